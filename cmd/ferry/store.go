package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/config"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/sqlite"
)

// errConfig marks a configuration the command refuses to start with (exit 2).
var errConfig = errors.New("config")

func loadConfig(path string) (*config.Config, error) {
	c, err := config.Load(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errConfig, path, err)
	}
	return c, nil
}

// openStore opens the configured store; close releases it.
func openStore(ctx context.Context, c *config.Config) (st ferry.Store, close func(), err error) {
	kind, dsn, err := c.StoreKind()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: store.url: %v", errConfig, err)
	}
	switch kind {
	case "sqlite":
		s, err := sqlite.Open(dsn, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("open sqlite store %s: %w", dsn, err)
		}
		return s, func() { _ = s.Close() }, nil
	default:
		s, err := postgres.Open(ctx, dsn, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("open postgres store: %w", err)
		}
		return s, s.Close, nil
	}
}
