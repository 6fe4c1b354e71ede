package ferry

import (
	"cmp"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-inbox/ferry/internal/groupcommit"
	"github.com/ferry-inbox/ferry/internal/typednil"
)

// Config configures a Client. Zero values take the documented defaults.
type Config struct {
	// Store is the inbox the client works. Required: nil, or a nil pointer
	// such as (*sqlite.Store)(nil), is refused by NewClient.
	Store Store

	// Sources are the per-source policies, one per Name: NewClient refuses
	// a Name given twice. A source with a handler but no entry here gets the
	// defaults of SourcePolicy.
	Sources []SourcePolicy

	// Workers is how many handlers run at once. Defaults to 128
	// (DefaultWorkers): a worker waits for its forward and for its
	// completion's commit, and 128 of them keep the forwarder up with the
	// receiver during a burst on 2 cores (docs/benchmarks.md, e2e).
	Workers int

	// Prefetch is how many events the client claims ahead of its workers:
	// claimed, heartbeated like running ones, and started as soon as a
	// worker is free, so that a busy worker never waits for a claim's round
	// trip. It is also the smallest claim a saturated client makes (claims
	// come in batches of at least Prefetch, not one per finished job).
	// Events waiting here are held from other instances, so it stays small:
	// defaults to Workers/2, at least 1. Events still waiting at Stop are
	// released at once. Events of LostLeaseHold sources are never claimed
	// ahead: if the process died, one that never started would go unknown.
	Prefetch int

	// MaxHeldBytes bounds the payload bytes of the events the client holds
	// (running or claimed ahead), so that large bodies cannot grow memory
	// with the worker count: a claim asks only for what fits in the room
	// left, and none is made while the budget is spent; a claim always takes
	// its first due event, so the client holds at most MaxHeldBytes plus
	// one event per claim in flight (two), and an event larger than the
	// budget is still worked.
	// Defaults to DefaultMaxHeldBytes (16 MiB).
	MaxHeldBytes int64

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
	// cancels them. A handler that then fails is cut off: its event is
	// released, or, for a LostLeaseHold source, whose effect may have run,
	// left to lapse and held as unknown. nil and Permanent are recorded as
	// usual. Defaults to 10 seconds.
	ShutdownGrace time.Duration

	// RetryBase and RetryCap shape the backoff: attempt n waits a random
	// time between 0 and min(RetryCap, RetryBase × 2^(n-1)) (exponential
	// with full jitter). Default to DefaultRetryBase (1 s) and
	// DefaultRetryCap (1 h).
	RetryBase time.Duration
	RetryCap  time.Duration

	// ID names this worker in leases and in the attempt ledger: UTF-8 text
	// without NUL. Defaults to hostname-pid-random.
	ID string

	// Logger receives one line per failed, dead or lost attempt, and claim
	// errors. Payloads and headers are never logged. Defaults to
	// slog.Default().
	Logger *slog.Logger

	// Observer, if set, is told of every attempt's end (metrics plug in
	// here).
	Observer Observer

	// TracerProvider, if set, traces every attempt: a span from the claim
	// to the verdict, a child of the receipt's span and linked to it when
	// the receipt was traced, so a handler's own spans (a forward) join the
	// receipt's trace. Defaults to none: no span is made.
	TracerProvider trace.TracerProvider
}

// SourcePolicy is how the client treats one source's events.
type SourcePolicy struct {
	// Name is the source name, as events are stored under.
	Name string
	// MaxAttempts is the attempt budget before an event goes dead, at most
	// MaxCount. Defaults to 25. Attempts that never finished (a lapsed
	// lease) and releases count: an event claimed back from a lapsed lease
	// past its budget (Claim.Reclaimed) goes dead without running, so a
	// handler that crashes its process cannot loop for ever.
	MaxAttempts int
	// ReplayWindow is how long the provider redelivers (Stripe and GitHub: 3
	// days). An event that fails once older than this goes dead, for a person
	// to see, rather than retrying past the provider's own horizon. Defaults
	// to 72 hours. Not ferryhttp.Source.ReplayWindow, which turns on replay
	// detection at receipt (default 0: off).
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
	DefaultWorkers       = 128
	DefaultMaxHeldBytes  = 16 << 20
	DefaultLeaseTTL      = 15 * time.Second
	DefaultPollInterval  = time.Second
	DefaultShutdownGrace = 10 * time.Second
	DefaultMaxAttempts   = 25
	DefaultReplayWindow  = 72 * time.Hour
	DefaultRetryBase     = time.Second
	DefaultRetryCap      = time.Hour
)

// batchWriters is how many completion batches, and how many failure
// batches, a client writes at once (each one connection).
const batchWriters = 2

// NewClient checks cfg and fills in its defaults.
func NewClient(cfg *Config) (*Client, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: NewClient needs a Config, with Store set", ErrInvalidParams)
	}
	c := *cfg
	if typednil.Is(c.Store) { // a nil *sqlite.Store would panic in Start's goroutine
		return nil, fmt.Errorf("%w: Config.Store is required", ErrInvalidParams)
	}
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, MaxHeartbeat(c.LeaseTTL))
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, DefaultShutdownGrace)
	c.Prefetch = cmp.Or(c.Prefetch, max(1, c.Workers/2))
	c.MaxHeldBytes = cmp.Or(c.MaxHeldBytes, DefaultMaxHeldBytes)
	c.RetryBase = cmp.Or(c.RetryBase, DefaultRetryBase)
	c.RetryCap = cmp.Or(c.RetryCap, DefaultRetryCap)
	if c.Workers < 0 || c.Prefetch < 0 || c.MaxHeldBytes < 0 || c.LeaseTTL < 0 || c.PollInterval < 0 || c.ShutdownGrace < 0 || c.RetryBase < 0 || c.RetryCap < 0 {
		return nil, fmt.Errorf("%w: Config durations, Workers, Prefetch and MaxHeldBytes may not be negative", ErrInvalidParams)
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval > MaxHeartbeat(c.LeaseTTL) {
		return nil, fmt.Errorf("%w: HeartbeatInterval %v must be positive and at most LeaseTTL/3 (%v)", ErrInvalidParams, c.HeartbeatInterval, MaxHeartbeat(c.LeaseTTL))
	}
	if c.ID == "" {
		c.ID = workerID()
	}
	if !storable(c.ID) {
		return nil, fmt.Errorf("%w: ID %q is not UTF-8 text without NUL: no store could name it in a lease", ErrInvalidParams, c.ID)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	cl := &Client{
		cfg:        c,
		store:      c.Store,
		log:        c.Logger,
		policies:   map[string]SourcePolicy{},
		handlers:   map[string]map[string]handler{},
		slotFree:   make(chan struct{}, 1),
		beating:    map[*job]struct{}{},
		workers:    make(chan struct{}, c.Workers),
		stopQueued: make(chan struct{}),
		graceCut:   make(chan struct{}),
	}
	cl.cutGrace = sync.OnceFunc(func() { close(cl.graceCut) })
	if c.TracerProvider != nil {
		cl.tracer = c.TracerProvider.Tracer(TracerName)
	}
	cl.completions = &groupcommit.Committer[completion, struct{}]{
		// A job has at most one completion waiting, so a batch never needs
		// more than Workers; 1000 caps the arrays a statement carries.
		MaxBatch: min(c.Workers, maxCompleteBatch),
		// Two batches at once: one can be written while the next fills,
		// so a stalled commit does not hold every finished job behind it,
		// and the work path still uses at most two connections for it.
		MaxConcurrent: batchWriters,
		Run:           cl.completeBatch,
	}
	cl.failures = &groupcommit.Committer[EventFailParams, State]{
		MaxBatch:      min(c.Workers, maxCompleteBatch),
		MaxConcurrent: batchWriters,
		Run:           cl.failBatch,
	}
	for _, p := range c.Sources {
		if p.Name == "" {
			return nil, fmt.Errorf("%w: SourcePolicy.Name is required", ErrInvalidParams)
		}
		if _, dup := cl.policies[p.Name]; dup {
			// Else the last would silently win.
			return nil, fmt.Errorf("%w: Config.Sources has two policies for %q", ErrInvalidParams, p.Name)
		}
		if p.MaxAttempts < 0 || p.MaxAttempts > MaxCount {
			return nil, fmt.Errorf("%w: source %q: MaxAttempts %d is not from 1 to %d", ErrInvalidParams, p.Name, p.MaxAttempts, MaxCount)
		}
		if p.ReplayWindow < 0 {
			return nil, fmt.Errorf("%w: source %q: ReplayWindow %v is negative", ErrInvalidParams, p.Name, p.ReplayWindow)
		}
		p = p.withDefaults()
		if p.LostLease != LostLeaseRetry && p.LostLease != LostLeaseHold {
			return nil, fmt.Errorf("%w: source %q: LostLease %q is neither %q nor %q", ErrInvalidParams, p.Name, p.LostLease, LostLeaseRetry, LostLeaseHold)
		}
		cl.policies[p.Name] = p
	}
	return cl, nil
}

// MaxHeartbeat is the longest HeartbeatInterval a LeaseTTL allows, and
// its default: a third, so that a living worker's lease outlasts two
// missed beats.
func MaxHeartbeat(leaseTTL time.Duration) time.Duration { return leaseTTL / 3 }

func (c *Client) policy(source string) SourcePolicy {
	if p, ok := c.policies[source]; ok {
		return p
	}
	return SourcePolicy{Name: source}.withDefaults()
}

// withDefaults is p with its zero fields at their documented defaults.
func (p SourcePolicy) withDefaults() SourcePolicy {
	p.MaxAttempts = cmp.Or(p.MaxAttempts, DefaultMaxAttempts)
	p.ReplayWindow = cmp.Or(p.ReplayWindow, DefaultReplayWindow)
	p.LostLease = cmp.Or(p.LostLease, LostLeaseRetry)
	return p
}

func workerID() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = crand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
