package ferry

import (
	"fmt"
	"slices"
	"time"
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

// Validate checks that the lease can name a claim: a row id and an attempt,
// both positive (a claim's first attempt is 1).
func (l Lease) Validate() error {
	if l.ID <= 0 || l.Attempt <= 0 {
		return invalid("lease %d/%d: id and attempt must be positive", l.ID, l.Attempt)
	}
	return nil
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

// Validate requires an ID.
func (p *ReplayListParams) Validate() error { return validID(p.ID) }

// Validate requires an ID.
func (p *ConflictListParams) Validate() error { return validID(p.ID) }

// Validate requires an Owner and a positive Limit and TTL.
func (p *EventClaimManyParams) Validate() error {
	switch {
	case p.Owner == "":
		return invalid("owner is required")
	case p.Limit <= 0:
		return invalid("limit must be positive, got %d", p.Limit)
	case p.TTL <= 0:
		return invalid("ttl must be positive, got %s", p.TTL)
	}
	return nil
}

// Validate requires a valid Lease.
func (p *EventCompleteParams) Validate() error { return p.Lease.Validate() }

// Validate requires every lease to be valid. No leases is valid (a no-op).
func (p *EventCompleteManyParams) Validate() error {
	for _, l := range p.Leases {
		if err := l.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Validate requires a valid Lease and no negative delay, budget or age.
func (p *EventFailParams) Validate() error {
	switch {
	case p.RetryDelay < 0:
		return invalid("retry delay must not be negative, got %s", p.RetryDelay)
	case p.MaxAttempts < 0:
		return invalid("max attempts must not be negative, got %d", p.MaxAttempts)
	case p.MaxAge < 0:
		return invalid("max age must not be negative, got %s", p.MaxAge)
	}
	return p.Lease.Validate()
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

// Normalize returns a copy of p with Limit defaulted to
// EventListLimitDefault and capped at EventListLimitMax, and a negative
// Before made 0 (start at the newest). It refuses a negative Limit and an
// unknown state.
func (p *EventListParams) Normalize() (*EventListParams, error) {
	if p.Limit < 0 {
		return nil, invalid("limit must not be negative, got %d", p.Limit)
	}
	if err := validStates(p.States); err != nil {
		return nil, err
	}
	out := *p
	if out.Limit == 0 {
		out.Limit = EventListLimitDefault
	}
	out.Limit = min(out.Limit, EventListLimitMax)
	out.Before = max(out.Before, 0)
	return &out, nil
}

// Validate requires a Source and a Retention at least as long as the
// ReplayWindow (ErrRetentionTooShort otherwise).
func (p *EventPurgeParams) Validate() error {
	switch {
	case p.Source == "":
		return invalid("source is required: retention is per source")
	case p.Retention < 0 || p.ReplayWindow < 0:
		return invalid("retention and replay window must not be negative")
	case p.Retention < p.ReplayWindow:
		return fmt.Errorf("purge of %s: retention %s, replay window %s: %w",
			p.Source, p.Retention, p.ReplayWindow, ErrRetentionTooShort)
	}
	return nil
}

// Validate requires a Source and an EventID, and no negative ReplayWindow.
func (p *EventReceiveParams) Validate() error {
	switch {
	case p.Source == "" || p.EventID == "":
		return invalid("source and event id are required")
	case p.ReplayWindow < 0:
		return invalid("replay window must not be negative, got %s (0 turns detection off)", p.ReplayWindow)
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
	return nil
}

// Validate requires a valid Lease.
func (p *EventReleaseParams) Validate() error { return p.Lease.Validate() }

// Normalize returns a copy of p that a store can run as it is: States
// defaulted (dead and unknown in bulk; done, dead and unknown by IDs) and
// stripped of pending and in_progress, which are never requeued; Source
// cleared when IDs name the events. It refuses a missing Actor, an unknown
// state and an ID that is not positive. The copy's States may be empty:
// nothing to requeue.
func (p *EventRequeueParams) Normalize() (*EventRequeueParams, error) {
	if p.Actor == "" {
		return nil, invalid("actor is required: name who asks for the requeue")
	}
	if err := validStates(p.States); err != nil {
		return nil, err
	}
	for _, id := range p.IDs {
		if err := validID(id); err != nil {
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
		out.Source = "" // IDs name the events; Source only narrows a bulk requeue
	}
	return &out, nil
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
// EventListLimitMax. It refuses a negative age or limit.
func (p *EventStatsParams) Normalize() (*EventStatsParams, error) {
	if p.AtRiskLimit < 0 {
		return nil, invalid("at-risk limit must not be negative, got %d", p.AtRiskLimit)
	}
	if p.DefaultAtRiskAfter < 0 {
		return nil, invalid("default at-risk age must not be negative, got %s", p.DefaultAtRiskAfter)
	}
	for source, d := range p.AtRiskAfter {
		if d < 0 {
			return nil, invalid("at-risk age of %s must not be negative, got %s", source, d)
		}
	}
	out := *p
	out.AtRiskLimit = min(out.AtRiskLimit, EventListLimitMax)
	return &out, nil
}

func validStates(states []State) error {
	for _, s := range states {
		if !s.Valid() {
			return invalid("unknown state %q", s)
		}
	}
	return nil
}

// Archive maintenance defaults.
const (
	ArchiveAheadDefault    = 7 * 24 * time.Hour
	ArchiveKeyBatchDefault = 10000
)

// Normalize returns a copy of p with KeyRetention, Ahead and KeyBatch
// defaulted. It requires an Owner and a positive Retention.
func (p *ArchiveMaintainParams) Normalize() (*ArchiveMaintainParams, error) {
	switch {
	case p.Owner == "":
		return nil, invalid("owner is required")
	case p.Retention <= 0:
		return nil, invalid("retention must be positive, got %s", p.Retention)
	case p.KeyRetention < 0 || p.Ahead < 0 || p.KeyBatch < 0:
		return nil, invalid("key retention, ahead and key batch must not be negative")
	}
	out := *p
	if out.KeyRetention == 0 {
		out.KeyRetention = out.Retention
	}
	if out.Ahead == 0 {
		out.Ahead = ArchiveAheadDefault
	}
	if out.KeyBatch == 0 {
		out.KeyBatch = ArchiveKeyBatchDefault
	}
	return &out, nil
}
