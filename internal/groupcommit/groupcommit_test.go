package groupcommit_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
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

	// A caller that gives up while its call waits behind a running batch
	// is withdrawn: no later batch runs it.
	t.Run("CancelledCallerIsNotRun", func(t *testing.T) {
		t.Parallel()
		var (
			mu      sync.Mutex
			ran     []int
			started = make(chan struct{})
			release = make(chan struct{})
		)
		c := &groupcommit.Committer[int, int]{MaxConcurrent: 1, Run: func(_ context.Context, reqs []int) []groupcommit.Result[int] {
			mu.Lock()
			ran = append(ran, reqs...)
			mu.Unlock()
			if slices.Contains(reqs, 1) {
				close(started)
				<-release // hold the only slot
			}
			return make([]groupcommit.Result[int], len(reqs))
		}}
		first := make(chan error, 1)
		go func() { _, err := c.Do(context.Background(), 1); first <- err }()
		<-started

		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := make(chan error, 1)
		go func() { _, err := c.Do(ctx, 2); gaveUp <- err }()
		for c.Queued() == 0 { // read the queue: call 2 waits behind batch 1
			runtime.Gosched()
		}
		cancel()
		if err := <-gaveUp; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Do err = %v, want context.Canceled", err)
		}
		close(release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do(context.Background(), 3); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if slices.Contains(ran, 2) {
			t.Fatalf("ran %v: the cancelled call 2 was run", ran)
		}
	})
}
