package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/ferry-inbox/ferry"
)

// archiveLeaseTTL bounds how long a maintenance run that died keeps others
// out.
const archiveLeaseTTL = 10 * time.Minute

// ArchiveMaintain enforces the longest retention; see ferry.Store. SQLite
// keeps done events in its one event table, so there is no partition to
// create or drop: it deletes every source's done events past Retention (and
// first delivered longer than KeyRetention ago, since the event row is its
// own dedupe key) in PurgeBatch-sized transactions, EventPurge's bounded
// batches, so receipts never queue behind the whole run. Ahead and KeyBatch
// do not apply. The lease keeps two processes sharing the file from purging
// at once.
func (s *Store) ArchiveMaintain(ctx context.Context, params *ferry.ArchiveMaintainParams) (*ferry.ArchiveMaintainResult, error) {
	params, err := params.Normalize()
	if err != nil {
		return nil, wrap("archive maintain", err)
	}
	res := &ferry.ArchiveMaintainResult{}
	held, err := s.LeaseAcquire(ctx, &ferry.LeaseAcquireParams{Name: ferry.ArchiveLease, Owner: params.Owner, TTL: archiveLeaseTTL})
	if err != nil {
		return nil, wrap("archive maintain", err)
	}
	if !held {
		res.Skipped = true
		return res, nil
	}
	defer func() {
		_ = s.LeaseRelease(context.WithoutCancel(ctx), &ferry.LeaseReleaseParams{Name: ferry.ArchiveLease, Owner: params.Owner})
	}()
	sources, err := s.archiveSources(ctx)
	if err != nil {
		return nil, wrap("archive maintain", err)
	}
	now := s.nowMicros()
	for _, source := range sources {
		n, err := s.purgeDone(ctx, "archive maintain", source, now, params.Retention, params.KeyRetention)
		res.Events += n
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// archiveSources lists the sources that have events.
func (s *Store) archiveSources(ctx context.Context) ([]string, error) {
	rows, err := s.readDB.QueryContext(ctx, archiveSourcesSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var sources []string
	for rows.Next() {
		var source string
		if err := rows.Scan(&source); err != nil {
			return nil, err
		}
		sources = append(sources, source)
	}
	return sources, rows.Err()
}

// ArchiveInfo reports no partitions: SQLite keeps done events in the event
// table. Now is the store's clock.
func (s *Store) ArchiveInfo(ctx context.Context) (*ferry.ArchiveInfo, error) {
	return &ferry.ArchiveInfo{Now: fromMicros(sql.NullInt64{Int64: s.nowMicros(), Valid: true})}, nil
}
