package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/provider"
	"github.com/ferry-inbox/ferry/sqlite"
)

// ingestSide is one receiver under load: start readies it for a run (a
// fresh, empty store), stop tears the run down.
type ingestSide struct {
	name  string
	start func(ctx context.Context) (target string, stop func(), err error)
}

// ingestPair runs A (Ferry) and B (the bare receiver) o.rounds times each,
// A B then B A, with the same load, and reports the median req/s ratio and
// both median p99s.
func ingestPair(ctx context.Context, o *options, key string, a, b ingestSide) (*result, error) {
	var rpsA, rpsB, ratios []float64
	var p99A, p99B []time.Duration
	failedA, failedB := 0, 0
	for round := range o.rounds {
		var pair [2]*loadResult
		order := []int{0, 1} // A B, then B A in the next round
		if round%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			side := []ingestSide{a, b}[i]
			target, stop, err := side.start(ctx)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", side.name, err)
			}
			res, err := closedLoop(ctx, target, fmt.Sprintf("evt_r%d_", round), o.clients, 500*time.Millisecond, o.ingestDur)
			stop()
			if err != nil {
				return nil, fmt.Errorf("%s round %d: %w", side.name, round+1, err)
			}
			pair[i] = res
			fmt.Fprintf(os.Stderr, "  %s round %d: %s: %.0f req/s, p99 %s, %d non-2xx\n",
				key, round+1, side.name, res.rps(), ms(res.p99()), res.failed)
		}
		rpsA, rpsB = append(rpsA, pair[0].rps()), append(rpsB, pair[1].rps())
		ratios = append(ratios, pair[0].rps()/pair[1].rps())
		p99A, p99B = append(p99A, pair[0].p99()), append(p99B, pair[1].p99())
		failedA += pair[0].failed
		failedB += pair[1].failed
	}
	x := median(ratios)
	return &result{
		rows: [][]string{
			{key, fmt.Sprintf("%.2f", x), fmt.Sprintf("median of %d rounds of per-round ratios %s", o.rounds, fmtFloats(ratios))},
			{"  " + a.name, fmt.Sprintf("%.0f req/s", median(rpsA)), fmt.Sprintf("p99 %s, %d non-2xx", ms(medianDur(p99A)), failedA)},
			{"  " + b.name, fmt.Sprintf("%.0f req/s", median(rpsB)), fmt.Sprintf("p99 %s, %d non-2xx", ms(medianDur(p99B)), failedB)},
		},
		summary: map[string]string{key: fmt.Sprintf("%.2f", x)},
	}, nil
}

func runIngestPG(ctx context.Context, o *options) (*result, error) {
	_, ferryPool, releaseFerry, err := createSchemaPool(ctx, o.url, "ingest_ferry", o.poolSize)
	if err != nil {
		return nil, err
	}
	defer releaseFerry()
	store := postgres.New(ferryPool, nil)
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return nil, err
	}
	_, barePool, releaseBare, err := createSchemaPool(ctx, o.url, "ingest_bare", o.poolSize)
	if err != nil {
		return nil, err
	}
	defer releaseBare()
	if _, err := barePool.Exec(ctx, bareTableSQL); err != nil {
		return nil, err
	}

	ferrySide := ingestSide{name: "ferry (stripe verify + durable dedupe)", start: func(ctx context.Context) (string, func(), error) {
		if _, err := ferryPool.Exec(ctx, ferryEmptySQL); err != nil {
			return "", nil, err
		}
		return serveFerry(store)
	}}
	bareSide := ingestSide{name: "bare (INSERT ON CONFLICT DO NOTHING)", start: func(ctx context.Context) (string, func(), error) {
		if _, err := barePool.Exec(ctx, "TRUNCATE bare_event"); err != nil {
			return "", nil, err
		}
		srv := httptest.NewServer(barePGHandler(barePool))
		return srv.URL + "/webhooks/stripe", srv.Close, nil
	}}
	return ingestPair(ctx, o, "ingest_pg_x", ferrySide, bareSide)
}

func runIngestSQLite(ctx context.Context, o *options) (*result, error) {
	run := 0
	ferrySide := ingestSide{name: "ferry sqlite (stripe verify + durable dedupe)", start: func(ctx context.Context) (string, func(), error) {
		run++
		path := filepath.Join(o.tmp, fmt.Sprintf("ferry-%d.db", run))
		store, err := sqlite.Open(path, nil)
		if err != nil {
			return "", nil, err
		}
		if err := store.Migrate(ctx); err != nil {
			store.Close()
			return "", nil, err
		}
		target, stop, err := serveFerry(store)
		if err != nil {
			store.Close()
			return "", nil, err
		}
		return target, func() { stop(); store.Close(); removeDB(path) }, nil
	}}
	bareSide := ingestSide{name: "bare sqlite (one INSERT per transaction)", start: func(ctx context.Context) (string, func(), error) {
		run++
		path := filepath.Join(o.tmp, fmt.Sprintf("bare-%d.db", run))
		db, err := openBareSQLite(ctx, path)
		if err != nil {
			return "", nil, err
		}
		srv := httptest.NewServer(bareSQLiteHandler(db))
		return srv.URL + "/webhooks/stripe", func() { srv.Close(); db.Close(); removeDB(path) }, nil
	}}
	return ingestPair(ctx, o, "ingest_sqlite_x", ferrySide, bareSide)
}

// serveFerry serves Ferry's own receiver, Stripe-verified, on store. It logs
// nothing: the bare receivers do not log either.
func serveFerry(store ferry.Store) (string, func(), error) {
	v, err := provider.NewStripe(provider.Options{Secrets: []string{stripeSecret}})
	if err != nil {
		return "", nil, err
	}
	r, err := ferryhttp.NewReceiver(ferryhttp.ReceiverOptions{
		Store:   store,
		Sources: []ferryhttp.Source{{Name: "stripe", Verifier: v}},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	r.Register(mux)
	srv := httptest.NewServer(mux)
	return srv.URL + "/webhooks/stripe", srv.Close, nil
}

const bareTableSQL = `
CREATE TABLE bare_event (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source      text        NOT NULL,
    event_id    text        NOT NULL,
    payload     bytea       NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (source, event_id)
)`

// bareBody reads the body and its event id the way any receiver must, and
// nothing more: no signature, no timestamp.
func bareBody(w http.ResponseWriter, r *http.Request) ([]byte, string, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return nil, "", false
	}
	var ev struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" {
		http.Error(w, "bad event", http.StatusBadRequest)
		return nil, "", false
	}
	return body, ev.ID, true
}

func barePGHandler(pool *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, id, ok := bareBody(w, r)
		if !ok {
			return
		}
		_, err := pool.Exec(r.Context(),
			"INSERT INTO bare_event (source, event_id, payload) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
			"stripe", id, body)
		bareReply(w, err)
	})
}

// openBareSQLite opens path the way Ferry's store opens its writer: WAL,
// synchronous=FULL, one connection, BEGIN IMMEDIATE.
func openBareSQLite(ctx context.Context, path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE bare_event (
		id INTEGER PRIMARY KEY, source TEXT NOT NULL, event_id TEXT NOT NULL,
		payload BLOB NOT NULL, received_at INTEGER NOT NULL, UNIQUE (source, event_id))`); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func bareSQLiteHandler(db *sql.DB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, id, ok := bareBody(w, r)
		if !ok {
			return
		}
		tx, err := db.BeginTx(r.Context(), nil)
		if err == nil {
			_, err = tx.ExecContext(r.Context(),
				"INSERT OR IGNORE INTO bare_event (source, event_id, payload, received_at) VALUES (?, ?, ?, ?)",
				"stripe", id, body, time.Now().UnixMicro())
			if err == nil {
				err = tx.Commit()
			} else {
				_ = tx.Rollback()
			}
		}
		bareReply(w, err)
	})
}

func bareReply(w http.ResponseWriter, err error) {
	if err != nil {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"ok"}`)
}

func removeDB(path string) {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		_ = os.Remove(p)
	}
}

func fmtFloats(v []float64) string {
	s := "["
	for i, f := range v {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.2f", f)
	}
	return s + "]"
}
