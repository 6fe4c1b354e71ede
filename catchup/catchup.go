// Package catchup fetches from a provider's API the events it never
// delivered, and feeds them to the store the way the receiver does: same
// dedupe on (source, event id), same states and ledger, origin "catchup".
// An event that arrives both ways is stored, and processed, once.
//
// A Reconciler lists one provider's events (Stripe's events API, a GitHub
// hook's deliveries); a Runner runs passes over a window of time, keeps a
// checkpoint in the store and, in a cluster, runs on one instance at a time
// under a named lease. A pass lists a long window an hour at a time, oldest
// first, and advances the checkpoint past each hour it has listed whole: a
// pass that fails half way is run again from there.
//
// Shopify and Standard Webhooks senders have no API a receiver can list
// missed deliveries with; see docs/operations.md.
package catchup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
)

// Defaults of a Runner.
const (
	// DefaultInterval is the interval `ferry serve` passes to Run when a
	// source's [source.catchup] sets none. Run takes its interval as an
	// argument and fills in no default: it refuses one of zero or less.
	DefaultInterval = 15 * time.Minute
	// DefaultLookback is the window of a source's first pass.
	DefaultLookback = 72 * time.Hour
	// DefaultOverlap is how far before the checkpoint a pass starts: events
	// the provider lists late, and clock skew between it and Ferry.
	DefaultOverlap = 10 * time.Minute
	// DefaultSettle is how old an event must be before a pass takes it, so
	// catch-up does not race the provider's own first delivery.
	DefaultSettle = 2 * time.Minute
)

// step is the longest window a pass lists at once while the checkpoint
// can follow it. Providers list newest first: a long window (a first pass,
// a catch-up after an outage) cut short by the pass timeout would keep
// only its newest events, and the next pass would start it over. Listed a
// step at a time, oldest first, with the checkpoint moved after each, it
// keeps what it finished and the next pass resumes there. A regular pass
// (interval plus overlap) is one step.
const step = time.Hour

// Reconciler lists one provider's events.
type Reconciler interface {
	// List calls found for each event the provider created (or first tried
	// to deliver) within w. It returns the first error, its own or
	// found's; the pass then advances no further.
	List(ctx context.Context, w Window, found func(*Candidate) error) error
	// Retention is how far back the provider's API reaches (Stripe 30 days,
	// GitHub 3 days). A window reaching further is cut there, with a
	// warning: it covers all the provider still has. Zero means no known
	// bound.
	Retention() time.Duration
}

// unfiltered is implemented by a Reconciler whose API has no time filter
// (GitHub's deliveries): every List reads from the newest event down to
// the window's start, so steps would read the newest pages once a step.
// It lists a long window whole, newest first, calling found page by page:
// a pass cut short keeps what it received, the next lists the window
// again and finds those known, and the checkpoint moves only once a
// window is listed whole.
type unfiltered interface{ unfiltered() }

// Window is the time range a pass covers, both ends included.
type Window struct {
	From, To time.Time
}

// Candidate is one listed event.
type Candidate struct {
	// ID is the event id the receiver would have stored it under.
	ID string
	// Created is when the provider created the event (or first tried to
	// deliver it), by its clock; zero if unknown. The runner passes over
	// one later than the window's end once the provider's clock has cut it
	// short: the next pass lists it, settled.
	Created time.Time
	// Fetch returns the event as the receiver would have stored it. The
	// runner calls it only for an event the store lacks, whatever the
	// provider says of its delivery: a store restored from a backup lacks
	// what was delivered since.
	Fetch func(ctx context.Context) (*Event, error)
}

// Event is a fetched event, ready to receive.
type Event struct {
	Type    string
	Payload []byte
	// Headers stored with the event (content type, provider identity
	// headers); never a signature.
	Headers http.Header
}

// Outcomes counted by an Observer.
const (
	OutcomeNew     = "new"     // the store lacked the event; catch-up added it
	OutcomeKnown   = "known"   // the store had it
	OutcomeSkipped = "skipped" // it cannot be fetched or stored; a warning names why

	PassOK     = "ok"     // a pass of Run's loop ran to its end
	PassFailed = "failed" // it failed, and the next interval tries again
)

// Observer counts what passes found, and how Run's passes ended: a key
// revoked at the provider fails every pass, and only this count shows it.
// prometheus.CatchupMetrics is one.
type Observer interface {
	CatchupEvent(source, outcome string)
	CatchupPass(source, outcome string)
}

// Runner runs catch-up passes for one source.
type Runner struct {
	// Source is the configured source name. Required.
	Source string
	// Reconciler lists the source's provider. Required.
	Reconciler Reconciler
	// Store is where events and the checkpoint live. Required.
	Store ferry.Store
	// Lookback is the window of the first pass, the one with no checkpoint
	// yet. Later passes start at the checkpoint however old it is (back to
	// Retention and the provider's reach), so no lookback, however short,
	// makes a pass skip what lies between the checkpoint and its window.
	// Defaults to DefaultLookback.
	Lookback time.Duration
	// Retention is how long the store remembers the source's events (the
	// source's retention): an older event may have been processed and
	// purged, and catch-up would receive it again as new. No window reaches
	// back further than Retention less Overlap (for the provider's clock);
	// a pass that would is cut there and says so. Zero means no bound.
	Retention time.Duration
	// Overlap defaults to DefaultOverlap.
	Overlap time.Duration
	// Settle defaults to DefaultSettle; negative means none.
	Settle time.Duration
	// MaxBody is the largest payload received, as the receiver's limit for
	// the source: a larger one, which the receiver would have answered 413,
	// is skipped with a warning. Defaults to ferryhttp.DefaultMaxBodyBytes,
	// the receiver's.
	MaxBody int64
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Observer is optional.
	Observer Observer
	// Now defaults to time.Now.
	Now func() time.Time
}

// PassOptions tune one pass.
type PassOptions struct {
	// Since, when positive, starts the window that long ago instead of at
	// the checkpoint. The checkpoint still advances if the window covers it.
	Since time.Duration
	// DryRun lists and looks up, but receives nothing and advances nothing.
	DryRun bool
	// Owner, when set, is the holder of the source's lease (LeaseAcquire
	// of CheckpointName): each checkpoint write is fenced by it, so a pass
	// that outlived its lease moves nothing back (ferry.ErrLeaseLost). Run
	// sets it; a one-off pass without the lease leaves it empty.
	Owner string
}

// Result is what one pass did.
type Result struct {
	Source string    `json:"source"`
	From   time.Time `json:"from"`
	// To is now less Settle, by this host's clock or, when it is earlier,
	// by the Date of the provider's first answer in the pass.
	To time.Time `json:"to"`
	// Fetched counts the events listed in the window.
	Fetched int `json:"fetched"`
	// New counts events the store lacked and the pass received.
	New int `json:"new"`
	// Known counts events the store had.
	Known int `json:"known"`
	// Skipped counts events skipped with a warning, so that one cannot stop
	// every pass: an id or type no store accepts (see
	// ferry.ValidateEventID), one the provider cannot return
	// (ErrUnfetchable), or a payload over MaxBody.
	Skipped int `json:"skipped"`
	// Advanced is whether the checkpoint moved, and Checkpoint where to:
	// To once the whole window was listed, less after a failed pass that
	// finished some steps.
	Advanced   bool      `json:"advanced"`
	Checkpoint time.Time `json:"checkpoint,omitzero"`
	DryRun     bool      `json:"dry_run,omitempty"`
	// Warnings name gaps the pass could not cover.
	Warnings []string `json:"warnings,omitempty"`
}

// CheckpointName is the store key of the source's checkpoint; its lease has
// the same name.
func CheckpointName(source string) string { return "catchup:" + source }

// FailureName is the store key under which the runner keeps why the
// source's last pass failed, until a pass ends ok (ReadFailure).
func FailureName(source string) string { return "catchup-failure:" + source }

// FailingSinceName is the store key whose time (UpdatedAt) is the first
// failed pass since one ended ok: the runner writes it when a failure
// follows an ok pass, or none.
func FailingSinceName(source string) string { return "catchup-failing-since:" + source }

// maxFailureBytes bounds the error a failed pass keeps.
const maxFailureBytes = 1000

// Failure is why a source's passes fail, as the runner kept it.
type Failure struct {
	Err string
	// At is the last failed pass, Since the first since one ended ok:
	// the database's times.
	At, Since time.Time
}

// ReadFailure returns why the source's last pass failed, or nil when the
// last pass ended ok, none failed, or the checkpoint moved since (ferry
// reconcile). ferry doctor reads it: a source whose every pass fails from
// the start has no checkpoint to age.
func ReadFailure(ctx context.Context, st ferry.Store, source string) (*Failure, error) {
	get := func(name string) (*ferry.Checkpoint, error) {
		cp, err := st.CheckpointGet(ctx, &ferry.CheckpointGetParams{Name: name})
		if errors.Is(err, ferry.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("catchup %s: read %s: %w", source, name, err)
		}
		return cp, nil
	}
	f, err := get(FailureName(source))
	if f == nil || f.Value == "" {
		return nil, err
	}
	cp, err := get(CheckpointName(source))
	if err != nil || cp != nil && !f.UpdatedAt.After(cp.UpdatedAt) {
		return nil, err
	}
	since, err := get(FailingSinceName(source))
	if err != nil {
		return nil, err
	}
	failure := &Failure{Err: f.Value, At: f.UpdatedAt, Since: f.UpdatedAt}
	if since != nil && since.UpdatedAt.Before(f.UpdatedAt) {
		failure.Since = since.UpdatedAt
	}
	return failure, nil
}

// ReadCheckpoint reads the source's checkpoint and the time it holds: how
// far the source's passes have looked. It returns an error wrapping
// ferry.ErrNotFound until a pass has moved it.
func ReadCheckpoint(ctx context.Context, st ferry.Store, source string) (*ferry.Checkpoint, time.Time, error) {
	cp, err := st.CheckpointGet(ctx, &ferry.CheckpointGetParams{Name: CheckpointName(source)})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("catchup %s: read checkpoint: %w", source, err)
	}
	at, err := time.Parse(time.RFC3339Nano, cp.Value)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("catchup %s: checkpoint %q: %w", source, cp.Value, err)
	}
	return cp, at, nil
}

// FailingAfter is the checkpoint age that says a source's passes fail, or
// none runs: three intervals and ten minutes, past the settle and a pass
// or two that a restart or a slow provider may cost. FerryCatchupFailing
// (docs/alerts.yml) and ferry doctor both use it.
func FailingAfter(interval time.Duration) time.Duration { return 3*interval + 10*time.Minute }

// ErrConfig is wrapped by errors in a Runner's or a Reconciler's settings.
var ErrConfig = errors.New("catchup: invalid settings")

// ErrUnfetchable is wrapped by a Candidate's Fetch error when the provider
// will never return the event (GitHub: a delivery it refuses within the
// last hour of its 3 days, so expired or about to be; one without a
// payload; a response over 32 MiB). The runner skips the event with a
// warning, so one such event cannot fail every pass until it ages out. A
// refusal that may pass is ErrRefusedForNow.
var ErrUnfetchable = errors.New("catchup: the provider cannot return the event")

// ErrRefusedForNow is wrapped by a Candidate's Fetch error when the
// provider refuses an event it still keeps (GitHub's 422 when throttled,
// its 404 to credentials that may not read the hook). The runner takes the
// pass's other events, then fails the pass without advancing the
// checkpoint, so the next pass tries the event again: stopping at it would
// leave every older event unfetched, and some could age out meanwhile.
var ErrRefusedForNow = errors.New("catchup: the provider refused the event for now")

// fetchError is a Candidate's Fetch failing (a 5xx after every retry, a
// timeout, an answer that does not decode), as opposed to the store's. The
// runner treats it as ErrRefusedForNow: one delivery GitHub keeps failing
// must not stop every older one from being fetched before it ages out.
type fetchError struct{ err error }

func (e *fetchError) Error() string { return e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

// maxFailedFetches is how many fetches failing in a row end a pass: the
// provider (or the way to it) is failing, and each further fetch would
// spend its retries, about 30 s, to fail alike.
const maxFailedFetches = 3

// errOverMaxBody is a payload over Runner.MaxBody: the runner skips it.
var errOverMaxBody = errors.New("payload over the source's max_body")

func (r *Runner) check() error {
	if r.Source == "" || r.Reconciler == nil || r.Store == nil {
		return fmt.Errorf("%w: Source, Reconciler and Store are required", ErrConfig)
	}
	return nil
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Runner) log() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Pass runs one catch-up pass: it works out the window from the checkpoint
// (or opts.Since), lists it a step at a time, receives what the store lacks
// and, if the window covers the checkpoint, moves it to the end of each
// step listed. The error of a failed pass says how far it got.
func (r *Runner) Pass(ctx context.Context, opts PassOptions) (*Result, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	listed := map[string]bool{}
	res, ahead, err := r.pass(ctx, opts, false, listed)
	if !ahead || opts.Since > 0 {
		return res, err
	}
	// The provider's first answer showed the checkpoint later than its now
	// by more than the overlap: written by a host whose clock ran ahead,
	// and past events the provider has created since. The window started
	// there, so the pass lists again from the lookback, and moves the
	// checkpoint back to what it listed. Left to the next pass, the gap
	// would be lost once the provider's clock came within the overlap of
	// the checkpoint. A fetch the first refused or failed does not stop
	// this: the second lists it again. (--since lists its own window: it
	// says so instead.)
	refused := countFalse(listed)
	again, _, err := r.pass(ctx, opts, true, listed)
	if again == nil {
		return res, err
	}
	// The second run counted only what the first did not (listed), so the
	// sums count each event once, however far the second got: a fetch the
	// first refused and the second listed again is fetched once.
	again.Fetched += res.Fetched - (refused - countFalse(listed))
	again.New += res.New
	again.Known += res.Known
	again.Skipped += res.Skipped
	warnings := res.Warnings
	for _, w := range again.Warnings {
		if !slices.Contains(warnings, w) {
			warnings = append(warnings, w)
		}
	}
	again.Warnings = warnings
	return again, err
}

// countFalse counts listed's refused events.
func countFalse(listed map[string]bool) int {
	n := 0
	for _, counted := range listed {
		if !counted {
			n++
		}
	}
	return n
}

// pass is one Pass. distrust drops the checkpoint as one later than now
// would be; ahead reports that the provider's first answer showed it so.
// listed is what Pass's first run listed, for its second (distrust): true
// for an event it counted, which the second passes over; false for one
// refused or failed, which the second takes, counts and deletes. The first
// run stops filling it once no second can follow: it holds the ids listed
// before the provider's first answer with a Date, or all of a window
// found ahead (the last overlap, or the checkpoint's).
func (r *Runner) pass(ctx context.Context, opts PassOptions, distrust bool, listed map[string]bool) (res *Result, ahead bool, err error) {
	// future: the checkpoint is later than this host's now by more than
	// the overlap (whose clock is off?); probe: this pass asks the provider.
	future, probe := false, false
	lookback := orDefault(r.Lookback, DefaultLookback)
	overlap := orDefault(r.Overlap, DefaultOverlap)
	settle := max(orDefault(r.Settle, DefaultSettle), 0)
	now := r.now().UTC().Truncate(time.Second) // providers count whole seconds
	res = &Result{Source: r.Source, To: now.Add(-settle), DryRun: opts.DryRun}

	name := CheckpointName(r.Source)
	var checkpoint time.Time
	switch cp, at, err := ReadCheckpoint(ctx, r.Store, r.Source); {
	case errors.Is(err, ferry.ErrNotFound):
	case err != nil:
		return nil, false, err
	default:
		checkpoint = at
		// The value is the writer's clock, UpdatedAt the store's: a host
		// whose clock ran ahead would have later passes skip what lies
		// between.
		if !cp.UpdatedAt.IsZero() && checkpoint.After(cp.UpdatedAt) {
			r.log().Warn("catchup: checkpoint later than the store's time of writing it (a clock ahead); starting from that time",
				"source", r.Source, "checkpoint", checkpoint, "written", cp.UpdatedAt)
			checkpoint = cp.UpdatedAt
		}
		// A checkpoint later than now by more than the overlap was written
		// by a clock ahead (on SQLite the store's time is the writer's host's
		// too) that has since stepped back, or this host's clock is behind.
		// Only the provider's clock tells which: the pass lists the last
		// overlap and compares the checkpoint with the answer's Date, or with
		// this host's clock when no answer carries one. distrust is Pass's
		// second run, once either showed the checkpoint ahead: what lies
		// between is unknown, so the pass starts at the lookback. Within the
		// overlap, a reader's clock a little behind the writer's, the
		// overlap covers it.
		switch {
		case distrust:
			r.log().Warn("catchup: checkpoint later than now (a clock that ran ahead); starting from the lookback",
				"source", r.Source, "checkpoint", checkpoint, "now", now)
			checkpoint = time.Time{}
		case checkpoint.After(now.Add(overlap)):
			future, probe = true, opts.Since == 0
		}
	}

	floor := now.Add(-lookback)
	// reach is the oldest instant any window can fetch: the store forgets
	// events after Retention, the provider after its own.
	var reach, forgotten time.Time
	if r.Retention > 0 {
		forgotten = now.Add(-r.Retention + overlap)
		reach = forgotten
	}
	kept := r.Reconciler.Retention()
	limit := now.Add(-kept)
	if kept > 0 && limit.After(reach) {
		reach = limit
	}
	switch {
	case opts.Since > 0:
		res.From = now.Add(-opts.Since)
	case probe:
		res.From = res.To.Add(-overlap)
	case checkpoint.IsZero():
		res.From = floor
	default:
		// However old: lookback only bounds a first pass.
		res.From = checkpoint.Add(-overlap)
	}
	if r.Retention > 0 && res.From.Before(forgotten) {
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"events created before %s are not fetched: the store forgets events after retention %s, so an older one may have been processed and purged, and would be sent to the app again",
			forgotten.Format(time.RFC3339), r.Retention))
		res.From = forgotten
	}
	if kept > 0 && res.From.Before(limit) {
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"events created before %s are out of the provider's reach (it keeps %s); they cannot be caught up",
			limit.Format(time.RFC3339), kept))
		res.From = limit
	}
	for _, w := range res.Warnings {
		r.log().Warn("catchup: gap", "source", r.Source, "warning", w)
	}
	if !res.From.Before(res.To) {
		return res, false, nil // nothing settled yet
	}

	// The window covers everything since the checkpoint if it starts at or
	// before it (a first pass: at lookback), or where nothing older can be
	// fetched (the cut is warned about); a short --since must not skip
	// what lies between.
	start := checkpoint
	if start.IsZero() {
		start = floor
	}
	advance := !opts.DryRun && !probe && (!res.From.After(start) || !res.From.After(reach))
	ctx, bound := r.providerBound(ctx, res, now, overlap, settle)
	// refused is the first ErrRefusedForNow or failed fetch of the pass,
	// and refusals how many: the pass goes on, advances no further, and
	// fails at its end. failing counts the fetches that failed since the
	// last that worked: at maxFailedFetches the provider itself is taken as
	// failing, and the pass ends there.
	var refused error
	refusals, failing := 0, 0
	// record: a second run may follow. Not with --since, nor once the
	// provider's clock is known and the checkpoint not ahead of it, nor
	// ever will be: it only advances to before that clock.
	record := !distrust && opts.Since == 0
	noSecondRun := func(date time.Time) {
		if record && !date.IsZero() && (checkpoint.IsZero() || !checkpoint.After(date.Add(overlap))) {
			record = false
			clear(listed)
		}
	}
	found := func(c *Candidate) error {
		date := bound()
		if noSecondRun(date); !c.Created.IsZero() && c.Created.After(res.To) {
			return nil // not settled at the provider: the next pass lists it
		}
		if counted, relisted := listed[c.ID]; distrust && relisted {
			if counted {
				return nil // the first run counted it
			}
			delete(listed, c.ID) // refused by the first: taken and counted here
		}
		res.Fetched++
		if record {
			listed[c.ID] = false
		}
		known, err := r.take(ctx, c, opts.DryRun)
		var outcome string
		switch {
		case errors.Is(err, ferry.ErrBadEventID) || errors.Is(err, ferry.ErrBadEventType) ||
			errors.Is(err, ErrUnfetchable) || errors.Is(err, errOverMaxBody):
			failing = 0 // the provider answered
			res.Skipped++
			outcome = OutcomeSkipped
			r.log().Warn("catchup: skipped an event it cannot fetch or store", "source", r.Source, "err", err)
		case errors.Is(err, ErrRefusedForNow):
			failing = 0 // the provider answered
			refused = cmp.Or(refused, err)
			refusals++
			r.log().Warn("catchup: the provider refused an event for now; the pass goes on and the next tries it again", "source", r.Source, "err", err)
			return nil
		case errors.As(err, new(*fetchError)) && ctx.Err() == nil:
			if failing++; failing >= maxFailedFetches {
				return fmt.Errorf("%d fetches failed in a row, so the provider is taken as failing: %w", failing, err)
			}
			refused = cmp.Or(refused, err)
			refusals++
			r.log().Warn("catchup: could not fetch an event; the pass goes on and the next tries it again", "source", r.Source, "err", err)
			return nil
		case err != nil:
			return err
		case known:
			res.Known++
			outcome = OutcomeKnown
		default:
			failing = 0
			res.New++
			outcome = OutcomeNew
		}
		if record {
			listed[c.ID] = true
		}
		if r.Observer != nil && !opts.DryRun {
			r.Observer.CatchupEvent(r.Source, outcome)
		}
		return nil
	}
	for _, w := range r.steps(res.From, res.To, advance) {
		if w.From.After(res.To) {
			break // past the provider's now
		}
		if err := r.Reconciler.List(ctx, w, found); err != nil {
			at := "checkpoint not advanced"
			if res.Advanced {
				at = "checkpoint advanced to " + res.Checkpoint.Format(time.RFC3339)
			}
			return res, false, fmt.Errorf("catchup %s: pass from %s failed after %d events (%d new), %s: %w",
				r.Source, res.From.Format(time.RFC3339), res.Fetched, res.New, at, err)
		}
		date := bound()
		if !date.IsZero() && !ahead && !checkpoint.IsZero() && checkpoint.After(date.Add(overlap)) {
			ahead = true
			next := "listing again from the lookback"
			if opts.Since > 0 {
				next = "run again without --since to list from the lookback and move it back"
			}
			w := fmt.Sprintf("the checkpoint %s is later than the provider's now (its Date: %s) by more than the overlap %s: written by a host whose clock ran ahead; %s",
				checkpoint.Format(time.RFC3339), date.Format(time.RFC3339), overlap, next)
			res.Warnings = append(res.Warnings, w)
			r.log().Warn("catchup: checkpoint ahead of the provider", "source", r.Source, "warning", w)
		}
		noSecondRun(date)
		end := w.To
		if res.To.Before(end) {
			end = res.To
		}
		if advance && refused == nil && end.After(checkpoint) {
			put := &ferry.CheckpointPutParams{Name: name, Value: end.Format(time.RFC3339Nano)}
			if opts.Owner != "" {
				put.Lease, put.Owner = name, opts.Owner
			}
			err := r.Store.CheckpointPut(ctx, put)
			if err != nil {
				return res, false, fmt.Errorf("catchup %s: write checkpoint: %w", r.Source, err)
			}
			checkpoint = end
			res.Advanced, res.Checkpoint = true, end
		}
	}
	if future && !ahead {
		var w string
		switch date := bound(); {
		case date.IsZero() && probe:
			ahead = true // no answer told the provider's clock: this host's says ahead
		case date.IsZero():
			w = fmt.Sprintf("the checkpoint %s is later than this host's now by more than the overlap %s, and no answer gave the provider's clock: run again without --since to list from the lookback and move it back",
				checkpoint.Format(time.RFC3339), overlap)
		default:
			listed := ""
			if probe {
				listed = ", and each pass lists only the last overlap until this host's clock nears it"
			}
			w = fmt.Sprintf("the checkpoint %s is later than this host's now, but not later than the provider's (its Date: %s) by more than the overlap %s: this host runs slow, so the checkpoint is kept%s; set the host's clock right (NTP)",
				checkpoint.Format(time.RFC3339), date.Format(time.RFC3339), overlap, listed)
		}
		if w != "" {
			res.Warnings = append(res.Warnings, w)
			r.log().Warn("catchup: checkpoint ahead of this host", "source", r.Source, "warning", w)
		}
	}
	if refused != nil {
		at := "checkpoint not advanced"
		if res.Advanced {
			at = "checkpoint advanced to " + res.Checkpoint.Format(time.RFC3339)
		}
		return res, ahead, fmt.Errorf("catchup %s: pass from %s took %d events (%d new), but the provider refused or failed %d for now, %s; the next pass tries again: %w",
			r.Source, res.From.Format(time.RFC3339), res.Fetched-refusals, res.New, refusals, at, refused)
	}
	return res, ahead, nil
}

// providerBound returns ctx, whose API answers record the provider's
// Date, and bound, which once one has cuts res.To to that Date less settle
// if it is earlier, and warns when the host's clock (now) and the
// provider's differ by more than overlap. A host clock running ahead would
// otherwise move the checkpoint past events the provider has yet to
// create, and the next pass, starting at the checkpoint less overlap,
// would never list them. bound returns the Date, zero until an answer
// carries one. A reconciler whose answers carry no Date leaves the host's
// clock in charge.
func (r *Runner) providerBound(ctx context.Context, res *Result, now time.Time, overlap, settle time.Duration) (context.Context, func() time.Time) {
	pc := &providerClock{}
	done := false
	return withProviderClock(ctx, pc), func() time.Time {
		date := pc.get()
		if done || date.IsZero() {
			return date
		}
		done = true
		if to := date.Add(-settle); to.Before(res.To) {
			res.To = to
		}
		skew := now.Sub(date)
		if skew.Abs() <= overlap {
			return date
		}
		way := "ahead of"
		if skew < 0 {
			way = "behind"
		}
		w := fmt.Sprintf("this host's clock is %s %s the provider's (its Date: %s), more than the overlap %s; the window ends at %s by the provider's clock; set the host's clock right (NTP)",
			skew.Abs(), way, date.Format(time.RFC3339), overlap, res.To.Format(time.RFC3339))
		res.Warnings = append(res.Warnings, w)
		r.log().Warn("catchup: clock skew", "source", r.Source, "warning", w)
		return date
	}
}

// steps splits [from, to] into windows a step long, oldest first, when the
// checkpoint can follow them; otherwise it is one window. A reconciler with
// no time filter lists it whole.
func (r *Runner) steps(from, to time.Time, advance bool) []Window {
	if _, whole := r.Reconciler.(unfiltered); whole || !advance {
		return []Window{{From: from, To: to}}
	}
	var ws []Window
	for to.Sub(from) > step {
		// Ends included, and providers filter on whole seconds: a step ends
		// just before the whole second the next begins at, so no event is
		// listed twice.
		next := from.Truncate(time.Second).Add(step)
		ws = append(ws, Window{From: from, To: next.Add(-time.Nanosecond)})
		from = next
	}
	return append(ws, Window{From: from, To: to})
}

// take looks c up and receives it if the store lacks it. It reports whether
// the event was known.
func (r *Runner) take(ctx context.Context, c *Candidate, dryRun bool) (known bool, err error) {
	if err := ferry.ValidateEventID(c.ID); err != nil {
		return false, err // the value stays out of the message: it may be anything
	}
	_, err = r.Store.EventGet(ctx, &ferry.EventGetParams{Source: r.Source, EventID: c.ID})
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, ferry.ErrNotFound):
		return false, fmt.Errorf("look up %s: %w", c.ID, err)
	case dryRun:
		return false, nil
	}
	ev, err := c.Fetch(ctx)
	if err != nil {
		return false, &fetchError{fmt.Errorf("fetch %s: %w", c.ID, err)}
	}
	if limit := cmp.Or(r.MaxBody, ferryhttp.DefaultMaxBodyBytes); int64(len(ev.Payload)) > limit {
		return false, fmt.Errorf("%s: %w: %d bytes, the limit %d (raise max_body, restart, and reconcile from before the event)", c.ID, errOverMaxBody, len(ev.Payload), limit)
	}
	res, err := r.Store.EventReceive(ctx, &ferry.EventReceiveParams{
		Source: r.Source, EventID: c.ID, Type: ev.Type, Payload: ev.Payload, Headers: ev.Headers,
		Origin: ferry.OriginCatchup,
	})
	if err != nil {
		return false, fmt.Errorf("receive %s: %w", c.ID, err)
	}
	// Not new: the live delivery got there between the look-up and now.
	return res.Outcome != ferry.ReceiveNew, nil
}

// minPassTimeout is the least time Run gives a pass; it gives an interval
// when that is longer.
const minPassTimeout = 5 * time.Minute

// MaxInterval is the longest interval Run takes for a source whose events
// the provider keeps for kept (Reconciler.Retention) and the store for
// retention (Runner.Retention), with the default overlap and settle; ok is
// false when neither bounds it (both zero). Run refuses a longer one.
//
// It keeps every event within reach (kept, or retention less the overlap,
// whichever is shorter) until a pass looks at it, even when the instance
// holding the lease crashes: an event created just after a pass's window
// ended (settle before the pass began) waits for the next pass, an
// interval after that one ended (up to a pass timeout, max(interval, 5m),
// after it began); if the holder renews the lease for it and crashes,
// the lease holds for a pass timeout and an interval, the instance taking
// over tries once an interval, and its pass may take a pass timeout to
// reach the event. Three intervals, three pass timeouts and the settle
// must fit in the reach: a sixth of it less the settle, for GitHub's 3
// days 11h59m40s.
func MaxInterval(kept, retention time.Duration) (d time.Duration, ok bool) {
	return maxInterval(kept, retention, DefaultOverlap, DefaultSettle)
}

func maxInterval(kept, retention, overlap, settle time.Duration) (time.Duration, bool) {
	reach := kept
	if retention > 0 && (kept <= 0 || retention-overlap < kept) {
		reach = retention - overlap
	}
	if kept <= 0 && retention <= 0 {
		return 0, false
	}
	// 3i + 3·max(i, minPassTimeout) + settle ≤ reach.
	if d := (reach - settle) / 6; d >= minPassTimeout {
		return d.Truncate(time.Second), true
	}
	return max((reach-settle-3*minPassTimeout)/3, 0).Truncate(time.Second), true
}

// Run starts a pass at once and then every interval, until ctx is done. In
// a cluster only the instance holding the lease CheckpointName(Source)
// runs passes; owner names this instance. A failed pass is logged and
// its lease released: whichever instance's interval comes next, this one
// or another, tries again. An interval past MaxInterval (with the
// Runner's own Overlap and Settle) is refused: an instance that crashed
// holding the lease could keep an event from every pass until it aged out.
func (r *Runner) Run(ctx context.Context, interval time.Duration, owner string) error {
	if err := r.check(); err != nil {
		return err
	}
	if interval <= 0 || owner == "" {
		return fmt.Errorf("%w: a positive interval and an owner are required", ErrConfig)
	}
	most, bounded := maxInterval(r.Reconciler.Retention(), r.Retention, orDefault(r.Overlap, DefaultOverlap), max(orDefault(r.Settle, DefaultSettle), 0))
	if bounded && interval > most {
		return fmt.Errorf("%w: interval %s is longer than %s: an instance that crashed holding the lease could keep an event from every pass until it is out of reach; see MaxInterval", ErrConfig, interval, most)
	}
	// A pass may take up to passTimeout; the lease outlives it by an
	// interval, and the holder renews it before every pass.
	passTimeout := max(interval, minPassTimeout)
	lease := &ferry.LeaseAcquireParams{Name: CheckpointName(r.Source), Owner: owner, TTL: passTimeout + interval}
	defer r.release(ctx, lease)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		r.runOnce(ctx, lease, passTimeout)
		timer.Reset(interval)
	}
}

// release gives up lease if this instance holds it, even once ctx is done.
func (r *Runner) release(ctx context.Context, lease *ferry.LeaseAcquireParams) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = r.Store.LeaseRelease(ctx, &ferry.LeaseReleaseParams{Name: lease.Name, Owner: lease.Owner})
}

// keepFailure records why the pass under lease failed (FailureName, and
// FailingSinceName after an ok pass), or clears it after one that ended
// ok, fenced by the lease and bounded in time: the store's trouble may be
// why the pass failed. A write that fails is not retried: the next pass
// writes again.
func (r *Runner) keepFailure(ctx context.Context, lease *ferry.LeaseAcquireParams, failed error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	put := func(name, value string) error {
		return r.Store.CheckpointPut(ctx, &ferry.CheckpointPutParams{Name: name, Value: value, Lease: lease.Name, Owner: lease.Owner})
	}
	var err error
	if failed == nil {
		err = put(FailureName(r.Source), "")
	} else {
		text := ferry.StorableText(failed.Error())
		if len(text) > maxFailureBytes {
			text = strings.ToValidUTF8(text[:maxFailureBytes], "")
		}
		prev, gerr := r.Store.CheckpointGet(ctx, &ferry.CheckpointGetParams{Name: FailureName(r.Source)})
		if errors.Is(gerr, ferry.ErrNotFound) || gerr == nil && prev.Value == "" {
			err = put(FailingSinceName(r.Source), "")
		}
		err = cmp.Or(err, put(FailureName(r.Source), text))
	}
	if err != nil && !errors.Is(err, ferry.ErrLeaseLost) { // lost: the pass's own line says so
		r.log().Warn("catchup: could not record the pass's outcome for ferry doctor", "source", r.Source, "error", err.Error())
	}
}

func (r *Runner) observePass(outcome string) {
	if r.Observer != nil {
		r.Observer.CatchupPass(r.Source, outcome)
	}
}

func (r *Runner) runOnce(ctx context.Context, lease *ferry.LeaseAcquireParams, timeout time.Duration) {
	held, err := r.Store.LeaseAcquire(ctx, lease)
	if err != nil {
		if ctx.Err() == nil {
			r.log().Warn("catchup: lease", "source", r.Source, "error", err.Error())
		}
		return
	}
	if !held {
		r.log().Debug("catchup: another instance holds the lease", "source", r.Source)
		return
	}
	passCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := r.Pass(passCtx, PassOptions{Owner: lease.Owner})
	if err != nil {
		if ctx.Err() == nil { // not a stop
			// Released, so that an instance which can reach the provider
			// (this one's route or proxy may be what fails) takes the next
			// pass; renewing it would keep every other instance out.
			r.log().Error("catchup: pass failed; lease released for any instance's next interval", "source", r.Source, "lease", lease.Name, "owner", lease.Owner, "error", err.Error())
			r.observePass(PassFailed)
			r.keepFailure(ctx, lease, err) // while the lease fences it
			r.release(ctx, lease)
		}
		return
	}
	r.observePass(PassOK)
	r.log().Info("catchup: pass", "source", r.Source, "from", res.From, "to", res.To,
		"fetched", res.Fetched, "new", res.New, "known", res.Known, "skipped", res.Skipped, "advanced", res.Advanced)
	r.keepFailure(ctx, lease, nil)
}
