//go:build !unix

package main

// chaosRuns: no SIGSTOP or SIGCONT here (see chaos_unix.go).
const chaosRuns = false
