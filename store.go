package ferry

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Store is the durable inbox. Every implementation passes the contract suite
// in package storetest; postgres.Store and sqlite.Store are the two Ferry
// ships.
//
// Time for leases, backoff and ages is the database's clock, never the
// caller's. Every write after a claim names the Lease it holds and changes
// nothing, returning ErrLeaseLost, unless the event is still in_progress under
// that attempt and its lease has not expired.
//
// Every method first checks its params with their Validate or Normalize
// method (params.go) and returns ErrInvalidParams, changing nothing, when
// they fail. Params must not be nil. Every error is prefixed with the store
// and the method ("postgres: event claim many: …") and keeps its sentinel
// for errors.Is.
type Store interface {
	// ActionList returns the operator actions on one event (requeues,
	// replays, retries now, resolves), oldest first, with who did each and when.
	ActionList(ctx context.Context, params *ActionListParams) ([]*Action, error)

	// ArchiveInfo reports how many time partitions hold done events and
	// when the oldest starts, read at the database's now, for metrics. A
	// store without partitions (sqlite.Store) reports zero partitions.
	ArchiveInfo(ctx context.Context) (*ArchiveInfo, error)

	// ArchiveMaintain enforces retention for every source at once, under a
	// maintenance lease taken for Owner (one instance of a cluster at a
	// time; Skipped, changing nothing, while another owner holds it; a
	// store takes it with MaintainArchive): done
	// events completed longer than Retention ago go, with their ledger,
	// conflicts, replays and actions, and no dedupe key younger than
	// KeyRetention is forgotten. postgres.Store keeps done events in time
	// partitions: it creates them Ahead of time, drops those wholly older
	// than Retention (an event is kept between Retention and Retention plus
	// one partition span), moves strays out of the default partition,
	// purges its key table in batches of KeyBatch and ANALYZEs the
	// partitioned parents. sqlite.Store keeps done events in its one event
	// table: it deletes them in short batches (its EventPurge's, so receipts
	// never wait behind the run) and reports no partitions; its event row is
	// its dedupe key, so a KeyRetention longer than Retention keeps the
	// whole event that long. A KeyRetention shorter than ReplayWindow is
	// refused with ErrRetentionTooShort: a redelivery inside the window
	// would run the work again. Rows come out in batches either way; a
	// shorter per-source retention is EventPurge's. A role that lacks a
	// privilege maintenance needs (on PostgreSQL, most often: it does not
	// own the tables) gets ErrMisconfigured, every run the same.
	ArchiveMaintain(ctx context.Context, params *ArchiveMaintainParams) (*ArchiveMaintainResult, error)

	// AttemptList returns the attempt ledger of one event, oldest first.
	AttemptList(ctx context.Context, params *AttemptListParams) ([]*Attempt, error)

	// CheckpointGet returns the named checkpoint, or ErrNotFound.
	CheckpointGet(ctx context.Context, params *CheckpointGetParams) (*Checkpoint, error)

	// CheckpointPut sets the named checkpoint's value, stamped with the
	// database's now.
	CheckpointPut(ctx context.Context, params *CheckpointPutParams) error

	// ConflictList returns the conflicting deliveries kept on one event
	// (NoticeKeep at most), oldest first, payloads included, up to Limit.
	ConflictList(ctx context.Context, params *ConflictListParams) ([]*Conflict, error)

	// ConflictNoticeList pages through one source's conflicting deliveries,
	// oldest first, after a cursor, without payloads: what pushed alerts
	// announce once each.
	ConflictNoticeList(ctx context.Context, params *NoticeListParams) ([]*Notice, error)

	// EventClaimMany leases up to Limit due events to Owner: pending events
	// whose next attempt time has come, and in_progress events whose lease has
	// expired, oldest due first (an expired lease counts from when its event
	// first became due, so a dead worker's events go ahead of newer work). Each claimed event's attempt goes up by one,
	// its lease runs TTL from the database's now, and the ledger gets a running
	// row. An expired attempt's ledger row is closed as lease_expired. Events
	// of HoldSources whose lease expired are moved to unknown instead.
	// Concurrent callers never receive the same event.
	EventClaimMany(ctx context.Context, params *EventClaimManyParams) ([]*Claim, error)

	// EventComplete marks the leased event done and closes its ledger row.
	EventComplete(ctx context.Context, params *EventCompleteParams) error

	// EventCompleteMany is EventComplete for many leases at once, in one
	// transaction and a constant number of statements (one commit for the
	// lot, however many leases): every lease that still holds is marked done
	// and its ledger row closed, each fenced exactly as EventComplete is. It
	// returns the leases that did not hold, each once, in the order first
	// named; nothing was changed for those. A lease named twice is completed
	// once. A non-nil error means nothing was committed. No leases is a
	// no-op.
	EventCompleteMany(ctx context.Context, params *EventCompleteManyParams) (lost []Lease, err error)

	// EventFail closes the attempt as failed: the event goes back to pending
	// with next attempt time now + RetryDelay, or to dead when Dead is set, the
	// attempt budget is spent, or the event is older than MaxAge. It returns
	// the state the event went to.
	EventFail(ctx context.Context, params *EventFailParams) (State, error)

	// EventFailMany is EventFail for many leases at once, in one
	// transaction and a constant number of statements: every failure whose
	// lease still holds is closed by EventFail's rule, each with its own
	// error, delay, budget and age. It returns one State per failure, in
	// order: the state the event went to, or "" for a lease that did not
	// hold (nothing was changed for it). A non-nil error means nothing was
	// committed. No failures is a no-op.
	EventFailMany(ctx context.Context, params *EventFailManyParams) ([]State, error)

	// EventGet returns one event by row id, or by (Source, EventID), payload
	// and headers included. ErrNotFound if there is none.
	EventGet(ctx context.Context, params *EventGetParams) (*Event, error)

	// EventHeartbeat extends the lease to TTL from the database's now and
	// returns its new expiry.
	EventHeartbeat(ctx context.Context, params *EventHeartbeatParams) (time.Time, error)

	// EventHeartbeatMany extends many leases to TTL from the database's now
	// in one statement (a client's heartbeat tick for all its leases), each
	// fenced exactly as EventHeartbeat is. It returns the leases that did
	// not hold, each once, in the order first named; nothing was changed for
	// those. A non-nil error means no lease was extended. No leases is a
	// no-op.
	EventHeartbeatMany(ctx context.Context, params *EventHeartbeatManyParams) (lost []Lease, err error)

	// EventList returns events newest first (by row id), filtered, without
	// payloads or headers, a page at a time.
	EventList(ctx context.Context, params *EventListParams) (*EventListResult, error)

	// EventPurge deletes done events completed longer than Retention ago,
	// with their ledger and conflicts. It refuses, with ErrRetentionTooShort,
	// a Retention shorter than ReplayWindow.
	EventPurge(ctx context.Context, params *EventPurgeParams) (int, error)

	// EventReceive stores a delivery durably before returning: a new key is
	// inserted pending and due now; a known key only counts the delivery (and
	// keeps it as a Conflict when its payload hash differs, within
	// NoticeKeep). With a ReplayWindow, a new key whose payload hash matches
	// an event of the source first delivered within the window is a replay:
	// nothing is inserted, the oldest such event counts it (Replays) and
	// keeps it as a Replay, within NoticeKeep. The decision and the write are one atomic step: concurrent
	// deliveries of one body under new ids store one event. A nil error
	// means the delivery is committed.
	EventReceive(ctx context.Context, params *EventReceiveParams) (*EventReceiveResult, error)

	// EventReceiveMany is EventReceive for many deliveries at once, the
	// group commit a receiver uses under load: the receipts are stored in
	// one transaction (one commit, one fsync for the lot). If a statement of
	// that transaction fails, nothing of it is kept and each receipt is
	// stored in a transaction of its own, so one bad delivery does not fail
	// the others. It returns one result per receipt, in order; a result
	// without Err is committed. Deliveries of one key are counted in order,
	// as if received one after the other; so are replays (of deliveries with
	// a ReplayWindow, the first of a body to arrive is the original). A non-nil error means nothing was
	// committed and no result is returned. No receipts is a no-op.
	EventReceiveMany(ctx context.Context, params *EventReceiveManyParams) ([]EventReceiveManyResult, error)

	// EventRelease gives a leased event back, pending and due now, for another
	// worker to take at once (graceful shutdown). The attempt still counts.
	EventRelease(ctx context.Context, params *EventReleaseParams) error

	// EventRequeue puts done, dead or unknown events back to pending, due now,
	// with a fresh attempt budget (the attempt counter itself never goes down),
	// and records an Action (who, when, by the database's clock) for each
	// requeued event in the same transaction. It returns how many events it
	// requeued, or with DryRun how many it would requeue: a dry run counts
	// by the requeue's own rule and only reads, so it writes and locks
	// nothing and answers on a store that cannot write.
	EventRequeue(ctx context.Context, params *EventRequeueParams) (int, error)

	// EventResolve closes dead or unknown events by hand: each moves to done,
	// as if it had completed, without running again, and an Action
	// (ActionResolve, who, when by the database's clock) records that a
	// person closed it, in the same transaction. It is for an unknown event
	// whose side effect the operator has confirmed did run, and a dead one
	// the operator decides to discard: either would otherwise stay, alerted,
	// until replayed. Events in any other state are left as they are (a
	// claim or requeue racing it wins), and the attempt ledger is kept as it
	// was. Resolved events are done events from then on: counted, archived
	// and purged at their source's retention like any other. It returns how
	// many events it resolved.
	EventResolve(ctx context.Context, params *EventResolveParams) (int, error)

	// EventRetryNow makes a pending event due at the database's now, so a
	// worker takes it without waiting out its backoff, and records the
	// action with its Actor. It reports false, changing nothing, for an
	// event that is not pending or is already due. The attempt budget is
	// not reset (that is EventRequeue's, for terminal events).
	EventRetryNow(ctx context.Context, params *EventRetryNowParams) (bool, error)

	// EventStats aggregates the whole inbox in one consistent read, timed by
	// the database's clock, for operators: counts by state, the oldest
	// waiting work, abandoned attempts and the events at risk of outliving
	// their provider's replay window. It should cost what is live, not what
	// is stored: postgres.Store reads live events and counters of done ones.
	// Callers that poll it (metrics) still cache the result.
	EventStats(ctx context.Context, params *EventStatsParams) (*EventStats, error)

	// LeaseAcquire takes the named lease for Owner, or renews it, until TTL
	// from the database's now, if it is free, expired or already Owner's. It
	// reports whether Owner holds the lease now.
	LeaseAcquire(ctx context.Context, params *LeaseAcquireParams) (bool, error)

	// LeaseRelease gives the named lease up if Owner holds it, so another
	// instance may take it at once; otherwise it does nothing.
	LeaseRelease(ctx context.Context, params *LeaseReleaseParams) error

	// Migrate brings the schema up to date. It is safe to call from several
	// processes at once. It applies every pending migration, an Exclusive
	// one too: at a start beside older instances (a rolling upgrade), call
	// MigrateRolling instead, as ferry serve does.
	Migrate(ctx context.Context) error

	// MigratePlan lists the migrations the schema lacks, in the order
	// Migrate would apply them, each with what it does to this store's data
	// (`ferry migrate --dry-run`); empty when the schema is up to date. It
	// changes nothing.
	MigratePlan(ctx context.Context) ([]MigrationStep, error)

	// Ping checks that the database answers and can commit a write now, for
	// readiness checks and doctor; it writes nothing. A database that
	// answers but refuses writes gives an error that is ErrReadOnly: reads
	// alone would pass a store that answers every delivery 503. One whose
	// sessions run with a setting the store's statements fail under, or
	// as a role that may not write its tables (postgres.Store: an
	// isolation above read committed, a missing GRANT), gives
	// ErrMisconfigured. It does not check the schema is current: Migrate
	// before answering readiness with it.
	Ping(ctx context.Context) error

	// ReplayList returns the suspected replays kept on one event
	// (NoticeKeep at most), oldest first, up to Limit.
	ReplayList(ctx context.Context, params *ReplayListParams) ([]*Replay, error)

	// ReplayNoticeList is ConflictNoticeList for suspected replays.
	ReplayNoticeList(ctx context.Context, params *NoticeListParams) ([]*Notice, error)

	// ReceiptSubscribe returns a channel that receives soon after any
	// instance sharing the store commits a change that puts an event in
	// pending: a new receipt, a requeue, a release, a failed attempt sent
	// back (signalled even while its retry delay runs; the claimer then finds
	// nothing yet and polls). Nothing else signals: a duplicate, a claim, a
	// heartbeat, a completion, a death. Signals coalesce: one value may stand
	// for many changes, so callers poll as well. The channel closes when ctx
	// is done or the store is closed.
	ReceiptSubscribe(ctx context.Context) (<-chan struct{}, error)
}

// TxStore is a Store that can complete an event inside a transaction the
// handler also writes in, so that the handler's writes and the fenced done
// commit or roll back together: exactly-once effects in the same database,
// without holding a transaction open across a claim. TX is pgx.Tx for
// postgres.Store and *sql.Tx for sqlite.Store.
type TxStore[TX any] interface {
	Store

	// EventCompleteTx is EventComplete inside tx. It returns ErrLeaseLost if
	// the lease is no longer held; the caller must then roll tx back. It
	// returns an error wrapping ErrTxDone if tx was already committed or
	// rolled back.
	EventCompleteTx(ctx context.Context, tx TX, params *EventCompleteParams) error

	// InTx runs fn in a new transaction, committing if fn returns nil and
	// rolling back otherwise. When fn fails after it ended tx itself
	// (committed or rolled back), the error wraps ErrTxDone as well as fn's.
	InTx(ctx context.Context, fn func(tx TX) error) error
}

// Claim is one event leased by EventClaimMany.
type Claim struct {
	// Event is the claimed event, payload and headers included. Its Attempt
	// and LeaseExpiresAt are those of this claim.
	Event *Event
	// PreviousUnfinished is true when the last attempt before this one that
	// ran never reported an end: its worker died or stalled past its lease,
	// and its side effects may or may not have happened. It is the newest
	// attempt in the ledger that was not released (a release never ran the
	// handler, or gave it up), so a release does not hide a lapse, and
	// neither does a requeue: a replayed event whose last attempt lapsed (an
	// unknown one) says it on its first claim.
	PreviousUnfinished bool
	// Reclaimed is true when this claim took the event back from a lease
	// that lapsed, closing that attempt as lease_expired: the sign of a
	// worker that died or stalled, which the attempt budget and the
	// reclaimed metric count. PreviousUnfinished is then true too.
	Reclaimed bool
}

// LostLeasePolicy says what a claim does with an event whose lease expired.
type LostLeasePolicy string

const (
	// LostLeaseRetry claims the event again; the idempotency key protects the
	// downstream. The default.
	LostLeaseRetry LostLeasePolicy = "retry"
	// LostLeaseHold moves the event to unknown for a person to decide.
	LostLeaseHold LostLeasePolicy = "hold"
)

// ReceiveOutcome says what EventReceive made of a delivery.
type ReceiveOutcome string

const (
	// ReceiveNew is a delivery of a key not stored before: a new event,
	// pending and due now.
	ReceiveNew ReceiveOutcome = "new"
	// ReceiveDuplicate is a redelivery of a known key, only counted
	// (Event.Deliveries): its payload hash matches the key's first, or
	// catch-up stored one side of it (see ReceiveConflict).
	ReceiveDuplicate ReceiveOutcome = "duplicate"
	// ReceiveConflict is a delivery of a known key whose payload hash
	// differs from the key's first, itself a delivery. The delivery is kept
	// as a Conflict (the first NoticeKeep payloads of the event, each once;
	// later ones are only counted). A key first stored by catch-up (OriginCatchup) holds
	// the provider API's copy, never a delivery's bytes: its receipts are
	// duplicates, and so is catch-up's copy of a delivered key.
	ReceiveConflict ReceiveOutcome = "conflict"
	// ReceiveReplay is a new key whose payload hash matches an event of the
	// source first delivered within EventReceiveParams.ReplayWindow: the
	// body of a stored event under another id. Nothing is inserted; the
	// delivery is counted on that event, whose row id the result carries,
	// and kept as a Replay on it while it keeps fewer than NoticeKeep.
	ReceiveReplay ReceiveOutcome = "replay"
)

// Action names an operator action on an event, as Action.Action records it.
const (
	// ActionRequeue is a requeue of a dead or unknown event (EventRequeue by
	// state, "replay all dead").
	ActionRequeue = "requeue"
	// ActionReplay is a requeue of an event named by its id, whatever its
	// terminal state.
	ActionReplay = "replay"
	// ActionRetryNow made a pending event in backoff due at once
	// (EventRetryNow).
	ActionRetryNow = "retry_now"
	// ActionResolve closed a dead or unknown event as done without running
	// it again (EventResolve): its effect was confirmed, or it was
	// discarded.
	ActionResolve = "resolve"
)

// ActionListParams name the event whose operator actions Store.ActionList
// returns. ID is required.
type ActionListParams struct {
	ID int64 // the event's row id
}

// ReplayListParams name the event whose suspected replays Store.ReplayList
// returns. Limit defaults to NoticeKeep and is capped at 1000.
type ReplayListParams struct {
	ID int64 // the event's row id
	// Limit is the most replays listed, oldest first. Defaults to
	// NoticeKeep, as many as a store keeps on one event; at most 1000.
	Limit int
}

// AttemptListParams name the event whose attempt ledger Store.AttemptList
// returns. ID is required.
type AttemptListParams struct {
	ID int64 // the event's row id
}

// ConflictListParams name the event whose conflicting deliveries
// Store.ConflictList returns. Limit defaults to NoticeKeep and is capped at
// 1000.
type ConflictListParams struct {
	ID int64 // the event's row id
	// Limit is the most conflicts listed, oldest first, payloads included.
	// Defaults to NoticeKeep, as many as a store keeps on one event; at
	// most 1000.
	Limit int
}

// EventClaimManyParams say who claims, how many events and for how long
// (Store.EventClaimMany). Owner, Limit (at most MaxCount) and TTL are
// required.
type EventClaimManyParams struct {
	// Owner names the worker; it is recorded as the lease owner and in the
	// ledger. Required.
	Owner string
	// Limit is the most events to claim. Required, positive.
	Limit int
	// TTL is the lease length. Required, positive.
	TTL time.Duration
	// Sources limits the claim to these sources. Empty means all.
	Sources []string
	// HoldSources are sources whose LostLeasePolicy is LostLeaseHold.
	HoldSources []string
	// MaxBytes bounds the payload bytes of the claimed events: the claim
	// stops, in due order, before the event that would take the total past
	// it, but always takes the first due event, however large. Zero means
	// no bound.
	MaxBytes int64
}

// EventCompleteParams name the lease Store.EventComplete marks done, and
// what the downstream answered.
type EventCompleteParams struct {
	Lease Lease
	// Response is what the handler's downstream answered, kept in the
	// attempt's ledger row. Optional.
	Response AttemptResponse
}

// EventCompleteManyParams are Store.EventCompleteMany's: the leases to
// mark done, with an optional response each.
type EventCompleteManyParams struct {
	// Leases are the leases to complete, in any order.
	Leases []Lease
	// Responses, when not empty, holds one AttemptResponse per lease, in
	// the order of Leases. Optional.
	Responses []AttemptResponse
}

// EventFailManyParams are Store.EventFailMany's: one EventFailParams per
// failed attempt, each naming a different lease.
type EventFailManyParams struct {
	// Failures are the attempts to close as failed, each naming a
	// different lease.
	Failures []EventFailParams
}

// EventFailParams close one attempt as failed (Store.EventFail): the
// lease, its error, when to retry, and the budget and age past which the
// event is dead instead. Zero MaxAttempts and MaxAge mean no limit.
type EventFailParams struct {
	Lease Lease
	// Error is recorded as the event's last error and in the ledger.
	Error string
	// RetryDelay is how long from the database's now until the next attempt.
	RetryDelay time.Duration
	// MaxAttempts is the attempt budget since the last requeue; the event is
	// dead once it is spent. Zero means no limit.
	MaxAttempts int
	// MaxAge makes the event dead once it is older than this, counted from
	// its first delivery or its last requeue, whichever is later. Zero means
	// no limit.
	MaxAge time.Duration
	// Dead sends the event to dead whatever its budget (a permanent error).
	Dead bool
	// NotRun says no handler ran in this attempt (its budget was spent by
	// attempts that never finished, or no handler takes its type): the
	// ledger row is closed as released, with Error, whatever the event's
	// new state, so the next claim's PreviousUnfinished looks past it to
	// the attempt before, as it looks past any release.
	NotRun bool
	// Response is what the handler's downstream answered, kept in the
	// attempt's ledger row. Optional.
	Response AttemptResponse
}

// EventGetParams names an event by ID, or by Source and EventID when ID is 0.
type EventGetParams struct {
	ID      int64
	Source  string
	EventID string
}

// EventHeartbeatParams name the lease Store.EventHeartbeat extends and the
// new lease length (TTL, from the database's now). TTL is required,
// positive.
type EventHeartbeatParams struct {
	Lease Lease
	TTL   time.Duration
}

// EventHeartbeatManyParams are Store.EventHeartbeatMany's: the leases to
// extend and one TTL for all of them.
type EventHeartbeatManyParams struct {
	// Leases are the leases to extend, in any order.
	Leases []Lease
	// TTL is the new lease length, from the database's now, for every lease.
	TTL time.Duration
}

// EventListParams filter and page Store.EventList. Every filter is
// optional; Limit defaults to EventListLimitDefault (50) and is capped at
// EventListLimitMax (1000).
type EventListParams struct {
	// Source filters by source; empty means all.
	Source string
	// Type filters by event type, exactly; empty means all.
	Type string
	// States filters by state; empty means all.
	States []State
	// Since keeps events first delivered at or after it; zero means all.
	Since time.Time
	// Until keeps events first delivered before it; zero means all.
	Until time.Time
	// EventIDContains keeps events whose provider event id contains it.
	EventIDContains string
	// LapsedAttempts keeps events with at least one attempt that ended
	// without a verdict: closed as OutcomeLeaseExpired when its lease
	// lapsed, so its effect may or may not have happened. These are the
	// events to check when EventStats' UnfinishedAttempts rises; an attempt
	// still running on a lapsed lease is counted there at once and listed
	// here once a claim takes its event back. Read through the ledger's
	// index of such attempts, so it stays cheap however many events are
	// stored. False keeps every event.
	LapsedAttempts bool
	// Before is the cursor of an older page: only events with a row id
	// below it. Zero starts at the newest.
	Before int64
	// After is the cursor of a newer page: the Limit events with the
	// lowest row ids above it, still listed newest first. At most one of
	// Before and After may be set.
	After int64
	// Limit is the page size. Defaults to 50; at most 1000.
	Limit int
}

// EventListResult is one page of Store.EventList, newest first, with the
// cursors of the pages on either side.
type EventListResult struct {
	Events []*Event
	// NextBefore is the cursor of the next older page; zero when no older
	// event matches. Set only when listing with Before or from the newest.
	NextBefore int64
	// NextAfter is the cursor of the next newer page; zero when no newer
	// event matches. Set only when listing with After.
	NextAfter int64
}

// EventPurgeParams are Store.EventPurge's: one source, its retention, and
// its provider's replay window, which the retention must not be shorter
// than.
type EventPurgeParams struct {
	// Source limits the purge to one source. Required: retention is per source.
	Source string
	// Retention is how long a done event is kept after completion.
	Retention time.Duration
	// ReplayWindow is how long the source's provider may redeliver.
	// Required, positive: a purge never takes a key its provider may still
	// send again.
	ReplayWindow time.Duration
}

// EventReceiveParams are one delivery for Store.EventReceive: its raw
// payload and the headers to keep. Source and EventID are required.
type EventReceiveParams struct {
	Source  string // required
	EventID string // required
	Type    string
	Payload []byte
	Headers http.Header
	// Origin is recorded with a new key; a known key keeps its own.
	// Defaults to OriginDelivery.
	Origin Origin
	// ReplayWindow turns on replay detection for providers that sign only
	// the body (GitHub, Shopify, body-mode HMAC), whose event id and type an
	// attacker can change at will: a new key whose payload hash matches an
	// event of Source first delivered at most this long ago is a replay
	// (ReceiveReplay), never a new event. Defaults to 0: detection off, as
	// is right when the signature covers the id (Stripe, Standard Webhooks).
	ReplayWindow time.Duration
	// Traceparent and Tracestate are the W3C trace context of the receipt,
	// stored with a new event (a redelivery keeps the first one's). Empty
	// means none. At most TraceparentMaxLen and TracestateMaxLen printable
	// ASCII characters.
	Traceparent string
	Tracestate  string
}

// EventReceiveResult says what Store.EventReceive made of a delivery and
// which stored event it counts on.
type EventReceiveResult struct {
	Outcome ReceiveOutcome
	// ID is the row id of the stored event.
	ID int64
	// CountedOnly is true for a conflict or a replay that was counted on
	// its event but not kept as a row: the event keeps NoticeKeep already,
	// or (a conflict) a conflict with the same payload. The receiver then
	// answers as always but raises no alert. False for every other outcome.
	CountedOnly bool
}

// EventReceiveManyParams are Store.EventReceiveMany's: the deliveries to
// store together, with one commit.
type EventReceiveManyParams struct {
	// Receipts are the deliveries to store, in arrival order.
	Receipts []*EventReceiveParams
}

// EventReceiveManyResult is the outcome of one receipt of EventReceiveMany:
// Err is nil when it is committed, and ErrInvalidParams (wrapped) when its
// params fail Validate.
type EventReceiveManyResult struct {
	Result *EventReceiveResult
	Err    error
}

// EventReleaseParams name the lease Store.EventRelease gives back.
type EventReleaseParams struct {
	Lease Lease
}

// EventRequeueParams say which events Store.EventRequeue puts back to
// pending (by IDs, or by filter for a bulk replay) and who asked. Actor is
// required.
type EventRequeueParams struct {
	// IDs requeues these events (by row id). When empty, the filters below
	// select the events instead (bulk replay), as EventList's do.
	IDs []int64
	// Source limits a bulk requeue to one source; empty means all.
	Source string
	// Type limits a bulk requeue to one event type; empty means all.
	Type string
	// Since and Until limit a bulk requeue to events first delivered in
	// [Since, Until); zero means unbounded.
	Since, Until time.Time
	// EventIDContains limits a bulk requeue to events whose provider event
	// id contains it.
	EventIDContains string
	// Before limits a bulk requeue to events with a row id below it, so a
	// confirmed count does not grow with events received since; zero means
	// no bound.
	Before int64
	// States are the states that may be requeued. Defaults to dead and
	// unknown for a bulk requeue, and done, dead and unknown for IDs. Pending
	// and in_progress are never requeued.
	States []State
	// Runnable, when not empty, takes only events of these sources, by IDs
	// or in bulk: the sources a worker runs (ferry's, those in the config).
	// An event of another source, one taken out of the config, would stay
	// pending for good, with no at-risk age to show it. Empty takes every
	// source.
	Runnable []string
	// DryRun counts what would be requeued, reading only (no row is
	// locked or written): the count a confirmation page shows.
	DryRun bool
	// Actor names who asked (a user, a token's name, "cli:alice"); it is
	// recorded with each requeued event's Action. Required: an audit trail
	// of "unknown" tells nobody anything.
	Actor string
}

// EventResolveParams say which events Store.EventResolve closes as done and
// who vouches for it. Both are required.
type EventResolveParams struct {
	// IDs are the events (by row id) to resolve. Required.
	IDs []int64
	// Actor is who closed them, recorded with each event's ActionResolve.
	// Required: a person vouches that the event needs no further run.
	Actor string
}

// EventRetryNowParams name the pending event Store.EventRetryNow makes due
// now and who asked. Both are required.
type EventRetryNowParams struct {
	ID int64 // the event's row id
	// Actor is who asked, recorded with the event's ActionRetryNow.
	// Required.
	Actor string
}

// EventStatsParams says when an event counts as at risk.
type EventStatsParams struct {
	// AtRiskAfter maps a source to the age (from first delivery) past which
	// its unfinished events are at risk: normally the source's replay window
	// minus a safety margin. Sources not listed use DefaultAtRiskAfter.
	AtRiskAfter map[string]time.Duration
	// DefaultAtRiskAfter applies to sources missing from AtRiskAfter. Zero
	// means such sources are never at risk.
	DefaultAtRiskAfter time.Duration
	// AtRiskLimit is how many at-risk events EventStats lists, oldest first.
	// Defaults to 0: count them, list none. At most 1000.
	AtRiskLimit int
}

// EventStats is a snapshot of the inbox.
type EventStats struct {
	// Now is the database clock the snapshot was taken at; ages are from it.
	Now time.Time
	// Sources holds one entry per source that has any event, sorted by name.
	Sources []*SourceStats
	// AtRisk lists up to AtRiskLimit at-risk events, oldest first, without
	// payloads or headers.
	AtRisk []*Event
}

// AtRiskCount is how many events are at risk, over every source. A store
// lists AtRisk only when it is not zero: the list would find nothing, and
// its scan of the unfinished events is what an operator view would pay.
func (s *EventStats) AtRiskCount() int {
	n := 0
	for _, src := range s.Sources {
		n += src.AtRisk
	}
	return n
}

// SourceStats is the snapshot of one source.
type SourceStats struct {
	Source string
	// States counts events by state; every state is present, zero or not.
	States map[State]int
	// OldestPending is the first delivery time of the oldest pending event;
	// zero when none is pending. It counts an event waiting out a backoff:
	// for work no worker takes, see OldestDue.
	OldestPending time.Time
	// OldestDue is when the most overdue pending event became due (its next
	// attempt time, at or before Now); zero when none is due. Unlike
	// OldestPending it leaves out events waiting out a backoff, so one
	// event the app keeps failing does not age it while the rest flows: a
	// growing Now - OldestDue means no worker is taking due work.
	OldestDue time.Time
	// OldestInProgress is when the longest-running current attempt was
	// claimed; zero when none is in progress. A growing age means a handler
	// is stuck, or a dead worker's lapsed lease is not being taken back
	// (LeaseExpired counts those).
	OldestInProgress time.Time
	// LeaseExpired counts in_progress events whose lease has lapsed: their
	// worker died or stalled, and the next claim will take them back.
	LeaseExpired int
	// UnfinishedAttempts counts attempts that were claimed and never reported
	// an end: ledger rows closed as lease_expired, and running attempts whose
	// lease has lapsed. Each may or may not have run its side effect.
	UnfinishedAttempts int
	// AtRisk counts unfinished events (pending, in_progress or unknown) older
	// than the source's at-risk age. Dead events are not counted: they are
	// alerted as dead already.
	AtRisk int
	// OldestAtRisk is the first delivery time of the oldest at-risk event;
	// zero when none is.
	OldestAtRisk time.Time
	// Replays counts the suspected replays of the source's events, kept or
	// only counted (Event.Replays, summed): deliveries of a stored body under another
	// id. Any rise is worth an alert: someone holds a captured delivery.
	Replays int
}

// Total is the number of events of the source, in every state.
func (s *SourceStats) Total() int {
	n := 0
	for _, c := range s.States {
		n += c
	}
	return n
}

// ArchiveLease is the named lease (LeaseAcquire) under which one instance at
// a time runs ArchiveMaintain, for ArchiveLeaseTTL: how long a run that died
// keeps the others out. A store renews it as the run goes.
const (
	ArchiveLease    = "ferry_archive_maintenance"
	ArchiveLeaseTTL = 10 * time.Minute
)

// MaintainArchive is the policy of Store.ArchiveMaintain, for stores to
// call: it normalizes params and runs run under ArchiveLease, one instance
// at a time, for ArchiveLeaseTTL, releasing the lease when run returns. When
// another instance holds the lease it reports Skipped without running run.
// run counts into res what it did before any error; renew renews the lease,
// for run to call between steps, and returns ErrLeaseLost once another
// instance has taken it over (this run outlived ArchiveLeaseTTL): run stops
// there, so two instances never drop partitions at once.
func MaintainArchive(ctx context.Context, s Store, params *ArchiveMaintainParams,
	run func(ctx context.Context, params *ArchiveMaintainParams, res *ArchiveMaintainResult, renew func() error) error,
) (*ArchiveMaintainResult, error) {
	params, err := params.Normalize()
	if err != nil {
		return nil, err
	}
	acquire := func() (bool, error) {
		return s.LeaseAcquire(ctx, &LeaseAcquireParams{Name: ArchiveLease, Owner: params.Owner, TTL: ArchiveLeaseTTL})
	}
	held, err := acquire()
	if err != nil {
		return nil, err
	}
	res := &ArchiveMaintainResult{Skipped: !held}
	if !held {
		return res, nil
	}
	defer func() {
		_ = s.LeaseRelease(context.WithoutCancel(ctx), &LeaseReleaseParams{Name: ArchiveLease, Owner: params.Owner})
	}()
	renew := func() error {
		held, err := acquire()
		if err == nil && !held {
			err = fmt.Errorf("%w: the archive maintenance lease passed to another instance", ErrLeaseLost)
		}
		return err
	}
	return res, run(ctx, params, res, renew)
}

// ArchiveMaintainParams are Store.ArchiveMaintain's.
type ArchiveMaintainParams struct {
	// Owner names this instance for the maintenance lease. Required.
	Owner string
	// Retention is how long a done event is kept at least: a partition is
	// dropped once its end is Retention old, so an event is kept between
	// Retention and Retention plus one partition span. Required, positive:
	// the longest retention of every source. It may be shorter than
	// ReplayWindow: the keys outlive their events.
	Retention time.Duration
	// ReplayWindow is the longest replay window of every source: how long
	// a provider may redeliver, so how long no dedupe key may be
	// forgotten. Defaults to DefaultReplayWindow (72 hours).
	ReplayWindow time.Duration
	// KeyRetention is how long a dedupe key is kept at least after the
	// first delivery, and never while its event is stored. At least
	// ReplayWindow (ErrRetentionTooShort otherwise). Defaults to the
	// longer of Retention and ReplayWindow.
	KeyRetention time.Duration
	// Ahead is how far ahead partitions exist. Defaults to 7 days.
	Ahead time.Duration
	// KeyBatch is how many keys one statement purges. Defaults to 10,000.
	KeyBatch int
}

// ArchiveMaintainResult is what one Store.ArchiveMaintain run did.
type ArchiveMaintainResult struct {
	// Skipped is true when another instance holds the maintenance lease.
	Skipped bool
	// Created and Dropped count partitions.
	Created, Dropped int
	// Events counts the events dropped (with their partitions, on
	// PostgreSQL); Keys the dedupe keys purged (on SQLite, whose event row
	// is its own key, each event deleted).
	Events, Keys int
}

// ArchiveInfo describes the archive's ranged partitions. A store that keeps
// done events in one table (sqlite.Store) reports none.
type ArchiveInfo struct {
	// Partitioned says the store keeps done events in time partitions that
	// ArchiveMaintain must create ahead of now (postgres.Store); false for
	// a store without partitions (sqlite.Store), whose other fields but Now
	// are zero.
	Partitioned bool
	Partitions  int
	// Oldest is the start of the oldest partition; zero when there is none.
	Oldest time.Time
	// End is the end of the newest partition: ArchiveMaintain keeps it
	// Ahead of now, and a completion past it lands in the default
	// partition. Zero when there is none.
	End time.Time
	// Now is the database clock the info was read at.
	Now time.Time
}
