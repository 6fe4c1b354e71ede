package ferry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-inbox/ferry/internal/groupcommit"
)

// job is one running attempt.
type job struct {
	lease     Lease
	source    string
	size      int64 // payload bytes, counted in Client.heldBytes
	reclaimed bool
	cancel    context.CancelCauseFunc
	lost      atomic.Bool
	span      trace.Span // the attempt's span; nil when tracing is off
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

// completion is one job's verdict of done, with what its downstream answered.
type completion struct {
	lease    Lease
	response AttemptResponse
}

// runHandler runs the event's handler; completed reports that a
// transactional handler's own transaction completed the event.
func (c *Client) runHandler(ctx context.Context, j *job, cl *Claim) (completed bool, took time.Duration, err error) {
	ev := cl.Event
	if err := budgetSpent(cl, c.policy(ev.Source)); err != nil {
		return false, 0, err
	}
	d := &Delivery{
		Event:              ev,
		Attempt:            ev.Attempt,
		IdempotencyKey:     IdempotencyKey(ev.Source, ev.EventID),
		PreviousUnfinished: cl.PreviousUnfinished,
	}
	started := time.Now()
	h := c.handlerFor(ev)
	if h == nil {
		return false, 0, Permanent(notRunError{fmt.Errorf("ferry: no handler for source %q type %q", ev.Source, ev.Type)})
	}
	completed, err = runSafely(ctx, h, d)
	j.response = d.Response()
	return completed, time.Since(started), err
}

// budgetSpent is a permanent error if cl took a lapsed lease back past the
// source's budget, which only attempts that never recorded a verdict can
// spend (a failure at the last attempt is dead): a handler that crashes its
// process or outlives its lease every time would otherwise be claimed for
// ever and never reach dead, where a person sees it. Reclaimed, not
// PreviousUnfinished: a release after the lapse still runs once.
func budgetSpent(cl *Claim, p SourcePolicy) error {
	ev := cl.Event
	if !cl.Reclaimed || ev.Attempt-ev.AttemptBase <= p.MaxAttempts {
		return nil
	}
	return Permanent(notRunError{fmt.Errorf("ferry: not run: the budget of %d attempts is spent, the last by an attempt that never finished (its worker died, or its handler outlived the lease)", p.MaxAttempts)})
}

// notRunError is an attempt's error given before any handler ran: its
// ledger row is closed as released (EventFailParams.NotRun), so a replay's
// PreviousUnfinished still sees the lapsed attempt before it.
type notRunError struct{ error }

func (e notRunError) Unwrap() error { return e.error }

// cutOff reports whether a handler that failed was cut off by Stop at the
// end of the grace. Cancellation comes back in many forms (ctx.Err(), its
// cause, an RPC status), so any error counts but Permanent, a verdict only
// the handler can give (an app's 404): that one is recorded.
func cutOff(ctx context.Context, err error) bool {
	return context.Cause(ctx) == errShutdown && !IsPermanent(err)
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
	leftToLapse := false
	switch {
	case completed:
	case j.lost.Load() || errors.As(err, new(leaseLostAtCompletion)):
		// Not errors.Is(err, ErrLeaseLost): a handler's own error may wrap
		// it (another lease's CheckpointPut), and that is a failure.
		outcome = OutcomeLeaseExpired
	case err == nil:
		// Shared with the completions of other jobs that finish meanwhile;
		// Do returns only once this lease's verdict is committed (or lost).
		if werr := retryWrite(wctx, func() error {
			_, err := c.completions.Do(wctx, completion{lease: j.lease, response: j.response})
			return err
		}); werr != nil {
			outcome = OutcomeLeaseExpired
			then := "retried"
			if policy.LostLease == LostLeaseHold {
				then = "held as unknown" // as for any lapsed lease of a hold source
			}
			log.Warn("ferry: could not record completion; the lease will lapse", "then", then, "err", werr)
		}
	case cutOff(ctx, err):
		if policy.LostLease == LostLeaseHold {
			// Its effect may have run: as for a worker that died, the
			// lease lapses and the next claim holds the event as unknown.
			outcome, leftToLapse = OutcomeLeaseExpired, true
			log.Warn("ferry: handler cut off at shutdown; its lease is left to lapse and the event will be held as unknown", "alert", "lease_lost", "policy", policy.LostLease)
			break
		}
		// Give it back for another instance.
		outcome = OutcomeReleased
		if err := c.store.EventRelease(wctx, &EventReleaseParams{Lease: j.lease}); err != nil {
			log.Warn("ferry: release at shutdown failed; the lease will lapse instead", "err", err)
		}
	default:
		// Grown with the attempts of this budget: a requeued event starts
		// again from RetryBase.
		delay := backoff(ev.Attempt-ev.AttemptBase, c.cfg.RetryBase, c.cfg.RetryCap)
		delay = max(delay, retryAfterOf(err))
		var state State
		// Batched with the failures of other jobs, as completions are.
		werr := retryWrite(wctx, func() error {
			var e error
			state, e = c.failures.Do(wctx, EventFailParams{
				Lease: j.lease, Error: StorableText(err.Error()), RetryDelay: delay,
				MaxAttempts: policy.MaxAttempts, MaxAge: policy.ReplayWindow, Dead: IsPermanent(err),
				NotRun: errors.As(err, new(notRunError)), Response: j.response,
			})
			return e
		})
		switch {
		case werr != nil:
			outcome = OutcomeLeaseExpired
			log.Warn("ferry: could not record failure; the lease will lapse", "err", werr, "handler_err", logSafe(err), panicStack(err))
		case state == StateDead:
			outcome = OutcomeDead
			log.Warn("ferry: event dead", "alert", "dead", "err", logSafe(err), panicStack(err))
		default:
			outcome = OutcomeFailed
			log.Info("ferry: attempt failed; retrying", "err", logSafe(err), "retry_in", delay, panicStack(err))
		}
	}
	if outcome == OutcomeLeaseExpired && !leftToLapse {
		log.Warn("ferry: lease lost; this attempt's verdict was not recorded", "alert", "lease_lost", "policy", policy.LostLease)
	}
	if c.cfg.Observer != nil {
		c.cfg.Observer.AttemptFinished(ev.Source, outcome, j.reclaimed, took)
	}
	endAttempt(j.span, outcome, err)
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

// heartbeatLoop extends the leases of every held job, running or claimed
// ahead, in one EventHeartbeatMany call per HeartbeatInterval, until ctx is
// done. Each call is bounded by one interval, so a slow store delays the
// next tick, never past it; a job whose lease the store found lost is
// cancelled with ErrLeaseLost, and a job whose beats keep failing is
// cancelled by its own timer at its deadline.
func (c *Client) heartbeatLoop(ctx context.Context) {
	defer close(c.beatDone)
	tick := time.NewTicker(c.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c.mu.Lock()
		jobs := make(map[Lease]*job, len(c.beating))
		leases := make([]Lease, 0, len(c.beating))
		for j := range c.beating {
			if !j.lost.Load() {
				jobs[j.lease] = j
				leases = append(leases, j.lease)
			}
		}
		c.mu.Unlock()
		if len(leases) == 0 {
			continue
		}
		sent := time.Now()
		bctx, cancel := context.WithTimeout(ctx, c.cfg.HeartbeatInterval)
		lost, err := c.store.EventHeartbeatMany(bctx, &EventHeartbeatManyParams{Leases: leases, TTL: c.cfg.LeaseTTL})
		cancel()
		switch {
		case err == nil:
			for _, l := range lost {
				if j := jobs[l]; j != nil { // a store's answer naming a lease not sent is no lease of ours
					j.lose()
					delete(jobs, l)
				}
			}
			for _, j := range jobs {
				j.extend(sent.Add(c.cfg.LeaseTTL))
			}
		case ctx.Err() != nil:
			return
		default:
			c.log.Warn("ferry: heartbeat failed; retrying until the leases would lapse", "worker", c.cfg.ID, "leases", len(leases), "err", logSafe(err))
		}
	}
}

// failBatch closes the attempts of jobs whose handlers failed, in one
// EventFailMany call, and gives each job its own verdict: the state its
// event went to, ErrLeaseLost for a lease the store found lost, or the
// call's error for every job when the batch failed as a whole (each job then
// retries within its own lease, as completeBatch's do).
func (c *Client) failBatch(ctx context.Context, failures []EventFailParams) []groupcommit.Result[State] {
	out := make([]groupcommit.Result[State], len(failures))
	states, err := c.store.EventFailMany(ctx, &EventFailManyParams{Failures: failures})
	if err != nil {
		err = fmt.Errorf("ferry: fail %d events: %w", len(failures), err)
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	for i, s := range states {
		if s == "" {
			out[i].Err = ErrLeaseLost
		} else {
			out[i].Value = s
		}
	}
	return out
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
