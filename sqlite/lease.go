package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ferry-inbox/ferry"
)

func (s *Store) LeaseAcquire(ctx context.Context, params *ferry.LeaseAcquireParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, fmt.Errorf("sqlite: lease acquire: %w", err)
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

func (s *Store) LeaseRelease(ctx context.Context, params *ferry.LeaseReleaseParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("sqlite: lease release: %w", err)
	}
	return s.writeTx(ctx, "lease release", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, leaseReleaseSQL, sql.Named("name", params.Name), sql.Named("owner", params.Owner))
		return err
	})
}

func (s *Store) CheckpointGet(ctx context.Context, params *ferry.CheckpointGetParams) (*ferry.Checkpoint, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("sqlite: checkpoint get: %w", err)
	}
	var (
		c       ferry.Checkpoint
		updated sql.NullInt64
	)
	err := s.readDB.QueryRowContext(ctx, checkpointGetSQL, sql.Named("name", params.Name)).Scan(&c.Name, &c.Value, &updated)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("sqlite: checkpoint get %s: %w", params.Name, ferry.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("sqlite: checkpoint get: %w", err)
	}
	c.UpdatedAt = fromMicros(updated)
	return &c, nil
}

func (s *Store) CheckpointPut(ctx context.Context, params *ferry.CheckpointPutParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("sqlite: checkpoint put: %w", err)
	}
	return s.writeTx(ctx, "checkpoint put", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, checkpointPutSQL,
			sql.Named("name", params.Name), sql.Named("value", params.Value), sql.Named("now", s.nowMicros()))
		return err
	})
}
