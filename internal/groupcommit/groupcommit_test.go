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
	"weak"

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
		b := setupHeld(t, 0, 1)
		first := b.do(context.Background(), 1)
		<-b.started

		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := b.do(ctx, 2)
		for b.c.Queued() == 0 { // read the queue: call 2 waits behind batch 1
			runtime.Gosched()
		}
		cancel()
		if err := <-gaveUp; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Do err = %v, want context.Canceled", err)
		}
		b.release()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		b.assertNeverRan(t, 2)
	})

	// A caller that gives up while it flushes others' batch is withdrawn
	// too: its call is still queued, and a later batch would run a write
	// whose caller was told it failed.
	t.Run("CallerGivingUpWhileFlushingIsNotRun", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t, 1, 1) // MaxBatch 1: the flusher of 1 leaves its own call queued
		// Caller 1 queues and stalls before it contends for the slot, so
		// caller 2 takes the slot and flushes 1's batch, not its own.
		ctx1 := &stalledCtx{Context: context.Background(), stalled: make(chan struct{}), resume: make(chan struct{})}
		first := b.do(ctx1, 1)
		// The waits are bounded: the setup leans on when Do asks for
		// Done, and a Do that asks at another moment must fail the test,
		// not hang it.
		within(t, ctx1.stalled, "caller 1 to queue and ask for Done")
		ctx2, cancel2 := context.WithCancel(context.Background())
		gaveUp := b.do(ctx2, 2)
		within(t, b.started, "caller 2 to run batch [1] while call 2 waits in the queue")
		cancel2()
		b.release()
		if err := within(t, gaveUp, "the cancelled caller 2 to return"); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Do err = %v, want context.Canceled", err)
		}
		close(ctx1.resume)
		if err := within(t, first, "caller 1 to return"); err != nil {
			t.Fatal(err)
		}
		b.assertNeverRan(t, 2)
	})

	// One caller without a deadline waits as long as it takes, so its
	// batch must not end at the others' deadline.
	t.Run("BatchHasNoDeadlineIfOneCallerHasNone", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t, 0, 1)
		first := b.do(context.Background(), 1)
		<-b.started
		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Hour)
		defer cancel2()
		second := b.do(ctx2, 2)
		for b.c.Queued() < 1 { // 2 first in the next batch, 3 after it
			runtime.Gosched()
		}
		third := b.do(context.Background(), 3)
		for b.c.Queued() < 2 {
			runtime.Gosched()
		}
		b.release()
		for _, done := range []chan error{first, second, third} {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if d, ok := b.ctxs[3].Deadline(); ok {
			t.Errorf("batch [2 3] has deadline %s, want none: caller 3 set none", d)
		}
	})

	// MaxConcurrent 2 lets a second batch run while the first still does.
	t.Run("MaxConcurrentBatchesRunAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setupHeld(t, 0, 2)
		first := b.do(context.Background(), 1)
		<-b.started
		select {
		case err := <-b.do(context.Background(), 2):
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second): // a ceiling only a single slot reaches
			t.Fatal("batch [2] waited for batch [1]: only one batch runs at a time")
		}
		b.release()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
	})
}

// heldBundle is a Committer whose Run records every request with its
// batch's context and holds the batch carrying request 1 until release:
// how a test keeps a flush slot busy for exactly as long as it needs.
type heldBundle struct {
	c       *groupcommit.Committer[int, int]
	started chan struct{} // closed when the batch carrying 1 starts
	release func()        // lets that batch finish; safe to call again

	mu   sync.Mutex
	ran  []int
	ctxs map[int]context.Context
}

func setupHeld(t *testing.T, maxBatch, maxConcurrent int) *heldBundle {
	t.Helper()
	released := make(chan struct{})
	b := &heldBundle{
		started: make(chan struct{}),
		release: sync.OnceFunc(func() { close(released) }),
		ctxs:    make(map[int]context.Context),
	}
	t.Cleanup(b.release) // a failed test leaves no Run blocked
	b.c = &groupcommit.Committer[int, int]{MaxBatch: maxBatch, MaxConcurrent: maxConcurrent, Run: func(ctx context.Context, reqs []int) []groupcommit.Result[int] {
		b.mu.Lock()
		b.ran = append(b.ran, reqs...)
		for _, r := range reqs {
			b.ctxs[r] = ctx
		}
		b.mu.Unlock()
		if slices.Contains(reqs, 1) {
			close(b.started)
			<-released
		}
		return make([]groupcommit.Result[int], len(reqs))
	}}
	return b
}

// do calls Do on its own goroutine and delivers its error.
func (b *heldBundle) do(ctx context.Context, req int) chan error {
	done := make(chan error, 1)
	go func() { _, err := b.c.Do(ctx, req); done <- err }()
	return done
}

// assertNeverRan fails t if req ran or runs in the next batch: a call
// withdrawn from the queue is not run, one left in it is run by the next.
func (b *heldBundle) assertNeverRan(t *testing.T, req int) {
	t.Helper()
	if _, err := b.c.Do(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if slices.Contains(b.ran, req) {
		t.Fatalf("ran %v: the cancelled call %d was run", b.ran, req)
	}
}

// within receives from ch, failing t after a minute, a ceiling only a
// setup that no longer holds reaches.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("waited a minute for %s", what)
		panic("unreachable")
	}
}

// stalledCtx stalls its caller the first time it asks for Done, as a busy
// scheduler may between queuing a call and waiting on it, until resume is
// closed.
type stalledCtx struct {
	context.Context
	once            sync.Once
	stalled, resume chan struct{}
}

func (c *stalledCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.stalled); <-c.resume })
	return c.Context.Done()
}

// A batch runs for as long as its longest-lived caller waits: the first
// caller giving up (a provider hanging up) cancels neither the batch nor
// the others' writes, and its deadline is not the batch's.
func TestCommitterBatchOutlivesOneCaller(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	running, proceed := make(chan time.Time), make(chan struct{})
	c := &groupcommit.Committer[int, int]{MaxConcurrent: 1, Run: func(ctx context.Context, reqs []int) []groupcommit.Result[int] {
		out := make([]groupcommit.Result[int], len(reqs))
		if slices.Contains(reqs, 1) {
			close(started)
			<-release // hold the only slot while 2 and 3 queue
			return out
		}
		deadline, _ := ctx.Deadline()
		running <- deadline
		<-proceed
		for i := range out {
			out[i].Err = ctx.Err() // cancelled with caller 2: every write fails
		}
		return out
	}}
	first := make(chan error, 1)
	go func() { _, err := c.Do(context.Background(), 1); first <- err }()
	<-started
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel2()
	go func() { _, _ = c.Do(ctx2, 2) }()
	for c.Queued() < 1 { // 2 first in the next batch
		runtime.Gosched()
	}
	ctx3, cancel3 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel3()
	third := make(chan error, 1)
	go func() { _, err := c.Do(ctx3, 3); third <- err }()
	for c.Queued() < 2 {
		runtime.Gosched()
	}
	close(release)
	deadline := <-running
	cancel2() // cancels at once whatever context derives from ctx2
	close(proceed)
	if err := <-third; err != nil {
		t.Errorf("caller 3's write failed when caller 2 gave up: %v", err)
	}
	if left := time.Until(deadline); left < 30*time.Minute {
		t.Errorf("the batch's deadline is %s away, want caller 3's hour", left.Round(time.Second))
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// TestCommitterRetainsNoFinishedRequest pins that the queue lets go of a
// request once its call returns, run or withdrawn: the receiver's requests
// carry whole bodies, and one kept reachable from the queue's spare
// capacity is memory that no byte budget counts.
func TestCommitterRetainsNoFinishedRequest(t *testing.T) {
	t.Parallel()

	type body [64 << 10]byte
	var (
		started = make(chan struct{})
		release = make(chan struct{})
		first   = new(body)
	)
	c := &groupcommit.Committer[*body, int]{MaxConcurrent: 1, Run: func(_ context.Context, reqs []*body) []groupcommit.Result[int] {
		if slices.Contains(reqs, first) {
			close(started)
			<-release // hold the only slot while the others queue
		}
		return make([]groupcommit.Result[int], len(reqs))
	}}
	done := make(chan error, 8)
	go func() { _, err := c.Do(context.Background(), first); done <- err }()
	<-started

	// Three calls queue behind the first batch and run as one batch; a
	// fourth gives up while queued and is withdrawn.
	var weaks []weak.Pointer[body]
	for range 3 {
		b := new(body)
		weaks = append(weaks, weak.Make(b))
		go func() { _, err := c.Do(context.Background(), b); done <- err }()
	}
	for c.Queued() < 3 {
		runtime.Gosched()
	}
	ctx, cancel := context.WithCancel(context.Background())
	withdrawn := new(body)
	weaks = append(weaks, weak.Make(withdrawn))
	go func() { _, err := c.Do(ctx, withdrawn); done <- err }()
	for c.Queued() < 4 {
		runtime.Gosched()
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn Do err = %v, want context.Canceled", err)
	}
	close(release)
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	runtime.GC()
	for i, w := range weaks {
		if w.Value() != nil {
			t.Errorf("request %d is still reachable after its call returned", i)
		}
	}
	runtime.KeepAlive(c)
}
