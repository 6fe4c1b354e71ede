package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry"
)

// The scale benchmark stores many done events (1 KB payloads, one ledger
// row each) under a standing pending backlog, and measures at each size
// what must not grow with history: a cold /metrics scrape, the dashboard
// overview, the first page of `ferry events list` and `ferry doctor` (the
// last two again after the write runs), receipts through the real
// receiver, claim + complete, and one retention step on a day of events.
// It runs the archive layout (this checkout) and the layout before it (the
// binary and SQL of the revision before migration 003, built from git),
// each in its own schema.

// scaleLayout is one storage layout under test.
type scaleLayout struct {
	name string
	bin  string                            // its ferry binary
	sql  func(file string) (string, error) // its postgres/query/<file>
	// load adds done events [from, to) completed within the last 3 days;
	// backlog adds n pending events; oldDay adds n done events completed 40
	// days ago (what one retention step removes).
	load    func(ctx context.Context, pool *pgxpool.Pool, from, to int) error
	backlog func(ctx context.Context, pool *pgxpool.Pool, prefix string, n int) error
	oldDay  func(ctx context.Context, pool *pgxpool.Pool, n int) error
	// retain runs one retention step that removes the old day and
	// everything of it, its dedupe keys included, and says what it ran.
	retain func(ctx context.Context, pool *pgxpool.Pool) (string, error)
}

// scaleSample is what one layout measured at one size.
type scaleSample struct {
	rows                                       int
	load                                       time.Duration
	diskMB                                     float64
	receiveRPS                                 float64
	receiveP99                                 time.Duration
	claimRPS                                   float64
	claimP99                                   time.Duration
	list, metrics, overview, doctor, retention time.Duration
	retainSteps                                string // what retention ran, with the time of each step
	// listChurned and doctorChurned are list and doctor again right after
	// the receipt and claim runs, before autovacuum has seen their churn.
	listChurned, doctorChurned time.Duration
	// failed names the views that gave no answer (the layout before 003
	// cannot serve some at 20M), with their errors; their times are how
	// long they took to fail.
	failed []string
}

const scaleToken = "bench-admin-token"

func runScale(ctx context.Context, o *options) (*result, error) {
	after := &scaleLayout{name: "archive", sql: func(file string) (string, error) {
		b, err := os.ReadFile(filepath.Join("..", "postgres", "query", file))
		return string(b), err
	}}
	var err error
	if after.bin, err = ferryBinary(ctx, o.tmp); err != nil {
		return nil, err
	}
	after.load, after.backlog, after.oldDay, after.retain = archiveLoad, archiveBacklog, archiveOldDay, archiveRetain(after.sql)
	layouts := []*scaleLayout{after}
	if o.scaleBefore {
		before, err := beforeLayout(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("the layout before: %w", err)
		}
		layouts = append(layouts, before)
	}
	samples := map[string][]*scaleSample{}
	for _, l := range layouts {
		s, err := scaleLayoutRun(ctx, o, l)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l.name, err)
		}
		samples[l.name] = s
	}
	res := &result{summary: map[string]string{}}
	for _, l := range layouts {
		for _, s := range samples[l.name] {
			res.rows = append(res.rows, []string{fmt.Sprintf("scale %s %d", l.name, s.rows), "",
				fmt.Sprintf("load %s (%.0f MB); receive %.0f/s p99 %s; claim+complete %.0f/s, claim p99 %s; list %s; metrics %s; overview %s; doctor %s; retention %s (%s); after the runs: list %s, doctor %s",
					s.load.Round(time.Second), s.diskMB, s.receiveRPS, ms(s.receiveP99), s.claimRPS, ms(s.claimP99),
					ms(s.list), ms(s.metrics), ms(s.overview), ms(s.doctor), ms(s.retention), s.retainSteps, ms(s.listChurned), ms(s.doctorChurned)) + failedNote(s)})
		}
	}
	res.summary["scale"] = scaleSummary(samples[after.name], samples["before"])
	return res, nil
}

// scaleSummary is scale's last line: the largest size of the archive layout
// a, and each *_x the largest size's figure ÷ the first's: for the rates
// (receive, claim) above 1 is faster at the largest size, for list's time
// above 1 is slower. before is the layout before 003, if it ran.
func scaleSummary(a, before []*scaleSample) string {
	first, last := a[0], a[len(a)-1]
	line := fmt.Sprintf("rows=%d receive_x=%.2f claim_x=%.2f list_x=%.2f metrics_ms=%.0f overview_ms=%.0f doctor_ms=%.0f retention_ms=%.0f",
		last.rows, last.receiveRPS/first.receiveRPS, last.claimRPS/first.claimRPS, float64(last.list)/float64(first.list),
		msf(last.metrics), msf(last.overview), msf(last.doctor), msf(last.retention))
	if len(last.failed) > 0 {
		line += " failed=" + strconv.Itoa(len(last.failed))
	}
	if len(before) > 0 {
		line += fmt.Sprintf(" before_claim_x=%.2f", before[len(before)-1].claimRPS/before[0].claimRPS)
	} else {
		line += " before_claim_x=NA"
	}
	return line
}

// scaleLayoutRun loads one layout to each size in turn and measures it.
func scaleLayoutRun(ctx context.Context, o *options, l *scaleLayout) ([]*scaleSample, error) {
	s, err := createSchema(ctx, o.url, "scale")
	if err != nil {
		return nil, err
	}
	defer s.drop()
	cfgPath := filepath.Join(o.tmp, "scale-"+l.name+".toml")
	// configTOML already opens [admin] on a free port; the views measured
	// here also need its token.
	cfg := strings.Replace(configTOML(s.url, "http://127.0.0.1:9/unused", "", 0),
		"[admin]\n", fmt.Sprintf("[admin]\ntoken = %q\n", scaleToken), 1)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, l.bin, "migrate", "--config", cfgPath).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("migrate: %v: %s", err, out)
	}
	pool, err := s.pool(ctx, "bench_scale", 8)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	var samples []*scaleSample
	loaded := 0
	for _, size := range o.scaleSizes {
		sample := &scaleSample{rows: size}
		t := time.Now()
		for from := loaded; from < size; from += 1_000_000 {
			if err := l.load(ctx, pool, from, min(size, from+1_000_000)); err != nil {
				return nil, fmt.Errorf("load: %w", err)
			}
		}
		loaded = size
		if err := topUpBacklog(ctx, pool, l, o.scaleBacklog); err != nil {
			return nil, fmt.Errorf("backlog: %w", err)
		}
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
			return nil, err
		}
		sample.load = time.Since(t)
		// The load's writeback is not the store's: flush it before measuring
		// (the server's dirty buffers, then the host's), at every size alike.
		if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
			return nil, err
		}
		if out, err := exec.CommandContext(ctx, "sync").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("sync: %v: %s", err, out)
		}
		if err := pool.QueryRow(ctx, `SELECT sum(pg_total_relation_size(c.oid))::float8 / 1e6 FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'`).Scan(&sample.diskMB); err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "  scale %s: %d done events + %d pending loaded in %s, %.0f MB\n", l.name, size, o.scaleBacklog, sample.load.Round(time.Second), sample.diskMB)
		if err := scaleMeasure(ctx, o, l, pool, cfgPath, cfg, sample); err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "  scale %s %d: receive %.0f/s p99 %s, claim+complete %.0f/s p99 %s, list %s, metrics %s, overview %s, doctor %s, retention %s (%s); after the runs: list %s, doctor %s\n",
			l.name, size, sample.receiveRPS, ms(sample.receiveP99), sample.claimRPS, ms(sample.claimP99),
			ms(sample.list), ms(sample.metrics), ms(sample.overview), ms(sample.doctor), ms(sample.retention), sample.retainSteps,
			ms(sample.listChurned), ms(sample.doctorChurned))
		if len(sample.failed) > 0 {
			fmt.Fprintf(os.Stderr, "  scale %s %d:%s\n", l.name, size, failedNote(sample))
		}
		samples = append(samples, sample)
	}
	return samples, nil
}

// topUpBacklog brings the pending backlog back to n events.
func topUpBacklog(ctx context.Context, pool *pgxpool.Pool, l *scaleLayout, n int) error {
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ferry_event WHERE state = 'pending'`).Scan(&pending); err != nil {
		return err
	}
	if pending >= n {
		return nil
	}
	return l.backlog(ctx, pool, fmt.Sprintf("evt_backlog_%d_", time.Now().UnixNano()), n-pending)
}

func scaleMeasure(ctx context.Context, o *options, l *scaleLayout, pool *pgxpool.Pool, cfgPath, cfg string, sample *scaleSample) error {
	timed := func(args ...string) (time.Duration, error) {
		t := time.Now()
		cmd := exec.CommandContext(ctx, l.bin, args...)
		out, err := cmd.CombinedOutput()
		if _, exit := err.(*exec.ExitError); err != nil && !exit {
			return 0, fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return time.Since(t), nil
	}
	list := func() (time.Duration, error) { return timed("events", "list", "--limit", "20", "--config", cfgPath) }
	doctor := func() (time.Duration, error) { return timed("doctor", "--config", cfgPath) }

	c, err := startServeBin(ctx, l.bin, o.tmp, "scale-"+l.name, cfg, "receiver")
	if err != nil {
		return err
	}
	defer c.stop() // on an error return; stopping twice is harmless
	// A view that fails is recorded with the time it took to fail, and the
	// run goes on.
	view := func(name string, d *time.Duration, f func() (time.Duration, error)) {
		t := time.Now()
		var err error
		if *d, err = f(); err != nil {
			*d = time.Since(t)
			sample.failed = append(sample.failed, fmt.Sprintf("%s: %v", name, err))
		}
	}
	// The operator views of the store as loaded, each from a fresh process
	// (no cached stats): the first scrape, the overview, a list, doctor.
	view("metrics", &sample.metrics, func() (time.Duration, error) { return adminGet(ctx, c.admin, "/metrics") })
	view("overview", &sample.overview, func() (time.Duration, error) { return adminGet(ctx, c.admin, "/ui/") })
	view("list", &sample.list, list)
	view("doctor", &sample.doctor, doctor)
	// Receipts through `ferry serve --role receiver` of the layout, then
	// claims and completions, alternating for o.rounds rounds; the medians.
	var recvRPS, claimRPS []float64
	var recvP99, claimP99 []time.Duration
	for round := range o.rounds {
		lr, err := closedLoop(ctx, "http://"+c.addr+"/webhooks/stripe", fmt.Sprintf("evt_scale_%d_r%d_", sample.rows, round), o.clients, time.Second, o.scaleDur)
		if err != nil {
			return err
		}
		recvRPS, recvP99 = append(recvRPS, lr.rps()), append(recvP99, lr.p99())
		// Each claim round starts from the same standing backlog.
		if err := topUpBacklog(ctx, pool, l, o.scaleBacklog); err != nil {
			return fmt.Errorf("backlog: %w", err)
		}
		rps, p99, err := claimComplete(ctx, l, pool, o.scaleDur)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		claimRPS, claimP99 = append(claimRPS, rps), append(claimP99, p99)
	}
	c.stop()
	sample.receiveRPS, sample.receiveP99 = median(recvRPS), medianDur(recvP99)
	sample.claimRPS, sample.claimP99 = median(claimRPS), medianDur(claimP99)
	fmt.Fprintf(os.Stderr, "  scale %s %d: receive/s by round %s, claim+complete/s by round %s\n", l.name, sample.rows, fmtFloats(recvRPS), fmtFloats(claimRPS))
	view("list after the runs", &sample.listChurned, list)
	view("doctor after the runs", &sample.doctorChurned, doctor)
	day := max(10_000, sample.rows/30) // a day of a 30-day retention
	if err := l.oldDay(ctx, pool, day); err != nil {
		return fmt.Errorf("old day: %w", err)
	}
	t := time.Now()
	if sample.retainSteps, err = l.retain(ctx, pool); err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	sample.retention = time.Since(t)
	return nil
}

// failedNote lists the views of s that gave no answer.
func failedNote(s *scaleSample) string {
	if len(s.failed) == 0 {
		return ""
	}
	return "; no answer: " + strings.Join(s.failed, "; ")
}

func adminGet(ctx context.Context, addr, path string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+scaleToken)
	t := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return time.Since(t), nil
}

// claimComplete runs 4 workers, each claiming 100 events and completing
// them in one statement, with the layout's own SQL, for dur.
func claimComplete(ctx context.Context, l *scaleLayout, pool *pgxpool.Pool, dur time.Duration) (float64, time.Duration, error) {
	claimSQL, err := l.sql("event_claim_many.sql")
	if err != nil {
		return 0, 0, err
	}
	completeSQL, err := l.sql("event_complete_many.sql")
	if err != nil {
		return 0, 0, err
	}
	var (
		mu     sync.Mutex
		claims []time.Duration
		done   int
		first  error
		wg     sync.WaitGroup
	)
	deadline := time.Now().Add(dur)
	for w := range 4 {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t := time.Now()
				rows, _ := pool.Query(ctx, claimSQL, pgx.NamedArgs{
					"now": nil, "owner": fmt.Sprint("bench-", w), "limit": 100, "ttl_us": int64(time.Minute / time.Microsecond),
					"sources": []string{}, "hold_sources": []string{},
					// No payload budget (a layout whose claim has none ignores it;
					// left out, NULL would claim one event a call).
					"max_bytes": 0,
				})
				var ids []int64
				var attempts []int32
				idCol, attemptCol := -1, -1
				for i, f := range rows.FieldDescriptions() {
					switch f.Name {
					case "id":
						idCol = i
					case "attempt":
						attemptCol = i
					}
				}
				for rows.Next() {
					v, err := rows.Values()
					if err != nil {
						break
					}
					ids = append(ids, v[idCol].(int64))
					attempts = append(attempts, v[attemptCol].(int32))
				}
				rows.Close()
				took := time.Since(t)
				if err := rows.Err(); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
					return
				}
				if len(ids) == 0 {
					continue
				}
				if _, err := pool.Exec(ctx, completeSQL, pgx.NamedArgs{"now": nil, "ids": ids, "attempts": attempts}); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
					return
				}
				mu.Lock()
				claims = append(claims, took)
				done += len(ids)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return 0, 0, first
	}
	return float64(done) / dur.Seconds(), percentile(claims, 0.99), nil
}

// The archive layout's loaders.

const scalePayload = `convert_to(repeat(md5(n::text), 32), 'UTF8')` // 1,024 bytes, one per event

func archiveLoad(ctx context.Context, pool *pgxpool.Pool, from, to int) error {
	return archiveInsertDone(ctx, pool, "evt_load_", from, to, "now() - (n % 3) * interval '1 day' - interval '1 hour'")
}

func archiveOldDay(ctx context.Context, pool *pgxpool.Pool, n int) error {
	return archiveInsertDone(ctx, pool, fmt.Sprintf("evt_old_%d_", time.Now().UnixNano()), 0, n, "now() - interval '40 days'")
}

// archiveInsertDone writes done events with their keys, ledger rows, done
// counts and partitions, as completions would have.
func archiveInsertDone(ctx context.Context, pool *pgxpool.Pool, prefix string, from, to int, completed string) error {
	_, err := pool.Exec(ctx, `SELECT ferry_archive_create(d::date, d::date + 1, now())
		FROM generate_series((now() - interval '40 days')::date, (now() + interval '7 days')::date, interval '1 day') d
		WHERE d::date = ((now() - interval '40 days') AT TIME ZONE 'UTC')::date OR d >= now() - interval '4 days'`)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `
		WITH g AS MATERIALIZED (
		    SELECT nextval(pg_get_serial_sequence('ferry_event', 'id')) AS id, $1::text || n AS key, n,
		           `+completed+` AS completed_at
		    FROM generate_series($2::int, $3::int - 1) n
		),
		k AS (
		    INSERT INTO ferry_event_key (source, event_id, id, payload_sha256, received_at)
		    SELECT 'stripe', key, id, sha256(convert_to(key, 'UTF8')), completed_at - interval '1 minute' FROM g
		),
		a AS (
		    INSERT INTO ferry_attempt_done (event_id, attempt, worker, started_at, finished_at, outcome, http_status, completed_at)
		    SELECT id, 1, 'bench', completed_at - interval '1 second', completed_at, 'done', 200, completed_at FROM g
		),
		c AS (
		    INSERT INTO ferry_done_count AS c (source, day, shard, n)
		    SELECT 'stripe', (completed_at AT TIME ZONE 'UTC')::date, 0, count(*) FROM g GROUP BY 2
		    ON CONFLICT (source, day, shard) DO UPDATE SET n = c.n + excluded.n
		)
		INSERT INTO ferry_event_done (id, source, event_id, type, payload, payload_sha256, state, attempt,
		                              next_attempt_at, first_delivered_at, last_delivered_at, claimed_at, completed_at)
		SELECT id, 'stripe', key, 'invoice.paid', `+scalePayload+`, sha256(convert_to(key, 'UTF8')), 'done', 1,
		       completed_at - interval '1 minute', completed_at - interval '1 minute', completed_at - interval '1 minute',
		       completed_at - interval '1 second', completed_at
		FROM g`, prefix, from, to)
	return err
}

func archiveBacklog(ctx context.Context, pool *pgxpool.Pool, prefix string, n int) error {
	_, err := pool.Exec(ctx, `
		WITH g AS MATERIALIZED (
		    SELECT nextval(pg_get_serial_sequence('ferry_event', 'id')) AS id, $1::text || n AS key, n
		    FROM generate_series(1, $2::int) n
		),
		k AS (
		    INSERT INTO ferry_event_key (source, event_id, id, payload_sha256, received_at)
		    SELECT 'stripe', key, id, sha256(convert_to(key, 'UTF8')), now() FROM g
		)
		INSERT INTO ferry_event (id, source, event_id, type, payload, payload_sha256, next_attempt_at, first_delivered_at, last_delivered_at)
		SELECT id, 'stripe', key, 'invoice.paid', `+scalePayload+`, sha256(convert_to(key, 'UTF8')), now(), now(), now() FROM g`, prefix, n)
	return err
}

// scaleRetention is the retention of scale's retention step: the old day
// (40 days) is past it, the loaded days (the last 3) are not.
const scaleRetention = 35 * 24 * time.Hour

// archiveRetain is the archive layout's retention step, as maintenance
// runs it (postgres.Store.ArchiveMaintain) with the layout's SQL: drop the
// partition 40 days old (the detach, which completions wait for, then its
// side rows and tables, two transactions), then purge the dedupe keys whose event is gone, in
// batches of ferry.ArchiveKeyBatchDefault, one transaction each. The layout
// before 003 removes the keys with the rows, in its one DELETE; both parts
// are timed here.
func archiveRetain(layoutSQL func(string) (string, error)) func(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	return func(ctx context.Context, pool *pgxpool.Pool) (string, error) {
		purgeSQL, err := layoutSQL("archive_keys_purge.sql")
		if err != nil {
			return "", err
		}
		forgetSQL, err := layoutSQL("archive_keys_forget.sql")
		if err != nil {
			return "", err
		}
		t := time.Now()
		var detach time.Duration
		for _, step := range []string{"ferry_archive_detach", "ferry_archive_drop_detached"} {
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '2s'"); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `SELECT `+step+`(name) FROM ferry_event_done_partition
					WHERE from_day = ((now() - interval '40 days') AT TIME ZONE 'UTC')::date`)
				return err
			}); err != nil {
				return "", fmt.Errorf("drop: %s: %w", step, err)
			}
			if detach == 0 {
				detach = time.Since(t)
			}
		}
		drop := time.Since(t)
		t = time.Now()
		keys, batches := 0, 0
		for {
			var n int
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				rows, _ := tx.Query(ctx, purgeSQL, pgx.NamedArgs{
					"now": nil, "source": "", "key_retention_us": int64(scaleRetention / time.Microsecond), "batch": ferry.ArchiveKeyBatchDefault,
				})
				ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil || len(ids) == 0 {
					return err
				}
				n = len(ids)
				_, err = tx.Exec(ctx, forgetSQL, pgx.NamedArgs{"ids": ids})
				return err
			})
			if err != nil {
				return "", fmt.Errorf("key purge: %w", err)
			}
			keys, batches = keys+n, batches+1
			if n < ferry.ArchiveKeyBatchDefault {
				break
			}
		}
		return fmt.Sprintf("partition drop %s (detach %s) + key purge %s: %d keys in %d batches", ms(drop), ms(detach), ms(time.Since(t)), keys, batches), nil
	}
}

// beforeLayout builds the binary of the revision before migration 003 and
// reads its SQL from git.
func beforeLayout(ctx context.Context, o *options) (*scaleLayout, error) {
	rev := o.scaleBeforeRev
	if rev == "" {
		out, err := exec.CommandContext(ctx, "git", "-C", "..", "log", "-1", "--format=%H", "--diff-filter=A", "--", "postgres/migration/003_archive.sql").Output()
		if err != nil || strings.TrimSpace(string(out)) == "" {
			return nil, fmt.Errorf("find the commit that added migration 003 (set -scale-before-rev): %v", err)
		}
		rev = strings.TrimSpace(string(out)) + "^"
	}
	src := filepath.Join(o.tmp, "before-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	archive := exec.CommandContext(ctx, "sh", "-c", "git -C .. archive "+rev+" | tar -x -C "+src)
	if out, err := archive.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("git archive %s: %v: %s", rev, err, out)
	}
	bin := filepath.Join(o.tmp, "ferry-before")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/ferry")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build %s: %v: %s", rev, err, out)
	}
	l := &scaleLayout{name: "before", bin: bin, sql: func(file string) (string, error) {
		b, err := os.ReadFile(filepath.Join(src, "postgres", "query", file))
		return string(b), err
	}}
	l.load = func(ctx context.Context, pool *pgxpool.Pool, from, to int) error {
		return beforeInsert(ctx, pool, "evt_load_", from, to, "'done'", "now() - (n % 3) * interval '1 day' - interval '1 hour'")
	}
	l.oldDay = func(ctx context.Context, pool *pgxpool.Pool, n int) error {
		return beforeInsert(ctx, pool, fmt.Sprintf("evt_old_%d_", time.Now().UnixNano()), 0, n, "'done'", "now() - interval '40 days'")
	}
	l.backlog = func(ctx context.Context, pool *pgxpool.Pool, prefix string, n int) error {
		return beforeInsert(ctx, pool, prefix, 0, n, "'pending'", "NULL::timestamptz")
	}
	purgeSQL, err := l.sql("event_purge.sql")
	if err != nil {
		return nil, err
	}
	l.retain = func(ctx context.Context, pool *pgxpool.Pool) (string, error) {
		tag, err := pool.Exec(ctx, purgeSQL, pgx.NamedArgs{"now": nil, "source": "stripe", "retention_us": int64(scaleRetention / time.Microsecond)})
		return fmt.Sprintf("one DELETE of %d events, keys with them", tag.RowsAffected()), err
	}
	return l, nil
}

func beforeInsert(ctx context.Context, pool *pgxpool.Pool, prefix string, from, to int, state, completed string) error {
	_, err := pool.Exec(ctx, `
		WITH e AS (
		    INSERT INTO ferry_event (source, event_id, type, payload, payload_sha256, state, attempt,
		                             next_attempt_at, first_delivered_at, last_delivered_at, claimed_at, completed_at)
		    SELECT 'stripe', $1::text || n, 'invoice.paid', `+scalePayload+`, sha256(convert_to($1::text || n, 'UTF8')), `+state+`,
		           CASE WHEN `+state+` = 'done' THEN 1 ELSE 0 END,
		           coalesce(c - interval '1 minute', now()), coalesce(c - interval '1 minute', now()), coalesce(c - interval '1 minute', now()),
		           c - interval '1 second', c
		    FROM (SELECT n, `+completed+` AS c FROM generate_series($2::int, $3::int - 1) n) g
		    RETURNING id, completed_at, state
		)
		INSERT INTO ferry_attempt (event_id, attempt, worker, started_at, finished_at, outcome, http_status)
		SELECT id, 1, 'bench', completed_at - interval '1 second', completed_at, 'done', 200 FROM e WHERE state = 'done'`, prefix, from, to)
	return err
}
