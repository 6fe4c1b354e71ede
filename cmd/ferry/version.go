package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

// Stamped by the release build (make release):
//
//	go build -ldflags "-X main.version=v0.4.0 -X main.commit=<sha> -X main.date=<RFC 3339>"
//
// A build without them (go build, go install) reports what the Go toolchain
// recorded instead: the module version and the VCS revision and commit time.
var (
	version string
	commit  string
	date    string
)

// build is what `ferry version` prints.
type build struct {
	Version   string
	Commit    string
	GoVersion string
	Date      string
}

// currentBuild merges the stamped values with the toolchain's build info.
func currentBuild() build {
	info, _ := debug.ReadBuildInfo()
	return resolveBuild(build{Version: version, Commit: commit, Date: date}, info)
}

// resolveBuild prefers each stamped value and falls back to info (nil when
// the binary has none): Main.Version, vcs.revision (marked "-dirty" when
// vcs.modified) and vcs.time, the commit's time, as the date is not
// recorded. What neither knows reads "unknown".
func resolveBuild(stamped build, info *debug.BuildInfo) build {
	b := stamped
	b.GoVersion = runtime.Version()
	if info != nil {
		b.GoVersion = info.GoVersion
		var revision, modified, vcsTime string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			case "vcs.time":
				vcsTime = s.Value
			}
		}
		if revision != "" && modified == "true" {
			revision += "-dirty"
		}
		if b.Version == "" && info.Main.Version != "" {
			b.Version = info.Main.Version // "(devel)" for a build inside the repository
		}
		if b.Commit == "" {
			b.Commit = revision
		}
		if b.Date == "" && vcsTime != "" {
			b.Date = vcsTime + " (commit time)"
		}
	}
	for _, v := range []*string{&b.Version, &b.Commit, &b.Date} {
		if *v == "" {
			*v = "unknown"
		}
	}
	return b
}

func (b build) write(w io.Writer) {
	fmt.Fprintf(w, "ferry %s\ncommit: %s\ngo: %s\nbuilt: %s\n", b.Version, b.Commit, b.GoVersion, b.Date)
}

func runVersion(_ context.Context, args []string) error {
	fs := newFlags("version", "",
		`Prints the version, commit, Go version and build date: the values a release
build stamps, else what the Go toolchain recorded.`)
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return usagef("version takes no arguments, got %q", positional)
	}
	currentBuild().write(os.Stdout)
	return nil
}
