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

// MigrationLockClass is the first key of the advisory lock Migrate holds
// while it migrates and MigratePlan waits on (pg_advisory_xact_lock's two
// int4 form): a constant of Ferry's own ("ferm" in ASCII). The second is
// hashtext(current_schema()), so a migration of one schema's inbox never
// holds up another's. pg_locks shows who holds it:
// locktype 'advisory' and classid 1717924461.
const MigrationLockClass int32 = 0x6665726d

// migrationLockTimeout bounds each wait of a migration for a lock
// (PostgreSQL's lock_timeout, which applies to each lock acquisition, set
// for the migration transaction only). A DDL statement waiting for ACCESS
// EXCLUSIVE on a table queues every later statement on it, SELECTs
// included, so an unbounded wait behind a long transaction (a transactional
// handler, pg_dump) stops receipts and claims for as long as it runs.
const migrationLockTimeout = 2 * time.Second

// migrationTries is how many times Migrate runs the migration transaction
// when a lock wait times out, 250 ms apart and doubling: about 14 s in
// all, after which it fails and a supervisor restarting serve tries again.
const migrationTries = 5

// migrationRetryBackoff is the pause before Migrate's second try; it
// doubles after each.
const migrationRetryBackoff = 250 * time.Millisecond

// Migrate applies every migration the schema lacks, in one transaction that
// holds an advisory lock, so instances starting together take turns and the
// schema is never half migrated. The wait for the advisory lock is bounded
// only by ctx; each wait for any other lock by migrationLockTimeout (2 s).
// On a lock timeout it rolls back and tries again, migrationTries (5) times
// in all, then fails wrapping the *pgconn.PgError (SQLSTATE 55P03) with
// nothing changed.
func (s *Store) Migrate(ctx context.Context) error {
	all, err := ferry.ReadMigrations(migrations, "migration")
	if err != nil {
		return wrap("migrate", err)
	}
	backoff := migrationRetryBackoff
	for try := 1; ; try++ {
		err = s.migrateOnce(ctx, all)
		if !lockTimedOut(err) {
			return wrap("migrate", err)
		}
		if try == s.migrateTries {
			return wrap("migrate", fmt.Errorf("%w: it waited more than %s for a lock another transaction holds (pg_stat_activity shows which), %d times; nothing was changed: retry, or run `ferry migrate` once that transaction ends",
				err, s.migrateLockTimeout, try))
		}
		select {
		case <-ctx.Done():
			return wrap("migrate", context.Cause(ctx))
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// migrateOnce is one try of Migrate: the lock timeout is set only once the
// advisory lock is held, since instances wait their turn on it for as long
// as a migration takes.
func (s *Store) migrateOnce(ctx context.Context, all []ferry.Migration) error {
	return s.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, migrationLockSQL, pgx.NamedArgs{"class": MigrationLockClass}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, migrationLockTimeoutSQL, pgx.NamedArgs{"timeout_ms": s.migrateLockTimeout.Milliseconds()}); err != nil {
			return err
		}
		// Created only where missing: CREATE TABLE IF NOT EXISTS needs
		// CREATE on the schema even when the table exists, which a role
		// granted only the rows lacks, and serve migrates at every start.
		exists, err := migrationExists(ctx, tx)
		if err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, migrationTableSQL); err != nil {
				return err
			}
		}
		rows, _ := tx.Query(ctx, migrationAppliedSQL)
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		pending, err := ferry.PendingMigrations(all, applied)
		if err != nil {
			return err
		}
		for _, m := range pending {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return migrationFailed(m, err)
			}
			if _, err := tx.Exec(ctx, migrationRecordSQL, pgx.NamedArgs{"version": m.Version, "name": m.Name}); err != nil {
				return err
			}
		}
		return nil
	})
}

// migrationExists reports whether the migration ledger exists in the
// schema Migrate creates it in; errNoSchema without one.
func migrationExists(ctx context.Context, tx pgx.Tx) (bool, error) {
	var schema, exists bool
	var searchPath string
	if err := tx.QueryRow(ctx, migrationExistsSQL).Scan(&schema, &searchPath, &exists); err != nil {
		return false, err
	}
	if !schema {
		return false, errNoSchema(searchPath)
	}
	return exists, nil
}

// errNoSchema is ferry.ErrMisconfigured for a session whose search_path
// names no schema that exists and the role may use: Migrate has nowhere
// to create the tables (PostgreSQL's "no schema has been selected to
// create in") and nothing else finds them.
func errNoSchema(searchPath string) error {
	return fmt.Errorf("%w: the search_path (%s) names no schema that exists and this role has USAGE on: create it (CREATE SCHEMA name AUTHORIZATION role), or set search_path in the URL's query to the schema Ferry's tables are in",
		ferry.ErrMisconfigured, searchPath)
}

// lockTimedOut reports whether err is PostgreSQL's lock_not_available
// (55P03): a statement waited longer than lock_timeout.
func lockTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// migrationFailed names the migration m that failed with err, and says how
// to fix a full lock table: a migration holds a lock on every table and
// index it creates until it commits (003 about 34 for each day of done
// events), which PostgreSQL's default max_locks_per_transaction does not
// hold for a store with hundreds of days of history.
func migrationFailed(m ferry.Migration, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "53200" { // out_of_memory: the shared lock table
		err = fmt.Errorf("%w: PostgreSQL's lock table is full; raise max_locks_per_transaction (it takes a restart) and migrate again, nothing was changed", err)
	}
	return m.Failed(err)
}

// MigratePlan lists the migrations Migrate would apply, each summarised by
// its file's leading comment and, for the archive migration, how many rows
// it moves. It reads only, in one transaction that first waits for a
// Migrate in progress, so the plan is of the schema that Migrate leaves.
func (s *Store) MigratePlan(ctx context.Context) ([]ferry.MigrationStep, error) {
	all, err := ferry.ReadMigrations(migrations, "migration")
	if err != nil {
		return nil, wrap("migrate plan", err)
	}
	var steps []ferry.MigrationStep
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, migrationLockSharedSQL, pgx.NamedArgs{"class": MigrationLockClass}); err != nil {
			return err
		}
		var applied []int
		exists, err := migrationExists(ctx, tx)
		if err != nil {
			return err
		}
		if exists {
			rows, _ := tx.Query(ctx, migrationAppliedSQL)
			if applied, err = pgx.CollectRows(rows, pgx.RowTo[int]); err != nil {
				return err
			}
		}
		pending, err := ferry.PendingMigrations(all, applied)
		if err != nil {
			return err
		}
		for _, m := range pending {
			step := m.Step()
			if m.Name == "archive" && exists {
				var events, done, days, ledger int64
				if err := tx.QueryRow(ctx, migratePlanArchiveSQL).Scan(&events, &done, &days, &ledger); err != nil {
					return err
				}
				step.Summary += fmt.Sprintf("\nOn this store: %d events get a dedupe key; %d done events move to %d daily partitions of ferry_event_done, their %d ledger rows to ferry_attempt_done's; %d stay in ferry_event.",
					events, done, days, ledger, events-done)
			}
			steps = append(steps, step)
		}
		return nil
	})
	if err != nil {
		return nil, wrap("migrate plan", err)
	}
	return steps, nil
}
