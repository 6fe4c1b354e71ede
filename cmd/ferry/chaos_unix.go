//go:build unix && !ferrychaos

package main

// chaosRuns is whether this system can run `ferry chaos`, which pauses
// its ferry processes with SIGSTOP and SIGCONT (internal/chaos is unix
// only).
const chaosRuns = true
