package sqlite

import (
	"context"
	"database/sql"

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
	var extended []ferry.Lease
	err := s.writeTx(ctx, "event heartbeat many", func(tx *sql.Tx) (err error) {
		extended, err = queryLeases(ctx, tx, eventHeartbeatManySQL, sql.Named("now", s.nowMicros()),
			sql.Named("ttl_us", params.TTL.Microseconds()), sql.Named("leases", leasePairs(params.Leases)))
		return err
	})
	if err != nil {
		return nil, err
	}
	return lostOf(params.Leases, extended), nil
}
