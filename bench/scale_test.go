package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry/postgres"
)

// The archive layout's retention step removes what the layout before 003's
// one DELETE removes: the old day's events and their dedupe keys, so that
// its time is compared with the DELETE's like for like.
func TestArchiveRetainPurgesTheOldDaysKeys(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := cmpEnv("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	_, pool, release, err := createSchemaPool(ctx, url, "test_retain", 4)
	if err != nil {
		t.Skipf("no PostgreSQL at %s: %v", redact(url), err)
	}
	defer release()
	if err := postgres.New(pool, nil).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := archiveLoad(ctx, pool, 0, 30); err != nil {
		t.Fatal(err)
	}
	if err := archiveOldDay(ctx, pool, 50); err != nil {
		t.Fatal(err)
	}
	layoutSQL := func(file string) (string, error) {
		b, err := os.ReadFile(filepath.Join("..", "postgres", "query", file))
		return string(b), err
	}
	steps, err := archiveRetain(layoutSQL)(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	var oldKeys, oldEvents, loadKeys int
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM ferry_event_key WHERE event_id LIKE 'evt_old_%'),
		(SELECT count(*) FROM ferry_event_done WHERE event_id LIKE 'evt_old_%'),
		(SELECT count(*) FROM ferry_event_key WHERE event_id LIKE 'evt_load_%')`).Scan(&oldKeys, &oldEvents, &loadKeys); err != nil {
		t.Fatal(err)
	}
	if oldKeys != 0 || oldEvents != 0 {
		t.Errorf("after retention: %d keys and %d events of the old day left, want none (%s)", oldKeys, oldEvents, steps)
	}
	if loadKeys != 30 {
		t.Errorf("after retention: %d keys of the recent days, want all 30", loadKeys)
	}
	if !strings.Contains(steps, "50 keys") {
		t.Errorf("retention steps %q: want the 50 purged keys named", steps)
	}
}

// Every *_x of the scale line is the largest size's figure ÷ the first's,
// as docs/benchmarks.md says: list taking longer at the largest size reads
// above 1.
func TestScaleSummaryRatiosAreLargestOverFirst(t *testing.T) {
	t.Parallel()
	first := &scaleSample{rows: 1_000_000, receiveRPS: 4000, claimRPS: 10000, list: 100 * time.Millisecond}
	last := &scaleSample{rows: 20_000_000, receiveRPS: 2000, claimRPS: 5000, list: 150 * time.Millisecond}
	line := scaleSummary([]*scaleSample{first, last}, nil)
	for _, want := range []string{"rows=20000000", "receive_x=0.50", "claim_x=0.50", "list_x=1.50", "before_claim_x=NA"} {
		if !strings.Contains(line, want) {
			t.Errorf("scale line %q: want %s", line, want)
		}
	}
}
