package ferry

import (
	"context"
	"errors"
	"fmt"
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
	// failures batches failed attempts into one EventFailMany call, the
	// same way.
	failures *groupcommit.Committer[EventFailParams, State]

	mu      sync.Mutex
	started bool
	// registerErr is the first handler that could not be registered
	// (HandleTx with a store not the client's own); Start returns it.
	registerErr error
	// held counts the events this client has leased and not yet finished:
	// running, or claimed ahead and waiting for one of the workers.
	held int
	// heldBytes sums the payloads of the held events (MaxHeldBytes).
	heldBytes int64
	// finished counts the events this client has finished, to tell the
	// claim loop that its workers make progress.
	finished int
	// beating holds the jobs whose leases the heartbeat loop extends:
	// from their claim until their handler returns.
	beating  map[*job]struct{}
	slotFree chan struct{}
	// workers has room for Workers running handlers.
	workers chan struct{}
	// stopQueued closes when Stop begins: events claimed ahead and still
	// waiting for a worker are released instead of run.
	stopQueued chan struct{}
	// graceCut closes at StopAndCancel (cutGrace): Stop cancels running
	// handlers then, without waiting out ShutdownGrace.
	graceCut chan struct{}
	cutGrace func()

	stopClaiming context.CancelFunc
	stopHandlers context.CancelCauseFunc
	stopBeats    context.CancelFunc
	beatCtx      context.Context
	claimDone    chan struct{}
	beatDone     chan struct{}
	// handlersDone closes once Stop has begun and every handler returned.
	handlersDone chan struct{}
	jobs         sync.WaitGroup
}

var errShutdown = errors.New("ferry: client stopped")

// errHandlerExited is the failure of a handler that ended its goroutine
// (runtime.Goexit, as t.FailNow does) instead of returning.
var errHandlerExited = errors.New("ferry: handler exited its goroutine without returning")

// maxCompleteBatch is the most leases one EventCompleteMany call carries.
const maxCompleteBatch = 1000

// maxClaimsInFlight is how many claims a client runs at once: two, so that
// the next batch is on its way while the last one comes back.
const maxClaimsInFlight = 2

// ID returns the name this worker leases under.
func (c *Client) ID() string { return c.cfg.ID }

// Start begins claiming and working events of every source with a handler.
// It returns at once; Stop ends the work. ctx gives its values (a trace,
// say) to the client's work, never its end: cancelling ctx stops nothing,
// so that a signal context does not cut running handlers short without the
// grace and the releases Stop gives them. A client starts once: after Stop,
// make a new one. A client whose store cannot notify it of receipts yet (a
// database down, a PostgreSQL schema not migrated) polls, and subscribes
// once it can, trying from PollInterval (at most 1s) up to every 30s.
//
// Start returns an error wrapping ErrInvalidParams for what would not work
// as asked: a second Start, a Start after Stop, no handler, a HandleTx on
// another store, a SourcePolicy for a source no handler works, or
// transactional handlers on a store whose pool (Pooled) is smaller than
// this client's Workload.Conns. That check is
// this client's alone: a pool shared with another client or a receiver
// needs the sum of their Workloads.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started && c.stopClaiming == nil { // Stop has begun
		return fmt.Errorf("%w: a stopped client cannot be started again; make a new one with NewClient", ErrInvalidParams)
	}
	if c.started {
		return fmt.Errorf("%w: client already started", ErrInvalidParams)
	}
	if c.registerErr != nil {
		return c.registerErr
	}
	if len(c.handlers) == 0 {
		return fmt.Errorf("%w: no handler registered", ErrInvalidParams)
	}
	if err := c.checkRegistered(); err != nil {
		return err
	}
	c.started = true

	claimCtx, stopClaiming := context.WithCancel(context.WithoutCancel(ctx))
	handlerCtx, stopHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	beatCtx, stopBeats := context.WithCancel(context.WithoutCancel(ctx))
	c.stopClaiming, c.stopHandlers, c.stopBeats, c.beatCtx = stopClaiming, stopHandlers, stopBeats, beatCtx
	c.claimDone = make(chan struct{})
	c.beatDone = make(chan struct{})
	c.handlersDone = make(chan struct{})
	go c.heartbeatLoop(beatCtx)
	go c.claimLoop(claimCtx, handlerCtx)
	return nil
}

// checkRegistered refuses what would silently not do what was asked: a
// policy for a source no handler works (a name that differs in case), and
// transactional handlers on a pool too small for them.
func (c *Client) checkRegistered() error {
	for name := range c.policies {
		if c.handlers[name] == nil {
			return fmt.Errorf("%w: Config.Sources has a policy for %q, which has no handler (names are case-sensitive): it would apply to nothing", ErrInvalidParams, name)
		}
	}
	pool, ok := c.store.(Pooled)
	if !ok || !c.hasTxHandler() {
		return nil
	}
	need := Workload{Workers: c.cfg.Workers, TxHandlers: true}.Conns()
	have := pool.MaxConns()
	if have >= need {
		return nil
	}
	// The server's max_connections (100 by default on PostgreSQL) caps
	// every pool on it together: the default Workers need more than that.
	fix := fmt.Sprintf("raise the pool's MaxConns to %d (within the server's max_connections, shared with every other connection; 100 by default)", need)
	if fit := c.cfg.Workers - (need - have); fit >= 1 {
		fix += fmt.Sprintf(", or lower Config.Workers to %d", fit)
	} else {
		fix += fmt.Sprintf(", or lower Config.Workers and raise MaxConns to Workers+%d: no Workers value fits %d connections", need-c.cfg.Workers, have)
	}
	return fmt.Errorf("%w: the store's pool has %d connections, and %d workers with transactional handlers need %d (ferry.Workload.Conns): %s",
		ErrInvalidParams, have, c.cfg.Workers, need, fix)
}

// Stop stops claiming, lets running handlers finish within ShutdownGrace (or
// until ctx is done), then cancels the rest and releases their events so that
// another instance takes them at once (see ShutdownGrace for what a handler's
// answer then means). It returns when every handler has
// returned, or when ctx is done: then it stops the heartbeats of handlers that
// ignore their context, so that their leases lapse, logs how many events
// are still held, and returns ctx.Err(). Those handlers may still be
// running: a store closed under them cannot record their verdicts, and their
// events run again once their leases lapse. A HandleTx handler among them
// holds a store connection: Close of a postgres.Store that Open made waits
// for it. A Stop while another runs waits the same way.
//
// A ctx already cancelled when Stop is called (the signal context a
// program waited on: <-ctx.Done(); client.Stop(ctx)) sets no deadline:
// handlers still get ShutdownGrace, and then DefaultShutdownGrace more to
// return once cancelled and release their events, as ferry serve gives
// them; Stop returns nil if they all do, else context.DeadlineExceeded. A
// deadline already past is kept: the caller's shutdown budget is spent.
func (c *Client) Stop(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		// Else a signal context would cut every handler off at once.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ShutdownGrace+DefaultShutdownGrace)
		defer cancel()
	}
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return nil
	}
	if c.stopClaiming == nil {
		c.mu.Unlock()
		select {
		case <-c.handlersDone:
			return nil
		case <-ctx.Done():
			c.stopBeats() // as the first Stop does when its ctx ends
			return ctx.Err()
		}
	}
	stopClaiming := c.stopClaiming
	c.stopClaiming = nil
	c.mu.Unlock()

	stopClaiming()
	// Events still waiting for a worker go back now; the claim loop
	// releases what its claims in flight bring back instead of launching
	// it. Grace and ctx count from here, even while a claim hangs.
	close(c.stopQueued)
	defer func() { c.stopBeats(); <-c.beatDone }()

	finished := c.handlersDone
	go func() { <-c.claimDone; c.jobs.Wait(); close(finished) }() // no launch after claimDone
	grace := time.NewTimer(c.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-finished:
	case <-grace.C:
	case <-c.graceCut:
	case <-ctx.Done():
	}
	c.stopHandlers(errShutdown)
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-finished: // both ready: the handlers are done
		return nil
	default:
	}
	c.mu.Lock()
	held := c.held
	c.mu.Unlock()
	if held > 0 {
		c.log.Warn("ferry: stop: ctx ended before every handler returned; keep the store open until they do, or their verdicts are not recorded and their events run again once their leases lapse", "held", held)
	}
	return ctx.Err()
}

// StopAndCancel is Stop without ShutdownGrace: it cancels running handlers
// at once, and their events go as they do once the grace ends (released;
// a LostLeaseHold source's, left to lapse). Called while a Stop waits out
// the grace (a second stop signal), it ends the grace, and that Stop goes
// on as it would then; both return when every handler has returned, or
// when their own ctx is done. Before Start it does nothing, as Stop.
func (c *Client) StopAndCancel(ctx context.Context) error {
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if !started {
		return nil
	}
	c.cutGrace()
	return c.Stop(ctx)
}

func (c *Client) sources() (claim, hold, retry []string) {
	for s := range c.handlers {
		claim = append(claim, s)
		if c.policy(s).LostLease == LostLeaseHold {
			hold = append(hold, s)
		} else {
			retry = append(retry, s)
		}
	}
	return claim, hold, retry
}

// claimLoop keeps up to Workers + Prefetch events leased: Workers running
// and at most Prefetch claimed ahead, waiting for the next free worker, so
// that a worker finishing its event starts the next at once instead of
// waiting for a claim's round trip. It claims in batches: only once at least
// Prefetch of those places are free (a saturated client claims Prefetch
// events at a time, not one per finished job), which also means whenever a
// worker is idle. Up to maxClaimsInFlight claims run at once: the next batch
// is asked for while the previous one is still on its way, so a claim's
// round trip does not cap the client's rate. A claim that came back short
// means nothing more is due: the loop then waits for a receipt signal or the
// poll before it claims again, rather than asking the store each time a job
// ends. And it claims ahead only after some job has finished since its last
// claim: a client whose workers are all stuck claims nothing more, so it
// holds at most Prefetch waiting events (heartbeated, released at Stop)
// besides its stuck ones. Hold sources are claimed only into idle workers.
func (c *Client) claimLoop(ctx, handlerCtx context.Context) {
	defer close(c.claimDone)
	// Here, not in Start: subscribing may wait for a connection (a database
	// that does not answer), and Start returns at once while Stop can
	// cancel it. The first claim runs after it, so nothing received before
	// is missed.
	wake, err := c.store.ReceiptSubscribe(ctx)
	var resubscribed chan (<-chan struct{}) // while nil, none is on its way
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("ferry: receipt notifications unavailable; polling until a subscription succeeds", "err", err)
		resubscribed = make(chan (<-chan struct{}), 1)
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			c.resubscribe(ctx, resubscribed)
		}()
	}
	sources, hold, retry := c.sources()
	poll := time.NewTimer(0)
	defer poll.Stop()
	type claimed struct {
		claims []*Claim
		err    error
		asked  int
		room   int64
		signal int  // signals seen when the claim was asked
		ahead  bool // of retry sources only, so short is no sign that nothing is due
		start  time.Time
	}
	results := make(chan claimed, maxClaimsInFlight)
	var (
		inFlight     int   // claims asked and not yet back
		asked        int   // events those claims may bring
		askedBytes   int64 // payload bytes they may bring
		failures     int
		dry          bool // the last claim found fewer due events than it asked for
		signals      int  // receipt signals and polls seen
		lastFinished = -1
		pollArmed    = true // poll will fire; not re-armed until it has
		aheadLast    bool   // the last claim was ahead, of retry sources only
	)
	defer func() {
		// Stop: what claims still on their way bring back is released.
		for ; inFlight > 0; inFlight-- {
			for _, cl := range (<-results).claims {
				c.release(cl.Event.Lease())
			}
		}
	}()
	for {
		c.mu.Lock()
		free := c.cfg.Workers + c.cfg.Prefetch - c.held - asked
		slots := c.cfg.Workers - c.held - asked // idle workers no claim is bringing work for
		idle := slots > 0
		room := c.cfg.MaxHeldBytes - c.heldBytes - askedBytes
		if c.held == 0 && inFlight == 0 {
			room = c.cfg.MaxHeldBytes // the first event is taken however large
		}
		finished := c.finished
		c.mu.Unlock()

		if inFlight < maxClaimsInFlight && free >= c.cfg.Prefetch && room > 0 && !dry && (idle || finished != lastFinished) {
			params, ahead := c.nextClaim(free, slots, room, sources, hold, retry)
			if ahead && aheadLast {
				// Never two claims ahead in a row: the next waits for an idle
				// worker and takes every source, so a stream of retry events
				// cannot starve the hold sources.
				params, ahead = nil, false
			}
			if params != nil {
				aheadLast = ahead
			}
			if params == nil || params.Limit == free {
				lastFinished = finished // else the claim ahead is still to come
			}
			if params != nil {
				inFlight, asked, askedBytes = inFlight+1, asked+params.Limit, askedBytes+room
				go func(params *EventClaimManyParams, signal int, ahead bool) {
					start := time.Now()
					// Not cancelled by Stop: a claim the database committed must
					// come back, so that it can be worked or released.
					claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.LeaseTTL)
					defer cancel()
					claims, err := c.store.EventClaimMany(claimCtx, params)
					results <- claimed{claims: claims, err: err, asked: params.Limit, room: params.MaxBytes, signal: signal, ahead: ahead, start: start}
				}(params, signals, ahead)
				continue // another claim may be due as soon as Prefetch more places free
			}
		}
		// Armed once, not on every pass: jobs that finish more often than
		// the interval must not keep putting the poll off, since only the
		// poll finds retries falling due and leases lapsing.
		if inFlight == 0 && !pollArmed {
			resetTimer(poll, max(c.cfg.PollInterval, backoff(failures, c.cfg.PollInterval, 30*c.cfg.PollInterval)))
			pollArmed = true
		}
		select {
		case <-ctx.Done():
			return
		case r := <-results:
			inFlight, asked, askedBytes = inFlight-1, asked-r.asked, askedBytes-r.room
			if ctx.Err() != nil {
				for _, cl := range r.claims {
					c.release(cl.Event.Lease())
				}
				return
			}
			if r.err != nil {
				failures++
				c.log.Warn("ferry: claim failed", "worker", c.cfg.ID, "err", r.err)
				// Only the poll, re-armed with the backoff, asks again: a
				// store that fails claims gets no claim per receipt.
				dry, pollArmed = true, false
				continue
			}
			failures = 0
			for _, cl := range r.claims {
				c.launch(handlerCtx, cl, r.start)
			}
			// Short means nothing more was due when it ran, unless a receipt
			// signal came since it was asked; a claim cut short by the byte
			// budget is not dry either: more is due once held events finish.
			if len(r.claims) < r.asked && !overBudget(r.claims, r.room) && r.signal == signals && !r.ahead {
				dry = true
			}
		case _, ok := <-wake:
			dry = dry && failures > 0 // after a failed claim, the poll's backoff decides
			signals++
			if !ok {
				wake = nil // the store closed its notifications: poll only
			}
		case w := <-resubscribed:
			c.log.Info("ferry: receipt notifications subscribed")
			// Receipts may have come meanwhile, and a store that answers
			// again may take claims again: one claim now.
			wake, resubscribed = w, nil
			dry = false
			signals++
		case <-poll.C:
			dry, pollArmed = false, false
			signals++
		case <-c.slotFree:
		}
	}
}

// resubscribeMax bounds the wait between tries of a receipt subscription
// that failed at start.
const resubscribeMax = 30 * time.Second

// resubscribe tries ReceiptSubscribe again, from PollInterval (at most a
// second) doubling to resubscribeMax, until it succeeds or ctx ends: a
// client started while its database was down or not yet migrated would
// otherwise poll for good. A subscription that began and then broke is the
// store's to mend (postgres reconnects its own); this is for one that never
// began, which the Store contract answers with an error.
func (c *Client) resubscribe(ctx context.Context, out chan<- (<-chan struct{})) {
	for delay := min(c.cfg.PollInterval, time.Second); ; delay = min(2*delay, resubscribeMax) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		if wake, err := c.store.ReceiptSubscribe(ctx); err == nil {
			out <- wake
			return
		}
	}
}

// nextClaim is the claim for free places, slots of them idle workers; nil
// if there is none to make. Hold sources are claimed only into idle
// workers: an event claimed ahead that never started would go unknown, for
// a person to decide, if this process died. ahead reports a claim of retry
// sources only, whose coming back short says nothing of the hold sources.
func (c *Client) nextClaim(free, slots int, room int64, sources, hold, retry []string) (params *EventClaimManyParams, ahead bool) {
	params = &EventClaimManyParams{
		Owner: c.cfg.ID, Limit: free, TTL: c.cfg.LeaseTTL, Sources: sources, HoldSources: hold,
		MaxBytes: room,
	}
	switch {
	case len(hold) == 0 || free <= slots: // no place is ahead of a worker, or none holds
	case slots > 0:
		params.Limit = slots
	case len(retry) > 0:
		params.Sources, ahead = retry, true
	default:
		return nil, false // every source holds
	}
	return params, ahead
}

// overBudget reports whether claims, made with room bytes to spare, may
// have stopped at the byte budget rather than for want of due events: one
// more event as large as the largest of them would not have fitted. The
// loop then claims again when a held event finishes, instead of waiting for
// a receipt signal that may not come; a claim that finds nothing ends it.
func overBudget(claims []*Claim, room int64) bool {
	var total, largest int64
	for _, cl := range claims {
		n := int64(len(cl.Event.Payload))
		total, largest = total+n, max(largest, n)
	}
	return len(claims) > 0 && total+largest > room
}

// launch holds a claimed event: its lease joins the heartbeats at once, and
// its handler runs as soon as one of the Workers is free. An event still
// waiting when Stop begins is released unworked, for another instance.
func (c *Client) launch(handlerCtx context.Context, cl *Claim, claimedAt time.Time) {
	ev := cl.Event
	hctx, cancel := context.WithCancelCause(handlerCtx)
	hctx, span := c.startAttempt(hctx, cl, claimedAt)
	j := &job{lease: ev.Lease(), source: ev.Source, size: int64(len(ev.Payload)), reclaimed: cl.Reclaimed, cancel: cancel, span: span}
	j.deadline = claimedAt.Add(c.cfg.LeaseTTL)
	j.timer = time.AfterFunc(time.Until(j.deadline), j.lose)
	c.mu.Lock()
	c.held++
	c.heldBytes += j.size
	c.beating[j] = struct{}{}
	c.mu.Unlock()
	c.jobs.Add(1)
	go func() {
		defer c.jobs.Done()
		defer c.finish(j)
		working := false
		select {
		case c.workers <- struct{}{}:
			working = true
		case <-c.stopQueued:
		}
		stopping := false
		select {
		case <-c.stopQueued:
			stopping = true
		default:
		}
		// Never started, so given back at once: Stop began while it waited
		// (a worker freed at the same moment does not count), or its lease
		// lapsed meanwhile on this worker's clock (a claim slow to come
		// back, heartbeats that did not get through), where a hold source's
		// event would otherwise go unknown for a person though nothing ran.
		// The release is fenced: a lease the store holds no more is left.
		if stopping || j.lost.Load() || !time.Now().Before(j.leaseDeadline()) {
			if working {
				<-c.workers
			}
			c.stopBeating(j)
			outcome := OutcomeReleased
			if errors.Is(c.release(j.lease), ErrLeaseLost) {
				outcome = OutcomeLeaseExpired
			}
			endAttempt(j.span, outcome, nil)
			if c.cfg.Observer != nil {
				c.cfg.Observer.AttemptFinished(ev.Source, outcome, j.reclaimed, 0)
			}
			return
		}
		defer func() { <-c.workers }()
		var (
			completed bool
			took      time.Duration
			// What a handler that never returns (runtime.Goexit) leaves:
			// deferred, the verdict is recorded on that path too.
			err = errHandlerExited
		)
		defer func() {
			c.stopBeating(j)
			c.record(hctx, j, cl, completed, err, took)
		}()
		if j.lost.Load() { // lost since the check above: not started, left to lapse
			err = ErrLeaseLost
		} else {
			completed, took, err = c.runHandler(hctx, j, cl)
		}
	}()
}

// stopBeating takes j out of the heartbeats: its handler has returned.
func (c *Client) stopBeating(j *job) {
	c.mu.Lock()
	delete(c.beating, j)
	c.mu.Unlock()
}

func (c *Client) finish(j *job) {
	j.timer.Stop()
	j.cancel(nil)
	c.mu.Lock()
	c.held--
	c.heldBytes -= j.size
	c.finished++
	c.mu.Unlock()
	select {
	case c.slotFree <- struct{}{}:
	default:
	}
}

// release gives back a lease whose event did not run. A lease the store
// holds no more (ErrLeaseLost) is another claim's already: nothing to warn
// of.
func (c *Client) release(l Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.LeaseTTL)
	defer cancel()
	err := c.store.EventRelease(ctx, &EventReleaseParams{Lease: l})
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		c.log.Warn("ferry: release failed; the lease will lapse instead", "err", err)
	}
	return err
}
