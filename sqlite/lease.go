package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferry-inbox/ferry"
)

// LeaseAcquire takes or renews the named lease for Owner until TTL from the
// store's now; see ferry.Store.
func (s *Store) LeaseAcquire(ctx context.Context, params *ferry.LeaseAcquireParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, wrap("lease acquire", err)
	}
	held := false
	err := s.writeTx(ctx, "lease acquire", func(tx *sql.Tx) error {
		now := s.nowMicros() // under the write lock
		var one int
		err := tx.QueryRowContext(ctx, leaseAcquireSQL,
			sql.Named("name", params.Name), sql.Named("owner", params.Owner),
			sql.Named("now", now), sql.Named("expires_at", now+params.TTL.Microseconds()),
		).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		held = err == nil
		return err
	})
	return held, err
}

// LeaseRelease gives the named lease up if Owner holds it.
func (s *Store) LeaseRelease(ctx context.Context, params *ferry.LeaseReleaseParams) error {
	if err := params.Validate(); err != nil {
		return wrap("lease release", err)
	}
	return s.writeTx(ctx, "lease release", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, leaseReleaseSQL, sql.Named("name", params.Name), sql.Named("owner", params.Owner))
		return err
	})
}

// CheckpointGet returns the named checkpoint, or ferry.ErrNotFound.
func (s *Store) CheckpointGet(ctx context.Context, params *ferry.CheckpointGetParams) (*ferry.Checkpoint, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("checkpoint get", err)
	}
	var (
		c       ferry.Checkpoint
		updated sql.NullInt64
	)
	err := s.readDB.QueryRowContext(ctx, checkpointGetSQL, sql.Named("name", params.Name)).Scan(&c.Name, &c.Value, &updated)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, wrap("checkpoint get "+params.Name, ferry.ErrNotFound)
	case err != nil:
		return nil, wrap("checkpoint get", err)
	}
	c.UpdatedAt = fromMicros(updated)
	return &c, nil
}

// CheckpointPut sets the named checkpoint's value, stamped with the
// store's now, fenced by params.Lease when set; see ferry.Store.
func (s *Store) CheckpointPut(ctx context.Context, params *ferry.CheckpointPutParams) error {
	if err := params.Validate(); err != nil {
		return wrap("checkpoint put", err)
	}
	return s.writeTx(ctx, "checkpoint put", func(tx *sql.Tx) error {
		var written int
		err := tx.QueryRowContext(ctx, checkpointPutSQL,
			sql.Named("name", params.Name), sql.Named("value", params.Value), sql.Named("now", s.nowMicros()),
			sql.Named("lease", params.Lease), sql.Named("owner", params.Owner)).Scan(&written)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%s: %w", params.Name, ferry.ErrLeaseLost)
		}
		return err
	})
}
