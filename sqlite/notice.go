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
	rows, err := s.readDB.QueryContext(ctx, noticeListSQL, sql.Named("kind", kind),
		sql.Named("source", params.Source), sql.Named("after_id", params.AfterID), sql.Named("limit", params.Limit))
	if err != nil {
		return nil, wrap(op, err)
	}
	defer rows.Close()
	var notices []*ferry.Notice
	for rows.Next() {
		var (
			n        ferry.Notice
			received sql.NullInt64
		)
		if err := rows.Scan(&n.ID, &n.EventRowID, &n.Source, &n.EventID, &received); err != nil {
			return nil, wrap(op, err)
		}
		n.ReceivedAt = fromMicros(received)
		notices = append(notices, &n)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(op, err)
	}
	return notices, nil
}
