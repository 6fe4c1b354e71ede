package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferry-inbox/ferry"
)

// archiveLockTimeout bounds how long a partition attach or detach waits for
// the archive's lock, so that completions never queue behind maintenance
// for longer; a run that times out tries again at its next interval.
const archiveLockTimeout = "2s"

// ArchiveMaintain keeps the archive's partitions: see ferry.Store.
// Each partition is created in its own transaction, and dropped in two
// (archiveDrop), with the lease renewed before each, and before each batch
// of keys.
// A role refused a privilege (SQLSTATE 42501; most often it does not own
// the tables) is refused every run the same way: ferry.ErrMisconfigured,
// saying which role must run it.
func (s *Store) ArchiveMaintain(ctx context.Context, params *ferry.ArchiveMaintainParams) (*ferry.ArchiveMaintainResult, error) {
	res, err := ferry.MaintainArchive(ctx, s, params, s.archiveMaintain)
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && pe.Code == "42501" {
		err = fmt.Errorf("%w: %w: the role lacks a privilege archive maintenance needs (most often: it does not own Ferry's tables, and only the owner may create and drop the archive's partitions): run the workers (serve --role worker or all) as the role that owns them", ferry.ErrMisconfigured, err)
	}
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
		if st.action == "drop" {
			if err := s.archiveDrop(ctx, st.name, res, renew); err != nil {
				return err
			}
			continue
		}
		err := s.archiveTx(ctx, func(tx pgx.Tx) error {
			var created bool
			err := tx.QueryRow(ctx, archiveCreateSQL, pgx.NamedArgs{"from_day": st.fromDay, "to_day": st.toD, "now": s.nowArg()}).Scan(&created)
			if created {
				res.Created++
			}
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

// archiveDrop drops partition name in two transactions: the detach and the
// day's done counters commit first, holding ACCESS EXCLUSIVE on the
// archive's parents (and so every completion) for the catalog change only;
// the side rows and the detached tables go in the second, which locks
// neither parent, however many side rows there are. A run that stops
// between them leaves the day detached, and the next run's plan lists it
// again: the first step is then a no-op and the second finishes it.
func (s *Store) archiveDrop(ctx context.Context, name string, res *ferry.ArchiveMaintainResult, renew func() error) error {
	err := s.archiveTx(ctx, func(tx pgx.Tx) error {
		var n int
		err := tx.QueryRow(ctx, archiveDetachSQL, pgx.NamedArgs{"name": name}).Scan(&n)
		res.Events += n
		return err
	})
	if err != nil {
		return err
	}
	if err := renew(); err != nil {
		return err
	}
	return s.archiveTx(ctx, func(tx pgx.Tx) error {
		var dropped bool
		err := tx.QueryRow(ctx, archiveDropSQL, pgx.NamedArgs{"name": name}).Scan(&dropped)
		if dropped {
			res.Dropped++
		}
		return err
	})
}

// archiveTx runs fn in a transaction whose every lock wait is bounded by
// archiveLockTimeout.
func (s *Store) archiveTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+archiveLockTimeout+"'"); err != nil {
			return err
		}
		return fn(tx)
	})
}

// purgeKeys purges up to batch keys of source ("" for all) received longer
// than retention ago whose event is stored nowhere, and forgets what hangs
// off those events, in one transaction (archive_keys_purge_wait.sql,
// archive_keys_purge.sql, archive_keys_forget.sql). It returns how many
// keys it purged.
func (s *Store) purgeKeys(ctx context.Context, source string, retention time.Duration, batch int) (int, error) {
	var n int
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, archiveKeysPurgeWaitSQL); err != nil {
			return err
		}
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
	info.Partitioned = true
	return &info, nil
}
