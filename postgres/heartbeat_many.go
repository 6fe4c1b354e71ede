package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// EventHeartbeatMany extends every lease that still holds in one statement
// (one round trip per tick, however many leases): the leases go as two
// arrays, and the statement returns the ones it found lost. See ferry.Store.
func (s *Store) EventHeartbeatMany(ctx context.Context, params *ferry.EventHeartbeatManyParams) ([]ferry.Lease, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("event heartbeat many", err)
	}
	if len(params.Leases) == 0 {
		return nil, nil
	}
	ids, attempts := leaseArrays(params.Leases)
	lost, err := queryLost(ctx, s.pool, eventHeartbeatManySQL, pgx.NamedArgs{
		"now":      s.nowArg(),
		"ids":      ids,
		"attempts": attempts,
		"ttl_us":   micros(params.TTL),
	})
	return lost, wrap("event heartbeat many", err)
}

// leaseArrays splits leases into the id and attempt arrays a statement
// unnests.
func leaseArrays(leases []ferry.Lease) (ids []int64, attempts []int32) {
	ids = make([]int64, len(leases))
	attempts = make([]int32, len(leases))
	for i, l := range leases {
		ids[i], attempts[i] = l.ID, int32(l.Attempt)
	}
	return ids, attempts
}

// queryLost runs a fenced batch statement that returns the leases it found
// lost, and returns them; nil when every lease held.
func queryLost(ctx context.Context, q querier, sql string, args pgx.NamedArgs) ([]ferry.Lease, error) {
	rows, _ := q.Query(ctx, sql, args)
	lost, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ferry.Lease, error) {
		var l ferry.Lease
		err := row.Scan(&l.ID, &l.Attempt)
		return l, err
	})
	if err != nil || len(lost) == 0 {
		return nil, err
	}
	return lost, nil
}
