//go:build !ferrychaos || !unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"
)

// runChaos is `ferry chaos` in an ordinary build, which has no fault hooks
// and no harness: once the flags check out (-h and a bad value cost no
// build), it builds a chaos binary from the Ferry source in the current
// directory (go build -tags ferrychaos, the same race setting as this
// binary) and runs `chaos` in it with the same arguments. So `go run
// ./cmd/ferry chaos ...` works in a checkout, and the ferry a user deploys
// carries no fault switch.
//
// A system without SIGSTOP and SIGCONT (Windows) builds no chaos binary
// (internal/chaos is unix only), and a -tags ferrychaos build there is
// this one again: it says so instead of building.
func runChaos(ctx context.Context, args []string) error {
	if _, err := chaosFlags(args); err != nil {
		return err
	}
	if !chaosRuns {
		return fmt.Errorf("ferry chaos pauses its ferry processes with SIGSTOP and SIGCONT, which %s lacks: run it on Linux or macOS", runtime.GOOS)
	}
	pkg := "github.com/ferry-inbox/ferry/cmd/ferry"
	race, tags := false, []string{"ferrychaos"}
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Path != "" {
			pkg = info.Path
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "-race":
				race = s.Value == "true"
			case "-tags":
				tags = append(tags, strings.Split(s.Value, ",")...)
			}
		}
	}
	dir, err := os.MkdirTemp("", "ferry-chaos-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "ferry-chaos")
	build := []string{"build", "-tags", strings.Join(tags, ","), "-o", bin}
	if race {
		build = append(build, "-race")
	}
	build = append(build, pkg)
	cmd := exec.CommandContext(ctx, "go", build...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the chaos binary (go %s): %w: this ferry has no fault hooks; run `ferry chaos` in a Ferry checkout with Go installed (go run ./cmd/ferry chaos ...), or build one yourself: go build -tags ferrychaos -o ferry-chaos ./cmd/ferry", strings.Join(build, " "), err)
	}

	child := exec.CommandContext(ctx, bin, append([]string{"chaos"}, args...)...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.Cancel = func() error { return child.Process.Signal(syscall.SIGTERM) } // the harness stops its children itself
	child.WaitDelay = time.Minute
	err = child.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() > 0 {
		return &exitError{code: exit.ExitCode()} // the chaos binary has said why
	}
	return err
}
