package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// machineLine describes where the run happens, for the header: host, CPU
// model and count, RAM, the 1-minute load average at start, Go, and the
// commit of the checkout (dirty: tracked files changed since it). What
// cannot be read says so instead of failing the run.
func machineLine(ctx context.Context) string {
	host, _ := os.Hostname()
	cpu, ram, load := "CPU model unknown", "RAM unknown", "load unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		cpu = cmpStr(cpuModel(string(b)), cpu)
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kb, ok := memTotalKB(string(b)); ok {
			ram = fmt.Sprintf("%.1f GiB RAM", float64(kb)/(1<<20))
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			load = "load average " + f[0] + " (1 min) at start"
		}
	}
	return fmt.Sprintf("%s, %s/%s, %s, %d CPUs (GOMAXPROCS %d), %s, %s, %s, %s",
		host, runtime.GOOS, runtime.GOARCH, cpu, runtime.NumCPU(), runtime.GOMAXPROCS(0), ram, load, runtime.Version(), commit(ctx))
}

// cpuModel is the first "model name" of /proc/cpuinfo's text.
func cpuModel(cpuinfo string) string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// memTotalKB is MemTotal of /proc/meminfo's text, in kB.
func memTotalKB(meminfo string) (int64, bool) {
	for _, line := range strings.Split(meminfo, "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// commit is the checkout's commit (the bench runs from bench/, so ".."),
// "dirty" when a tracked file differs from it.
func commit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "-C", "..", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "commit unknown"
	}
	c := "commit " + strings.TrimSpace(string(out))
	status, err := exec.CommandContext(ctx, "git", "-C", "..", "status", "--porcelain", "--untracked-files=no").Output()
	switch {
	case err != nil:
		return c + " (dirty or not: unknown)"
	case len(strings.TrimSpace(string(status))) > 0:
		return c + " (dirty)"
	default:
		return c + " (clean)"
	}
}

// moduleVersion is the version of module path this binary was built with
// (its replacement's, if replaced), from the build info.
func moduleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(version unknown)"
	}
	for _, d := range info.Deps {
		if d.Path != path {
			continue
		}
		if d.Replace != nil {
			return d.Replace.Version
		}
		return d.Version
	}
	return "(version unknown)"
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
