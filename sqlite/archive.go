package sqlite

import (
	"context"
	"database/sql"

	"github.com/ferry-inbox/ferry"
)

// ArchiveMaintain enforces the longest retention; see ferry.Store. SQLite
// keeps done events in its one event table, so there is no partition to
// create or drop: it deletes every source's done events past Retention (and
// first delivered longer than KeyRetention ago, since the event row is its
// own dedupe key) in PurgeBatch-sized transactions, EventPurge's bounded
// batches, so receipts never queue behind the whole run. Ahead and KeyBatch
// do not apply. The lease keeps two processes sharing the file from purging
// at once.
func (s *Store) ArchiveMaintain(ctx context.Context, params *ferry.ArchiveMaintainParams) (*ferry.ArchiveMaintainResult, error) {
	res, err := ferry.MaintainArchive(ctx, s, params, s.archiveMaintain)
	return res, wrap("archive maintain", err)
}

// archiveMaintain is ArchiveMaintain's run under the lease: it counts into
// res what it deletes before any error. It renews the lease as it goes
// (purgeDone's renew): a purge of millions of events can outlive it.
func (s *Store) archiveMaintain(ctx context.Context, params *ferry.ArchiveMaintainParams, res *ferry.ArchiveMaintainResult, renew func() error) error {
	sources, err := collectRows(ctx, s.readDB, archiveSourcesSQL, scanValue[string])
	if err != nil {
		return err
	}
	now := s.nowMicros()
	for _, source := range sources {
		n, err := s.purgeDone(ctx, source, now, params.Retention, params.KeyRetention, renew, purgeRenewEvery)
		res.Events += n
		if err != nil {
			return err
		}
	}
	return nil
}

// ArchiveInfo reports no partitions: SQLite keeps done events in the event
// table. Now is the store's clock.
func (s *Store) ArchiveInfo(ctx context.Context) (*ferry.ArchiveInfo, error) {
	return &ferry.ArchiveInfo{Now: fromMicros(sql.NullInt64{Int64: s.nowMicros(), Valid: true})}, nil
}
