package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// LeaseAcquire takes or renews the named lease for Owner until TTL from the
// database's now; see ferry.Store.
func (s *Store) LeaseAcquire(ctx context.Context, params *ferry.LeaseAcquireParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, wrap("lease acquire", err)
	}
	var held bool
	err := s.pool.QueryRow(ctx, leaseAcquireSQL, pgx.NamedArgs{
		"now": s.nowArg(), "name": params.Name, "owner": params.Owner, "ttl_us": micros(params.TTL),
	}).Scan(&held)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, wrap("lease acquire", err)
	}
	return held, nil
}

// LeaseRelease gives the named lease up if Owner holds it.
func (s *Store) LeaseRelease(ctx context.Context, params *ferry.LeaseReleaseParams) error {
	if err := params.Validate(); err != nil {
		return wrap("lease release", err)
	}
	if _, err := s.pool.Exec(ctx, leaseReleaseSQL, pgx.NamedArgs{"name": params.Name, "owner": params.Owner}); err != nil {
		return wrap("lease release", err)
	}
	return nil
}

// CheckpointGet returns the named checkpoint, or ferry.ErrNotFound.
func (s *Store) CheckpointGet(ctx context.Context, params *ferry.CheckpointGetParams) (*ferry.Checkpoint, error) {
	if err := params.Validate(); err != nil {
		return nil, wrap("checkpoint get", err)
	}
	var c ferry.Checkpoint
	err := s.pool.QueryRow(ctx, checkpointGetSQL, pgx.NamedArgs{"name": params.Name}).Scan(&c.Name, &c.Value, &c.UpdatedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, wrap("checkpoint get "+params.Name, ferry.ErrNotFound)
	case err != nil:
		return nil, wrap("checkpoint get", err)
	}
	c.UpdatedAt = c.UpdatedAt.UTC()
	return &c, nil
}

// CheckpointPut sets the named checkpoint's value, stamped with the
// database's now, fenced by params.Lease when set; see ferry.Store.
func (s *Store) CheckpointPut(ctx context.Context, params *ferry.CheckpointPutParams) error {
	if err := params.Validate(); err != nil {
		return wrap("checkpoint put", err)
	}
	var written bool
	err := s.pool.QueryRow(ctx, checkpointPutSQL, pgx.NamedArgs{
		"now": s.nowArg(), "name": params.Name, "value": params.Value, "lease": params.Lease, "owner": params.Owner,
	}).Scan(&written)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return wrap("checkpoint put", fmt.Errorf("%s: %w", params.Name, ferry.ErrLeaseLost))
	case err != nil:
		return wrap("checkpoint put", err)
	}
	return nil
}
