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
	res, err := ferry.MaintainArchive(ctx, s, params, s.archiveRun(purgeRenewEvery))
	return res, wrap("archive maintain", err)
}

// archiveRun returns ArchiveMaintain's run under the lease. It counts into
// res what it deletes before any error, and renews the lease every
// renewEvery purge batches, counted across sources: a purge of millions of
// events, or of thousands of sources, can outlive it.
func (s *Store) archiveRun(renewEvery int) func(context.Context, *ferry.ArchiveMaintainParams, *ferry.ArchiveMaintainResult, func() error) error {
	return func(ctx context.Context, params *ferry.ArchiveMaintainParams, res *ferry.ArchiveMaintainResult, renew func() error) error {
		sources, err := collectRows(ctx, s.readDB, archiveSourcesSQL, scanValue[string])
		if err != nil {
			return err
		}
		now := s.nowMicros()
		batches := 0
		beforeBatch := func() error {
			if batches++; batches%renewEvery == 0 {
				return renew()
			}
			return nil
		}
		for _, source := range sources {
			n, err := s.purgeDone(ctx, source, now, params.Retention, params.KeyRetention, beforeBatch)
			res.Events += n
			res.Keys += n // the event row is its own key
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// ArchiveInfo reports no partitions: SQLite keeps done events in the event
// table. Now is the store's clock.
func (s *Store) ArchiveInfo(ctx context.Context) (*ferry.ArchiveInfo, error) {
	return &ferry.ArchiveInfo{Now: fromMicros(sql.NullInt64{Int64: s.nowMicros(), Valid: true})}, nil
}
