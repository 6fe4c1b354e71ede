package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"

	"github.com/ferry-inbox/ferry"
)

// EventCompleteMany completes every lease that still holds in one write
// transaction (one fsync) of two statements, whatever the number of leases:
// a fenced update of the events that returns the ones it completed, then
// their ledger rows. The clock is read under the write lock. See
// ferry.Store.
func (s *Store) EventCompleteMany(ctx context.Context, params *ferry.EventCompleteManyParams) ([]ferry.Lease, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event complete many", err)
	}
	if len(params.Leases) == 0 {
		return nil, nil
	}
	completed := make(map[ferry.Lease]bool, len(params.Leases))
	err := s.writeTx(ctx, "event complete many", func(tx *sql.Tx) error {
		now := s.nowMicros()
		rows, err := tx.QueryContext(ctx, eventCompleteManySQL,
			sql.Named("now", now), sql.Named("leases", leasePairs(params.Leases)))
		if err != nil {
			return err
		}
		defer rows.Close()
		var done []ferry.Lease
		for rows.Next() {
			var l ferry.Lease
			if err := rows.Scan(&l.ID, &l.Attempt); err != nil {
				return err
			}
			done = append(done, l)
			completed[l] = true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(done) == 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, eventCompleteManyAttemptSQL, sql.Named("now", now),
			sql.Named("outcome", string(ferry.OutcomeDone)), sql.Named("leases", ledgerRows(done, params)))
		return err
	})
	if err != nil {
		return nil, err
	}
	var lost []ferry.Lease
	for _, l := range params.Leases {
		if !completed[l] && !slices.Contains(lost, l) {
			lost = append(lost, l)
		}
	}
	return lost, nil
}

// leasePairs encodes leases as a JSON array of [id, attempt] pairs for
// json_each.
func leasePairs(leases []ferry.Lease) string {
	pairs := make([][2]int64, len(leases))
	for i, l := range leases {
		pairs[i] = [2]int64{l.ID, int64(l.Attempt)}
	}
	b, _ := json.Marshal(pairs) // integers cannot fail
	return string(b)
}

// ledgerRows encodes the completed leases with what their downstream
// answered (the first naming's) as a JSON array of [id, attempt,
// http_status, response] for json_each.
func ledgerRows(done []ferry.Lease, params *ferry.EventCompleteManyParams) string {
	responses := make(map[ferry.Lease]ferry.AttemptResponse, len(params.Responses))
	for i, r := range params.Responses {
		if _, seen := responses[params.Leases[i]]; !seen {
			responses[params.Leases[i]] = r
		}
	}
	rows := make([][4]any, len(done))
	for i, l := range done {
		r := responses[l]
		rows[i] = [4]any{l.ID, l.Attempt, r.HTTPStatus, r.Body}
	}
	b, _ := json.Marshal(rows) // integers and valid UTF-8 cannot fail
	return string(b)
}
