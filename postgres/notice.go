package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// ConflictNoticeList pages through one source's conflicting deliveries.
func (s *Store) ConflictNoticeList(ctx context.Context, params *ferry.NoticeListParams) ([]*ferry.Notice, error) {
	return s.noticeList(ctx, "conflict", params)
}

// ReplayNoticeList pages through one source's suspected replays.
func (s *Store) ReplayNoticeList(ctx context.Context, params *ferry.NoticeListParams) ([]*ferry.Notice, error) {
	return s.noticeList(ctx, "replay", params)
}

// noticeList pages through kind's notices ("conflict" or "replay").
func (s *Store) noticeList(ctx context.Context, kind string, params *ferry.NoticeListParams) ([]*ferry.Notice, error) {
	op := kind + " notice list"
	if err := params.Normalize(); err != nil {
		return nil, wrap(op, err)
	}
	rows, _ := s.pool.Query(ctx, noticeListSQL, pgx.NamedArgs{"kind": kind, "source": params.Source, "after_id": params.AfterID, "limit": params.Limit})
	notices, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*ferry.Notice, error) {
		var n ferry.Notice
		err := row.Scan(&n.ID, &n.EventRowID, &n.Source, &n.EventID, &n.ReceivedAt)
		n.ReceivedAt = n.ReceivedAt.UTC()
		return &n, err
	})
	if err != nil {
		return nil, wrap(op, err)
	}
	return notices, nil
}
