package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry"
)

// EventReceive stores a delivery in a write transaction, shared with the
// deliveries that arrive while the one before is being written (group
// commit; see receive_batch.go). Writes are serialized, so concurrent
// deliveries of one key make exactly one row: the first is new, the rest are
// duplicates (or conflicts) and are counted.
func (s *Store) EventReceive(ctx context.Context, params *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error) {
	if params.Source == "" || params.EventID == "" {
		return nil, fmt.Errorf("sqlite: receive: %w: source and event id are required", ferry.ErrInvalidParams)
	}
	origin := params.Origin.OrDelivery()
	if !origin.Valid() {
		return nil, fmt.Errorf("sqlite: receive: %w: origin %q", ferry.ErrInvalidParams, params.Origin)
	}
	sum := sha256.Sum256(params.Payload)
	headers, err := marshalHeaders(params.Headers)
	if err != nil {
		return nil, fmt.Errorf("sqlite: receive: %w", err)
	}
	payload := params.Payload
	if payload == nil {
		payload = []byte{} // the column is NOT NULL; nil would bind as NULL
	}
	args := []any{
		sql.Named("source", params.Source),
		sql.Named("event_id", params.EventID),
		sql.Named("type", params.Type),
		sql.Named("payload", payload),
		sql.Named("headers", headers),
		sql.Named("payload_sha256", sum[:]),
		sql.Named("now", s.nowMicros()),
		sql.Named("origin", string(origin)),
	}

	return s.receipts.Do(ctx, args)
}

// EventClaimMany leases due events in one write transaction; see
// ferry.Store. Write transactions are serialized, which is what keeps two
// claimers off the same event.
func (s *Store) EventClaimMany(ctx context.Context, params *ferry.EventClaimManyParams) ([]*ferry.Claim, error) {
	if params.Owner == "" || params.Limit <= 0 || params.TTL <= 0 {
		return nil, fmt.Errorf("sqlite: claim: %w: owner, a positive limit and a positive ttl are required", ferry.ErrInvalidParams)
	}
	var claims []*ferry.Claim
	err := s.writeTx(ctx, "claim", func(tx *sql.Tx) error {
		now := s.nowMicros() // read under the write lock, not before waiting for it
		if len(params.HoldSources) > 0 {
			hold := []any{sql.Named("now", now), sql.Named("hold_sources", jsonArray(params.HoldSources))}
			if _, err := tx.ExecContext(ctx, eventClaimHoldAttemptSQL, hold...); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, eventClaimHoldSQL, hold...); err != nil {
				return err
			}
		}

		ids, err := queryInt64s(ctx, tx, eventClaimDueSQL,
			sql.Named("now", now),
			sql.Named("sources", jsonArray(params.Sources)),
			sql.Named("limit", params.Limit),
		)
		if err != nil || len(ids) == 0 {
			return err
		}
		idsJSON := jsonArray(ids)

		unfinished, err := queryInt64s(ctx, tx, eventClaimClosePreviousSQL,
			sql.Named("now", now), sql.Named("ids", idsJSON))
		if err != nil {
			return err
		}

		rows, err := tx.QueryContext(ctx, eventClaimSQL,
			sql.Named("now", now),
			sql.Named("ids", idsJSON),
			sql.Named("owner", params.Owner),
			sql.Named("lease_expires_at", now+params.TTL.Microseconds()),
		)
		if err != nil {
			return err
		}
		byID, err := scanEvents(rows)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, attemptStartSQL,
			sql.Named("now", now), sql.Named("ids", idsJSON), sql.Named("owner", params.Owner)); err != nil {
			return err
		}

		wasUnfinished := make(map[int64]bool, len(unfinished))
		for _, id := range unfinished {
			wasUnfinished[id] = true
		}
		events := make(map[int64]*ferry.Event, len(byID))
		for _, e := range byID {
			events[e.ID] = e
		}
		claims = make([]*ferry.Claim, 0, len(ids))
		for _, id := range ids { // RETURNING has no order; keep the due order
			claims = append(claims, &ferry.Claim{Event: events[id], PreviousUnfinished: wasUnfinished[id]})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return claims, nil
}

// EventHeartbeat extends a held lease to TTL from now.
func (s *Store) EventHeartbeat(ctx context.Context, params *ferry.EventHeartbeatParams) (time.Time, error) {
	if params.TTL <= 0 {
		return time.Time{}, fmt.Errorf("sqlite: heartbeat: %w: ttl must be positive", ferry.ErrInvalidParams)
	}
	var expires time.Time
	err := s.writeTx(ctx, "heartbeat", func(tx *sql.Tx) error {
		now := s.nowTime()
		expires = now.Add(params.TTL).Truncate(time.Microsecond)
		return execFenced(ctx, tx, eventHeartbeatSQL, params.Lease, now,
			sql.Named("lease_expires_at", expires.UnixMicro()))
	})
	if err != nil {
		return time.Time{}, err
	}
	return expires, nil
}

// EventComplete marks the leased event done.
func (s *Store) EventComplete(ctx context.Context, params *ferry.EventCompleteParams) error {
	return s.writeTx(ctx, "complete", func(tx *sql.Tx) error {
		return s.complete(ctx, tx, params.Lease)
	})
}

// EventCompleteTx marks the leased event done inside tx, which must come
// from InTx or DB (a write transaction). On ErrLeaseLost nothing was
// changed and the caller must roll tx back.
func (s *Store) EventCompleteTx(ctx context.Context, tx *sql.Tx, params *ferry.EventCompleteParams) error {
	err := s.complete(ctx, tx, params.Lease)
	if err != nil && !errors.Is(err, ferry.ErrLeaseLost) {
		return fmt.Errorf("sqlite: complete: %w", err)
	}
	return err
}

func (s *Store) complete(ctx context.Context, tx *sql.Tx, lease ferry.Lease) error {
	now := s.nowTime()
	if err := execFenced(ctx, tx, eventCompleteSQL, lease, now); err != nil {
		return err
	}
	return finishAttempt(ctx, tx, lease, now, ferry.OutcomeDone, "")
}

// EventFail ends the attempt as failed and returns the state the event went
// to: dead when Dead is set, MaxAttempts since the last requeue are spent,
// or the event is MaxAge old (from its first delivery or last requeue);
// pending and due in RetryDelay otherwise.
func (s *Store) EventFail(ctx context.Context, params *ferry.EventFailParams) (ferry.State, error) {
	var state ferry.State
	err := s.writeTx(ctx, "fail", func(tx *sql.Tx) error {
		now := s.nowTime()
		var attempt, attemptBase int
		var firstDelivered, requeued sql.NullInt64
		err := tx.QueryRowContext(ctx, eventFenceSQL, fenceArgs(params.Lease, now)...).
			Scan(&attempt, &attemptBase, &firstDelivered, &requeued)
		if errors.Is(err, sql.ErrNoRows) {
			return ferry.ErrLeaseLost
		}
		if err != nil {
			return err
		}

		age := now.Sub(fromMicros(firstDelivered))
		if requeued.Valid && requeued.Int64 > firstDelivered.Int64 {
			age = now.Sub(fromMicros(requeued))
		}
		state = ferry.StatePending
		outcome := ferry.OutcomeFailed
		if params.Dead ||
			(params.MaxAttempts > 0 && attempt-attemptBase >= params.MaxAttempts) ||
			(params.MaxAge > 0 && age >= params.MaxAge) {
			state, outcome = ferry.StateDead, ferry.OutcomeDead
		}

		if err := execFenced(ctx, tx, eventFailSQL, params.Lease, now,
			sql.Named("state", string(state)),
			sql.Named("next_attempt_at", now.Add(params.RetryDelay).UnixMicro()),
			sql.Named("error", params.Error),
		); err != nil {
			return err
		}
		return finishAttempt(ctx, tx, params.Lease, now, outcome, params.Error)
	})
	if err != nil {
		return "", err
	}
	if state == ferry.StatePending {
		s.broadcast()
	}
	return state, nil
}

// EventRelease gives a leased event back, pending and due now.
func (s *Store) EventRelease(ctx context.Context, params *ferry.EventReleaseParams) error {
	err := s.writeTx(ctx, "release", func(tx *sql.Tx) error {
		now := s.nowTime()
		if err := execFenced(ctx, tx, eventReleaseSQL, params.Lease, now); err != nil {
			return err
		}
		return finishAttempt(ctx, tx, params.Lease, now, ferry.OutcomeReleased, "")
	})
	if err != nil {
		return err
	}
	s.broadcast()
	return nil
}

// fenceArgs are the parameters of the lease fence every write after a claim
// carries: this row, this attempt, still in_progress, lease not expired.
func fenceArgs(lease ferry.Lease, now time.Time) []any {
	return []any{
		sql.Named("id", lease.ID),
		sql.Named("attempt", lease.Attempt),
		sql.Named("now", now.UnixMicro()),
	}
}

// execFenced runs a fenced update and returns ferry.ErrLeaseLost if the fence
// matched no row.
func execFenced(ctx context.Context, tx *sql.Tx, query string, lease ferry.Lease, now time.Time, args ...any) error {
	res, err := tx.ExecContext(ctx, query, append(fenceArgs(lease, now), args...)...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ferry.ErrLeaseLost
	}
	return nil
}

// finishAttempt closes the ledger row of the lease's attempt.
func finishAttempt(ctx context.Context, tx *sql.Tx, lease ferry.Lease, now time.Time, outcome ferry.Outcome, errText string) error {
	var errArg any // NULL unless the attempt failed
	if errText != "" {
		errArg = errText
	}
	_, err := tx.ExecContext(ctx, attemptFinishSQL, append(fenceArgs(lease, now),
		sql.Named("outcome", string(outcome)),
		sql.Named("error", errArg),
	)...)
	return err
}

// EventGet returns one event, payload and headers included.
func (s *Store) EventGet(ctx context.Context, params *ferry.EventGetParams) (*ferry.Event, error) {
	var row *sql.Row
	if params.ID != 0 {
		row = s.readDB.QueryRowContext(ctx, eventGetByIdSQL, sql.Named("id", params.ID))
	} else {
		row = s.readDB.QueryRowContext(ctx, eventGetByKeySQL,
			sql.Named("source", params.Source), sql.Named("event_id", params.EventID))
	}
	event, err := scanEvent(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ferry.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get: %w", err)
	}
	return event, nil
}

// List page sizes.
const (
	listLimitDefault = 50
	listLimitMax     = 1000
)

// EventList returns a page of events, newest first, without payloads or
// headers. Limit defaults to 50 and is clamped to 1000. EventIDContains is
// a literal, case-sensitive substring (instr, so % and _ are not wildcards).
func (s *Store) EventList(ctx context.Context, params *ferry.EventListParams) (*ferry.EventListResult, error) {
	limit := params.Limit
	if limit <= 0 {
		limit = listLimitDefault
	}
	limit = min(limit, listLimitMax)

	// Only the filters in use go into the WHERE clause, so SQLite can pick
	// the (source, id) or (state, id) index.
	var where []string
	var args []any
	if params.Source != "" {
		where = append(where, "source = :source")
		args = append(args, sql.Named("source", params.Source))
	}
	if len(params.States) > 0 {
		states := make([]string, len(params.States))
		for i, st := range params.States {
			states[i] = string(st)
		}
		where = append(where, "state IN (SELECT value FROM json_each(:states))")
		args = append(args, sql.Named("states", jsonArray(states)))
	}
	if !params.Since.IsZero() {
		where = append(where, "first_delivered_at >= :since")
		args = append(args, sql.Named("since", params.Since.UnixMicro()))
	}
	if params.EventIDContains != "" {
		where = append(where, "instr(event_id, :contains) > 0")
		args = append(args, sql.Named("contains", params.EventIDContains))
	}
	if params.Before > 0 {
		where = append(where, "id < :before")
		args = append(args, sql.Named("before", params.Before))
	}
	query := eventListSQL
	if len(where) > 0 {
		query += "WHERE " + strings.Join(where, "\n  AND ") + "\n"
	}
	query += "ORDER BY id DESC\nLIMIT :limit"
	args = append(args, sql.Named("limit", limit+1)) // one more tells if a next page exists

	rows, err := s.readDB.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	events, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	result := &ferry.EventListResult{Events: events}
	if len(events) > limit {
		result.Events = events[:limit]
		result.NextBefore = events[limit-1].ID
	}
	return result, nil
}

// EventRequeue puts done, dead or unknown events back to pending, due now,
// with a fresh attempt budget. States defaults to dead and unknown in bulk,
// and to done, dead and unknown by IDs; pending and in_progress are never
// requeued, even when named.
func (s *Store) EventRequeue(ctx context.Context, params *ferry.EventRequeueParams) (int, error) {
	states := params.States
	if len(states) == 0 {
		states = []ferry.State{ferry.StateDead, ferry.StateUnknown}
		if len(params.IDs) > 0 {
			states = []ferry.State{ferry.StateDone, ferry.StateDead, ferry.StateUnknown}
		}
	}
	var requeuable []string
	for _, st := range states {
		if !st.Valid() {
			return 0, fmt.Errorf("sqlite: requeue: %w: unknown state %q", ferry.ErrInvalidParams, st)
		}
		if st.Terminal() {
			requeuable = append(requeuable, string(st))
		}
	}
	if len(requeuable) == 0 {
		return 0, nil
	}

	query := eventRequeueBulkSQL
	args := []any{
		sql.Named("now", s.nowMicros()),
		sql.Named("states", jsonArray(requeuable)),
		sql.Named("source", params.Source),
	}
	if len(params.IDs) > 0 {
		query = eventRequeueIdsSQL
		args = append(args, sql.Named("ids", jsonArray(params.IDs)))
	}
	var n int64
	err := s.writeTx(ctx, "requeue", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		s.broadcast()
	}
	return int(n), nil
}

// EventPurge deletes done events of Source completed at least Retention ago;
// their ledger and conflicts go with them (ON DELETE CASCADE).
func (s *Store) EventPurge(ctx context.Context, params *ferry.EventPurgeParams) (int, error) {
	if params.Source == "" {
		return 0, fmt.Errorf("sqlite: purge: %w: source is required", ferry.ErrInvalidParams)
	}
	if params.Retention < params.ReplayWindow {
		return 0, fmt.Errorf("sqlite: purge %q: retention %s, replay window %s: %w",
			params.Source, params.Retention, params.ReplayWindow, ferry.ErrRetentionTooShort)
	}
	cutoff := s.nowTime().Add(-params.Retention)
	var n int64
	err := s.writeTx(ctx, "purge", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, eventPurgeSQL,
			sql.Named("source", params.Source), sql.Named("cutoff", cutoff.UnixMicro()))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// AttemptList returns the ledger of one event, oldest attempt first.
func (s *Store) AttemptList(ctx context.Context, params *ferry.AttemptListParams) ([]*ferry.Attempt, error) {
	rows, err := s.readDB.QueryContext(ctx, attemptListSQL, sql.Named("id", params.ID))
	if err != nil {
		return nil, fmt.Errorf("sqlite: attempt list: %w", err)
	}
	defer rows.Close()
	var attempts []*ferry.Attempt
	for rows.Next() {
		var (
			a                 ferry.Attempt
			started, finished sql.NullInt64
			outcome           string
			errText           sql.NullString
		)
		if err := rows.Scan(&a.EventID, &a.Attempt, &a.Worker, &started, &finished, &outcome, &errText); err != nil {
			return nil, fmt.Errorf("sqlite: attempt list: %w", err)
		}
		a.StartedAt, a.FinishedAt = fromMicros(started), fromMicros(finished)
		a.Outcome, a.Error = ferry.Outcome(outcome), errText.String
		attempts = append(attempts, &a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: attempt list: %w", err)
	}
	return attempts, nil
}

// ConflictList returns the conflicting deliveries of one event, oldest first.
func (s *Store) ConflictList(ctx context.Context, params *ferry.ConflictListParams) ([]*ferry.Conflict, error) {
	rows, err := s.readDB.QueryContext(ctx, conflictListSQL, sql.Named("id", params.ID))
	if err != nil {
		return nil, fmt.Errorf("sqlite: conflict list: %w", err)
	}
	defer rows.Close()
	var conflicts []*ferry.Conflict
	for rows.Next() {
		var (
			c        ferry.Conflict
			received sql.NullInt64
			headers  string
		)
		if err := rows.Scan(&c.EventID, &received, &c.PayloadSHA256, &c.Payload, &headers); err != nil {
			return nil, fmt.Errorf("sqlite: conflict list: %w", err)
		}
		c.ReceivedAt = fromMicros(received)
		if c.Headers, err = unmarshalHeaders(headers); err != nil {
			return nil, fmt.Errorf("sqlite: conflict list: %w", err)
		}
		conflicts = append(conflicts, &c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: conflict list: %w", err)
	}
	return conflicts, nil
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// scanEvent reads the event columns in the order the query/*.sql files
// select them.
func scanEvent(row scanner) (*ferry.Event, error) {
	var (
		e                                      ferry.Event
		state, origin                          string
		headers, leaseOwner, lastError         sql.NullString
		leaseExpires, nextAttempt, first, last sql.NullInt64
		claimed, completed, requeued           sql.NullInt64
	)
	err := row.Scan(&e.ID, &e.Source, &e.EventID, &e.Type, &e.Payload, &headers, &e.PayloadSHA256,
		&state, &e.Attempt, &leaseOwner, &leaseExpires, &nextAttempt, &first, &last,
		&e.Deliveries, &e.Conflicts, &claimed, &completed, &lastError, &requeued, &origin)
	if err != nil {
		return nil, err
	}
	e.State, e.Origin = ferry.State(state), ferry.Origin(origin)
	e.LeaseOwner, e.LastError = leaseOwner.String, lastError.String
	e.LeaseExpiresAt, e.NextAttemptAt = fromMicros(leaseExpires), fromMicros(nextAttempt)
	e.FirstDeliveredAt, e.LastDeliveredAt = fromMicros(first), fromMicros(last)
	e.ClaimedAt, e.CompletedAt, e.RequeuedAt = fromMicros(claimed), fromMicros(completed), fromMicros(requeued)
	if headers.Valid {
		if e.Headers, err = unmarshalHeaders(headers.String); err != nil {
			return nil, err
		}
	}
	return &e, nil
}

// scanEvents reads and closes rows of events.
func scanEvents(rows *sql.Rows) ([]*ferry.Event, error) {
	defer rows.Close()
	var events []*ferry.Event
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, rows.Err()
}

// queryInt64s runs a query whose rows are one integer each.
func queryInt64s(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// jsonArray encodes a list for json_each; nil becomes [] rather than null.
func jsonArray[T any](values []T) string {
	if len(values) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(values) // strings and integers cannot fail
	return string(b)
}

// marshalHeaders stores headers as JSON; no headers is "{}".
func marshalHeaders(h http.Header) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	return string(b), err
}

// unmarshalHeaders reads stored headers; "{}" is nil, as it was received.
func unmarshalHeaders(s string) (http.Header, error) {
	var h http.Header
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	if len(h) == 0 {
		return nil, nil
	}
	return h, nil
}
