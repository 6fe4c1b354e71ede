package ferry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// Delivery is what a handler gets: one event, on one attempt.
type Delivery struct {
	// Event is the event, payload and headers included.
	Event *Event
	// Attempt is this attempt's number, starting at 1. It is also the lease's
	// fencing token.
	Attempt int
	// IdempotencyKey is stable across every attempt of the event (derived from
	// its source and event id, on any instance). Send it downstream, as the
	// Idempotency-Key header for instance, so that a repeated attempt cannot
	// repeat the effect.
	IdempotencyKey string
	// PreviousUnfinished is true when the last attempt before this one that
	// ran never reported an end: its worker died or stalled past its lease.
	// Its effect may or may not have happened; a handler with a
	// non-idempotent effect should check the downstream before doing it
	// again. Released attempts in between are passed over: those that ran
	// no handler (a graceful stop, or the one that sent the event dead
	// because such attempts spent its budget), and on a retry source one
	// whose handler was cut off at the end of the shutdown grace, though its
	// effect may have run (a hold source leaves that lease to lapse, so it
	// counts here). A replay does not clear it: the first attempt of a
	// replayed unknown event, or of one dead that way, says it too, whatever
	// a person found downstream.
	PreviousUnfinished bool

	response atomic.Pointer[AttemptResponse] // what SetResponse recorded
}

// SetResponse records what the handler's downstream answered this attempt:
// its HTTP status and the first bytes of its body, cut to ResponseLimit and
// made valid UTF-8 (NewAttemptResponse). The attempt ledger keeps it, shown
// beside the attempt on the dashboard, so pass only what an operator may
// read: the downstream's answer, never a secret. The last call wins.
func (d *Delivery) SetResponse(status int, body []byte) {
	r := NewAttemptResponse(status, body)
	d.response.Store(&r)
}

// Response returns what SetResponse recorded; the zero value if nothing.
func (d *Delivery) Response() AttemptResponse {
	if r := d.response.Load(); r != nil {
		return *r
	}
	return AttemptResponse{}
}

// IdempotencyKey returns the key Ferry hands every attempt of the event
// (source, eventID): "ferry_" and 32 hex digits of a SHA-256.
func IdempotencyKey(source, eventID string) string {
	sum := sha256.Sum256([]byte(source + "\x00" + eventID))
	return "ferry_" + hex.EncodeToString(sum[:16])
}

// HandlerFunc works one delivery. A nil error completes the event; an error
// fails the attempt and schedules a retry with backoff, unless it is
// Permanent, whatever it wraps: ErrLeaseLost or ErrTxDone from the
// handler's own calls (another lease's CheckpointPut) is a failure too. The
// context is cancelled the moment the lease is lost or the client stops for
// good; a handler should return promptly then. A panic is a failed attempt,
// not a dead worker.
type HandlerFunc func(ctx context.Context, d *Delivery) error

// TxHandlerFunc works one delivery inside tx, the transaction in which Ferry
// also marks the event done, fenced by its lease. Its writes commit only if
// the lease still holds: exactly-once effects in the store's database.
// Never Commit or Rollback tx: Ferry ends it. A handler that does leaves
// its writes without the event's done; the event goes dead at once
// (ErrTxDone in its last error) rather than repeat them with every retry.
type TxHandlerFunc[TX any] func(ctx context.Context, tx TX, d *Delivery) error

// MaxRetryAfter bounds the wait a RetryAfter asks for, so that a
// downstream's Retry-After of a year cannot park an event for a year: 24 h.
const MaxRetryAfter = 24 * time.Hour

// Permanent marks err as one no retry will fix (a 404 from the downstream,
// a payload the handler cannot understand): the event goes dead at once.
// Wrapped in RetryAfter, it stays permanent.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &handlerError{err: err, permanent: true}
}

// RetryAfter asks for the next attempt no sooner than d (at most
// MaxRetryAfter) from now, as a downstream's Retry-After header does. The
// attempt still counts, and a Permanent err stays permanent.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &handlerError{err: err, retryAfter: d, permanent: IsPermanent(err)}
}

type handlerError struct {
	err        error
	permanent  bool
	retryAfter time.Duration
}

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// IsPermanent reports whether err, or an error it wraps, was marked Permanent.
func IsPermanent(err error) bool {
	var he *handlerError
	return errors.As(err, &he) && he.permanent
}

func retryAfterOf(err error) time.Duration {
	var he *handlerError
	if errors.As(err, &he) {
		return min(he.retryAfter, MaxRetryAfter)
	}
	return 0
}

// handler is how the engine runs either kind of handler: completed reports
// that the handler's own transaction already completed the event;
// transactional, that a running one holds a store connection.
type handler interface {
	run(ctx context.Context, d *Delivery) (completed bool, err error)
	transactional() bool
}

type plainHandler HandlerFunc

func (h plainHandler) run(ctx context.Context, d *Delivery) (bool, error) {
	return false, h(ctx, d)
}

func (plainHandler) transactional() bool { return false }

type txHandler[TX any] struct {
	store TxStore[TX]
	fn    TxHandlerFunc[TX]
}

func (txHandler[TX]) transactional() bool { return true }

func (h txHandler[TX]) run(ctx context.Context, d *Delivery) (bool, error) {
	var fnErr error
	err := h.store.InTx(ctx, func(tx TX) error {
		if fnErr = h.fn(ctx, tx, d); fnErr != nil {
			return opaqueError{fnErr}
		}
		return h.store.EventCompleteTx(ctx, tx, &EventCompleteParams{Lease: d.Event.Lease(), Response: d.Response()})
	})
	switch {
	case errors.Is(err, ErrTxDone):
		// InTx or EventCompleteTx found tx ended: its writes may have
		// committed, whatever it returned, and a retry could repeat them.
		// The handler's own error is wrapped as it is, so that its
		// Redacted still serves the log.
		if fnErr != nil {
			err = fmt.Errorf("%w: %w", ErrTxDone, fnErr)
		}
		return false, Permanent(txEndedError{err})
	case fnErr != nil:
		return false, fnErr
	case errors.Is(err, ErrLeaseLost):
		return false, leaseLostAtCompletion{err}
	}
	return err == nil, err
}

// txEndedError is the verdict on a transactional handler that ended
// Ferry's transaction itself. Its Redacted keeps the explanation and takes
// the rest from the handler's own Redacted, if it has one.
type txEndedError struct{ err error }

const txEndedText = "ferry: the handler committed or rolled back Ferry's transaction itself (never call Commit or Rollback on tx), or SQLite rolled it back after a statement in it failed: dead, not retried, since its writes may have committed without the event's done: "

func (e txEndedError) Error() string    { return txEndedText + e.err.Error() }
func (e txEndedError) Unwrap() error    { return e.err }
func (e txEndedError) Redacted() string { return txEndedText + logSafe(e.err) }

// opaqueError carries a transactional handler's own error through InTx
// without unwrapping, so that only the store's words count as ErrTxDone or
// ErrLeaseLost: a handler may well pass up either from a call of its own
// (another lease's CheckpointPut), which is an ordinary failure.
type opaqueError struct{ err error }

func (e opaqueError) Error() string { return e.err.Error() }

// leaseLostAtCompletion is ErrLeaseLost from EventCompleteTx: the event's
// lease lapsed before its done could commit, so the attempt's verdict is
// the next claim's, as for a lease its heartbeats lost.
type leaseLostAtCompletion struct{ error }

func (e leaseLostAtCompletion) Unwrap() error { return e.error }

// panicked is a handler's panic as its attempt's error. Error, which the
// store records, has the value; Redacted, which the log and the span get,
// has the value's own Redacted when it is an error with one. The stack it
// panicked on goes to the log lines alone (panicStack). It unwraps to
// nothing: a panic is an ordinary failure whatever its value wraps.
type panicked struct {
	value any
	stack []byte
}

func (e panicked) Error() string { return fmt.Sprintf("ferry: handler panicked: %v", e.value) }

func (e panicked) Redacted() string {
	if err, ok := e.value.(error); ok {
		return "ferry: handler panicked: " + logSafe(err)
	}
	return e.Error()
}

// panicError is p, recovered from a handler, with the stack it panicked
// on: call it in the deferred function that recovers.
func panicError(p any) error { return panicked{p, debug.Stack()} }

// panicStack is the stack a handler panicked on, as a log line's "stack"
// attribute, to find the bug by: functions, files and lines, and argument
// words as numbers, never the data behind them. For any other error it is
// the empty attribute, which a log handler leaves out.
func panicStack(err error) slog.Attr {
	if p, ok := errors.AsType[panicked](err); ok {
		return slog.String("stack", string(p.stack))
	}
	return slog.Attr{}
}

// logSafe is the text of err fit for a log line. An error whose full text may
// carry data that must not be logged (a downstream response that echoes the
// payload) implements Redacted() string: the store records Error(), the log
// gets Redacted().
func logSafe(err error) string {
	var r interface{ Redacted() string }
	if errors.As(err, &r) {
		return r.Redacted()
	}
	return err.Error()
}
