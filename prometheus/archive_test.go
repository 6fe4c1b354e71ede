package prometheus_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/prometheus"
	"github.com/ferry-inbox/ferry/storetest"
)

// On a store with a partitioned archive, the collector exports its
// partition count, the age of its oldest partition and how far ahead its
// newest one ends.
func TestArchiveGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := storetest.NewClock()
	store := teststore.Postgres(t, &postgres.Config{Now: clock.Now})
	// Partitions from the retention's start (2 days back) to 3 days ahead.
	if _, err := store.ArchiveMaintain(ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: 48 * time.Hour, Ahead: 72 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	reg := prom.NewRegistry()
	reg.MustRegister(prometheus.NewStatsCollector(prometheus.StatsOptions{Store: store, Sources: []string{"stripe"}}))
	server := httptest.NewServer(prometheus.Handler(reg))
	t.Cleanup(server.Close)
	got := scrape(t, server.URL)
	// The clock stands at 2026-01-02 03:04:05: partitions from Dec 31 to Jan 5.
	oldest := clock.Now().Sub(time.Date(2025, 12, 31, 0, 0, 0, 0, time.UTC)).Seconds()
	ahead := time.Date(2026, 1, 6, 0, 0, 0, 0, time.UTC).Sub(clock.Now()).Seconds()
	if got["ferry_archive_partitions"] != 6 || got["ferry_archive_oldest_partition_age_seconds"] != oldest || got["ferry_archive_ahead_seconds"] != ahead {
		t.Fatalf("archive gauges: partitions %v, oldest age %v, ahead %v; want 6, %v and %v",
			got["ferry_archive_partitions"], got["ferry_archive_oldest_partition_age_seconds"], got["ferry_archive_ahead_seconds"], oldest, ahead)
	}
}
