package ferry

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-inbox/ferry/internal/groupcommit"
)

// Client claims events from a Store and runs their handlers: in batches,
// with bounded concurrency, a heartbeat per lease, fenced completion, backoff
// and dead-lettering. Any number of clients, in any number of processes, may
// share a PostgreSQL store.
type Client struct {
	cfg      Config
	store    Store
	log      *slog.Logger
	tracer   trace.Tracer // nil when tracing is off
	policies map[string]SourcePolicy
	handlers map[string]map[string]handler // source → event type ("" for any) → handler

	// completions batches the completions of concurrent jobs into one
	// EventCompleteMany call (group commit: no timer, an idle client
	// completes each job alone at once); each job still waits for its own
	// verdict.
	completions *groupcommit.Committer[completion, struct{}]

	mu      sync.Mutex
	started bool
	// registerErr is the first handler that could not be registered
	// (HandleTx with a store not the client's own); Start returns it.
	registerErr error
	active      int
	slotFree    chan struct{}

	stopClaiming context.CancelFunc
	stopHandlers context.CancelCauseFunc
	stopBeats    context.CancelFunc
	beatCtx      context.Context
	claimDone    chan struct{}
	jobs         sync.WaitGroup
}

var errShutdown = errors.New("ferry: client stopped")

// maxCompleteBatch is the most leases one EventCompleteMany call carries.
const maxCompleteBatch = 1000

// ID returns the name this worker leases under.
func (c *Client) ID() string { return c.cfg.ID }

// Start begins claiming and working events of every source with a handler.
// It returns at once; Stop ends the work.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("ferry: client already started")
	}
	if c.registerErr != nil {
		return c.registerErr
	}
	if len(c.handlers) == 0 {
		return errors.New("ferry: no handler registered")
	}
	c.started = true

	claimCtx, stopClaiming := context.WithCancel(context.WithoutCancel(ctx))
	handlerCtx, stopHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	beatCtx, stopBeats := context.WithCancel(context.WithoutCancel(ctx))
	c.stopClaiming, c.stopHandlers, c.stopBeats, c.beatCtx = stopClaiming, stopHandlers, stopBeats, beatCtx
	c.claimDone = make(chan struct{})

	wake, err := c.store.ReceiptSubscribe(claimCtx)
	if err != nil {
		c.log.Warn("ferry: receipt notifications unavailable; polling only", "err", err)
		wake = nil
	}
	go c.claimLoop(claimCtx, handlerCtx, wake)
	return nil
}

// Stop stops claiming, lets running handlers finish within ShutdownGrace (or
// until ctx is done), then cancels the rest and releases their events so that
// another instance takes them at once. It returns when every handler has
// returned, or when ctx is done: then it stops the heartbeats of handlers that
// ignore their context, so that their leases lapse, and returns ctx.Err().
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started || c.stopClaiming == nil {
		c.mu.Unlock()
		return nil
	}
	stopClaiming := c.stopClaiming
	c.stopClaiming = nil
	c.mu.Unlock()

	stopClaiming()
	<-c.claimDone

	finished := make(chan struct{})
	go func() { c.jobs.Wait(); close(finished) }()
	grace := time.NewTimer(c.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-finished:
	case <-grace.C:
	case <-ctx.Done():
	}
	c.stopHandlers(errShutdown)
	defer c.stopBeats()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) sources() (claim, hold []string) {
	for s := range c.handlers {
		claim = append(claim, s)
		if c.policy(s).LostLease == LostLeaseHold {
			hold = append(hold, s)
		}
	}
	return claim, hold
}

func (c *Client) claimLoop(ctx, handlerCtx context.Context, wake <-chan struct{}) {
	defer close(c.claimDone)
	sources, hold := c.sources()
	poll := time.NewTimer(0)
	defer poll.Stop()
	failures := 0
	for {
		c.mu.Lock()
		free := c.cfg.Workers - c.active
		c.mu.Unlock()

		full := false
		if free > 0 {
			started := time.Now()
			// Not cancelled by Stop: a claim the database committed must come
			// back, so that it can be worked or released.
			claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.LeaseTTL)
			claims, err := c.store.EventClaimMany(claimCtx, &EventClaimManyParams{
				Owner: c.cfg.ID, Limit: free, TTL: c.cfg.LeaseTTL, Sources: sources, HoldSources: hold,
			})
			cancel()
			switch {
			case ctx.Err() != nil:
				for _, cl := range claims {
					c.release(cl.Event.Lease())
				}
				return
			case err != nil:
				failures++
				c.log.Warn("ferry: claim failed", "worker", c.cfg.ID, "err", err)
			default:
				failures = 0
				for _, cl := range claims {
					c.launch(handlerCtx, cl, started)
				}
				full = len(claims) == free
			}
		}
		if full {
			continue // more may be due: claim again at once
		}
		resetTimer(poll, max(c.cfg.PollInterval, backoff(failures, c.cfg.PollInterval, 30*c.cfg.PollInterval)))
		select {
		case <-ctx.Done():
			return
		case _, ok := <-wake:
			if !ok {
				wake = nil // the store closed its notifications: poll only
			}
		case <-poll.C:
		case <-c.slotFree:
		}
	}
}

func (c *Client) launch(handlerCtx context.Context, cl *Claim, claimedAt time.Time) {
	ev := cl.Event
	hctx, cancel := context.WithCancelCause(handlerCtx)
	hctx, span := c.startAttempt(hctx, cl, claimedAt)
	j := &job{lease: ev.Lease(), source: ev.Source, reclaimed: cl.PreviousUnfinished, cancel: cancel, span: span}
	j.deadline = claimedAt.Add(c.cfg.LeaseTTL)
	j.timer = time.AfterFunc(time.Until(j.deadline), j.lose)
	c.mu.Lock()
	c.active++
	c.mu.Unlock()
	c.jobs.Add(1)
	go func() {
		defer c.jobs.Done()
		defer c.finish(j)
		beatCtx, stopBeat := context.WithCancel(c.beatCtx)
		beating := make(chan struct{})
		go func() { defer close(beating); c.heartbeat(beatCtx, j) }()
		completed, took, err := c.runHandler(hctx, j, cl)
		stopBeat()
		<-beating
		c.record(hctx, j, cl, completed, err, took)
	}()
}

func (c *Client) finish(j *job) {
	j.timer.Stop()
	j.cancel(nil)
	c.mu.Lock()
	c.active--
	c.mu.Unlock()
	select {
	case c.slotFree <- struct{}{}:
	default:
	}
}

func (c *Client) release(l Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.LeaseTTL)
	defer cancel()
	if err := c.store.EventRelease(ctx, &EventReleaseParams{Lease: l}); err != nil {
		c.log.Warn("ferry: release failed; the lease will lapse instead", "err", err)
	}
}
