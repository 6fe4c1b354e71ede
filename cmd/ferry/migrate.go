package main

import (
	"context"
	"fmt"
)

func runMigrate(ctx context.Context, args []string) error {
	fs := newFlags("migrate", "[--config FILE]",
		`Brings the store's schema up to date. Safe to run from several processes at
once; serve also migrates at start unless store.migrate = false or --no-migrate.`)
	configPath := fs.String("config", "ferry.toml", "the config `file`")
	if err := fs.parseFlagsOnly(args); err != nil {
		return err
	}
	c, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	st, closeStore, err := openStore(ctx, c, nil)
	if err != nil {
		return err
	}
	defer closeStore()
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	fmt.Println("ferry: schema up to date")
	return nil
}
