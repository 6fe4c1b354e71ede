package sqlite

import (
	"context"
	"database/sql"
	"slices"

	"github.com/ferry-inbox/ferry"
)

// EventHeartbeatMany extends every lease that still holds in one statement
// of one write transaction, whatever the number of leases. See ferry.Store.
func (s *Store) EventHeartbeatMany(ctx context.Context, params *ferry.EventHeartbeatManyParams) ([]ferry.Lease, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event heartbeat many", err)
	}
	if len(params.Leases) == 0 {
		return nil, nil
	}
	extended := make(map[ferry.Lease]bool, len(params.Leases))
	err := s.writeTx(ctx, "event heartbeat many", func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, eventHeartbeatManySQL, sql.Named("now", s.nowMicros()),
			sql.Named("ttl_us", params.TTL.Microseconds()), sql.Named("leases", leasePairs(params.Leases)))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var l ferry.Lease
			if err := rows.Scan(&l.ID, &l.Attempt); err != nil {
				return err
			}
			extended[l] = true
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	var lost []ferry.Lease
	for _, l := range params.Leases {
		if !extended[l] && !slices.Contains(lost, l) {
			lost = append(lost, l)
		}
	}
	return lost, nil
}
