package main

import (
	"strings"
	"testing"
)

// migrate names the migrations it applied, and says only that the schema
// is up to date when none was pending.
func TestMigrateSaysWhatItApplied(t *testing.T) {
	t.Parallel()
	storeURL, _ := cliStores()[0].setup(t)
	cfg := writeCLIConfig(t, storeURL, "")
	stdout, stderr, code := runFerry(t, "migrate", "--config", cfg)
	if code != 0 || !strings.HasSuffix(stdout, "ferry: applied 4 migration(s): 001_initial, 002_operations, 003_archive, 004_pending_due_source; schema up to date\n") {
		t.Errorf("first migrate: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = runFerry(t, "migrate", "--config", cfg)
	if code != 0 || stdout != "ferry: schema up to date\n" {
		t.Errorf("second migrate: exit %d, stdout %q %s; want only schema up to date", code, stdout, stderr)
	}
}
