//go:build ferrychaos && unix

package main

import (
	"context"
	"errors"
	"os"

	"github.com/ferry-inbox/ferry/internal/chaos"
	"github.com/ferry-inbox/ferry/internal/pgtest"
)

// runChaos is `ferry chaos` in a chaos build (-tags ferrychaos): the
// crash-safety proof a user can rerun. The harness lives in internal/chaos;
// the children it starts are this very binary running `ferry serve`, with
// the fault hooks of chaos_hook.go. A ferry built without the tag builds
// this one first (chaos_launch.go).
func runChaos(ctx context.Context, args []string) error {
	o, err := chaosFlags(args)
	if err != nil {
		return err
	}
	if o.DatabaseURL == "" {
		o.DatabaseURL = pgtest.URL()
	}
	if o.Bin, err = os.Executable(); err != nil {
		return err
	}
	_, err = chaos.Run(ctx, *o)
	if errors.Is(err, chaos.ErrFailed) {
		return &exitError{1, err}
	}
	return err
}
