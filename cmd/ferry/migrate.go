package main

import (
	"context"
	"flag"
	"fmt"
)

func runMigrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	configPath := fs.String("config", "ferry.toml", "the config `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	st, closeStore, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer closeStore()
	if err := st.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Println("ferry: schema up to date")
	return nil
}
