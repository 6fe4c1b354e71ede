package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/sqlfile"
)

// EventClaimMany leases due events in one write transaction; see
// ferry.Store. Write transactions are serialized, which is what keeps two
// claimers off the same event.
func (s *Store) EventClaimMany(ctx context.Context, params *ferry.EventClaimManyParams) ([]*ferry.Claim, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event claim many", err)
	}
	var claims []*ferry.Claim
	err := s.writeTx(ctx, "event claim many", func(tx *sql.Tx) error {
		now := s.nowMicros() // read under the write lock, not before waiting for it
		if len(params.HoldSources) > 0 {
			hold := []any{sql.Named("now", now), sql.Named("hold_sources", jsonArray(params.HoldSources))}
			if _, err := tx.ExecContext(ctx, eventClaimManyHoldAttemptSQL, hold...); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, eventClaimManyHoldSQL, hold...); err != nil {
				return err
			}
		}

		ids, err := collectRows(ctx, tx, eventClaimManyDueSQL, scanValue[int64],
			sql.Named("now", now),
			sql.Named("sources", jsonArray(params.Sources)),
			sql.Named("limit", params.Limit),
			sql.Named("max_bytes", params.MaxBytes),
		)
		if err != nil || len(ids) == 0 {
			return err
		}
		idsJSON := jsonArray(ids)

		unfinished, err := collectRows(ctx, tx, eventClaimManyPreviousSQL, scanValue[int64], sql.Named("ids", idsJSON))
		if err != nil {
			return err
		}
		reclaimed, err := collectRows(ctx, tx, eventClaimManyClosePreviousSQL, scanValue[int64],
			sql.Named("now", now), sql.Named("ids", idsJSON))
		if err != nil {
			return err
		}

		byID, err := collectRows(ctx, tx, eventClaimManySQL, scanEvent,
			sql.Named("now", now),
			sql.Named("ids", idsJSON),
			sql.Named("owner", params.Owner),
			sql.Named("lease_expires_at", now+params.TTL.Microseconds()),
		)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, eventClaimManyAttemptSQL,
			sql.Named("now", now), sql.Named("ids", idsJSON), sql.Named("owner", params.Owner)); err != nil {
			return err
		}

		wasUnfinished, wasReclaimed := idSet(unfinished), idSet(reclaimed)
		events := make(map[int64]*ferry.Event, len(byID))
		for _, e := range byID {
			events[e.ID] = e
		}
		claims = make([]*ferry.Claim, 0, len(ids))
		for _, id := range ids { // RETURNING has no order; keep the due order
			claims = append(claims, &ferry.Claim{Event: events[id], PreviousUnfinished: wasUnfinished[id], Reclaimed: wasReclaimed[id]})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return claims, nil
}

// idSet tells which of a claim's events a query returned.
func idSet(ids []int64) map[int64]bool {
	set := make(map[int64]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// EventGet returns one event, payload and headers included.
func (s *Store) EventGet(ctx context.Context, params *ferry.EventGetParams) (*ferry.Event, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event get", err)
	}
	var row *sql.Row
	if params.ID != 0 {
		row = s.readDB.QueryRowContext(ctx, eventGetByIDSQL, sql.Named("id", params.ID))
	} else {
		row = s.readDB.QueryRowContext(ctx, eventGetByKeySQL,
			sql.Named("source", params.Source), sql.Named("event_id", params.EventID))
	}
	event, err := scanEvent(row)
	if errors.Is(err, sql.ErrNoRows) {
		err = ferry.ErrNotFound
	}
	if err != nil {
		return nil, wrap("event get", err)
	}
	return event, nil
}

// EventList returns a page of events, newest first, without payloads or
// headers. EventIDContains is
// a literal, case-sensitive substring (instr, so % and _ are not wildcards).
func (s *Store) EventList(ctx context.Context, params *ferry.EventListParams) (*ferry.EventListResult, error) {
	params, err := params.Normalize()
	if err != nil {
		return nil, wrap("event list", err)
	}
	query, args := eventListQuery(params)
	events, err := collectRows(ctx, s.readDB, query, scanEvent, args...)
	if err != nil {
		return nil, wrap("event list", err)
	}
	return params.Page(events), nil
}

// eventListQuery is EventList's statement for normalized params, and its
// arguments.
func eventListQuery(params *ferry.EventListParams) (string, []any) {
	where, args := eventFilter(params.Source, params.Type, params.States, params.Since, params.Until, params.EventIDContains, params.Before)
	if params.LapsedAttempts {
		// The ids come from the ledger's partial index of lapsed attempts,
		// few, and each is looked up by rowid, in id order: never a read of
		// the events until a page matches.
		where = append(where, "id IN (SELECT a.event_id FROM ferry_attempt a WHERE a.outcome = 'lease_expired')")
	}
	order := "DESC"
	if params.After > 0 { // a newer page: the lowest ids above the cursor
		where = append(where, "id > :after")
		args = append(args, sql.Named("after", params.After))
		order = "ASC"
	}
	query := eventListSQL
	if len(where) > 0 {
		query += "WHERE " + strings.Join(where, "\n  AND ") + "\n"
	}
	query += "ORDER BY id " + order + "\nLIMIT :limit"
	args = append(args, sql.Named("limit", params.Limit+1)) // one more tells if a next page exists
	return query, args
}

// eventFilter is the condition EventList and a bulk EventRequeue select
// events by (PostgreSQL's ferry_event_filter, with the states), and its
// arguments: only the filters in use go into it, so SQLite can pick the
// (source, id) or (state, id) index. Empty values match all.
func eventFilter(source, typ string, states []ferry.State, since, until time.Time, contains string, before int64) (where []string, args []any) {
	if source != "" {
		where = append(where, "source = :source")
		args = append(args, sql.Named("source", source))
	}
	if typ != "" {
		where = append(where, "type = :type")
		args = append(args, sql.Named("type", typ))
	}
	if len(states) > 0 {
		where = append(where, "state IN (SELECT value FROM json_each(:states))")
		args = append(args, sql.Named("states", jsonArray(states)))
	}
	if !since.IsZero() {
		where = append(where, "first_delivered_at >= :since")
		args = append(args, sql.Named("since", since.UnixMicro()))
	}
	if !until.IsZero() {
		where = append(where, "first_delivered_at < :until")
		args = append(args, sql.Named("until", until.UnixMicro()))
	}
	if contains != "" {
		where = append(where, "instr(event_id, :contains) > 0")
		args = append(args, sql.Named("contains", contains))
	}
	if before > 0 {
		where = append(where, "id < :before")
		args = append(args, sql.Named("before", before))
	}
	return where, args
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
	// The rule (event_requeue_match.sql, with EventList's filter), the
	// same for the requeue and its dry run's count. Normalize cleared the
	// filters where IDs name the events.
	where, match := eventFilter(params.Source, params.Type, params.States, params.Since, params.Until, params.EventIDContains, params.Before)
	filter := strings.Join(where, "\nAND ")
	match = append(match, sql.Named("ids", jsonArray(params.IDs)), sql.Named("runnable", jsonArray(params.Runnable)))
	var n int
	if params.DryRun {
		// A dry run counts by the requeue's own rule and only reads, on a
		// read connection: the requeue rolled back would hold the one write
		// connection, and every receipt behind it, while it rewrote each
		// event it counts.
		err = s.readDB.QueryRowContext(ctx, sqlfile.Splice(eventRequeueCountSQL, eventFilterMarker, filter), match...).Scan(&n)
		return n, wrap("event requeue", err)
	}
	err = s.writeTx(ctx, "event requeue", func(tx *sql.Tx) error {
		now := s.nowMicros()
		ids, err := collectRows(ctx, tx, sqlfile.Splice(eventRequeueSQL, eventFilterMarker, filter), scanValue[int64],
			append(match, sql.Named("now", now))...)
		if err != nil || len(ids) == 0 {
			return err
		}
		n = len(ids)
		_, err = tx.ExecContext(ctx, eventRequeueActionSQL,
			sql.Named("now", now),
			sql.Named("ids", jsonArray(ids)),
			sql.Named("action", params.Action()),
			sql.Named("actor", params.Actor),
		)
		return err
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		s.broadcast()
	}
	return n, nil
}

// EventResolve closes dead or unknown events as done and records who
// closed them, in one transaction.
func (s *Store) EventResolve(ctx context.Context, params *ferry.EventResolveParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, wrap("event resolve", err)
	}
	var n int
	err := s.writeTx(ctx, "event resolve", func(tx *sql.Tx) error {
		now := s.nowMicros()
		ids, err := collectRows(ctx, tx, eventResolveSQL, scanValue[int64],
			sql.Named("now", now), sql.Named("ids", jsonArray(params.IDs)))
		if err != nil || len(ids) == 0 {
			return err
		}
		n = len(ids)
		_, err = tx.ExecContext(ctx, eventRequeueActionSQL, sql.Named("now", now), sql.Named("ids", jsonArray(ids)),
			sql.Named("action", ferry.ActionResolve), sql.Named("actor", params.Actor))
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// EventRetryNow makes a pending event due now and records who asked.
func (s *Store) EventRetryNow(ctx context.Context, params *ferry.EventRetryNowParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, wrap("event retry now", err)
	}
	var n int64
	err := s.writeTx(ctx, "event retry now", func(tx *sql.Tx) error {
		now := s.nowMicros()
		res, err := tx.ExecContext(ctx, eventRetryNowSQL, sql.Named("now", now), sql.Named("id", params.ID))
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		_, err = tx.ExecContext(ctx, actionInsertSQL, sql.Named("id", params.ID), sql.Named("now", now),
			sql.Named("action", ferry.ActionRetryNow), sql.Named("actor", params.Actor))
		return err
	})
	if err != nil {
		return false, err
	}
	if n > 0 {
		s.broadcast()
	}
	return n > 0, nil
}

// PurgeBatch is how many events one purge transaction deletes at most.
// Each batch holds SQLite's write lock only briefly (milliseconds), so
// receipts queue behind one batch at most, never behind the whole purge.
const PurgeBatch = 500

// EventPurge deletes done events of Source completed at least Retention
// ago, in transactions of at most PurgeBatch events each; their ledger and
// conflicts go with them (ON DELETE CASCADE). The cutoff is fixed at the
// start, so a purge ends even while events keep completing.
func (s *Store) EventPurge(ctx context.Context, params *ferry.EventPurgeParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, wrap("event purge", err)
	}
	n, err := s.purgeDone(ctx, params.Source, s.nowMicros(), params.Retention, 0, nil)
	return n, wrap("event purge", err)
}

// purgeRenewEvery is how many purge batches (of PurgeBatch events) run
// between two renewals of the maintenance lease: 100 batches take seconds,
// the lease lasts ferry.ArchiveLeaseTTL.
const purgeRenewEvery = 100

// purgeDone deletes source's done events completed at least retention
// before now and first delivered at least keyRetention before it, PurgeBatch
// at a time, each batch its own transaction. A non-nil beforeBatch runs
// before every batch, and its error stops the purge.
func (s *Store) purgeDone(ctx context.Context, source string, now int64, retention, keyRetention time.Duration, beforeBatch func() error) (int, error) {
	total := 0
	for {
		if beforeBatch != nil {
			if err := beforeBatch(); err != nil {
				return total, err
			}
		}
		var deleted int64
		err := s.write(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, eventPurgeSQL,
				sql.Named("now", now),
				sql.Named("source", source),
				sql.Named("retention_us", retention.Microseconds()),
				sql.Named("key_retention_us", keyRetention.Microseconds()),
				sql.Named("batch", PurgeBatch))
			if err != nil {
				return err
			}
			deleted, err = res.RowsAffected()
			return err
		})
		if err != nil { // nothing of this batch was committed
			return total, err
		}
		total += int(deleted)
		if deleted < PurgeBatch {
			return total, nil
		}
	}
}

// AttemptList returns the ledger of one event, oldest attempt first.
func (s *Store) AttemptList(ctx context.Context, params *ferry.AttemptListParams) ([]*ferry.Attempt, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("attempt list", err)
	}
	return listByEvent(ctx, s, "attempt list", attemptListSQL, params.ID, 0, func(row scanner) (*ferry.Attempt, error) {
		var (
			a                 ferry.Attempt
			started, finished sql.NullInt64
			outcome           string
			errText, response sql.NullString
			status            sql.NullInt64
		)
		if err := row.Scan(&a.EventID, &a.Attempt, &a.Worker, &started, &finished, &outcome, &errText, &status, &response); err != nil {
			return nil, err
		}
		a.HTTPStatus, a.Response = int(status.Int64), response.String
		a.StartedAt, a.FinishedAt = fromMicros(started), fromMicros(finished)
		a.Outcome, a.Error = ferry.Outcome(outcome), errText.String
		return &a, nil
	})
}

// ConflictList returns the conflicting deliveries kept on one event,
// oldest first, up to Limit.
func (s *Store) ConflictList(ctx context.Context, params *ferry.ConflictListParams) ([]*ferry.Conflict, error) {
	if err := params.Normalize(); err != nil {
		return nil, wrap("conflict list", err)
	}
	return listByEvent(ctx, s, "conflict list", conflictListSQL, params.ID, params.Limit, func(row scanner) (*ferry.Conflict, error) {
		var (
			c        ferry.Conflict
			received sql.NullInt64
			headers  string
		)
		if err := row.Scan(&c.EventID, &received, &c.PayloadSHA256, &c.Payload, &headers); err != nil {
			return nil, err
		}
		c.ReceivedAt = fromMicros(received)
		var err error
		c.Headers, err = unmarshalHeaders(headers)
		return &c, err
	})
}

// ReplayList returns the replays kept on one event, oldest first, up to
// Limit.
func (s *Store) ReplayList(ctx context.Context, params *ferry.ReplayListParams) ([]*ferry.Replay, error) {
	if err := params.Normalize(); err != nil {
		return nil, wrap("replay list", err)
	}
	return listByEvent(ctx, s, "replay list", replayListSQL, params.ID, params.Limit, func(row scanner) (*ferry.Replay, error) {
		var (
			r        ferry.Replay
			received sql.NullInt64
			headers  string
		)
		if err := row.Scan(&r.EventID, &received, &r.ClaimedEventID, &r.ClaimedType, &headers); err != nil {
			return nil, err
		}
		r.ReceivedAt = fromMicros(received)
		var err error
		r.Headers, err = unmarshalHeaders(headers)
		return &r, err
	})
}

// ActionList returns the operator actions on one event, oldest first.
func (s *Store) ActionList(ctx context.Context, params *ferry.ActionListParams) ([]*ferry.Action, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("action list", err)
	}
	return listByEvent(ctx, s, "action list", actionListSQL, params.ID, 0, func(row scanner) (*ferry.Action, error) {
		var (
			a  ferry.Action
			at sql.NullInt64
		)
		if err := row.Scan(&a.EventID, &at, &a.Action, &a.Actor); err != nil {
			return nil, err
		}
		a.At = fromMicros(at)
		return &a, nil
	})
}

// listByEvent reads the rows query selects for one event's id (its ledger
// and the side tables shown with it), each through scan. limit binds
// :limit, for the side tables a list reads a page of (conflicts, replays).
func listByEvent[T any](ctx context.Context, s *Store, what, query string, id int64, limit int, scan func(scanner) (*T, error)) ([]*T, error) {
	list, err := collectRows(ctx, s.readDB, query, scan, sql.Named("id", id), sql.Named("limit", limit))
	if err != nil {
		return nil, wrap(what, err)
	}
	return list, nil
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// queryer is a *sql.DB or *sql.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// collectRows runs query on q and reads every row through scan:
// database/sql's counterpart of pgx's Query and CollectRows, so that each
// read here is its PostgreSQL twin in another dialect.
func collectRows[T any](ctx context.Context, q queryer, query string, scan func(scanner) (T, error), args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, v)
	}
	return list, rows.Err()
}

// scanValue reads a row of one column: pgx.RowTo's counterpart.
func scanValue[T any](row scanner) (T, error) {
	var v T
	err := row.Scan(&v)
	return v, err
}

// scanEvent reads the event columns in the order the query/*.sql files
// select them.
func scanEvent(row scanner) (*ferry.Event, error) {
	var (
		e                                      ferry.Event
		state, origin                          string
		headers, leaseOwner, lastError         sql.NullString
		traceparent, tracestate                sql.NullString
		leaseExpires, nextAttempt, first, last sql.NullInt64
		claimed, completed, requeued           sql.NullInt64
	)
	err := row.Scan(&e.ID, &e.Source, &e.EventID, &e.Type, &e.Payload, &headers, &e.PayloadSHA256,
		&state, &e.Attempt, &leaseOwner, &leaseExpires, &nextAttempt, &first, &last,
		&e.Deliveries, &e.Conflicts, &claimed, &completed, &lastError, &requeued, &origin, &e.Replays,
		&traceparent, &tracestate, &e.AttemptBase)
	if err != nil {
		return nil, err
	}
	e.State, e.Origin = ferry.State(state), ferry.Origin(origin)
	e.LeaseOwner, e.LastError = leaseOwner.String, lastError.String
	e.Traceparent, e.Tracestate = traceparent.String, tracestate.String
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
