package postgres

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// EventStats runs the per-source aggregate, then lists at-risk events if
// asked, both in one repeatable-read transaction so the list agrees with
// the counts.
func (s *Store) EventStats(ctx context.Context, params *ferry.EventStatsParams) (*ferry.EventStats, error) {
	params, err := params.Normalize()
	if err != nil {
		return nil, wrap("event stats", err)
	}
	args := statsArgs(s, params)
	stats := &ferry.EventStats{}
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, eventStatsSQL, args)
		var err error
		stats.Sources, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*ferry.SourceStats, error) {
			var (
				ss                                                  ferry.SourceStats
				pending, inProgress, done, dead, unknown            int
				oldestPending, oldestDue, oldestRunning, oldestRisk *time.Time
				now                                                 time.Time
			)
			if err := row.Scan(&ss.Source, &pending, &inProgress, &done, &dead, &unknown,
				&oldestPending, &oldestDue, &oldestRunning, &ss.LeaseExpired, &ss.AtRisk, &oldestRisk, &ss.Replays,
				&ss.UnfinishedAttempts, &now); err != nil {
				return nil, err
			}
			ss.States = map[ferry.State]int{
				ferry.StatePending: pending, ferry.StateInProgress: inProgress,
				ferry.StateDone: done, ferry.StateDead: dead, ferry.StateUnknown: unknown,
			}
			ss.OldestPending, ss.OldestDue = utc(oldestPending), utc(oldestDue)
			ss.OldestInProgress, ss.OldestAtRisk = utc(oldestRunning), utc(oldestRisk)
			stats.Now = now.UTC()
			return &ss, nil
		})
		if err != nil {
			return err
		}
		if stats.Now.IsZero() { // no events: the aggregate returned no row
			if err := tx.QueryRow(ctx, `SELECT coalesce($1::timestamptz, statement_timestamp())`, s.nowArg()).Scan(&stats.Now); err != nil {
				return err
			}
			stats.Now = stats.Now.UTC()
		}
		if params.AtRiskLimit <= 0 || stats.AtRiskCount() == 0 {
			return nil
		}
		// The counts' now, not the list's own statement_timestamp(): an
		// event crossing its at-risk age between the two is then in both or
		// in neither.
		args["limit"], args["now"] = params.AtRiskLimit, stats.Now
		rows, _ = tx.Query(ctx, eventListAtRiskSQL, args)
		listed, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByNameLax[eventRow])
		if err != nil {
			return err
		}
		for _, row := range listed {
			event, err := row.event()
			if err != nil {
				return err
			}
			stats.AtRisk = append(stats.AtRisk, event)
		}
		return nil
	})
	if err != nil {
		return nil, wrap("event stats", err)
	}
	return stats, nil
}

// statsArgs passes the per-source at-risk ages as two parallel arrays, in a
// stable order.
func statsArgs(s *Store, params *ferry.EventStatsParams) pgx.NamedArgs {
	sources := make([]string, 0, len(params.AtRiskAfter))
	for source := range params.AtRiskAfter {
		sources = append(sources, source)
	}
	sort.Strings(sources)
	us := make([]int64, len(sources))
	for i, source := range sources {
		us[i] = micros(params.AtRiskAfter[source])
	}
	return pgx.NamedArgs{
		"now":             s.nowArg(),
		"risk_sources":    sources,
		"risk_us":         us,
		"default_risk_us": micros(params.DefaultAtRiskAfter),
	}
}
