package ferry

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Validation and defaults of every Store operation live here, once: each
// store calls them first and acts only on what they return, so a rule
// changed here changes on every store. Each returns an error wrapping
// ErrInvalidParams, naming what is wrong.

// EventList page sizes.
const (
	// EventListLimitDefault is EventListParams.Limit when it is zero.
	EventListLimitDefault = 50
	// EventListLimitMax caps EventListParams.Limit and EventStatsParams.AtRiskLimit.
	EventListLimitMax = 1000
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidParams}, args...)...)
}

// tooShort is invalid for a retention shorter than a replay window: the
// error wraps ErrRetentionTooShort as well, so callers can tell it apart.
func tooShort(format string, args ...any) error {
	return fmt.Errorf("%w: %w: "+format, append([]any{ErrInvalidParams, ErrRetentionTooShort}, args...)...)
}

// MaxCount bounds the counts a store keeps in 32 bits: an attempt number,
// an attempt budget, a claim's limit. Past it a store would compare a
// truncated number, and a fence on the attempt would not hold.
const MaxCount = math.MaxInt32

// Validate checks that the lease can name a claim: a row id and an attempt,
// both positive (a claim's first attempt is 1), the attempt at most MaxCount.
func (l Lease) Validate() error {
	if l.ID <= 0 || l.Attempt <= 0 || l.Attempt > MaxCount {
		return invalid("lease %d/%d: id and attempt must be positive, the attempt at most %d", l.ID, l.Attempt, MaxCount)
	}
	return nil
}

// storable reports whether every store can keep s as text: valid UTF-8
// without NUL (PostgreSQL's text and jsonb hold neither).
func storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// requiredText refuses an empty s, or one no store keeps as text; what
// names it in the error.
func requiredText(what, s string) error {
	if s == "" || !storable(s) {
		return invalid("%s must be non-empty UTF-8 text without NUL", what)
	}
	return nil
}

// StorableText makes any text storable as a last error or a checkpoint
// value: invalid bytes and NUL become U+FFFD.
func StorableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

func validID(id int64) error {
	if id <= 0 {
		return invalid("id must be positive, got %d", id)
	}
	return nil
}

// Validate requires an ID.
func (p *ActionListParams) Validate() error { return validID(p.ID) }

// Validate requires an ID.
func (p *AttemptListParams) Validate() error { return validID(p.ID) }

// Validate requires an ID and a Limit that is not negative.
func (p *ReplayListParams) Validate() error { return validNoticeList(p.ID, p.Limit) }

// Normalize checks p and fills Limit's default.
func (p *ReplayListParams) Normalize() error { return normalizeNoticeList(p.ID, &p.Limit) }

// Validate requires an ID and a Limit that is not negative.
func (p *ConflictListParams) Validate() error { return validNoticeList(p.ID, p.Limit) }

// Normalize checks p and fills Limit's default.
func (p *ConflictListParams) Normalize() error { return normalizeNoticeList(p.ID, &p.Limit) }

// validNoticeList is normalizeNoticeList's check, on a copy of limit.
func validNoticeList(id int64, limit int) error { return normalizeNoticeList(id, &limit) }

// normalizeNoticeList checks a ReplayList or ConflictList's params and sets
// *limit to its default, NoticeKeep, when zero, and within noticeListMax.
func normalizeNoticeList(id int64, limit *int) error {
	if err := validID(id); err != nil {
		return err
	}
	return noticeLimit(limit, NoticeKeep)
}

// noticeLimit refuses a negative *limit, and sets it to def when zero and
// within noticeListMax.
func noticeLimit(limit *int, def int) error {
	if *limit < 0 {
		return invalid("limit must not be negative, got %d", *limit)
	}
	if *limit == 0 {
		*limit = def
	}
	*limit = min(*limit, noticeListMax)
	return nil
}

// Validate requires an Owner of UTF-8 text without NUL, a Limit from 1 to
// MaxCount and a positive TTL.
func (p *EventClaimManyParams) Validate() error {
	if err := requiredText("owner", p.Owner); err != nil {
		return err
	}
	switch {
	case p.Limit <= 0 || p.Limit > MaxCount:
		return invalid("limit must be from 1 to %d, got %d", MaxCount, p.Limit)
	case p.TTL <= 0:
		return invalid("ttl must be positive, got %s", p.TTL)
	case p.MaxBytes < 0:
		return invalid("max bytes must not be negative, got %d", p.MaxBytes)
	}
	return nil
}

// Validate requires a status of 0 or 100 to 599 and a Body a store can
// keep as it is: at most ResponseLimit bytes of valid UTF-8 without NUL.
// NewAttemptResponse makes such a response of any bytes.
func (r AttemptResponse) Validate() error {
	switch {
	case r.HTTPStatus != 0 && (r.HTTPStatus < 100 || r.HTTPStatus > 599):
		return invalid("response status %d is not an HTTP status", r.HTTPStatus)
	case len(r.Body) > ResponseLimit:
		return invalid("response of %d bytes is over the limit of %d", len(r.Body), ResponseLimit)
	case !storable(r.Body):
		return invalid("response is not UTF-8 text without NUL")
	}
	return nil
}

// Validate requires a valid Lease and Response.
func (p *EventCompleteParams) Validate() error {
	if err := p.Response.Validate(); err != nil {
		return err
	}
	return p.Lease.Validate()
}

// Validate requires every lease to be valid, and Responses to be empty or
// one valid response per lease. No leases is valid (a no-op).
func (p *EventCompleteManyParams) Validate() error {
	if len(p.Responses) > 0 && len(p.Responses) != len(p.Leases) {
		return invalid("%d responses for %d leases", len(p.Responses), len(p.Leases))
	}
	for _, l := range p.Leases {
		if err := l.Validate(); err != nil {
			return err
		}
	}
	for _, r := range p.Responses {
		if err := r.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Validate requires a valid Lease, an Error of UTF-8 text without NUL (the
// Client replaces what is not), no negative delay or age, and a budget from
// 0 to MaxCount.
func (p *EventFailParams) Validate() error {
	switch {
	case p.RetryDelay < 0:
		return invalid("retry delay must not be negative, got %s", p.RetryDelay)
	case p.MaxAttempts < 0 || p.MaxAttempts > MaxCount:
		return invalid("max attempts must be from 0 to %d, got %d", MaxCount, p.MaxAttempts)
	case !storable(p.Error):
		return invalid("error is not UTF-8 text without NUL")
	case p.MaxAge < 0:
		return invalid("max age must not be negative, got %s", p.MaxAge)
	}
	if err := p.Response.Validate(); err != nil {
		return err
	}
	return p.Lease.Validate()
}

// Validate requires every failure to be valid and to name a different
// lease: two verdicts for one attempt cannot both be recorded. No failures
// is valid (a no-op).
func (p *EventFailManyParams) Validate() error {
	seen := make(map[Lease]bool, len(p.Failures))
	for i := range p.Failures {
		f := &p.Failures[i]
		if err := f.Validate(); err != nil {
			return err
		}
		if seen[f.Lease] {
			return invalid("lease %d/%d is named twice", f.Lease.ID, f.Lease.Attempt)
		}
		seen[f.Lease] = true
	}
	return nil
}

// Validate requires a positive ID, or a Source and an EventID when ID is 0.
// Its error is also ErrNotFound, as no event can match such params: callers
// that answer "not found" for a bad id keep doing so.
func (p *EventGetParams) Validate() error {
	switch {
	case p.ID < 0:
		return invalid("%w: id must be positive, got %d", ErrNotFound, p.ID)
	case p.ID == 0 && (p.Source == "" || p.EventID == ""):
		return invalid("%w: an id, or a source and an event id, are required", ErrNotFound)
	case !storable(p.Source) || !storable(p.EventID):
		return invalid("%w: no stored source or event id holds NUL or invalid UTF-8", ErrNotFound)
	}
	return nil
}

// validFilter checks the filter EventList and EventRequeue share. It
// refuses text no stored row could match (PostgreSQL would fail the query,
// SQLite match nothing), an unknown state and an Until before Since.
func validFilter(source, typ, eventIDContains string, states []State, since, until time.Time) error {
	for _, s := range []string{source, typ, eventIDContains} {
		if !storable(s) {
			return invalid("filter %q is not UTF-8 text without NUL", s)
		}
	}
	for _, s := range states {
		if !s.Valid() {
			return invalid("unknown state %q", s)
		}
	}
	if !since.IsZero() && !until.IsZero() && until.Before(since) {
		return invalid("until %s is before since %s", until.Format(time.RFC3339), since.Format(time.RFC3339))
	}
	return nil
}

// Validate requires a valid Lease and a positive TTL.
func (p *EventHeartbeatParams) Validate() error {
	if p.TTL <= 0 {
		return invalid("ttl must be positive, got %s", p.TTL)
	}
	return p.Lease.Validate()
}

// Validate requires a positive TTL and every lease to be valid. No leases
// is valid (a no-op).
func (p *EventHeartbeatManyParams) Validate() error {
	if p.TTL <= 0 {
		return invalid("ttl must be positive, got %s", p.TTL)
	}
	for _, l := range p.Leases {
		if err := l.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Normalize returns a copy of p with Limit defaulted to
// EventListLimitDefault and capped at EventListLimitMax, and a negative
// Before or After made 0 (start at the newest). It refuses a negative
// Limit, an unknown state, both cursors at once, an Until before Since, and
// a text filter that is not UTF-8 without NUL.
func (p *EventListParams) Normalize() (*EventListParams, error) {
	if p.Limit < 0 {
		return nil, invalid("limit must not be negative, got %d", p.Limit)
	}
	if err := validFilter(p.Source, p.Type, p.EventIDContains, p.States, p.Since, p.Until); err != nil {
		return nil, err
	}
	if p.Before > 0 && p.After > 0 {
		return nil, invalid("before and after are both set: page one way at a time")
	}
	out := *p
	if out.Limit == 0 {
		out.Limit = EventListLimitDefault
	}
	out.Limit = min(out.Limit, EventListLimitMax)
	out.Before = max(out.Before, 0)
	out.After = max(out.After, 0)
	return &out, nil
}

// Page is the EventListResult of listed, what a store read for p (as
// Normalize returns it): up to Limit+1 events in the cursor's order (oldest
// first after an After cursor, else newest first), the one past Limit
// saying a next page exists. The page holds Limit at most, newest first,
// with the cursor to the next one. A Limit not above zero is the default.
func (p *EventListParams) Page(listed []*Event) *EventListResult {
	limit := p.Limit
	if limit <= 0 {
		limit = EventListLimitDefault
	}
	res := &EventListResult{Events: listed[:min(len(listed), limit)]}
	if len(listed) > limit {
		last := res.Events[limit-1].ID
		if p.After > 0 {
			res.NextAfter = last
		} else {
			res.NextBefore = last
		}
	}
	if p.After > 0 {
		slices.Reverse(res.Events) // listed oldest first; shown newest first
	}
	return res
}

// Validate requires a Source (UTF-8 text without NUL), a positive
// ReplayWindow and a Retention at least as long as it
// (ErrRetentionTooShort otherwise): SQLite's event row is its own dedupe
// key, so an event purged is a key forgotten. A zero window is refused,
// not read as "none": params built without it would purge done events at
// once, and the next redelivery would run the work again.
func (p *EventPurgeParams) Validate() error {
	if err := requiredText("source (retention is per source)", p.Source); err != nil {
		return err
	}
	switch {
	case p.ReplayWindow <= 0:
		return invalid("replay window must be positive, got %s: it is how long the provider may redeliver (DefaultReplayWindow is %s)", p.ReplayWindow, DefaultReplayWindow)
	case p.Retention < 0:
		return invalid("retention must not be negative")
	case p.Retention < p.ReplayWindow:
		return tooShort("purge of %s: retention %s, replay window %s", p.Source, p.Retention, p.ReplayWindow)
	}
	return nil
}

// Validate requires a Source of UTF-8 text without NUL, an EventID and a
// Type that ValidateEventID and ValidateEventType accept, headers without
// NUL, a known Origin, no negative ReplayWindow, and a trace context that
// ValidateTraceContext accepts. (HTTP carries no NUL in a header.)
func (p *EventReceiveParams) Validate() error {
	switch {
	case p.Source == "":
		return invalid("source is required")
	case !storable(p.Source):
		return invalid("source is not UTF-8 text without NUL")
	case p.ReplayWindow < 0:
		return invalid("replay window must not be negative, got %s (0 turns detection off)", p.ReplayWindow)
	}
	for name, values := range p.Headers {
		if strings.IndexByte(name, 0) >= 0 || slices.ContainsFunc(values, func(v string) bool { return strings.IndexByte(v, 0) >= 0 }) {
			return invalid("header %q holds a NUL", name)
		}
	}
	if err := ValidateEventID(p.EventID); err != nil {
		return err
	}
	if err := ValidateEventType(p.Type); err != nil {
		return err
	}
	if !p.Origin.OrDelivery().Valid() {
		return invalid("origin must be delivery or catchup")
	}
	return ValidateTraceContext(p.Traceparent, p.Tracestate)
}

// Trace context bounds. A W3C traceparent of version 00 is 55 characters;
// later versions may append fields, hence the room. W3C asks that at least
// 512 characters of tracestate be passed on; Ferry keeps no more.
const (
	TraceparentMaxLen = 128
	TracestateMaxLen  = 512
)

// ValidateTraceContext accepts a traceparent and a tracestate of at most
// TraceparentMaxLen and TracestateMaxLen printable ASCII characters (a
// header value, as W3C defines both), empty or not. A receiver whose span
// has a longer tracestate (from the program's sampler or middleware; never
// the sender's) stores the receipt without it rather than refuse the
// delivery.
func ValidateTraceContext(traceparent, tracestate string) error {
	switch {
	case len(traceparent) > TraceparentMaxLen:
		return invalid("traceparent is %d characters, at most %d", len(traceparent), TraceparentMaxLen)
	case len(tracestate) > TracestateMaxLen:
		return invalid("tracestate is %d characters, at most %d", len(tracestate), TracestateMaxLen)
	case !printable(traceparent):
		return invalid("traceparent holds a character that is not printable ASCII")
	case !printable(tracestate):
		return invalid("tracestate holds a character that is not printable ASCII")
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Validate requires a valid Lease.
func (p *EventReleaseParams) Validate() error { return p.Lease.Validate() }

// Normalize returns a copy of p that a store can run as it is: States
// defaulted (dead and unknown in bulk; done, dead and unknown by IDs) and
// stripped of pending and in_progress, which are never requeued; the
// filters (Source, Type, Since, Until, EventIDContains, Before) cleared
// when IDs name the events (Runnable stays: it narrows both), and a
// negative Before made 0. It refuses a missing Actor, an unknown state, an
// ID that is not positive, an Until before Since, and text (actor,
// filters, runnable sources) that is empty where it names something or is
// not UTF-8 without NUL.
// The copy's States may be empty: nothing to requeue.
func (p *EventRequeueParams) Normalize() (*EventRequeueParams, error) {
	if err := requiredText("actor (who asks for the requeue)", p.Actor); err != nil {
		return nil, err
	}
	if err := validFilter(p.Source, p.Type, p.EventIDContains, p.States, p.Since, p.Until); err != nil {
		return nil, err
	}
	for _, id := range p.IDs {
		if err := validID(id); err != nil {
			return nil, err
		}
	}
	for _, source := range p.Runnable {
		if err := requiredText("runnable source", source); err != nil {
			return nil, err
		}
	}
	out := *p
	states := p.States
	switch {
	case len(states) > 0:
	case len(p.IDs) > 0:
		states = []State{StateDone, StateDead, StateUnknown}
	default:
		states = []State{StateDead, StateUnknown}
	}
	out.States = nil
	for _, s := range states {
		if s.Terminal() && !slices.Contains(out.States, s) {
			out.States = append(out.States, s)
		}
	}
	if len(p.IDs) > 0 {
		// IDs name the events; the filters only narrow a bulk requeue.
		out.Source, out.Type, out.EventIDContains = "", "", ""
		out.Since, out.Until, out.Before = time.Time{}, time.Time{}, 0
	}
	out.Before = max(out.Before, 0)
	return &out, nil
}

// Validate requires a positive ID and an Actor.
func (p *EventRetryNowParams) Validate() error {
	if err := requiredText("actor (the action ledger names who retried)", p.Actor); err != nil {
		return err
	}
	return validID(p.ID)
}

// Validate requires at least one ID, each positive, and an Actor.
func (p *EventResolveParams) Validate() error {
	if err := requiredText("actor (the action ledger names who resolved)", p.Actor); err != nil {
		return err
	}
	if len(p.IDs) == 0 {
		return invalid("no event ids to resolve")
	}
	for _, id := range p.IDs {
		if err := validID(id); err != nil {
			return err
		}
	}
	return nil
}

// Action is what EventRequeue records for each event it requeues:
// ActionReplay when IDs name the events, ActionRequeue for a bulk requeue.
func (p *EventRequeueParams) Action() string {
	if len(p.IDs) > 0 {
		return ActionReplay
	}
	return ActionRequeue
}

// Normalize returns a copy of p with AtRiskLimit capped at
// EventListLimitMax. It refuses a negative age or limit, and a source
// in AtRiskAfter that is not UTF-8 text without NUL.
func (p *EventStatsParams) Normalize() (*EventStatsParams, error) {
	if p.AtRiskLimit < 0 {
		return nil, invalid("at-risk limit must not be negative, got %d", p.AtRiskLimit)
	}
	if p.DefaultAtRiskAfter < 0 {
		return nil, invalid("default at-risk age must not be negative, got %s", p.DefaultAtRiskAfter)
	}
	for source, d := range p.AtRiskAfter {
		if !storable(source) {
			return nil, invalid("at-risk age's source %q is not UTF-8 text without NUL", source)
		}
		if d < 0 {
			return nil, invalid("at-risk age of %s must not be negative, got %s", source, d)
		}
	}
	out := *p
	out.AtRiskLimit = min(out.AtRiskLimit, EventListLimitMax)
	return &out, nil
}

// AtRiskAge is the age from first delivery past which source's unfinished
// events are at risk: its AtRiskAfter, or DefaultAtRiskAfter when it is not
// listed. Zero: never.
func (p *EventStatsParams) AtRiskAge(source string) time.Duration {
	if d, ok := p.AtRiskAfter[source]; ok {
		return d
	}
	return p.DefaultAtRiskAfter
}

// AtRisk reports whether e is at risk at now, the store's clock
// (EventStats.Now), as EventStats counts it: unfinished, and first
// delivered at least its source's AtRiskAge ago.
func (p *EventStatsParams) AtRisk(e *Event, now time.Time) bool {
	age := p.AtRiskAge(e.Source)
	return age > 0 && e.State.Unfinished() && !e.FirstDeliveredAt.After(now.Add(-age))
}

// Archive maintenance defaults.
const (
	ArchiveAheadDefault    = 7 * 24 * time.Hour
	ArchiveKeyBatchDefault = 10000
)

// Normalize returns a copy of p with ReplayWindow, KeyRetention, Ahead and
// KeyBatch defaulted. It requires an Owner (UTF-8 text without NUL) and a
// positive Retention, and refuses a KeyRetention shorter than ReplayWindow
// (ErrRetentionTooShort): a key forgotten inside the window lets a
// redelivery run the work again.
// Retention alone may be shorter: both stores keep a key for KeyRetention
// whatever becomes of its event (PostgreSQL in ferry_event_key; SQLite
// keeps the event row, its key, that long).
func (p *ArchiveMaintainParams) Normalize() (*ArchiveMaintainParams, error) {
	if err := requiredText("owner", p.Owner); err != nil {
		return nil, err
	}
	switch {
	case p.Retention <= 0:
		return nil, invalid("retention must be positive, got %s", p.Retention)
	case p.ReplayWindow < 0 || p.KeyRetention < 0 || p.Ahead < 0 || p.KeyBatch < 0:
		return nil, invalid("replay window, key retention, ahead and key batch must not be negative")
	}
	out := *p
	if out.ReplayWindow == 0 {
		out.ReplayWindow = DefaultReplayWindow
	}
	if out.KeyRetention == 0 {
		out.KeyRetention = max(out.Retention, out.ReplayWindow)
	}
	if out.KeyRetention < out.ReplayWindow {
		return nil, tooShort("key retention %s, replay window %s", out.KeyRetention, out.ReplayWindow)
	}
	if out.Ahead == 0 {
		out.Ahead = ArchiveAheadDefault
	}
	if out.KeyBatch == 0 {
		out.KeyBatch = ArchiveKeyBatchDefault
	}
	return &out, nil
}
