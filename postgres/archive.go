package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// archiveLockTimeout bounds how long a partition attach or detach waits for
// the archive's lock, so that completions never queue behind maintenance
// for longer; a run that times out tries again at its next interval.
const archiveLockTimeout = "2s"

// ArchiveMaintain keeps the archive's partitions: see ferry.Store.
// Each partition is created or dropped in its own transaction, with the
// lease renewed before each, and before each batch of keys.
func (s *Store) ArchiveMaintain(ctx context.Context, params *ferry.ArchiveMaintainParams) (*ferry.ArchiveMaintainResult, error) {
	res, err := ferry.MaintainArchive(ctx, s, params, s.archiveMaintain)
	return res, wrap("archive maintain", err)
}

// archiveMaintain is ArchiveMaintain's run under the lease: it counts into
// res what it does before any error.
func (s *Store) archiveMaintain(ctx context.Context, params *ferry.ArchiveMaintainParams, res *ferry.ArchiveMaintainResult, renew func() error) error {
	type step struct {
		action       string
		fromDay, toD time.Time
		name         string
	}
	rows, _ := s.pool.Query(ctx, archivePlanSQL, pgx.NamedArgs{
		"now":          s.nowArg(),
		"ahead_us":     micros(params.Ahead),
		"retention_us": micros(params.Retention),
		"span_days":    s.archiveSpanDays,
	})
	var steps []step
	var st step
	if _, err := pgx.ForEachRow(rows, []any{&st.action, &st.fromDay, &st.toD, &st.name}, func() error {
		steps = append(steps, st)
		return nil
	}); err != nil {
		return err
	}
	for _, st := range steps {
		if err := renew(); err != nil {
			return err
		}
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+archiveLockTimeout+"'"); err != nil {
				return err
			}
			if st.action == "create" {
				var created bool
				err := tx.QueryRow(ctx, archiveCreateSQL, pgx.NamedArgs{"from_day": st.fromDay, "to_day": st.toD, "now": s.nowArg()}).Scan(&created)
				if created {
					res.Created++
				}
				return err
			}
			var n int
			err := tx.QueryRow(ctx, archiveDropSQL, pgx.NamedArgs{"name": st.name}).Scan(&n)
			res.Dropped++
			res.Events += n
			return err
		})
		if err != nil {
			return err
		}
	}
	if err := renew(); err != nil {
		return err
	}
	var strays int
	if err := s.pool.QueryRow(ctx, archiveDefaultPurgeSQL, pgx.NamedArgs{
		"now": s.nowArg(), "retention_us": micros(params.Retention),
	}).Scan(&strays); err != nil {
		return err
	}
	res.Events += strays
	for {
		// Millions of keys can be due at once (a first run, a retention
		// cut): renew between batches as between partitions.
		if err := renew(); err != nil {
			return err
		}
		n, err := s.purgeKeys(ctx, "", params.KeyRetention, params.KeyBatch)
		if err != nil {
			return err
		}
		res.Keys += n
		if n < params.KeyBatch {
			break
		}
	}
	if res.Created > 0 || res.Dropped > 0 {
		if _, err := s.pool.Exec(ctx, archiveAnalyzeSQL); err != nil {
			return err
		}
	}
	return nil
}

// purgeKeys purges up to batch keys of source ("" for all) received longer
// than retention ago whose event is stored nowhere, and forgets what hangs
// off those events, in one transaction of two statements
// (archive_keys_purge.sql, archive_keys_forget.sql). It returns how many
// keys it purged.
func (s *Store) purgeKeys(ctx context.Context, source string, retention time.Duration, batch int) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, archiveKeysPurgeSQL, pgx.NamedArgs{
			"now": s.nowArg(), "source": source, "key_retention_us": micros(retention), "batch": batch,
		})
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(ids) == 0 {
			return err
		}
		n = len(ids)
		_, err = tx.Exec(ctx, archiveKeysForgetSQL, pgx.NamedArgs{"ids": ids})
		return err
	})
	return n, err
}

// ArchiveInfo counts the archive's ranged partitions and dates the oldest
// and the newest.
func (s *Store) ArchiveInfo(ctx context.Context) (*ferry.ArchiveInfo, error) {
	var (
		info           ferry.ArchiveInfo
		oldest, newest *time.Time
	)
	if err := s.pool.QueryRow(ctx, archiveInfoSQL, pgx.NamedArgs{"now": s.nowArg()}).Scan(&info.Partitions, &oldest, &newest, &info.Now); err != nil {
		return nil, wrap("archive info", err)
	}
	info.Oldest, info.End, info.Now = utc(oldest), utc(newest), info.Now.UTC()
	return &info, nil
}
