package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

func (s *Store) LeaseAcquire(ctx context.Context, params *ferry.LeaseAcquireParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, fmt.Errorf("postgres: lease acquire: %w", err)
	}
	var held bool
	err := s.pool.QueryRow(ctx, leaseAcquireSQL, pgx.NamedArgs{
		"now": s.nowArg(), "name": params.Name, "owner": params.Owner, "ttl_us": micros(params.TTL),
	}).Scan(&held)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("postgres: lease acquire: %w", err)
	}
	return held, nil
}

func (s *Store) LeaseRelease(ctx context.Context, params *ferry.LeaseReleaseParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("postgres: lease release: %w", err)
	}
	if _, err := s.pool.Exec(ctx, leaseReleaseSQL, pgx.NamedArgs{"name": params.Name, "owner": params.Owner}); err != nil {
		return fmt.Errorf("postgres: lease release: %w", err)
	}
	return nil
}

func (s *Store) CheckpointGet(ctx context.Context, params *ferry.CheckpointGetParams) (*ferry.Checkpoint, error) {
	if err := params.Validate(); err != nil {
		return nil, fmt.Errorf("postgres: checkpoint get: %w", err)
	}
	var c ferry.Checkpoint
	err := s.pool.QueryRow(ctx, checkpointGetSQL, pgx.NamedArgs{"name": params.Name}).Scan(&c.Name, &c.Value, &c.UpdatedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("postgres: checkpoint get %s: %w", params.Name, ferry.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("postgres: checkpoint get: %w", err)
	}
	c.UpdatedAt = c.UpdatedAt.UTC()
	return &c, nil
}

func (s *Store) CheckpointPut(ctx context.Context, params *ferry.CheckpointPutParams) error {
	if err := params.Validate(); err != nil {
		return fmt.Errorf("postgres: checkpoint put: %w", err)
	}
	_, err := s.pool.Exec(ctx, checkpointPutSQL, pgx.NamedArgs{"now": s.nowArg(), "name": params.Name, "value": params.Value})
	if err != nil {
		return fmt.Errorf("postgres: checkpoint put: %w", err)
	}
	return nil
}
