package prometheus

import (
	"context"
	"errors"
	"sync"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/catchup"
)

// StatsOptions configure a StatsCollector.
type StatsOptions struct {
	// Store is read at scrape time. Required.
	Store ferry.Store
	// Params says when an event is at risk (AtRiskLimit is ignored).
	Params ferry.EventStatsParams
	// Sources are exported even before they have an event, at zero, so an
	// alert on a gauge never sees it vanish.
	Sources []string
	// CatchupSources are the sources whose catch-up checkpoint age is
	// exported (ferry_catchup_checkpoint_age_seconds), once they have one.
	CatchupSources []string
	// CacheTTL is how long one read of the store answers scrapes: several
	// Prometheus servers, or a fast scrape interval, cost one aggregate query
	// per TTL. Defaults to DefaultCacheTTL.
	CacheTTL time.Duration
	// Timeout bounds one read of the store. Defaults to 5 seconds.
	Timeout time.Duration
	// Now is the process clock the cache ages by. Defaults to time.Now.
	Now func() time.Time
}

// StatsCollector exports the store's state as gauges. Every instance sharing
// a store exports the same values; aggregate with max(), not sum().
type StatsCollector struct {
	opts StatsOptions

	events, oldestPending, oldestDue, oldestInProgress, leaseExpired, unfinished, atRisk, oldestAtRisk, replays, up *prom.Desc
	partitions, oldestPartition, archiveAhead, writable, checkpointAge                                              *prom.Desc

	mu      sync.Mutex
	last    snapshot
	err     error
	pingErr error
	readAt  time.Time
	hasRead bool
}

// snapshot is one read of the store, which a scrape exports whole: a
// concurrent scrape's read replaces it, never changes it.
type snapshot struct {
	stats       *ferry.EventStats
	archive     *ferry.ArchiveInfo
	checkpoints map[string]time.Time // catch-up source → its checkpoint
}

// DefaultCacheTTL is StatsOptions.CacheTTL's default, 10 seconds.
const DefaultCacheTTL = 10 * time.Second

// NewStatsCollector returns a collector to register on the caller's registry.
func NewStatsCollector(opts StatsOptions) *StatsCollector {
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = DefaultCacheTTL
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	desc := func(name, help string, labels ...string) *prom.Desc {
		return prom.NewDesc("ferry_"+name, help, labels, nil)
	}
	return &StatsCollector{
		opts:             opts,
		events:           desc("events", "Events in the store, by source and state.", "source", "state"),
		oldestPending:    desc("oldest_pending_age_seconds", "Age (since first delivery) of the oldest pending event; 0 when none.", "source"),
		oldestDue:        desc("oldest_due_age_seconds", "How long the most overdue pending event has been due (since its next attempt time); events waiting out a backoff do not count; 0 when none is due.", "source"),
		oldestInProgress: desc("oldest_in_progress_age_seconds", "How long the longest-running current attempt has held its event; 0 when none.", "source"),
		leaseExpired:     desc("events_lease_expired", "In-progress events whose lease lapsed: their worker died or stalled.", "source"),
		unfinished:       desc("attempts_unfinished", "Attempts claimed that never reported an end (lease expired); their effect may or may not have happened.", "source"),
		atRisk:           desc("events_at_risk", "Unfinished events older than their source's replay window minus the margin.", "source"),
		oldestAtRisk:     desc("oldest_at_risk_age_seconds", "Age of the oldest at-risk event; 0 when none.", "source"),
		replays:          desc("replays_suspected", "Deliveries of a stored event's body under another event id, answered and never processed (suspected replays).", "source"),
		up:               desc("stats_up", "1 if the last read of the store's stats succeeded, 0 if not."),
		writable:         desc("store_writable", "0 if the store said it is read-only or misconfigured (Store.Ping: ferry.ErrReadOnly, ferry.ErrMisconfigured) or answered nothing at the last read, else 1: a standby after failover, or a role without GRANTs, reads fine and refuses every delivery."),
		partitions:       desc("archive_partitions", "Ranged partitions of the done-event archive; 0 on a store without partitions (SQLite)."),
		oldestPartition:  desc("archive_oldest_partition_age_seconds", "Age of the start of the archive's oldest partition; 0 when none. Growing past retention plus a day means maintenance stopped."),
		checkpointAge:    desc("catchup_checkpoint_age_seconds", "How far behind the store's now the source's catch-up checkpoint is: the settle time (2m) plus up to an interval while passes end ok, growing while they fail or none runs. Absent before the first pass moves it.", "source"),
		archiveAhead:     desc("archive_ahead_seconds", "How far past now the archive's newest partition ends: maintenance keeps it about 7 days; under 6 days, maintenance has not run for a day; at 0, completions land in the default partition (as when maintenance never made one). Absent on a store without partitions (SQLite)."),
	}
}

// Describe sends every descriptor.
func (c *StatsCollector) Describe(ch chan<- *prom.Desc) {
	for _, d := range []*prom.Desc{c.events, c.oldestPending, c.oldestDue, c.oldestInProgress, c.leaseExpired, c.unfinished, c.atRisk, c.oldestAtRisk, c.replays, c.up, c.writable, c.partitions, c.oldestPartition, c.archiveAhead, c.checkpointAge} {
		ch <- d
	}
}

// Collect reads the store unless the cached read is fresh. When the read
// fails, only ferry_stats_up (0) and ferry_store_writable are exported:
// stale gauges would lie.
func (c *StatsCollector) Collect(ch chan<- prom.Metric) {
	snap, writable, err := c.read()
	stats := snap.stats
	if writable {
		ch <- prom.MustNewConstMetric(c.writable, prom.GaugeValue, 1)
	} else {
		ch <- prom.MustNewConstMetric(c.writable, prom.GaugeValue, 0)
	}
	if err != nil {
		ch <- prom.MustNewConstMetric(c.up, prom.GaugeValue, 0)
		return
	}
	ch <- prom.MustNewConstMetric(c.up, prom.GaugeValue, 1)
	seen := map[string]bool{}
	gauge := func(d *prom.Desc, v float64, labels ...string) {
		ch <- prom.MustNewConstMetric(d, prom.GaugeValue, v, labels...)
	}
	age := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return max(0, stats.Now.Sub(t).Seconds())
	}
	emit := func(s *ferry.SourceStats) {
		seen[s.Source] = true
		for _, st := range ferry.States {
			gauge(c.events, float64(s.States[st]), s.Source, string(st))
		}
		gauge(c.oldestPending, age(s.OldestPending), s.Source)
		gauge(c.oldestDue, age(s.OldestDue), s.Source)
		gauge(c.oldestInProgress, age(s.OldestInProgress), s.Source)
		gauge(c.leaseExpired, float64(s.LeaseExpired), s.Source)
		gauge(c.unfinished, float64(s.UnfinishedAttempts), s.Source)
		gauge(c.atRisk, float64(s.AtRisk), s.Source)
		gauge(c.oldestAtRisk, age(s.OldestAtRisk), s.Source)
		gauge(c.replays, float64(s.Replays), s.Source)
	}
	for _, s := range stats.Sources {
		emit(s)
	}
	if a := snap.archive; a != nil {
		gauge(c.partitions, float64(a.Partitions))
		oldest := 0.0
		if !a.Oldest.IsZero() {
			oldest = max(0, a.Now.Sub(a.Oldest).Seconds())
		}
		gauge(c.oldestPartition, oldest)
		if a.Partitioned { // 0 on a store without partitions would read as maintenance stopped
			ahead := 0.0
			if !a.End.IsZero() {
				ahead = max(0, a.End.Sub(a.Now).Seconds())
			}
			gauge(c.archiveAhead, ahead)
		}
	}
	for source, at := range snap.checkpoints {
		gauge(c.checkpointAge, age(at), source)
	}
	for _, name := range c.opts.Sources {
		if !seen[name] {
			emit(&ferry.SourceStats{Source: name})
		}
	}
}

// read returns the cached snapshot, reading the store if it is stale. The
// lock makes concurrent scrapes wait for one read instead of each running it.
func (c *StatsCollector) read() (snap snapshot, writable bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hasRead && c.opts.Now().Sub(c.readAt) < c.opts.CacheTTL {
		return c.last, c.storeWritable(), c.err
	}
	// Every instance sees 503s stop when /readyz takes them out of the
	// load balancer: the write check's gauge still says why. It runs beside
	// the stats read, each within Timeout: a store that hangs answers the
	// scrape in one Timeout (5 s), inside Prometheus's 10 s scrape timeout,
	// so the gauges that page say so instead of the target going stale.
	pinged := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
		defer cancel()
		pinged <- c.opts.Store.Ping(ctx)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	params := c.opts.Params
	params.AtRiskLimit = 0
	c.last = snapshot{}
	c.last.stats, c.err = c.opts.Store.EventStats(ctx, &params)
	if c.err == nil {
		c.last.archive, c.err = c.opts.Store.ArchiveInfo(ctx)
	}
	if c.err == nil {
		// Its own error: a checkpoint read that fails leaves its gauges out
		// (FerryCatchupFailing then counts the source as never moved), and
		// never takes the store's gauges or ferry_stats_up down with it.
		c.last.checkpoints = c.readCheckpoints(ctx)
	}
	select {
	case c.pingErr = <-pinged:
	case <-ctx.Done(): // a Ping that ignores its deadline: the buffer lets it end later
		c.pingErr = ctx.Err()
	}
	c.readAt, c.hasRead = c.opts.Now(), true
	return c.last, c.storeWritable(), c.err
}

// readCheckpoints reads each catch-up source's checkpoint: the state every
// instance shares, so its age survives restarts, where a process's own
// record of its last ok pass would start afresh. A source without one yet,
// one that could not be read, or one no time parses from, is left out.
func (c *StatsCollector) readCheckpoints(ctx context.Context) map[string]time.Time {
	out := map[string]time.Time{}
	for _, source := range c.opts.CatchupSources {
		if _, at, err := catchup.ReadCheckpoint(ctx, c.opts.Store, source); err == nil {
			out[source] = at
		}
	}
	return out
}

// storeWritable is what the last read says of writes: not if the store said
// it is read-only or misconfigured, or answered nothing at all; a Ping that
// only failed while the stats read worked (a timeout) is no "cannot write"
// to page on.
func (c *StatsCollector) storeWritable() bool {
	if errors.Is(c.pingErr, ferry.ErrReadOnly) || errors.Is(c.pingErr, ferry.ErrMisconfigured) {
		return false
	}
	return c.pingErr == nil || c.err == nil
}
