package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// querier runs a statement on the pool or inside a caller's transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// EventClaimMany leases due events in one statement; see ferry.Store. Rows
// are locked FOR UPDATE SKIP LOCKED, which is what keeps two claimers off
// the same event without one waiting for the other.
func (s *Store) EventClaimMany(ctx context.Context, params *ferry.EventClaimManyParams) ([]*ferry.Claim, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event claim many", err)
	}
	rows, _ := s.pool.Query(ctx, eventClaimManySQL, pgx.NamedArgs{
		"now":          s.nowArg(),
		"owner":        params.Owner,
		"limit":        params.Limit,
		"ttl_us":       micros(params.TTL),
		"sources":      nonNil(params.Sources),
		"hold_sources": nonNil(params.HoldSources),
		"max_bytes":    params.MaxBytes,
	})
	claimed, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[claimRow])
	if err != nil {
		return nil, wrap("event claim many", err)
	}
	claims := make([]*ferry.Claim, len(claimed))
	for i, row := range claimed {
		event, err := row.event()
		if err != nil {
			return nil, wrap("event claim many", err)
		}
		claims[i] = &ferry.Claim{Event: event, PreviousUnfinished: row.PreviousUnfinished, Reclaimed: row.Reclaimed}
	}
	return claims, nil
}

// EventGet returns one event, payload and headers included.
func (s *Store) EventGet(ctx context.Context, params *ferry.EventGetParams) (*ferry.Event, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event get", err)
	}
	var rows pgx.Rows
	if params.ID != 0 {
		rows, _ = s.pool.Query(ctx, eventGetByIDSQL, pgx.NamedArgs{"id": params.ID})
	} else {
		rows, _ = s.pool.Query(ctx, eventGetByKeySQL, pgx.NamedArgs{"source": params.Source, "event_id": params.EventID})
	}
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[eventRow])
	if errors.Is(err, pgx.ErrNoRows) {
		err = ferry.ErrNotFound
	}
	if err != nil {
		return nil, wrap("event get", err)
	}
	event, err := row.event()
	return event, wrap("event get", err)
}

// EventList returns a page of events, newest first, without payloads or
// headers. EventIDContains is a literal, case-sensitive substring (LIKE with
// % and _ escaped, so they are not wildcards).
func (s *Store) EventList(ctx context.Context, params *ferry.EventListParams) (*ferry.EventListResult, error) {
	params, err := params.Normalize()
	if err != nil {
		return nil, wrap("event list", err)
	}
	rows, _ := s.pool.Query(ctx, eventListSQL, pgx.NamedArgs{
		"source":        params.Source,
		"type":          params.Type,
		"states":        stateStrings(params.States),
		"since":         timeArg(params.Since),
		"until":         timeArg(params.Until),
		"event_id_like": likeArg(params.EventIDContains),
		"lapsed":        params.LapsedAttempts,
		"before":        params.Before,
		"after":         params.After,
		"limit":         params.Limit + 1, // one more tells whether a next page exists
	})
	listed, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByNameLax[eventRow])
	if err != nil {
		return nil, wrap("event list", err)
	}
	events := make([]*ferry.Event, len(listed))
	for i, row := range listed {
		if events[i], err = row.event(); err != nil {
			return nil, wrap("event list", err)
		}
	}
	return params.Page(events), nil
}

// timeArg is NULL for the zero time, which the queries read as unbounded.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// likeArg is the LIKE pattern of a literal substring; "" matches all.
func likeArg(contains string) string {
	if contains == "" {
		return ""
	}
	return "%" + escapeLike(contains) + "%"
}

// EventRequeue puts done, dead or unknown events back to pending, due now,
// with a fresh attempt budget.
func (s *Store) EventRequeue(ctx context.Context, params *ferry.EventRequeueParams) (int, error) {
	params, err := params.Normalize()
	if err != nil {
		return 0, wrap("event requeue", err)
	}
	if len(params.States) == 0 {
		return 0, nil
	}
	args := pgx.NamedArgs{
		"now":           s.nowArg(),
		"states":        stateStrings(params.States),
		"ids":           nonNil(params.IDs),
		"runnable":      nonNil(params.Runnable),
		"source":        params.Source,
		"type":          params.Type,
		"since":         timeArg(params.Since),
		"until":         timeArg(params.Until),
		"event_id_like": likeArg(params.EventIDContains),
		"before":        params.Before,
		"action":        params.Action(),
		"actor":         params.Actor,
	}
	query := eventRequeueSQL
	if params.DryRun {
		// A dry run counts by the requeue's own rule and only reads: the
		// requeue rolled back would lock, rewrite and leave dead every row
		// it counts, for a confirmation page.
		query = eventRequeueCountSQL
	}
	var count int
	err = s.pool.QueryRow(ctx, query, args).Scan(&count)
	return count, wrap("event requeue", err)
}

// EventResolve closes dead or unknown events as done, archived with their
// ledger, and records who closed them, in one statement.
func (s *Store) EventResolve(ctx context.Context, params *ferry.EventResolveParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, wrap("event resolve", err)
	}
	var n int
	err := s.pool.QueryRow(ctx, eventResolveSQL, pgx.NamedArgs{
		"now": s.nowArg(), "ids": params.IDs, "action": ferry.ActionResolve, "actor": params.Actor,
	}).Scan(&n)
	return n, wrap("event resolve", err)
}

// EventRetryNow makes a pending event due now and records who asked.
func (s *Store) EventRetryNow(ctx context.Context, params *ferry.EventRetryNowParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, wrap("event retry now", err)
	}
	var id int64
	err := s.pool.QueryRow(ctx, eventRetryNowSQL, pgx.NamedArgs{
		"now": s.nowArg(), "id": params.ID, "action": ferry.ActionRetryNow, "actor": params.Actor,
	}).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, wrap("event retry now", err)
}

// EventPurge deletes done events of Source completed at least Retention
// ago, in one statement, with what hangs off them, then the source's keys
// older than both Retention and ReplayWindow whose event is gone. Partition
// maintenance (ArchiveMaintain) drops whole days; this serves shorter
// retentions.
func (s *Store) EventPurge(ctx context.Context, params *ferry.EventPurgeParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, wrap("event purge", err)
	}
	var n int
	err := s.pool.QueryRow(ctx, eventPurgeSQL, pgx.NamedArgs{
		"now":          s.nowArg(),
		"source":       params.Source,
		"retention_us": micros(params.Retention),
	}).Scan(&n)
	if err != nil {
		return 0, wrap("event purge", err)
	}
	// Keys after events, in statements of their own: one that deleted both
	// would lock the event before the key, and a redelivery locks the key
	// before the event.
	for {
		keys, err := s.purgeKeys(ctx, params.Source, max(params.Retention, params.ReplayWindow), ferry.ArchiveKeyBatchDefault)
		if err != nil {
			return n, wrap("event purge", err)
		}
		if keys < ferry.ArchiveKeyBatchDefault {
			return n, nil
		}
	}
}

// AttemptList returns the ledger of one event, oldest attempt first.
func (s *Store) AttemptList(ctx context.Context, params *ferry.AttemptListParams) ([]*ferry.Attempt, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("attempt list", err)
	}
	return listByEvent(ctx, s, "attempt list", attemptListSQL, params.ID, 0, func(row pgx.CollectableRow) (*ferry.Attempt, error) {
		var (
			a        ferry.Attempt
			finished *time.Time
			outcome  string
			errText  *string
			status   *int
			response *string
		)
		if err := row.Scan(&a.EventID, &a.Attempt, &a.Worker, &a.StartedAt, &finished, &outcome, &errText, &status, &response); err != nil {
			return nil, err
		}
		if status != nil {
			a.HTTPStatus = *status
		}
		a.Response = deref(response)
		a.StartedAt = a.StartedAt.UTC()
		a.FinishedAt = utc(finished)
		a.Outcome = ferry.Outcome(outcome)
		a.Error = deref(errText)
		return &a, nil
	})
}

// ConflictList returns the conflicting deliveries kept on one event,
// oldest first, up to Limit.
func (s *Store) ConflictList(ctx context.Context, params *ferry.ConflictListParams) ([]*ferry.Conflict, error) {
	if err := params.Normalize(); err != nil {
		return nil, wrap("conflict list", err)
	}
	return listByEvent(ctx, s, "conflict list", conflictListSQL, params.ID, params.Limit, func(row pgx.CollectableRow) (*ferry.Conflict, error) {
		var (
			c       ferry.Conflict
			headers []byte
		)
		if err := row.Scan(&c.EventID, &c.ReceivedAt, &c.PayloadSHA256, &c.Payload, &headers); err != nil {
			return nil, err
		}
		c.ReceivedAt = c.ReceivedAt.UTC()
		var err error
		c.Headers, err = decodeHeaders(headers)
		return &c, err
	})
}

// ReplayList returns the replays kept on one event, oldest first, up to
// Limit.
func (s *Store) ReplayList(ctx context.Context, params *ferry.ReplayListParams) ([]*ferry.Replay, error) {
	if err := params.Normalize(); err != nil {
		return nil, wrap("replay list", err)
	}
	return listByEvent(ctx, s, "replay list", replayListSQL, params.ID, params.Limit, func(row pgx.CollectableRow) (*ferry.Replay, error) {
		var (
			r       ferry.Replay
			headers []byte
		)
		if err := row.Scan(&r.EventID, &r.ReceivedAt, &r.ClaimedEventID, &r.ClaimedType, &headers); err != nil {
			return nil, err
		}
		r.ReceivedAt = r.ReceivedAt.UTC()
		var err error
		r.Headers, err = decodeHeaders(headers)
		return &r, err
	})
}

// ActionList returns the operator actions on one event, oldest first.
func (s *Store) ActionList(ctx context.Context, params *ferry.ActionListParams) ([]*ferry.Action, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("action list", err)
	}
	return listByEvent(ctx, s, "action list", actionListSQL, params.ID, 0, func(row pgx.CollectableRow) (*ferry.Action, error) {
		var a ferry.Action
		if err := row.Scan(&a.EventID, &a.At, &a.Action, &a.Actor); err != nil {
			return nil, err
		}
		a.At = a.At.UTC()
		return &a, nil
	})
}

// eventRow is one ferry_event row as the queries return it.
type eventRow struct {
	ID               int64      `db:"id"`
	Source           string     `db:"source"`
	EventID          string     `db:"event_id"`
	Type             string     `db:"type"`
	Payload          []byte     `db:"payload"`
	Headers          []byte     `db:"headers"`
	PayloadSHA256    []byte     `db:"payload_sha256"`
	State            string     `db:"state"`
	Attempt          int        `db:"attempt"`
	AttemptBase      int        `db:"attempt_base"`
	LeaseOwner       *string    `db:"lease_owner"`
	LeaseExpiresAt   *time.Time `db:"lease_expires_at"`
	NextAttemptAt    time.Time  `db:"next_attempt_at"`
	FirstDeliveredAt time.Time  `db:"first_delivered_at"`
	LastDeliveredAt  time.Time  `db:"last_delivered_at"`
	Deliveries       int        `db:"deliveries"`
	Conflicts        int        `db:"conflicts"`
	ClaimedAt        *time.Time `db:"claimed_at"`
	CompletedAt      *time.Time `db:"completed_at"`
	LastError        *string    `db:"last_error"`
	RequeuedAt       *time.Time `db:"requeued_at"`
	Replays          int        `db:"replays"`
	Traceparent      *string    `db:"traceparent"`
	Tracestate       *string    `db:"tracestate"`
	Origin           string     `db:"origin"`
}

// claimRow is a claimed event with what the claim learned about the attempt
// before it.
type claimRow struct {
	eventRow
	PreviousUnfinished bool      `db:"previous_unfinished"`
	Reclaimed          bool      `db:"reclaimed"`
	DueAt              time.Time `db:"due_at"` // orders the claims; not returned
}

func (r *eventRow) event() (*ferry.Event, error) {
	headers, err := decodeHeaders(r.Headers)
	if err != nil {
		return nil, err
	}
	return &ferry.Event{
		ID:               r.ID,
		Source:           r.Source,
		EventID:          r.EventID,
		Type:             r.Type,
		Payload:          r.Payload,
		Headers:          headers,
		PayloadSHA256:    r.PayloadSHA256,
		State:            ferry.State(r.State),
		Attempt:          r.Attempt,
		AttemptBase:      r.AttemptBase,
		LeaseOwner:       deref(r.LeaseOwner),
		LeaseExpiresAt:   utc(r.LeaseExpiresAt),
		NextAttemptAt:    r.NextAttemptAt.UTC(),
		FirstDeliveredAt: r.FirstDeliveredAt.UTC(),
		LastDeliveredAt:  r.LastDeliveredAt.UTC(),
		Deliveries:       r.Deliveries,
		Conflicts:        r.Conflicts,
		Replays:          r.Replays,
		ClaimedAt:        utc(r.ClaimedAt),
		CompletedAt:      utc(r.CompletedAt),
		LastError:        deref(r.LastError),
		RequeuedAt:       utc(r.RequeuedAt),
		Origin:           ferry.Origin(r.Origin),
		Traceparent:      deref(r.Traceparent),
		Tracestate:       deref(r.Tracestate),
	}, nil
}

// encodeHeaders stores no headers as NULL, so they come back nil.
func encodeHeaders(h http.Header) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	return json.Marshal(h)
}

func decodeHeaders(raw []byte) (http.Header, error) {
	if raw == nil {
		return nil, nil
	}
	var h http.Header
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("decode headers: %w", err)
	}
	return h, nil
}

// escapeLike makes s match literally inside a LIKE pattern whose escape
// character is PostgreSQL's default, the backslash.
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

func stateStrings(states []ferry.State) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

// nonNil sends an empty array rather than NULL, which cardinality() and ANY
// would treat as unknown.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func utc(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Ping checks that the database answers and that a session of the pool
// can write: not a standby, not read-only by default (ferry.ErrReadOnly,
// after which a pool Open made is reset, so that new sessions find the
// primary or the setting fixed); that it runs read committed by default,
// which Open sets but a pool passed to New may not; and that its role may
// do what Ferry's statements do to its tables, id sequence and functions
// (ferry.ErrMisconfigured, naming what it lacks and the GRANTs), in a
// schema its search_path names (ferry.ErrMisconfigured otherwise).
func (s *Store) Ping(ctx context.Context) error {
	var standby, readOnly, noSchema bool
	var isolation, lacking, grants, role, searchPath string
	if err := s.pool.QueryRow(ctx, pingSQL).Scan(&standby, &readOnly, &isolation, &lacking, &grants, &role, &noSchema, &searchPath); err != nil {
		return wrap("ping", err)
	}
	if (standby || readOnly) && s.ownsPool {
		// A session keeps the server it reached and the settings it began
		// with: once the address leads to the primary again, or the setting
		// is reset, only new sessions see it. Without this an instance
		// would answer 503 until it restarts.
		s.pool.Reset()
	}
	switch {
	case standby:
		return wrap("ping", fmt.Errorf("%w: the server is a standby (in recovery)", ferry.ErrReadOnly))
	case readOnly:
		return wrap("ping", fmt.Errorf("%w: transactions are read-only (default_transaction_read_only)", ferry.ErrReadOnly))
	case noSchema:
		return wrap("ping", errNoSchema(searchPath))
	case lacking != "":
		return wrap("ping", fmt.Errorf("%w: the role %s lacks %s, which Ferry's statements use: run ferry as the role that owns its tables (workers must: they maintain the archive's partitions, which only the owner may), or, for receivers, %s",
			ferry.ErrMisconfigured, role, lacking, grants))
	}
	return wrap("ping", isolationRefused(isolation,
		"ALTER ROLE ... SET default_transaction_isolation = 'read committed' (or the database's), drop it from the URL (postgres.Open then sets it), or set it in the pool's AfterConnect"))
}

// listByEvent reads the rows query selects for one event's id (its ledger
// and the side tables shown with it), each through scan. limit binds
// @limit, for the side tables a list reads a page of (conflicts, replays).
func listByEvent[T any](ctx context.Context, s *Store, what, query string, id int64, limit int, scan func(pgx.CollectableRow) (*T, error)) ([]*T, error) {
	rows, _ := s.pool.Query(ctx, query, pgx.NamedArgs{"id": id, "limit": limit})
	list, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, wrap(what, err)
	}
	return list, nil
}
