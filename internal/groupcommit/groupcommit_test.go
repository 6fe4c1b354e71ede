package groupcommit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry/internal/groupcommit"
)

func TestCommitter(t *testing.T) {
	t.Parallel()

	t.Run("EveryCallerGetsItsOwnResult", func(t *testing.T) {
		t.Parallel()
		var batches, maxSize atomic.Int64
		c := &groupcommit.Committer[int, int]{
			MaxBatch:      8,
			MaxConcurrent: 2,
			Run: func(_ context.Context, reqs []int) []groupcommit.Result[int] {
				batches.Add(1)
				if n := int64(len(reqs)); n > maxSize.Load() {
					maxSize.Store(n)
				}
				time.Sleep(time.Millisecond)
				out := make([]groupcommit.Result[int], len(reqs))
				for i, r := range reqs {
					out[i].Value = r * 2
				}
				return out
			},
		}
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				v, err := c.Do(context.Background(), i)
				if err != nil || v != i*2 {
					t.Errorf("Do(%d) = %d, %v", i, v, err)
				}
			})
		}
		wg.Wait()
		if maxSize.Load() > 8 {
			t.Errorf("a batch of %d exceeds MaxBatch 8", maxSize.Load())
		}
		if batches.Load() >= 200 {
			t.Errorf("%d batches for 200 concurrent calls: nothing was grouped", batches.Load())
		}
	})

	t.Run("FailedBatchFailsEveryCaller", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("boom")
		c := &groupcommit.Committer[int, int]{Run: func(_ context.Context, reqs []int) []groupcommit.Result[int] {
			out := make([]groupcommit.Result[int], len(reqs))
			for i := range out {
				out[i].Err = boom
			}
			return out
		}}
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				if _, err := c.Do(context.Background(), i); !errors.Is(err, boom) {
					t.Errorf("Do(%d) err = %v, want boom", i, err)
				}
			})
		}
		wg.Wait()
	})

	t.Run("CancelledCallerIsNotRun", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		c := &groupcommit.Committer[int, int]{Run: func(_ context.Context, reqs []int) []groupcommit.Result[int] {
			ran.Add(int64(len(reqs)))
			return make([]groupcommit.Result[int], len(reqs))
		}}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := c.Do(ctx, 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if ran.Load() != 0 {
			t.Fatalf("a cancelled call ran")
		}
	})
}
