package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionResolve(t *testing.T) {
	t.Parallel()
	info := &debug.BuildInfo{
		GoVersion: "go1.99.1",
		Main:      debug.Module{Path: "github.com/ferry-inbox/ferry", Version: "v0.3.1"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef"},
			{Key: "vcs.time", Value: "2026-11-30T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}

	t.Run("FallsBackToBuildInfo", func(t *testing.T) {
		t.Parallel()
		got := resolveBuild(build{}, info)
		want := build{Version: "v0.3.1", Commit: "0123456789abcdef-dirty", GoVersion: "go1.99.1", Date: "2026-11-30T10:00:00Z (commit time)"}
		if got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("StampedValuesWin", func(t *testing.T) {
		t.Parallel()
		got := resolveBuild(build{Version: "v1.0.0", Commit: "feedbeef", Date: "2026-12-01T00:00:00Z"}, info)
		want := build{Version: "v1.0.0", Commit: "feedbeef", GoVersion: "go1.99.1", Date: "2026-12-01T00:00:00Z"}
		if got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("NothingKnown", func(t *testing.T) {
		t.Parallel()
		got := resolveBuild(build{}, nil)
		if got.Version != "unknown" || got.Commit != "unknown" || got.Date != "unknown" || !strings.HasPrefix(got.GoVersion, "go") {
			t.Errorf("got %+v, want unknown version, commit and date and this toolchain's Go version", got)
		}
	})
}

// TestVersionCommand builds the binary the way `make release` does (the same
// -X names) and the way `go build` does in a clone (VCS info only), and runs
// both spellings of the command.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git for the VCS stamp")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	// -race as in TestMain: the dependencies are then already compiled, and
	// each build is a link (without it, each compiled them all again).
	goBuild := func(t *testing.T, args ...string) string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "ferry")
		cmd := exec.Command("go", append(append([]string{"build", "-race", "-o", bin}, args...), ".")...)
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		return bin
	}
	version := func(t *testing.T, bin string, arg string) string {
		t.Helper()
		out, err := exec.Command(bin, arg).Output()
		if err != nil {
			t.Fatalf("%s %s: %v", bin, arg, err)
		}
		return string(out)
	}

	t.Run("Stamped", func(t *testing.T) {
		t.Parallel()
		bin := goBuild(t, "-buildvcs=false", "-ldflags",
			"-X main.version=v9.8.7-test -X main.commit=c0ffee -X main.date=2026-11-30T12:00:00Z")
		for _, arg := range []string{"version", "--version"} {
			out := version(t, bin, arg)
			for _, want := range []string{"ferry v9.8.7-test\n", "commit: c0ffee\n", "go: go1.", "built: 2026-11-30T12:00:00Z\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("ferry %s printed\n%s\nwant it to contain %q", arg, out, want)
				}
			}
		}
	})
	t.Run("FromVCS", func(t *testing.T) {
		t.Parallel()
		// The go command stamps VCS info only when .git is a directory; a
		// `git worktree` has a .git file and gets none.
		if fi, err := os.Stat(filepath.Join("..", "..", ".git")); err != nil || !fi.IsDir() {
			t.Skip("not a plain git clone (a worktree?): the go command records no VCS info here")
		}
		bin := goBuild(t, "-buildvcs=true")
		out := version(t, bin, "version")
		if want := "commit: " + strings.TrimSpace(string(head)); !strings.Contains(out, want) {
			t.Errorf("ferry version printed\n%s\nwant it to contain %q", out, want)
		}
		if !strings.Contains(out, "(commit time)") {
			t.Errorf("ferry version printed\n%s\nwant the commit time as the date", out)
		}
	})
}
