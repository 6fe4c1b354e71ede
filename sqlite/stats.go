package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/ferry-inbox/ferry"
)

// EventStats reads the aggregate, and the at-risk list if asked, in one read
// transaction on the read pool, so the list agrees with the counts and
// writers are not held up.
func (s *Store) EventStats(ctx context.Context, params *ferry.EventStatsParams) (*ferry.EventStats, error) {
	params, err := params.Normalize()
	if err != nil {
		return nil, wrap("event stats", err)
	}
	risk := make(map[string]int64, len(params.AtRiskAfter))
	for source, d := range params.AtRiskAfter {
		risk[source] = d.Microseconds()
	}
	riskJSON, err := json.Marshal(risk)
	if err != nil {
		return nil, wrap("event stats", err)
	}
	now := s.nowTime()
	args := []any{
		sql.Named("now", now.UnixMicro()),
		sql.Named("risk", string(riskJSON)),
		sql.Named("default_risk_us", params.DefaultAtRiskAfter.Microseconds()),
	}
	stats := &ferry.EventStats{Now: now}

	tx, err := s.readDB.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, wrap("event stats", err)
	}
	defer tx.Rollback()
	stats.Sources, err = collectRows(ctx, tx, eventStatsSQL, func(row scanner) (*ferry.SourceStats, error) {
		var (
			ss                                                  ferry.SourceStats
			pending, inProgress, done, dead, unknown            int
			oldestPending, oldestDue, oldestRunning, oldestRisk sql.NullInt64
		)
		if err := row.Scan(&ss.Source, &pending, &inProgress, &done, &dead, &unknown,
			&oldestPending, &oldestDue, &oldestRunning, &ss.LeaseExpired, &ss.AtRisk, &oldestRisk, &ss.Replays,
			&ss.UnfinishedAttempts); err != nil {
			return nil, err
		}
		ss.States = map[ferry.State]int{
			ferry.StatePending: pending, ferry.StateInProgress: inProgress,
			ferry.StateDone: done, ferry.StateDead: dead, ferry.StateUnknown: unknown,
		}
		ss.OldestPending, ss.OldestDue = fromMicros(oldestPending), fromMicros(oldestDue)
		ss.OldestInProgress, ss.OldestAtRisk = fromMicros(oldestRunning), fromMicros(oldestRisk)
		return &ss, nil
	}, args...)
	if err != nil {
		return nil, wrap("event stats", err)
	}
	if params.AtRiskLimit > 0 && stats.AtRiskCount() > 0 {
		args = append(args, sql.Named("limit", params.AtRiskLimit))
		if stats.AtRisk, err = collectRows(ctx, tx, eventListAtRiskSQL, scanEvent, args...); err != nil {
			return nil, wrap("event stats", err)
		}
	}
	return stats, nil
}
