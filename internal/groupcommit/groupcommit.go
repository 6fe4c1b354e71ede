// Package groupcommit runs the writes of concurrent callers as batches, one
// transaction (one commit, one fsync) per batch, and hands each caller its
// own result only after its batch has run.
//
// There is no timer and no background goroutine: a caller whose write is
// queued and who finds a free flush slot becomes the flusher, takes every
// queued write (its own and those of callers who arrived meanwhile, up to
// MaxBatch) and runs them as one batch. An idle system therefore runs each
// write at once, alone; a busy one batches exactly as many writes as queued
// up while the previous batches ran. That is the group commit of databases'
// own logs, done one level up.
package groupcommit

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Result is one caller's outcome within a batch.
type Result[Res any] struct {
	Value Res
	Err   error
}

// Committer batches calls of Run. Its zero value is not usable; set Run
// (and optionally the limits) and use it from any number of goroutines.
type Committer[Req, Res any] struct {
	// Run writes one batch, at least one request, and returns one result per
	// request, in order. A batch that fails as a whole returns the error in
	// every result: no caller is told a write succeeded that did not commit.
	Run func(ctx context.Context, reqs []Req) []Result[Res]

	// MaxBatch is the most requests in one batch. Defaults to 64.
	MaxBatch int
	// MaxConcurrent is how many batches may run at once. Defaults to 1.
	MaxConcurrent int

	once    sync.Once
	slots   chan struct{}
	mu      sync.Mutex
	pending []*call[Req, Res]
}

type call[Req, Res any] struct {
	ctx  context.Context
	req  Req
	res  Result[Res]
	done chan struct{}
}

func (c *Committer[Req, Res]) init() {
	c.once.Do(func() {
		c.slots = make(chan struct{}, max(c.MaxConcurrent, 1))
		if c.MaxBatch <= 0 {
			c.MaxBatch = 64
		}
	})
}

// Do queues req, runs batches until req's has run, and returns its result.
// If ctx ends first, Do returns ctx's error at once and withdraws req if no
// batch has taken it yet, so it is never run; if a batch has, the write may
// or may not still commit (as with any write whose caller stopped waiting).
func (c *Committer[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	c.init()
	var zero Res
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	cl := &call[Req, Res]{ctx: ctx, req: req, done: make(chan struct{})}
	c.mu.Lock()
	c.pending = append(c.pending, cl)
	c.mu.Unlock()

	for {
		select {
		case <-cl.done: // checked first: a finished caller flushes for no one
			return cl.res.Value, cl.res.Err
		default:
		}
		if err := ctx.Err(); err != nil { // checked second: nor does one who gave up
			c.withdraw(cl)
			return zero, err
		}
		select {
		case <-cl.done:
			return cl.res.Value, cl.res.Err
		case <-ctx.Done():
			c.withdraw(cl)
			return zero, ctx.Err()
		case c.slots <- struct{}{}:
			ran := c.flush()
			<-c.slots
			if !ran {
				// Nothing was queued, so another flusher has cl: wait for it.
				select {
				case <-cl.done:
					return cl.res.Value, cl.res.Err
				case <-ctx.Done():
					return zero, ctx.Err()
				}
			}
		}
	}
}

// withdraw drops cl from the queue if no flusher has taken it yet.
func (c *Committer[Req, Res]) withdraw(cl *call[Req, Res]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.pending, cl); i >= 0 {
		c.pending = slices.Delete(c.pending, i, i+1) // zeroes the freed slot: see flush
	}
}

// flush takes up to MaxBatch queued calls, oldest first, runs them as one
// batch and completes each. It reports whether there was anything to run.
// A call whose caller gave up is not among them: Do withdrew it.
func (c *Committer[Req, Res]) flush() bool {
	c.mu.Lock()
	n := min(len(c.pending), c.MaxBatch)
	batch := slices.Clone(c.pending[:n])
	// slices.Delete zeroes the slots past the new length: a stale pointer
	// left there would keep a finished call's request (a receipt's whole
	// body) reachable until the queue grew over it again, memory no byte
	// budget counts.
	c.pending = slices.Delete(c.pending, 0, n)
	c.mu.Unlock()
	if n == 0 {
		return false
	}

	ctx, cancel := batchContext(batch)
	defer cancel()
	reqs := make([]Req, len(batch))
	for i, cl := range batch {
		reqs[i] = cl.req
	}
	results := c.Run(ctx, reqs)
	for i, cl := range batch {
		cl.res = results[i]
		close(cl.done)
	}
	return true
}

// batchContext lives as long as the longest-lived caller of the batch wants
// to wait: no single caller's cancellation may fail the others' writes.
func batchContext[Req, Res any](batch []*call[Req, Res]) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, cl := range batch {
		d, ok := cl.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.WithoutCancel(batch[0].ctx))
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}
