package ferry

import (
	"net/http"
	"time"
	"unicode/utf8"
)

// State is where an event stands in Ferry's state machine:
//
//	pending ──claim──► in_progress ──complete──► done
//	   ▲                  │   │  └── lease lost, source holds ──► unknown
//	   └── fail (backoff) ┘   └── attempts or age exhausted ──► dead
//	   └──── lease expired (worker died) ◄┘
//
// done, dead and unknown are terminal until an operator requeues the event.
type State string

const (
	// StatePending events wait for a worker; next_attempt_at says from when.
	StatePending State = "pending"
	// StateInProgress events are leased to one worker until their lease expires.
	StateInProgress State = "in_progress"
	// StateDone events were completed by the worker that held their lease.
	StateDone State = "done"
	// StateDead events ran out of attempts or outlived their replay window.
	StateDead State = "dead"
	// StateUnknown events lost their lease while a non-idempotent effect may
	// have run, in a source whose LostLease policy is LostLeaseHold. A person
	// or a reconciler decides what happened.
	StateUnknown State = "unknown"
)

// States lists every state in the order an operator reads them.
var States = []State{StatePending, StateInProgress, StateDone, StateDead, StateUnknown}

// Valid reports whether s is one of the five states.
func (s State) Valid() bool {
	switch s {
	case StatePending, StateInProgress, StateDone, StateDead, StateUnknown:
		return true
	}
	return false
}

// Terminal reports whether no worker will pick the event up again without an
// operator's requeue.
func (s State) Terminal() bool {
	return s == StateDone || s == StateDead || s == StateUnknown
}

// Unfinished reports whether an event in state s still waits for an
// attempt or a verdict: pending, in_progress or unknown. Only such an
// event can outlive the provider's replay window unprocessed (at risk).
func (s State) Unfinished() bool {
	return s == StatePending || s == StateInProgress || s == StateUnknown
}

// Event is one webhook event, keyed by (Source, EventID), with everything the
// inbox knows of it.
type Event struct {
	// ID is the store's row id: stable, unique across sources, and the first
	// half of a Lease.
	ID int64
	// Source is the configured source name ("stripe", "github-main").
	Source string
	// EventID is the provider's event id, the deduplication key within Source.
	EventID string
	// Type is the provider's event type ("invoice.paid", "push"), if it has one.
	Type string
	// Payload holds the raw request body, byte for byte as it was verified.
	Payload []byte
	// Headers holds the request headers the receiver chose to keep. Signature
	// headers are never kept.
	Headers http.Header
	// PayloadSHA256 is the SHA-256 of Payload; a later delivery of the same key
	// with another hash is a conflicting duplicate.
	PayloadSHA256 []byte

	State State
	// Attempt counts claims and is the fencing token: every write after a claim
	// must name the attempt it holds. It never goes down, even on requeue.
	Attempt int
	// AttemptBase is Attempt as it was when the event was last requeued (0
	// before): Attempt - AttemptBase counts the claims of its current
	// budget, which MaxAttempts bounds and the retry backoff grows with.
	AttemptBase int
	// LeaseOwner names the worker holding the lease; empty when none does.
	LeaseOwner string
	// LeaseExpiresAt is when the lease lapses unless heartbeated; zero when no
	// lease is held.
	LeaseExpiresAt time.Time
	// NextAttemptAt is when a pending event becomes due.
	NextAttemptAt time.Time

	FirstDeliveredAt time.Time
	LastDeliveredAt  time.Time
	// Deliveries counts every delivery of this key, duplicates included.
	Deliveries int
	// Conflicts counts deliveries of this key whose payload hash differed.
	Conflicts int
	// Replays counts deliveries of this event's payload under other event
	// ids (suspected replays, see ReceiveReplay); each is kept as a Replay.
	Replays int

	// ClaimedAt is when the latest attempt started; zero before the first.
	ClaimedAt time.Time
	// CompletedAt is when the event was done; zero until then.
	CompletedAt time.Time
	// LastError is the error of the latest failed attempt.
	LastError string
	// RequeuedAt is when an operator last requeued the event; zero if never.
	RequeuedAt time.Time
	// Origin says whether the provider delivered the event or catch-up
	// fetched it; the first receipt decides.
	Origin Origin

	// Traceparent and Tracestate are the W3C trace context of the receipt
	// (its span's), so that every attempt, in any process, links to the
	// trace it began. Empty when the receipt was not traced.
	Traceparent string
	Tracestate  string
}

// Lease names one claim of one event: the row and the attempt that holds it.
// Every write after a claim is fenced by both.
type Lease struct {
	ID      int64
	Attempt int
}

// Lease returns the lease this event's current attempt holds.
func (e *Event) Lease() Lease { return Lease{ID: e.ID, Attempt: e.Attempt} }

// Outcome is how one attempt ended, as the attempt ledger records it.
type Outcome string

const (
	// OutcomeRunning: the attempt has not reported an end (yet, or ever).
	OutcomeRunning Outcome = "running"
	// OutcomeDone: the attempt completed the event.
	OutcomeDone Outcome = "done"
	// OutcomeFailed: the attempt failed and the event was scheduled again.
	OutcomeFailed Outcome = "failed"
	// OutcomeDead: the attempt failed and the event went dead.
	OutcomeDead Outcome = "dead"
	// OutcomeReleased: the worker gave the event back at shutdown, unworked
	// or with its handler cut off at the end of the grace; or the event went
	// dead without a handler running (EventFailParams.NotRun), which the
	// attempt's error says.
	OutcomeReleased Outcome = "released"
	// OutcomeLeaseExpired: the lease lapsed before the attempt reported; the
	// event was taken back (or held as unknown). Its effect may or may not have
	// happened.
	OutcomeLeaseExpired Outcome = "lease_expired"
)

// Attempt is one row of the attempt ledger: every claim leaves one, so every
// repeated side effect leaves a trace.
type Attempt struct {
	EventID    int64 // the Event's row ID
	Attempt    int
	Worker     string
	StartedAt  time.Time
	FinishedAt time.Time // zero while running
	Outcome    Outcome
	Error      string
	// HTTPStatus is the status the handler's downstream answered (the
	// forwarder's app); 0 when none was recorded.
	HTTPStatus int
	// Response is the start of what the downstream answered, at most
	// ResponseLimit bytes of valid UTF-8; empty when none was recorded.
	Response string
}

// ResponseLimit is the most bytes of a downstream's response an attempt
// keeps: enough to read an error message, too little to hold a payload.
const ResponseLimit = 512

// AttemptResponse is what a handler's downstream answered one attempt, for
// the attempt ledger. The zero value records nothing.
type AttemptResponse struct {
	// HTTPStatus is 0 (none) or a status code, 100 to 599.
	HTTPStatus int
	// Body is at most ResponseLimit bytes of valid UTF-8 without NUL.
	Body string
}

// NewAttemptResponse makes what a store can keep of a response: body cut to
// ResponseLimit bytes on a rune boundary, invalid UTF-8 and NUL bytes
// replaced by U+FFFD, and a status outside 100 to 599 dropped.
func NewAttemptResponse(status int, body []byte) AttemptResponse {
	if status < 100 || status > 599 {
		status = 0
	}
	s := StorableText(string(body))
	if len(s) > ResponseLimit {
		cut := ResponseLimit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return AttemptResponse{HTTPStatus: status, Body: s}
}

// Conflict is a delivery whose key matched a stored event but whose payload
// did not. The first NoticeKeep conflicting payloads of an event are kept,
// each once, for an operator to look at; every conflict is counted
// (Event.Conflicts).
type Conflict struct {
	EventID       int64 // the Event's row ID
	ReceivedAt    time.Time
	PayloadSHA256 []byte
	Payload       []byte
	Headers       http.Header
}

// Replay is a delivery whose body matched a stored event's under another
// event id, from a provider whose signature does not cover the id. It was
// answered 2xx (the signature was valid) and never processed. The first
// NoticeKeep of an event are kept, without their payload (the event's own)
// and without signature headers, for an operator to look at; every replay
// is counted (Event.Replays).
type Replay struct {
	EventID    int64 // the Event's row ID: the event whose body was replayed
	ReceivedAt time.Time
	// ClaimedEventID and ClaimedType are what the replayed delivery said it
	// was: unsigned, hence the attacker's choice.
	ClaimedEventID string
	ClaimedType    string
	Headers        http.Header
}

// Action is one operator action on an event: who did what, when (the
// database's clock).
type Action struct {
	EventID int64 // the Event's row ID
	At      time.Time
	Action  string // ActionRequeue, ActionReplay, ActionRetryNow or ActionResolve
	Actor   string
}
