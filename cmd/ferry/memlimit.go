package main

import (
	"math"
	"runtime/debug"
	"strconv"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/config"
)

// memoryLimitBase is the part of serve's soft memory limit that is not
// bodies: the runtime, the connections' buffers, the drivers' pools and
// caches, and the room the collector needs to run without thrashing.
const memoryLimitBase = 32 << 20

// memoryLimit is the soft memory limit (runtime/debug.SetMemoryLimit)
// serve sets when GOMEMLIMIT is not in its environment, derived from the
// byte budgets of what this process runs:
//
//   - the receiver's bodies in flight, http.max_in_flight (8 MiB by
//     default, or the largest source's max_body if larger; never less);
//   - the worker's held events, ferry.DefaultMaxHeldBytes (16 MiB), plus
//     one largest body for each of its two claims in flight.
//
// Each budgeted byte is counted twice (a body is held at once by its owner
// and by the store driver's encoding or read buffer), and memoryLimitBase
// is added: 32 + 2 × (8 + 16 + 2) = 84 MiB with the defaults and --role
// all. Without it the collector lets the heap grow to twice what is live
// (GOGC=100), which the rss benchmark's worst case (64 connections sending
// 1 MiB bodies) took to a peak RSS near 128 MB. The limit is soft: past
// it the collector runs more often (at most half the CPU), it never
// refuses an allocation.
func memoryLimit(cfg *config.Config, runsReceiver, runsWorker bool) int64 {
	var maxBody int64
	for _, s := range cfg.Sources {
		maxBody = max(maxBody, s.MaxBody)
	}
	var budget int64
	if runsReceiver {
		budget = cfg.HTTP.MaxInFlight
	}
	if runsWorker {
		budget = addSaturating(budget, addSaturating(ferry.DefaultMaxHeldBytes, addSaturating(maxBody, maxBody)))
	}
	return addSaturating(memoryLimitBase, addSaturating(budget, budget))
}

// addSaturating is a + b for non-negative a and b, math.MaxInt64 where the
// sum would overflow: a limit that wrapped negative would be no limit's
// opposite. Config bounds the budgets; this holds without them.
func addSaturating(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// setMemoryLimit applies memoryLimit unless GOMEMLIMIT is set (the runtime
// has applied it, "off" included), and returns the limit in force, in
// GOMEMLIMIT's own notation for the log.
func setMemoryLimit(cfg *config.Config, runsReceiver, runsWorker bool, getenv func(string) string) string {
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit(cfg, runsReceiver, runsWorker))
	}
	limit := debug.SetMemoryLimit(-1) // -1 reads the limit without changing it
	switch {
	case limit == math.MaxInt64:
		return "off"
	case limit%(1<<20) == 0:
		return strconv.FormatInt(limit>>20, 10) + "MiB"
	}
	return strconv.FormatInt(limit, 10) + "B"
}
