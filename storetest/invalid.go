package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testInvalidParams checks that every operation refuses params it cannot
// act on with ErrInvalidParams and changes nothing: the rules of the root
// package's Validate and Normalize methods, reached through each store.
func testInvalidParams[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	b := setup(t)
	id := receive(t, b, "stripe", "evt_1")
	lease := claimOne(t, b, "w1").Event.Lease()
	before := get(t, b, id)

	bad := ferry.Lease{ID: id, Attempt: 0}
	ctx := b.ctx
	s := b.store
	type invalidCase struct {
		name string
		call func() error
	}
	cases := []invalidCase{
		{"AttemptList", func() error { _, err := s.AttemptList(ctx, &ferry.AttemptListParams{}); return err }},
		{"ConflictList", func() error { _, err := s.ConflictList(ctx, &ferry.ConflictListParams{ID: -1}); return err }},
		{"EventClaimMany/NoOwner", func() error {
			_, err := s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Limit: 1, TTL: ttl})
			return err
		}},
		{"EventClaimMany/NoLimit", func() error {
			_, err := s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", TTL: ttl})
			return err
		}},
		{"EventClaimMany/NoTTL", func() error {
			_, err := s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1})
			return err
		}},
		{"EventClaimMany/NegativeMaxBytes", func() error {
			_, err := s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: ttl, MaxBytes: -1})
			return err
		}},
		{"EventComplete", func() error { return s.EventComplete(ctx, &ferry.EventCompleteParams{Lease: bad}) }},
		{"EventCompleteTx", func() error {
			return s.InTx(ctx, func(tx TX) error {
				return s.EventCompleteTx(ctx, tx, &ferry.EventCompleteParams{Lease: bad})
			})
		}},
		{"EventCompleteMany", func() error {
			_, err := s.EventCompleteMany(ctx, &ferry.EventCompleteManyParams{Leases: []ferry.Lease{lease, bad}})
			return err
		}},
		{"EventHeartbeatMany/BadLease", func() error {
			_, err := s.EventHeartbeatMany(ctx, &ferry.EventHeartbeatManyParams{Leases: []ferry.Lease{lease, bad}, TTL: ttl})
			return err
		}},
		{"EventHeartbeatMany/NoTTL", func() error {
			_, err := s.EventHeartbeatMany(ctx, &ferry.EventHeartbeatManyParams{Leases: []ferry.Lease{lease}})
			return err
		}},
		{"EventFailMany/BadFailure", func() error {
			_, err := s.EventFailMany(ctx, &ferry.EventFailManyParams{Failures: []ferry.EventFailParams{{Lease: lease}, {Lease: lease, RetryDelay: -time.Second}}})
			return err
		}},
		{"EventFailMany/LeaseNamedTwice", func() error {
			_, err := s.EventFailMany(ctx, &ferry.EventFailManyParams{Failures: []ferry.EventFailParams{{Lease: lease}, {Lease: lease, Dead: true}}})
			return err
		}},
		{"EventFail/NoLease", func() error { _, err := s.EventFail(ctx, &ferry.EventFailParams{Lease: bad}); return err }},
		{"EventFail/NegativeDelay", func() error {
			_, err := s.EventFail(ctx, &ferry.EventFailParams{Lease: lease, RetryDelay: -time.Second})
			return err
		}},
		{"EventFail/NegativeBudget", func() error {
			_, err := s.EventFail(ctx, &ferry.EventFailParams{Lease: lease, MaxAttempts: -1})
			return err
		}},
		{"EventGet", func() error {
			_, err := s.EventGet(ctx, &ferry.EventGetParams{Source: "stripe"})
			if !errors.Is(err, ferry.ErrNotFound) {
				return fmt.Errorf("not ErrNotFound as well: %v", err)
			}
			return err
		}},
		{"EventHeartbeat/NoTTL", func() error {
			_, err := s.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: lease})
			return err
		}},
		{"EventHeartbeat/NoLease", func() error {
			_, err := s.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: bad, TTL: ttl})
			return err
		}},
		{"EventList/NegativeLimit", func() error { _, err := s.EventList(ctx, &ferry.EventListParams{Limit: -1}); return err }},
		{"EventList/UnknownState", func() error {
			_, err := s.EventList(ctx, &ferry.EventListParams{States: []ferry.State{"stuck"}})
			return err
		}},
		{"EventPurge/NoReplayWindow", func() error {
			_, err := s.EventPurge(ctx, &ferry.EventPurgeParams{Source: "stripe"})
			return err
		}},
		{"EventPurge/NoSource", func() error {
			_, err := s.EventPurge(ctx, &ferry.EventPurgeParams{Retention: time.Hour})
			return err
		}},
		{"EventPurge/RetentionShorterThanTheReplayWindow", func() error {
			_, err := s.EventPurge(ctx, &ferry.EventPurgeParams{Source: "stripe", Retention: time.Hour, ReplayWindow: 2 * time.Hour})
			if !errors.Is(err, ferry.ErrRetentionTooShort) {
				return fmt.Errorf("not ErrRetentionTooShort: %v", err)
			}
			return err
		}},
		{"ArchiveMaintain/KeyRetentionShorterThanTheReplayWindow", func() error {
			_, err := s.ArchiveMaintain(ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: time.Hour, KeyRetention: time.Hour})
			if !errors.Is(err, ferry.ErrRetentionTooShort) {
				return fmt.Errorf("not ErrRetentionTooShort: %v", err)
			}
			return err
		}},
		{"EventReceive/NoSource", func() error {
			_, err := s.EventReceive(ctx, &ferry.EventReceiveParams{EventID: "evt_2"})
			return err
		}},
		{"EventReceive/NoEventID", func() error {
			_, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe"})
			if !errors.Is(err, ferry.ErrBadEventID) {
				return fmt.Errorf("not ErrBadEventID: %v", err)
			}
			return err
		}},
		// The receiver refuses these first; the store refuses them too, the
		// same way on every store (PostgreSQL's text cannot hold a NUL, and
		// its unique index a key of a few KB, that SQLite would keep).
		{"EventReceive/UnstorableEventID", func() error {
			_, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_\x00", Payload: []byte("{}")})
			if !errors.Is(err, ferry.ErrBadEventID) {
				return fmt.Errorf("not ErrBadEventID: %v", err)
			}
			return err
		}},
		{"EventReceive/LongEventID", func() error {
			_, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: strings.Repeat("e", ferry.MaxEventIDBytes+1), Payload: []byte("{}")})
			if !errors.Is(err, ferry.ErrBadEventID) {
				return fmt.Errorf("not ErrBadEventID: %v", err)
			}
			return err
		}},
		{"EventReceive/UnstorableType", func() error {
			_, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_3", Type: strings.Repeat("t", ferry.MaxEventTypeBytes+1), Payload: []byte("{}")})
			if !errors.Is(err, ferry.ErrBadEventType) {
				return fmt.Errorf("not ErrBadEventType: %v", err)
			}
			return err
		}},
		{"EventReceiveMany", func() error {
			res, err := s.EventReceiveMany(ctx, &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{{Source: "stripe"}}})
			if err != nil {
				return err
			}
			return res[0].Err
		}},
		{"EventRelease", func() error { return s.EventRelease(ctx, &ferry.EventReleaseParams{Lease: bad}) }},
		{"EventRequeue/UnknownState", func() error {
			_, err := s.EventRequeue(ctx, &ferry.EventRequeueParams{States: []ferry.State{ferry.StateDead, "gone"}, Actor: "op"})
			return err
		}},
		{"EventRequeue/NoActor", func() error { _, err := s.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{id}}); return err }},
		{"EventReceive/NegativeReplayWindow", func() error {
			_, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_3", ReplayWindow: -time.Second})
			return err
		}},
		{"ActionList", func() error { _, err := s.ActionList(ctx, &ferry.ActionListParams{}); return err }},
		{"ReplayList", func() error { _, err := s.ReplayList(ctx, &ferry.ReplayListParams{}); return err }},
		{"EventRequeue/EmptyRunnableSource", func() error {
			_, err := s.EventRequeue(ctx, &ferry.EventRequeueParams{Runnable: []string{"stripe", ""}, Actor: "op"})
			return err
		}},
		{"EventRequeue/BadID", func() error {
			_, err := s.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{0}, Actor: "op"})
			return err
		}},
		{"EventComplete/ResponseTooLong", func() error {
			return s.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease, Response: ferry.AttemptResponse{Body: string(make([]byte, ferry.ResponseLimit+1))}})
		}},
		{"EventCompleteMany/ResponsesMismatch", func() error {
			_, err := s.EventCompleteMany(ctx, &ferry.EventCompleteManyParams{Leases: []ferry.Lease{lease}, Responses: make([]ferry.AttemptResponse, 2)})
			return err
		}},
		{"EventFail/BadStatus", func() error {
			_, err := s.EventFail(ctx, &ferry.EventFailParams{Lease: lease, Response: ferry.AttemptResponse{HTTPStatus: 42}})
			return err
		}},
		{"EventFail/InvalidUTF8", func() error {
			_, err := s.EventFail(ctx, &ferry.EventFailParams{Lease: lease, Response: ferry.AttemptResponse{Body: "\xff"}})
			return err
		}},
		// PostgreSQL keeps text without NUL or invalid UTF-8: the same
		// refusal on every store, not a failed batch.
		{"EventFailMany/ErrorWithNUL", func() error {
			_, err := s.EventFailMany(ctx, &ferry.EventFailManyParams{Failures: []ferry.EventFailParams{{Lease: lease, Error: "said \x00"}}})
			return err
		}},
		{"EventFail/ErrorNotUTF8", func() error {
			_, err := s.EventFail(ctx, &ferry.EventFailParams{Lease: lease, Error: "said \xff"})
			return err
		}},
		{"EventReceive/SourceNotUTF8", func() error {
			_, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s\xff", EventID: "evt_4", Payload: []byte("{}")})
			return err
		}},
		{"EventReceive/NULInAHeader", func() error {
			_, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_5", Payload: []byte("{}"), Headers: map[string][]string{"X-Note": {"a\x00b"}}})
			return err
		}},
		{"LeaseAcquire/NoTTL", func() error {
			_, err := s.LeaseAcquire(ctx, &ferry.LeaseAcquireParams{Name: "n", Owner: "o"})
			return err
		}},
		{"LeaseAcquire/OwnerNotUTF8", func() error {
			_, err := s.LeaseAcquire(ctx, &ferry.LeaseAcquireParams{Name: "n", Owner: "o\xff", TTL: ttl})
			return err
		}},
		{"LeaseRelease/NoOwner", func() error { return s.LeaseRelease(ctx, &ferry.LeaseReleaseParams{Name: "n"}) }},
		{"CheckpointGet/NoName", func() error { _, err := s.CheckpointGet(ctx, &ferry.CheckpointGetParams{}); return err }},
		{"CheckpointGet/NameWithNUL", func() error { _, err := s.CheckpointGet(ctx, &ferry.CheckpointGetParams{Name: "a\x00"}); return err }},
		{"EventClaimMany/OwnerNotUTF8", func() error {
			_, err := s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w\xff", Limit: 1, TTL: ttl})
			return err
		}},
		{"CheckpointPut/ValueWithNUL", func() error {
			return s.CheckpointPut(ctx, &ferry.CheckpointPutParams{Name: "n", Value: "a\x00"})
		}},
		{"EventRequeue/ActorWithNUL", func() error {
			_, err := s.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{id}, Actor: "op\x00"})
			return err
		}},
		{"EventList/SourceWithNUL", func() error {
			_, err := s.EventList(ctx, &ferry.EventListParams{Source: "a\x00"})
			return err
		}},
		{"EventList/EventIDNotUTF8", func() error {
			_, err := s.EventList(ctx, &ferry.EventListParams{EventIDContains: "\xff"})
			return err
		}},
		{"EventRequeue/TypeWithNUL", func() error {
			_, err := s.EventRequeue(ctx, &ferry.EventRequeueParams{Type: "t\x00", Actor: "op"})
			return err
		}},
		{"EventGet/KeyNotUTF8", func() error {
			_, err := s.EventGet(ctx, &ferry.EventGetParams{Source: "stripe", EventID: "evt_\xff"})
			if !errors.Is(err, ferry.ErrNotFound) {
				return fmt.Errorf("not ErrNotFound as well: %v", err)
			}
			return err
		}},
		{"EventList/BothCursors", func() error {
			_, err := s.EventList(ctx, &ferry.EventListParams{Before: 5, After: 2})
			return err
		}},
		{"EventList/UntilBeforeSince", func() error {
			_, err := s.EventList(ctx, &ferry.EventListParams{Since: b.clock.Now(), Until: b.clock.Now().Add(-time.Second)})
			return err
		}},
		{"EventRequeue/UntilBeforeSince", func() error {
			_, err := s.EventRequeue(ctx, &ferry.EventRequeueParams{Since: b.clock.Now(), Until: b.clock.Now().Add(-time.Second), Actor: "op"})
			return err
		}},
		{"EventRetryNow/NoActor", func() error { _, err := s.EventRetryNow(ctx, &ferry.EventRetryNowParams{ID: id}); return err }},
		{"EventRetryNow/BadID", func() error { _, err := s.EventRetryNow(ctx, &ferry.EventRetryNowParams{Actor: "ops"}); return err }},
		{"EventStats", func() error { _, err := s.EventStats(ctx, &ferry.EventStatsParams{AtRiskLimit: -1}); return err }},
		// PostgreSQL's text cannot hold these; SQLite's can. Refused the
		// same way on both, not a driver error on one and nothing on the
		// other.
		{"EventStats/AtRiskSourceWithNUL", func() error {
			_, err := s.EventStats(ctx, &ferry.EventStatsParams{AtRiskAfter: map[string]time.Duration{"a\x00": time.Hour}})
			return err
		}},
		{"EventPurge/SourceNotUTF8", func() error {
			_, err := s.EventPurge(ctx, &ferry.EventPurgeParams{Source: "s\xff", Retention: time.Hour, ReplayWindow: time.Hour})
			return err
		}},
		{"ConflictNoticeList/SourceWithNUL", func() error {
			_, err := s.ConflictNoticeList(ctx, &ferry.NoticeListParams{Source: "a\x00"})
			return err
		}},
		{"ReplayNoticeList/SourceNotUTF8", func() error {
			_, err := s.ReplayNoticeList(ctx, &ferry.NoticeListParams{Source: "s\xff"})
			return err
		}},
		{"ReplayNoticeList/NegativeLimit", func() error {
			_, err := s.ReplayNoticeList(ctx, &ferry.NoticeListParams{Source: "stripe", Limit: -5})
			return err
		}},
		{"ArchiveMaintain/OwnerWithNUL", func() error {
			_, err := s.ArchiveMaintain(ctx, &ferry.ArchiveMaintainParams{Owner: "m\x00", Retention: time.Hour})
			if err != nil && strings.Contains(err.Error(), "lease acquire") {
				return fmt.Errorf("refused late, by the lease: %v", err)
			}
			return err
		}},
	}
	// PostgreSQL keeps attempts, budgets and limits in 32 bits: past them,
	// the same refusal on every store, not a truncated fence. Only a 64-bit
	// int passes MaxCount; shift and past are variables so that storetest
	// compiles where int is 32 bits.
	if strconv.IntSize == 64 {
		shift := 32
		past := ferry.MaxCount
		past++
		wide := ferry.Lease{ID: lease.ID, Attempt: lease.Attempt + 1<<shift} // truncated to 32 bits: lease itself
		cases = append(cases, []invalidCase{
			{"EventHeartbeatMany/AttemptOver32Bits", func() error {
				_, err := s.EventHeartbeatMany(ctx, &ferry.EventHeartbeatManyParams{Leases: []ferry.Lease{wide}, TTL: time.Hour})
				return err
			}},
			{"EventComplete/AttemptOver32Bits", func() error {
				return s.EventComplete(ctx, &ferry.EventCompleteParams{Lease: wide})
			}},
			{"EventClaimMany/LimitOver32Bits", func() error {
				_, err := s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: past, TTL: ttl})
				return err
			}},
			{"EventFail/BudgetOver32Bits", func() error {
				_, err := s.EventFail(ctx, &ferry.EventFailParams{Lease: lease, MaxAttempts: past})
				return err
			}},
		}...)
	}
	for _, tc := range cases {
		if err := tc.call(); !errors.Is(err, ferry.ErrInvalidParams) {
			t.Errorf("%s: err = %v, want ErrInvalidParams", tc.name, err)
		}
	}
	// Nothing changed: the lease still holds, the event is as it was.
	if after := get(t, b, id); after.State != ferry.StateInProgress || !after.LeaseExpiresAt.Equal(before.LeaseExpiresAt) || after.LastError != "" {
		t.Errorf("event after refused calls = %+v, want it untouched", after)
	}
	if list, err := s.EventList(ctx, &ferry.EventListParams{}); err != nil || len(list.Events) != 1 {
		t.Errorf("events = %v, %v; want only the first", list, err)
	}
	if err := s.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
		t.Errorf("the lease no longer holds after refused calls: %v", err)
	}
}
