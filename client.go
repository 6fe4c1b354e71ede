package ferry

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-inbox/ferry/internal/groupcommit"
)

// Config configures a Client. Zero values take the documented defaults.
type Config struct {
	// Store is the inbox the client works. Required.
	Store Store

	// Sources are the per-source policies. A source with a handler but no
	// entry here gets the defaults of SourcePolicy.
	Sources []SourcePolicy

	// Workers is how many handlers run at once. Defaults to 10.
	Workers int

	// LeaseTTL is how long a claim holds an event without a heartbeat; a
	// dead worker's events are taken back within it. Defaults to 15 seconds.
	LeaseTTL time.Duration

	// HeartbeatInterval is how often running leases are extended. Defaults to
	// LeaseTTL/3, and must leave room for at least two missed beats: it may
	// not exceed LeaseTTL/3.
	HeartbeatInterval time.Duration

	// PollInterval is how often the client looks for due events when no
	// receipt notification wakes it (retries coming due, expired leases, a
	// missed notification). Defaults to 1 second.
	PollInterval time.Duration

	// ShutdownGrace is how long Stop lets running handlers finish before it
	// cancels them and releases their events. Defaults to 10 seconds.
	ShutdownGrace time.Duration

	// RetryBase and RetryCap shape the backoff: attempt n waits a random
	// time between 0 and min(RetryCap, RetryBase × 2^(n-1)) (exponential
	// with full jitter). Default to 1 second and 1 hour.
	RetryBase time.Duration
	RetryCap  time.Duration

	// ID names this worker in leases and in the attempt ledger. Defaults to
	// hostname-pid-random.
	ID string

	// Logger receives one line per failed, dead or lost attempt, and claim
	// errors. Payloads and headers are never logged. Defaults to
	// slog.Default().
	Logger *slog.Logger

	// Observer, if set, is told of every attempt's end (metrics plug in
	// here).
	Observer Observer
}

// SourcePolicy is how the client treats one source's events.
type SourcePolicy struct {
	// Name is the source name, as events are stored under.
	Name string
	// MaxAttempts is the attempt budget before an event goes dead. Defaults
	// to 25.
	MaxAttempts int
	// ReplayWindow is how long the provider redelivers (Stripe and GitHub: 3
	// days). An event that fails once older than this goes dead, for a person
	// to see, rather than retrying past the provider's own horizon. Defaults
	// to 72 hours.
	ReplayWindow time.Duration
	// LostLease is what happens to an event whose lease lapsed while a
	// handler may have been running. Defaults to LostLeaseRetry.
	LostLease LostLeasePolicy
}

// Observer is told what the engine did; a metrics adapter implements it.
// Methods must not block.
type Observer interface {
	// AttemptFinished is called once per claimed attempt, with how it ended
	// (done, failed, dead, released or lease_expired) and how long the
	// handler ran.
	AttemptFinished(source string, outcome Outcome, reclaimed bool, handlerTime time.Duration)
}

// Default settings; see Config.
const (
	DefaultWorkers       = 10
	DefaultLeaseTTL      = 15 * time.Second
	DefaultPollInterval  = time.Second
	DefaultShutdownGrace = 10 * time.Second
	DefaultMaxAttempts   = 25
	DefaultReplayWindow  = 72 * time.Hour
)

// Client claims events from a Store and runs their handlers: in batches,
// with bounded concurrency, a heartbeat per lease, fenced completion, backoff
// and dead-lettering. Any number of clients, in any number of processes, may
// share a PostgreSQL store.
type Client struct {
	cfg      Config
	store    Store
	log      *slog.Logger
	policies map[string]SourcePolicy
	handlers map[string]map[string]handler // source → event type ("" for any) → handler

	// completions batches the completions of concurrent jobs into one
	// EventCompleteMany call (group commit: no timer, an idle client
	// completes each job alone at once); each job still waits for its own
	// verdict.
	completions *groupcommit.Committer[completion, struct{}]

	mu       sync.Mutex
	started  bool
	active   int
	slotFree chan struct{}

	stopClaiming context.CancelFunc
	stopHandlers context.CancelCauseFunc
	stopBeats    context.CancelFunc
	beatCtx      context.Context
	claimDone    chan struct{}
	jobs         sync.WaitGroup
}

// job is one running attempt.
type job struct {
	lease     Lease
	source    string
	reclaimed bool
	cancel    context.CancelCauseFunc
	lost      atomic.Bool
	// response is what the handler's downstream answered (SetResponse),
	// written by the job's goroutine before it records the verdict.
	response AttemptResponse

	mu sync.Mutex
	// deadline is this worker's conservative guess of the lease's end, on its
	// own clock (from before the claim or heartbeat was sent): only ever used
	// to give up sooner, never to hold on longer. timer cancels the handler
	// at the deadline even if the store stops answering.
	deadline time.Time
	timer    *time.Timer
}

// lose marks the lease lost and cancels the handler with ErrLeaseLost.
func (j *job) lose() {
	j.lost.Store(true)
	j.cancel(ErrLeaseLost)
}

// extend moves the deadline to until, after a heartbeat the store accepted.
func (j *job) extend(until time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.lost.Load() || !until.After(j.deadline) {
		return
	}
	j.deadline = until
	j.timer.Reset(time.Until(until))
}

func (j *job) leaseDeadline() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.deadline
}

var errShutdown = errors.New("ferry: client stopped")

// completion is one job's verdict of done, with what its downstream answered.
type completion struct {
	lease    Lease
	response AttemptResponse
}

// maxCompleteBatch is the most leases one EventCompleteMany call carries.
const maxCompleteBatch = 1000

// NewClient checks cfg and fills in its defaults.
func NewClient(cfg *Config) (*Client, error) {
	c := *cfg
	if c.Store == nil {
		return nil, fmt.Errorf("%w: Config.Store is required", ErrInvalidParams)
	}
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, c.LeaseTTL/3)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, DefaultShutdownGrace)
	c.RetryBase = cmp.Or(c.RetryBase, time.Second)
	c.RetryCap = cmp.Or(c.RetryCap, time.Hour)
	if c.Workers < 0 || c.LeaseTTL < 0 || c.PollInterval < 0 || c.ShutdownGrace < 0 || c.RetryBase < 0 || c.RetryCap < 0 {
		return nil, fmt.Errorf("%w: Config durations and Workers may not be negative", ErrInvalidParams)
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval > c.LeaseTTL/3 {
		return nil, fmt.Errorf("%w: HeartbeatInterval %v must be positive and at most LeaseTTL/3 (%v)", ErrInvalidParams, c.HeartbeatInterval, c.LeaseTTL/3)
	}
	if c.ID == "" {
		c.ID = workerID()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	cl := &Client{
		cfg:      c,
		store:    c.Store,
		log:      c.Logger,
		policies: map[string]SourcePolicy{},
		handlers: map[string]map[string]handler{},
		slotFree: make(chan struct{}, 1),
	}
	cl.completions = &groupcommit.Committer[completion, struct{}]{
		// A job has at most one completion waiting, so a batch never needs
		// more than Workers; 1000 caps the arrays a statement carries.
		MaxBatch: min(c.Workers, maxCompleteBatch),
		// Two batches at once: one can be written while the next fills,
		// so a stalled commit does not hold every finished job behind it,
		// and the work path still uses at most two connections for it.
		MaxConcurrent: 2,
		Run:           cl.completeBatch,
	}
	for _, p := range c.Sources {
		if p.Name == "" {
			return nil, fmt.Errorf("%w: SourcePolicy.Name is required", ErrInvalidParams)
		}
		p.MaxAttempts = cmp.Or(p.MaxAttempts, DefaultMaxAttempts)
		p.ReplayWindow = cmp.Or(p.ReplayWindow, DefaultReplayWindow)
		if p.LostLease == "" {
			p.LostLease = LostLeaseRetry
		}
		if p.LostLease != LostLeaseRetry && p.LostLease != LostLeaseHold {
			return nil, fmt.Errorf("%w: source %q: LostLease %q is neither %q nor %q", ErrInvalidParams, p.Name, p.LostLease, LostLeaseRetry, LostLeaseHold)
		}
		cl.policies[p.Name] = p
	}
	return cl, nil
}

// ID returns the name this worker leases under.
func (c *Client) ID() string { return c.cfg.ID }

// Handle registers h for every event of source that no HandleType handler
// takes. Register before Start.
func (c *Client) Handle(source string, h HandlerFunc) { c.register(source, "", plainHandler(h)) }

// HandleType registers h for events of source whose type is eventType.
func (c *Client) HandleType(source, eventType string, h HandlerFunc) {
	c.register(source, eventType, plainHandler(h))
}

// HandleTx registers a transactional handler for source: h's writes and the
// fenced done commit in one transaction of store, which must be the client's
// own Store. eventType "" takes every type.
func HandleTx[TX any](c *Client, store TxStore[TX], source, eventType string, h TxHandlerFunc[TX]) {
	c.register(source, eventType, txHandler[TX]{store: store, fn: h})
}

func (c *Client) register(source, eventType string, h handler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		panic("ferry: handler registered after Start")
	}
	if c.handlers[source] == nil {
		c.handlers[source] = map[string]handler{}
	}
	c.handlers[source][eventType] = h
}

func (c *Client) policy(source string) SourcePolicy {
	if p, ok := c.policies[source]; ok {
		return p
	}
	return SourcePolicy{Name: source, MaxAttempts: DefaultMaxAttempts, ReplayWindow: DefaultReplayWindow, LostLease: LostLeaseRetry}
}

// Start begins claiming and working events of every source with a handler.
// It returns at once; Stop ends the work.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("ferry: client already started")
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
	j := &job{lease: ev.Lease(), source: ev.Source, reclaimed: cl.PreviousUnfinished, cancel: cancel}
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
		completed, err, took := c.runHandler(hctx, j, cl)
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

// runHandler runs the event's handler; completed reports that a
// transactional handler's own transaction completed the event.
func (c *Client) runHandler(ctx context.Context, j *job, cl *Claim) (completed bool, err error, took time.Duration) {
	ev := cl.Event
	d := &Delivery{
		Event:              ev,
		Attempt:            ev.Attempt,
		IdempotencyKey:     IdempotencyKey(ev.Source, ev.EventID),
		PreviousUnfinished: cl.PreviousUnfinished,
	}
	started := time.Now()
	h := c.handlerFor(ev)
	if h == nil {
		return false, Permanent(fmt.Errorf("ferry: no handler for source %q type %q", ev.Source, ev.Type)), 0
	}
	completed, err = runSafely(ctx, h, d)
	j.response = d.Response()
	return completed, err, time.Since(started)
}

// record writes the attempt's verdict, fenced by its lease, and reports it.
func (c *Client) record(ctx context.Context, j *job, cl *Claim, completed bool, err error, took time.Duration) {
	ev := cl.Event
	log := c.log.With("source", ev.Source, "event_id", ev.EventID, "attempt", ev.Attempt, "worker", c.cfg.ID)
	policy := c.policy(ev.Source)

	// A write with a background context: the handler's context may be
	// cancelled, but the verdict must still reach the store while the lease
	// holds.
	wctx, cancel := context.WithDeadline(context.Background(), j.leaseDeadline())
	defer cancel()

	outcome := OutcomeDone
	switch {
	case completed:
	case j.lost.Load() || errors.Is(err, ErrLeaseLost):
		outcome = OutcomeLeaseExpired
	case err == nil:
		// Shared with the completions of other jobs that finish meanwhile;
		// Do returns only once this lease's verdict is committed (or lost).
		if werr := retryWrite(wctx, func() error {
			_, err := c.completions.Do(wctx, completion{lease: j.lease, response: j.response})
			return err
		}); werr != nil {
			outcome = OutcomeLeaseExpired
			log.Warn("ferry: could not record completion; the event will be retried", "err", werr)
		}
	case context.Cause(ctx) == errShutdown:
		// Cancelled unfinished at shutdown: give it back for another instance.
		outcome = OutcomeReleased
		if err := c.store.EventRelease(wctx, &EventReleaseParams{Lease: j.lease}); err != nil {
			log.Warn("ferry: release at shutdown failed; the lease will lapse instead", "err", err)
		}
	default:
		delay := backoff(ev.Attempt, c.cfg.RetryBase, c.cfg.RetryCap)
		delay = max(delay, retryAfterOf(err))
		var state State
		werr := retryWrite(wctx, func() error {
			var e error
			state, e = c.store.EventFail(wctx, &EventFailParams{
				Lease: j.lease, Error: err.Error(), RetryDelay: delay,
				MaxAttempts: policy.MaxAttempts, MaxAge: policy.ReplayWindow, Dead: IsPermanent(err),
				Response: j.response,
			})
			return e
		})
		switch {
		case werr != nil:
			outcome = OutcomeLeaseExpired
			log.Warn("ferry: could not record failure; the lease will lapse", "err", werr, "handler_err", logSafe(err))
		case state == StateDead:
			outcome = OutcomeDead
			log.Warn("ferry: event dead", "alert", "dead", "err", logSafe(err))
		default:
			outcome = OutcomeFailed
			log.Info("ferry: attempt failed; retrying", "err", logSafe(err), "retry_in", delay)
		}
	}
	if outcome == OutcomeLeaseExpired {
		log.Warn("ferry: lease lost; this attempt's verdict was not recorded", "alert", "lease_lost", "policy", policy.LostLease)
	}
	if c.cfg.Observer != nil {
		c.cfg.Observer.AttemptFinished(ev.Source, outcome, j.reclaimed, took)
	}
}

// completeBatch completes the leases of jobs whose handlers returned nil, in
// one store call, and gives each job its own verdict: nil, ErrLeaseLost for
// a lease the store found lost, or the call's error for every job when the
// batch failed as a whole. Each job then retries within its own lease; if
// the failed call did commit (a connection lost at commit), the retry finds
// the lease done and the job reports it lost, as a single EventComplete
// would.
func (c *Client) completeBatch(ctx context.Context, done []completion) []groupcommit.Result[struct{}] {
	out := make([]groupcommit.Result[struct{}], len(done))
	leases := make([]Lease, len(done))
	var responses []AttemptResponse // none unless a handler recorded one
	for i, d := range done {
		leases[i] = d.lease
		if d.response != (AttemptResponse{}) && responses == nil {
			responses = make([]AttemptResponse, len(done))
		}
	}
	if responses != nil {
		for i, d := range done {
			responses[i] = d.response
		}
	}
	lost, err := c.store.EventCompleteMany(ctx, &EventCompleteManyParams{Leases: leases, Responses: responses})
	if err != nil {
		err = fmt.Errorf("ferry: complete %d events: %w", len(leases), err)
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	if len(lost) == 0 {
		return out
	}
	isLost := make(map[Lease]bool, len(lost))
	for _, l := range lost {
		isLost[l] = true
	}
	for i, l := range leases {
		if isLost[l] {
			out[i].Err = ErrLeaseLost
		}
	}
	return out
}

func (c *Client) handlerFor(ev *Event) handler {
	byType := c.handlers[ev.Source]
	if h, ok := byType[ev.Type]; ok {
		return h
	}
	return byType[""]
}

func runSafely(ctx context.Context, h handler, d *Delivery) (completed bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			completed, err = false, panicError(p)
		}
	}()
	return h.run(ctx, d)
}

// heartbeat extends j's lease every interval until ctx is done. Each job
// beats on its own, so one slow call cannot delay another lease; each call is
// bounded by the job's deadline, past which the job's timer has already
// cancelled the handler.
func (c *Client) heartbeat(ctx context.Context, j *job) {
	tick := time.NewTicker(c.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if j.lost.Load() {
			return
		}
		sent := time.Now()
		bctx, cancel := context.WithDeadline(ctx, j.leaseDeadline())
		_, err := c.store.EventHeartbeat(bctx, &EventHeartbeatParams{Lease: j.lease, TTL: c.cfg.LeaseTTL})
		cancel()
		switch {
		case err == nil:
			j.extend(sent.Add(c.cfg.LeaseTTL))
		case errors.Is(err, ErrLeaseLost):
			j.lose()
			return
		case ctx.Err() != nil:
			return
		default:
			c.log.Warn("ferry: heartbeat failed; retrying until the lease would lapse", "worker", c.cfg.ID, "err", logSafe(err))
		}
	}
}

func (c *Client) release(l Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.LeaseTTL)
	defer cancel()
	if err := c.store.EventRelease(ctx, &EventReleaseParams{Lease: l}); err != nil {
		c.log.Warn("ferry: release failed; the lease will lapse instead", "err", err)
	}
}

// retryWrite retries a store write that failed for any reason but a lost
// lease, until ctx (bounded by the lease) ends.
func retryWrite(ctx context.Context, write func() error) error {
	for i := 0; ; i++ {
		err := write()
		if err == nil || errors.Is(err, ErrLeaseLost) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(backoff(i+1, 50*time.Millisecond, time.Second)):
		}
	}
}

// backoff is exponential with full jitter: a random time in [0, min(limit,
// base × 2^(n-1))]. n ≤ 0 is no wait.
func backoff(n int, base, limit time.Duration) time.Duration {
	if n <= 0 {
		return base
	}
	ceiling := limit
	if n < 63 {
		if d := base << (n - 1); d > 0 && d < limit {
			ceiling = d
		}
	}
	return rand.N(ceiling + 1)
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(d)
}

func workerID() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = crand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
