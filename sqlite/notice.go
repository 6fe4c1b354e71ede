package sqlite

import (
	"context"
	"database/sql"

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
	notices, err := collectRows(ctx, s.readDB, noticeListSQL, func(row scanner) (*ferry.Notice, error) {
		var (
			n        ferry.Notice
			received sql.NullInt64
		)
		err := row.Scan(&n.ID, &n.EventRowID, &n.Source, &n.EventID, &received)
		n.ReceivedAt = fromMicros(received)
		return &n, err
	}, sql.Named("kind", kind), sql.Named("source", params.Source), sql.Named("after_id", params.AfterID), sql.Named("limit", params.Limit))
	if err != nil {
		return nil, wrap(op, err)
	}
	return notices, nil
}
