package postgres

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// TestReceiveReplayWaitsForTheOriginal holds a delivery's transaction open
// after its insert, as a concurrent receipt would, and sends the same body
// under a new id meanwhile: the body's advisory lock makes the second wait
// and see the first committed, so it is a replay. Without the lock it would
// not see the uncommitted row and store a second event.
func TestReceiveReplayWaitsForTheOriginal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		receive func(*Store, *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error)
	}{
		{"Alone", func(s *Store, p *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error) {
			return s.EventReceive(context.Background(), p)
		}},
		{"Batch", func(s *Store, p *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error) {
			other := delivery("stripe", "evt_1", "other")
			results, err := s.EventReceiveMany(context.Background(), &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{other, p}})
			if err != nil {
				return nil, err
			}
			return results[1].Result, results[1].Err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := batchTestStore(t)
			ctx := context.Background()
			// Advisory locks are database-wide: a body of its own keeps
			// other tests (the other subtest, other runs) off this lock key.
			body := "captured " + rand.Text()
			original := delivery("github", "d-0", body)
			original.ReplayWindow = time.Hour
			args, err := newReceiveArgs(original)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := s.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, eventReceiveLockSQL, pgx.NamedArgs{"keys": []int32{args.lockKey()}}); err != nil {
				t.Fatal(err)
			}
			var holder int
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder); err != nil {
				t.Fatal(err)
			}
			first, err := s.receiveOne(ctx, tx, args, nil, nil)
			if err != nil || first.Outcome != ferry.ReceiveNew {
				t.Fatalf("original = %+v, %v", first, err)
			}

			type answer struct {
				res *ferry.EventReceiveResult
				err error
			}
			done := make(chan answer, 1)
			go func() {
				replay := delivery("github", "d-1", body)
				replay.ReplayWindow = time.Hour
				res, err := tc.receive(s, replay)
				done <- answer{res, err}
			}()
			// Commit once the replay waits on the lock, or has answered
			// without waiting (the bug this test catches).
			var got *answer
			deadline := time.Now().Add(30 * time.Second)
			for got == nil && !waitingOnReplayLock(t, s, holder) {
				select {
				case a := <-done:
					got = &a
				case <-time.After(5 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatal("the replay neither answered nor waited on the lock")
				}
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got == nil {
				a := <-done
				got = &a
			}
			if got.err != nil || got.res.Outcome != ferry.ReceiveReplay || got.res.ID != first.ID {
				t.Fatalf("replay under a new id = %+v, %v; want a replay of event %d", got.res, got.err, first.ID)
			}
		})
	}
}

// waitingOnReplayLock reports whether a session waits for a
// replay-detection lock (event_receive_lock.sql's class) that the backend
// holder holds: only this test's waits count.
func waitingOnReplayLock(t *testing.T, s *Store, holder int) bool {
	t.Helper()
	var n int
	err := s.pool.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND NOT granted AND classid = 1717924466
		  AND $1 = ANY(pg_blocking_pids(pid))`, holder).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}
