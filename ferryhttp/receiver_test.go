package ferryhttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/internal/pgtest"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/postgres"
	"github.com/ferry-inbox/ferry/provider"
	"github.com/ferry-inbox/ferry/sqlite"
)

// Expected reply bodies.
var (
	accepted  = map[string]string{"status": "accepted"}
	duplicate = map[string]string{"status": "duplicate"}
	conflict  = map[string]string{"status": "conflict"}
)

func rejected(reason string) map[string]string {
	return map[string]string{"status": "rejected", "error": reason}
}

// rejectedWith is a rejection that says what to fix.
func rejectedWith(reason, detail string) map[string]string {
	return map[string]string{"status": "rejected", "error": reason, "detail": detail}
}

func unavailable(reason string) map[string]string {
	return map[string]string{"status": "unavailable", "error": reason}
}

// receiveCase is one row of the status table.
type receiveCase struct {
	name   string
	before []delivery // sent first; each must be answered 200
	d      delivery
	status int
	body   map[string]string

	// source and eventID name the key the case is about; stored says whether
	// it must exist afterwards.
	source, eventID string
	stored          bool
	// check, if set, looks further at the stored event.
	check func(t *testing.T, st ferry.Store, ev *ferry.Event)
}

func receiveCases() []receiveCase {
	const mib = 1 << 20
	big := stripeBodyOfSize("evt_big", mib)
	tooBig := stripeBodyOfSize("evt_toobig", mib+1)
	stale := 6 * time.Minute // past provider.DefaultTolerance

	conflictA := `{"id":"evt_conflict","type":"invoice.paid","amount":100}`
	conflictB := `{"id":"evt_conflict","type":"invoice.paid","amount":999}`

	return []receiveCase{
		// Accepted, once per provider.
		{name: "stripe accepted", d: stripe(`{"id":"evt_new","type":"invoice.paid"}`),
			status: 200, body: accepted, source: "stripe", eventID: "evt_new", stored: true,
			check: wantType("invoice.paid")},
		{name: "github accepted", d: github(githubSecret, "gh-new", `{"zen":"hi"}`),
			status: 200, body: accepted, source: "github", eventID: "gh-new", stored: true,
			check: wantType("push")},
		{name: "shopify accepted", d: shopify(shopifySecret, "shop-new", `{"order":1}`),
			status: 200, body: accepted, source: "shopify", eventID: "shop-new", stored: true,
			check: wantType("orders/create")},
		{name: "standard webhooks accepted", d: standardWebhooks(swSecret, "msg_new", `{"type":"user.created"}`, testNow),
			status: 200, body: accepted, source: "standardwebhooks", eventID: "msg_new", stored: true,
			check: wantType("user.created")},
		{name: "svix headers accepted", d: svix("msg_svix", `{"type":"user.deleted"}`),
			status: 200, body: accepted, source: "standardwebhooks", eventID: "msg_svix", stored: true,
			check: func(t *testing.T, _ ferry.Store, ev *ferry.Event) {
				if ev.Headers.Get("Svix-Id") != "msg_svix" || ev.Headers.Get("Svix-Timestamp") == "" {
					t.Errorf("Svix-Id and Svix-Timestamp not kept: %v", ev.Headers)
				}
			}},
		{name: "hmac accepted", d: hmacDelivery(hmacSecret, "acme-new", `{"n":1}`),
			status: 200, body: accepted, source: "hmac", eventID: "acme-new", stored: true,
			check: wantType("thing.happened")},
		{name: "exactly the 1 MiB default limit accepted", d: stripe(big),
			status: 200, body: accepted, source: "stripe", eventID: "evt_big", stored: true},
		{name: "exactly the limit, chunked, accepted", d: chunked(stripe(stripeBodyOfSize("evt_big_chunked", mib))),
			status: 200, body: accepted, source: "stripe", eventID: "evt_big_chunked", stored: true},

		// Routing.
		{name: "wrong method", d: delivery{method: http.MethodGet, source: "stripe"},
			status: 405, body: rejected("method_not_allowed")},
		{name: "wrong method with a signed body", d: withMethod(http.MethodPut, stripe(`{"id":"evt_put"}`)),
			status: 405, body: rejected("method_not_allowed"), source: "stripe", eventID: "evt_put"},
		{name: "unknown source", d: withSource("nope", stripe(`{"id":"evt_nope"}`)),
			status: 404, body: rejected("unknown_source"), source: "nope", eventID: "evt_nope"},

		// Size.
		{name: "too large, Content-Length known", d: stripe(tooBig),
			status: 413, body: rejected("body_too_large"), source: "stripe", eventID: "evt_toobig"},
		{name: "too large, chunked", d: chunked(stripe(tooBig)),
			status: 413, body: rejected("body_too_large"), source: "stripe", eventID: "evt_toobig"},

		// Signatures and timestamps.
		{name: "stripe stale timestamp", d: stripeAt(stripeSecret, `{"id":"evt_stale"}`, testNow.Add(-stale)),
			status: 401, body: rejectedWith("stale_timestamp", "signed more than 5m0s ago"), source: "stripe", eventID: "evt_stale"},
		{name: "stripe timestamp from the future", d: stripeAt(stripeSecret, `{"id":"evt_future"}`, testNow.Add(stale)),
			status: 401, body: rejectedWith("stale_timestamp", "signed more than 5m0s in the future"), source: "stripe", eventID: "evt_future"},
		{name: "standard webhooks stale timestamp", d: standardWebhooks(swSecret, "msg_stale", `{}`, testNow.Add(-stale)),
			status: 401, body: rejectedWith("stale_timestamp", "signed more than 5m0s ago"), source: "standardwebhooks", eventID: "msg_stale"},
		{name: "stripe wrong secret", d: stripeAt("whsec_wrong", `{"id":"evt_wrong"}`, testNow),
			status: 401, body: rejected("bad_signature"), source: "stripe", eventID: "evt_wrong"},
		{name: "stripe wrong secret and stale", d: stripeAt("whsec_wrong", `{"id":"evt_wrong_stale"}`, testNow.Add(-stale)),
			status: 401, body: rejected("bad_signature"), source: "stripe", eventID: "evt_wrong_stale"},
		{name: "stripe tampered body", d: tampered(stripe(`{"id":"evt_tamper","amount":1}`), `{"id":"evt_tamper","amount":9}`),
			status: 401, body: rejected("bad_signature"), source: "stripe", eventID: "evt_tamper"},
		{name: "github wrong secret", d: github("wrong", "gh-wrong", `{}`),
			status: 401, body: rejected("bad_signature"), source: "github", eventID: "gh-wrong"},
		{name: "shopify wrong secret", d: shopify("wrong", "shop-wrong", `{}`),
			status: 401, body: rejected("bad_signature"), source: "shopify", eventID: "shop-wrong"},
		{name: "standard webhooks wrong secret", d: standardWebhooks("whsec_d3Jvbmc=", "msg_wrong", `{}`, testNow),
			status: 401, body: rejected("bad_signature"), source: "standardwebhooks", eventID: "msg_wrong"},
		{name: "hmac wrong secret", d: hmacDelivery("wrong", "acme-wrong", `{}`),
			status: 401, body: rejected("bad_signature"), source: "hmac", eventID: "acme-wrong"},
		{name: "stripe missing signature", d: stripe(`{"id":"evt_unsigned"}`).with("Stripe-Signature", ""),
			status: 401, body: rejectedWith("missing_signature", "no Stripe-Signature header"), source: "stripe", eventID: "evt_unsigned"},
		{name: "github missing signature", d: github(githubSecret, "gh-unsigned", `{}`).with("X-Hub-Signature-256", ""),
			status: 401, body: rejectedWith("missing_signature", "no X-Hub-Signature-256 header"), source: "github", eventID: "gh-unsigned"},
		{name: "stripe malformed signature", d: stripe(`{"id":"evt_malformed"}`).with("Stripe-Signature", "t=1767322945,v1=not-hex"),
			status: 401, body: rejectedWith("malformed_signature", "v1 is not a hex SHA-256"), source: "stripe", eventID: "evt_malformed"},
		{name: "github malformed signature", d: github(githubSecret, "gh-malformed", `{}`).with("X-Hub-Signature-256", "sha1=abc"),
			status: 401, body: rejectedWith("malformed_signature", "no \"sha256=\" prefix"), source: "github", eventID: "gh-malformed"},
		{name: "standard webhooks malformed signature", d: standardWebhooks(swSecret, "msg_malformed", `{}`, testNow).with("Webhook-Signature", "garbage"),
			status: 401, body: rejectedWith("malformed_signature", "no readable v1 signature"), source: "standardwebhooks", eventID: "msg_malformed"},

		// Identity.
		{name: "github without X-GitHub-Delivery", d: github(githubSecret, "gh-noid", `{}`).with("X-GitHub-Delivery", ""),
			status: 400, body: rejectedWith("missing_event_id", "no X-GitHub-Delivery header")},
		{name: "shopify without webhook id", d: shopify(shopifySecret, "shop-noid", `{}`).with("X-Shopify-Webhook-Id", ""),
			status: 400, body: rejectedWith("missing_event_id", "no X-Shopify-Webhook-Id header")},
		{name: "standard webhooks without webhook-id", d: standardWebhooks(swSecret, "", `{}`, testNow).with("Webhook-Id", ""),
			status: 400, body: rejectedWith("missing_event_id", "no Webhook-Id header")},
		{name: "stripe body without id", d: stripe(`{"type":"invoice.paid"}`),
			status: 400, body: rejectedWith("missing_event_id", "body has no \"id\" field")},
		{name: "stripe bad JSON", d: stripe(`{"id":"evt_badjson",`),
			status: 400, body: rejectedWith("bad_payload", "body is not a JSON event"), source: "stripe", eventID: "evt_badjson"},

		// Redeliveries.
		{name: "stripe duplicate", before: []delivery{stripe(`{"id":"evt_dup","type":"a"}`)}, d: stripe(`{"id":"evt_dup","type":"a"}`),
			status: 200, body: duplicate, source: "stripe", eventID: "evt_dup", stored: true,
			check: func(t *testing.T, _ ferry.Store, ev *ferry.Event) {
				if ev.Deliveries != 2 || ev.Conflicts != 0 {
					t.Errorf("deliveries, conflicts = %d, %d; want 2, 0", ev.Deliveries, ev.Conflicts)
				}
			}},
		{name: "github redelivery", before: []delivery{github(githubSecret, "gh-dup", `{"a":1}`)}, d: github(githubSecret, "gh-dup", `{"a":1}`),
			status: 200, body: duplicate, source: "github", eventID: "gh-dup", stored: true},
		{name: "stripe conflicting duplicate", before: []delivery{stripe(conflictA)}, d: stripe(conflictB),
			status: 200, body: conflict, source: "stripe", eventID: "evt_conflict", stored: true,
			check: func(t *testing.T, st ferry.Store, ev *ferry.Event) {
				if ev.Deliveries != 2 || ev.Conflicts != 1 {
					t.Errorf("deliveries, conflicts = %d, %d; want 2, 1", ev.Deliveries, ev.Conflicts)
				}
				if string(ev.Payload) != conflictA {
					t.Errorf("stored payload = %s, want the first delivery's", ev.Payload)
				}
				list, err := st.ConflictList(context.Background(), &ferry.ConflictListParams{ID: ev.ID})
				if err != nil {
					t.Fatal(err)
				}
				if len(list) != 1 || string(list[0].Payload) != conflictB {
					t.Fatalf("conflicts = %d, want 1 with the second payload", len(list))
				}
				assertNoSignatureHeaders(t, list[0].Headers)
				if list[0].Headers.Get("Content-Type") != "application/json" {
					t.Errorf("conflict headers = %v, want Content-Type kept", list[0].Headers)
				}
			}},
	}
}

func TestReceiverStatusTable(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) ferry.Store) {
		b := setup(t, open(t), nil)
		for _, tc := range receiveCases() {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				for _, d := range tc.before {
					if r := b.send(t, d); r.status != 200 {
						t.Fatalf("earlier delivery answered %d %s", r.status, r.raw)
					}
				}
				d := tc.d
				d.header = d.header.Clone()
				if d.header == nil {
					d.header = http.Header{}
				}
				d.header.Set("X-Test-Case", tc.name)
				r := b.send(t, d)

				if r.status != tc.status || !maps.Equal(r.body, tc.body) {
					t.Fatalf("answer = %d %s, want %d %v", r.status, r.raw, tc.status, tc.body)
				}
				if ct := r.header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q", ct)
				}
				if tc.status == 405 && r.header.Get("Allow") != http.MethodPost {
					t.Errorf("Allow = %q, want POST", r.header.Get("Allow"))
				}
				if cc := r.header.Get("Cache-Control"); cc != "no-store" {
					t.Errorf("Cache-Control = %q, want no-store", cc)
				}
				if ra := r.header.Get("Retry-After"); ra != "" && tc.status != http.StatusServiceUnavailable {
					t.Errorf("a %d answer carries Retry-After %q: only a 503 asks the sender to come back", tc.status, ra)
				}
				if d.chunked {
					b.mu.Lock()
					n := b.contentLengths[tc.name]
					b.mu.Unlock()
					if n != -1 {
						t.Fatalf("server saw Content-Length %d: the delivery was not chunked", n)
					}
				}

				if tc.eventID == "" {
					return
				}
				ev := event(t, b.store, tc.source, tc.eventID)
				if !tc.stored {
					if ev != nil {
						t.Fatalf("a %d answer stored the event", tc.status)
					}
					return
				}
				if ev == nil {
					t.Fatalf("answered %d but the event is not stored", tc.status)
				}
				if len(tc.before) == 0 && string(ev.Payload) != string(tc.d.body) {
					t.Errorf("stored payload differs from the body sent (%d bytes vs %d)", len(ev.Payload), len(tc.d.body))
				}
				if ev.Headers.Get("Content-Type") != "application/json" {
					t.Errorf("stored headers = %v, want Content-Type kept", ev.Headers)
				}
				assertNoSignatureHeaders(t, ev.Headers)
				for _, name := range sentSignatureHeaders {
					if sig := tc.d.header.Get(name); sig != "" && storedValue(ev.Headers, sig) {
						t.Errorf("the %s value is stored", name)
					}
				}
				if tc.check != nil {
					tc.check(t, b.store, ev)
				}
			})
		}
	})
}

func wantType(typ string) func(*testing.T, ferry.Store, *ferry.Event) {
	return func(t *testing.T, _ ferry.Store, ev *ferry.Event) {
		t.Helper()
		if ev.Type != typ {
			t.Errorf("type = %q, want %q", ev.Type, typ)
		}
	}
}

func chunked(d delivery) delivery { d.chunked = true; return d }

func withMethod(m string, d delivery) delivery { d.method = m; return d }

func withSource(s string, d delivery) delivery { d.source = s; return d }

func tampered(d delivery, body string) delivery { d.body = []byte(body); return d }

func assertNoSignatureHeaders(t *testing.T, h http.Header) {
	t.Helper()
	for name := range h {
		for _, sig := range sentSignatureHeaders {
			if strings.EqualFold(name, sig) {
				t.Errorf("signature header %s stored", name)
			}
		}
	}
}

func storedValue(h http.Header, value string) bool {
	for _, vs := range h {
		if slices.Contains(vs, value) {
			return true
		}
	}
	return false
}

// failingStore is a real store whose EventReceive is replaced, to make the
// store fail in ways a test cannot make a database fail on cue.
type failingStore struct {
	ferry.Store
	receive func(ctx context.Context, p *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error)
}

func (s *failingStore) EventReceive(ctx context.Context, p *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error) {
	return s.receive(ctx, p)
}

// EventReceiveMany stores each receipt with receive, so that the receiver's
// batches meet the same failures.
func (s *failingStore) EventReceiveMany(ctx context.Context, p *ferry.EventReceiveManyParams) ([]ferry.EventReceiveManyResult, error) {
	out := make([]ferry.EventReceiveManyResult, len(p.Receipts))
	for i, r := range p.Receipts {
		out[i].Result, out[i].Err = s.receive(ctx, r)
	}
	return out, nil
}

// holdingFirst is st, but its receipt of evt_first waits until release:
// with ReceiveConcurrency 1, the one batch in flight is held and later
// deliveries queue behind it. writing closes when that receipt starts.
func holdingFirst(st ferry.Store) (store *failingStore, writing <-chan struct{}, release func()) {
	started, held := make(chan struct{}), make(chan struct{})
	return &failingStore{Store: st, receive: func(ctx context.Context, p *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error) {
		if p.EventID == "evt_first" {
			close(started)
			<-held
		}
		return st.EventReceive(ctx, p)
	}}, started, sync.OnceFunc(func() { close(held) })
}

// sendFirst sends evt_first to a receiver on holdingFirst's store and
// returns once its receipt is held, with the channel its answer comes on.
func sendFirst(b *bundle, writing <-chan struct{}) <-chan reply {
	first := make(chan reply, 1)
	go func() {
		r, _ := b.do(stripe(`{"id":"evt_first"}`))
		first <- r
	}()
	<-writing
	return first
}

var errStoreDown = errors.New("ferry-test: store down")

// assertUnavailable checks that r is a 503 with Retry-After and reason.
func assertUnavailable(t *testing.T, r reply, retryAfter, reason string) {
	t.Helper()
	if r.status != http.StatusServiceUnavailable || !maps.Equal(r.body, unavailable(reason)) {
		t.Fatalf("answer = %d %s, want 503 %s", r.status, r.raw, reason)
	}
	if got := r.header.Get("Retry-After"); got != retryAfter {
		t.Errorf("Retry-After = %q, want %q", got, retryAfter)
	}
}

// observerFunc is a ReceiveObserver.
type observerFunc func(source, outcome, reason string, latency time.Duration)

func (f observerFunc) ObserveReceive(source, outcome, reason string, latency time.Duration) {
	f(source, outcome, reason, latency)
}

// wantRefused sends a Stripe delivery of eventID with body to a receiver on
// down, and wants a 503 store_unavailable and no event in seen, a store on
// the same data that can read. It returns the receiver's bundle.
func wantRefused(t *testing.T, down, seen ferry.Store, eventID, body string) *bundle {
	t.Helper()
	b := setup(t, down, nil)
	assertUnavailable(t, b.send(t, stripe(body)), "5", "store_unavailable")
	if event(t, seen, "stripe", eventID) != nil {
		t.Fatal("event stored")
	}
	return b
}

func TestReceiverStoreUnavailable(t *testing.T) {
	t.Parallel()

	t.Run("store returns an error", func(t *testing.T) {
		t.Parallel()
		forEachStore(t, func(t *testing.T, open func(testing.TB) ferry.Store) {
			st := open(t)
			down := &failingStore{Store: st, receive: func(context.Context, *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error) {
				return nil, errStoreDown
			}}
			wantRefused(t, down, st, "evt_down", `{"id":"evt_down"}`)
		})
	})

	t.Run("closed sqlite store", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "ferry.db")
		st := teststore.SQLiteAt(t, path, nil)
		st.Close()
		wantRefused(t, st, teststore.SQLiteAt(t, path, nil), "evt_closed", `{"id":"evt_closed"}`)
	})

	t.Run("closed postgres pool", func(t *testing.T) {
		t.Parallel()
		pool, schema := pgtest.Schema(t)
		st := teststore.PostgresOn(t, pool, nil)
		closed := pgtest.PoolOn(t, schema, nil)
		closed.Close()
		down := postgres.New(closed, nil)
		t.Cleanup(down.Close)
		wantRefused(t, down, st, "evt_closed", `{"id":"evt_closed"}`)
	})

	t.Run("sqlite full", func(t *testing.T) {
		t.Parallel()
		st := teststore.SQLite(t, &sqlite.Config{MaxPageCount: 40})
		// 512 KiB does not fit in 40 pages of 4 KiB, but is under the 1 MiB
		// body limit: the store, not the receiver, refuses it.
		b := wantRefused(t, st, st, "evt_full", stripeBodyOfSize("evt_full", 512<<10))
		// The failed write left nothing behind: a small delivery still fits.
		if r := b.send(t, stripe(`{"id":"evt_small"}`)); r.status != 200 || !maps.Equal(r.body, accepted) {
			t.Fatalf("small delivery after the full one = %d %s", r.status, r.raw)
		}
	})

	t.Run("postgres rejects writes", func(t *testing.T) {
		t.Parallel()
		pool, schema := pgtest.Schema(t)
		writable := teststore.PostgresOn(t, pool, nil)
		// A pool on the same schema whose every transaction is read-only: the
		// server is up and answers, but refuses to commit the receipt.
		readOnly := pgtest.PoolOn(t, schema, func(c *pgxpool.Config) {
			c.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
		})
		refusing := postgres.New(readOnly, nil)
		t.Cleanup(refusing.Close)
		wantRefused(t, refusing, writable, "evt_readonly", `{"id":"evt_readonly"}`)
		// The read-only store can still read: the rejection was the write.
		if _, err := refusing.EventList(context.Background(), &ferry.EventListParams{}); err != nil {
			t.Fatalf("read-only pool cannot read either: %v", err)
		}
	})

	t.Run("draining", func(t *testing.T) {
		t.Parallel()
		forEachStore(t, func(t *testing.T, open func(testing.TB) ferry.Store) {
			st := open(t)
			b := setup(t, st, func(o *ferryhttp.ReceiverOptions) { o.RetryAfter = 30 * time.Second })
			if r := b.send(t, stripe(`{"id":"evt_before"}`)); r.status != 200 {
				t.Fatalf("before Drain: %d %s", r.status, r.raw)
			}
			b.recv.Drain()
			assertUnavailable(t, b.send(t, stripe(`{"id":"evt_draining"}`)), "30", "draining")
			// A redelivery of a stored event is not acknowledged either:
			// a draining instance commits nothing.
			assertUnavailable(t, b.send(t, stripe(`{"id":"evt_before"}`)), "30", "draining")
			if event(t, st, "stripe", "evt_draining") != nil {
				t.Fatal("event stored while draining")
			}
		})
	})

	t.Run("store hangs past StoreTimeout", func(t *testing.T) {
		t.Parallel()
		st := teststore.SQLite(t, nil)
		var deadline atomic.Bool
		b := setup(t, &failingStore{Store: st, receive: func(ctx context.Context, _ *ferry.EventReceiveParams) (*ferry.EventReceiveResult, error) {
			_, ok := ctx.Deadline()
			deadline.Store(ok)
			<-ctx.Done()
			return nil, ctx.Err()
		}}, func(o *ferryhttp.ReceiverOptions) { o.StoreTimeout = 20 * time.Millisecond })
		assertUnavailable(t, b.send(t, stripe(`{"id":"evt_hang"}`)), "5", "store_timeout")
		if !deadline.Load() {
			t.Error("the store's context had no deadline")
		}
		if event(t, st, "stripe", "evt_hang") != nil {
			t.Fatal("event stored")
		}
	})

	// A sender that hangs up while its receipt waits for a batch is counted
	// as client_gone, not as a store failure, and nothing is stored.
	t.Run("sender hangs up while its receipt waits", func(t *testing.T) {
		t.Parallel()
		st := teststore.SQLite(t, nil)
		holding, writing, release := holdingFirst(st)
		observed := make(chan string, 2)
		b := setup(t, holding, func(o *ferryhttp.ReceiverOptions) {
			o.ReceiveConcurrency = 1
			o.Observer = observerFunc(func(_, outcome, reason string, _ time.Duration) { observed <- outcome + " " + reason })
		})
		t.Cleanup(release) // before the server's Close, which waits for it
		first := sendFirst(b, writing)
		d := stripe(`{"id":"evt_gone"}`).with("X-Test-Case", "gone")
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL+"/webhooks/stripe", bytes.NewReader(d.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = d.header
		go func() { // hang up once the receiver has the delivery
			for !b.reached("gone") {
				time.Sleep(time.Millisecond) // polling interval, not a proof
			}
			cancel()
		}()
		if resp, err := b.srv.Client().Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("the hung-up delivery was answered %d", resp.StatusCode)
		}
		select {
		case got := <-observed:
			if got != "unavailable client_gone" {
				t.Fatalf("the hung-up delivery: %q, want unavailable client_gone", got)
			}
		case <-time.After(time.Minute): // a ceiling only a hang reaches
			t.Fatal("the receiver never answered the hung-up delivery")
		}
		release()
		if r := <-first; r.status != http.StatusOK {
			t.Fatalf("the delivery in flight: %d %s", r.status, r.raw)
		}
		if event(t, st, "stripe", "evt_gone") != nil {
			t.Fatal("the hung-up delivery was stored")
		}
	})

	t.Run("sub-second RetryAfter rounds up", func(t *testing.T) {
		t.Parallel()
		b := setup(t, teststore.SQLite(t, nil), func(o *ferryhttp.ReceiverOptions) { o.RetryAfter = 300 * time.Millisecond })
		b.recv.Drain()
		assertUnavailable(t, b.send(t, stripe(`{"id":"evt_x"}`)), "1", "draining")
	})
}

func TestReceiverConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) ferry.Store) {
		b := setup(t, open(t), nil)
		const n = 16
		d := stripe(`{"id":"evt_concurrent","type":"invoice.paid"}`)
		replies := make([]reply, n)
		errs := make(chan error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				r, err := b.do(d)
				if err != nil {
					errs <- fmt.Errorf("delivery %d: %w", i, err)
				}
				replies[i] = r
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var news int
		for i, r := range replies {
			switch {
			case r.status == 200 && maps.Equal(r.body, accepted):
				news++
			case r.status == 200 && maps.Equal(r.body, duplicate):
			default:
				t.Errorf("delivery %d answered %d %s", i, r.status, r.raw)
			}
		}
		if news != 1 {
			t.Errorf("%d deliveries answered accepted, want 1", news)
		}
		list, err := b.store.EventList(context.Background(), &ferry.EventListParams{Source: "stripe"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Events) != 1 {
			t.Fatalf("%d events stored, want 1", len(list.Events))
		}
		if ev := event(t, b.store, "stripe", "evt_concurrent"); ev.Deliveries != n || ev.Conflicts != 0 {
			t.Errorf("deliveries, conflicts = %d, %d; want %d, 0", ev.Deliveries, ev.Conflicts, n)
		}
	})
}

func TestReceiverKeepHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, teststore.SQLite(t, nil), func(o *ferryhttp.ReceiverOptions) {
		// Listing signature or credential headers must not get them stored.
		o.KeepHeaders = []string{"x-acme-event-id", "X-Acme-Signature", "Stripe-Signature", "Authorization", "X-Other-Hmac", "X-Api-Key", "X-Gitlab-Token", "X-Client-Secret"}
	})
	d := hmacDelivery(hmacSecret, "acme-keep", `{}`).with("Authorization", "Bearer t0ken").with("X-Other-Hmac", "abc").
		with("X-Api-Key", "k3y").with("X-Gitlab-Token", "glpat-x").with("X-Client-Secret", "s3cret")
	if r := b.send(t, d); r.status != 200 {
		t.Fatalf("answer %d %s", r.status, r.raw)
	}
	ev := event(t, b.store, "hmac", "acme-keep")
	want := http.Header{"X-Acme-Event-Id": {"acme-keep"}}
	if len(ev.Headers) != len(want) || ev.Headers.Get("X-Acme-Event-Id") != "acme-keep" {
		t.Fatalf("stored headers = %v, want %v", ev.Headers, want)
	}
	// What ferry serve keeps for the providers is not taken for a secret.
	for _, h := range ferryhttp.DefaultKeepHeaders {
		if ferryhttp.SensitiveHeader(h) {
			t.Errorf("DefaultKeepHeaders lists %s, which is never stored", h)
		}
	}
}

// A generic HMAC source's signature header, whatever its sender calls it,
// is never stored, though KeepHeaders lists it: its verifier names it.
func TestReceiverNeverKeepsANamedSignatureHeader(t *testing.T) {
	t.Parallel()
	scheme := provider.HMACOptions{Header: "X-Partner-Check", EventIDHeader: "X-Partner-Id"}
	v, err := provider.NewHMAC(provider.Options{Secrets: []string{hmacSecret}, HMAC: scheme})
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, teststore.SQLite(t, nil), func(o *ferryhttp.ReceiverOptions) {
		o.Sources = append(o.Sources, ferryhttp.Source{Name: "partner", Verifier: v})
		o.KeepHeaders = []string{"x-partner-check", "X-Partner-Id"}
	})
	h, err := ferrytest.SignHMACEvent(hmacSecret, scheme, "p-1", time.Now(), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := b.send(t, delivery{source: "partner", header: h, body: []byte(`{}`)}); r.status != 200 {
		t.Fatalf("answer %d %s", r.status, r.raw)
	}
	if ev := event(t, b.store, "partner", "p-1"); ev.Headers.Get("X-Partner-Id") != "p-1" || ev.Headers.Get("X-Partner-Check") != "" {
		t.Fatalf("stored headers = %v, want X-Partner-Id and not the signature", ev.Headers)
	}
}

// TestReceiverKeptHeadersBounded: whatever a sender puts in the headers
// the receiver keeps, a delivery stored as an event, a replay or a conflict
// keeps at most KeptHeaderValueMax bytes a value, cut on a character
// boundary with a mark (a Content-Type too long for the whole budget,
// dropped), and KeptHeadersMax in all, the rest dropped and named.
func TestReceiverKeptHeadersBounded(t *testing.T) {
	t.Parallel()
	pads := padHeaders(10)
	b := setup(t, teststore.SQLite(t, nil), func(o *ferryhttp.ReceiverOptions) {
		o.KeepHeaders = append([]string{"Content-Type", "User-Agent", "X-GitHub-Delivery"}, pads...)
		for i, s := range o.Sources {
			if s.Name == "github" {
				o.Sources[i].ReplayWindow = time.Hour
			}
		}
	})
	huge := "x" + strings.Repeat("é", 30_000) // 60001 bytes; é is two
	signed := func(id, body string) delivery {
		d := github(githubSecret, id, body).with("User-Agent", huge).with("Content-Type", "application/json; x="+huge)
		for _, p := range pads {
			d = d.with(p, strings.Repeat("p", 1000))
		}
		return d
	}
	for _, tc := range []struct {
		d    delivery
		want string
	}{
		{signed("gh-1", `{"n":1}`), "accepted"}, {signed("gh-2", `{"n":1}`), "replay"}, {signed("gh-1", `{"n":2}`), "conflict"},
	} {
		if r := b.send(t, tc.d); r.status != 200 || r.body["status"] != tc.want {
			t.Fatalf("%d %s, want 200 %s", r.status, r.raw, tc.want)
		}
	}
	ev := event(t, b.store, "github", "gh-1")
	replays, err := b.store.ReplayList(t.Context(), &ferry.ReplayListParams{ID: ev.ID})
	if err != nil || len(replays) != 1 {
		t.Fatalf("replays = %d, %v; want 1", len(replays), err)
	}
	conflicts, err := b.store.ConflictList(t.Context(), &ferry.ConflictListParams{ID: ev.ID})
	if err != nil || len(conflicts) != 1 {
		t.Fatalf("conflicts = %d, %v; want 1", len(conflicts), err)
	}
	for what, h := range map[string]http.Header{"event": ev.Headers, "replay": replays[0].Headers, "conflict": conflicts[0].Headers} {
		ua := h.Get("User-Agent")
		if len(ua) > ferryhttp.KeptHeaderValueMax || !utf8.ValidString(ua) || !strings.HasPrefix(ua, "xéé") || !strings.HasSuffix(ua, "é [cut by ferry from 60001 bytes]") {
			t.Errorf("%s: User-Agent kept as %d bytes, valid UTF-8 %t, ending %q; want the start of it, marked, within %d",
				what, len(ua), utf8.ValidString(ua), ua[max(len(ua)-40, 0):], ferryhttp.KeptHeaderValueMax)
		}
		total := 0
		for name, values := range h {
			for _, v := range values {
				if name != "Ferry-Headers-Dropped" {
					total += len(name) + len(v)
				}
			}
		}
		// User-Agent, the delivery id and seven pads fit in 8 KiB.
		if total > ferryhttp.KeptHeadersMax || h.Get("X-Github-Delivery") == "" || h.Get("X-Pad-7") == "" || h.Get("X-Pad-8") != "" {
			t.Errorf("%s: %d bytes kept, delivery id %q, pads 7 and 8 %t %t; want at most %d, the id, pad 7 and not 8",
				what, total, h.Get("X-Github-Delivery"), h.Get("X-Pad-7") != "", h.Get("X-Pad-8") != "", ferryhttp.KeptHeadersMax)
		}
		// A Content-Type is kept whole, for the app, or not at all.
		if got := h.Get("Ferry-Headers-Dropped"); got != "Content-Type, X-Pad-8, X-Pad-9, X-Pad-10" || h.Get("Content-Type") != "" {
			t.Errorf("%s: Ferry-Headers-Dropped = %q, Content-Type %d bytes; want it and the three pads that did not fit dropped", what, got, len(h.Get("Content-Type")))
		}
	}
}

// TestReceiverKeptHeadersAtTheirBounds: a value of exactly
// KeptHeaderValueMax bytes is kept whole, a header that fills the budget
// exactly is kept, and one header past it, sent twice, is named once.
func TestReceiverKeptHeadersAtTheirBounds(t *testing.T) {
	t.Parallel()
	pads := padHeaders(10)
	b := setup(t, teststore.SQLite(t, nil), func(o *ferryhttp.ReceiverOptions) { o.KeepHeaders = pads })
	d := github(githubSecret, "gh-bounds", `{}`)
	used := 0
	for _, p := range pads[:7] {
		d = d.with(p, strings.Repeat("p", 1000))
		used += len(p) + 1000
	}
	atMax := strings.Repeat("m", ferryhttp.KeptHeaderValueMax)
	d = d.with("X-Pad-8", atMax)
	used += len("X-Pad-8") + len(atMax)
	last := strings.Repeat("l", ferryhttp.KeptHeadersMax-used-len("X-Pad-9")) // the budget, to the byte
	d = d.with("X-Pad-9", last)
	d.header.Add("X-Pad-10", "past")
	d.header.Add("X-Pad-10", "past again")
	if r := b.send(t, d); r.status != 200 || r.body["status"] != "accepted" {
		t.Fatalf("%d %s, want 200 accepted", r.status, r.raw)
	}
	h := event(t, b.store, "github", "gh-bounds").Headers
	if h.Get("X-Pad-8") != atMax {
		t.Errorf("a value of KeptHeaderValueMax bytes kept as %d bytes, want it whole", len(h.Get("X-Pad-8")))
	}
	if h.Get("X-Pad-9") != last {
		t.Errorf("the header that fills the budget exactly kept as %q…, want it whole", h.Get("X-Pad-9")[:min(len(h.Get("X-Pad-9")), 8)])
	}
	if got := h.Values("Ferry-Headers-Dropped"); len(got) != 1 || got[0] != "X-Pad-10" {
		t.Errorf("Ferry-Headers-Dropped = %q, want only X-Pad-10, once", got)
	}
}

// padHeaders names n headers X-Pad-1 … X-Pad-n, to fill the kept headers.
func padHeaders(n int) []string {
	var pads []string
	for i := range n {
		pads = append(pads, fmt.Sprint("X-Pad-", i+1))
	}
	return pads
}

// Content-Type is what the forwarder sends the app: kept whole, whatever
// its length and wherever KeepHeaders lists it.
func TestReceiverKeepsContentTypeWhole(t *testing.T) {
	t.Parallel()
	pads := padHeaders(10)
	b := setup(t, teststore.SQLite(t, nil), func(o *ferryhttp.ReceiverOptions) {
		o.KeepHeaders = append(pads, "Content-Type")
	})
	ct := "multipart/related; boundary=" + strings.Repeat("b", 1500)
	d := github(githubSecret, "gh-ct", `{"n":1}`).with("Content-Type", ct)
	for _, p := range pads {
		d = d.with(p, strings.Repeat("p", 1000))
	}
	if r := b.send(t, d); r.status != 200 || r.body["status"] != "accepted" {
		t.Fatalf("%d %s, want 200 accepted", r.status, r.raw)
	}
	if got := event(t, b.store, "github", "gh-ct").Headers.Get("Content-Type"); got != ct {
		t.Errorf("Content-Type kept as %d bytes ending %q; want the %d sent", len(got), got[max(len(got)-40, 0):], len(ct))
	}
}

func TestNewReceiverOptions(t *testing.T) {
	t.Parallel()
	st := teststore.SQLite(t, nil)
	v := sources(t)[0].Verifier
	cases := map[string]ferryhttp.ReceiverOptions{
		"no store":               {Sources: []ferryhttp.Source{{Name: "a", Verifier: v}}},
		"no source":              {Store: st},
		"source without name":    {Store: st, Sources: []ferryhttp.Source{{Verifier: v}}},
		"source without check":   {Store: st, Sources: []ferryhttp.Source{{Name: "a"}}},
		"source twice":           {Store: st, Sources: []ferryhttp.Source{{Name: "a", Verifier: v}, {Name: "a", Verifier: v}}},
		"negative replay window": {Store: st, Sources: []ferryhttp.Source{{Name: "a", Verifier: v, ReplayWindow: -time.Second}}},
	}
	for name, opts := range cases {
		if _, err := ferryhttp.NewReceiver(opts); !errors.Is(err, ferry.ErrInvalidParams) {
			t.Errorf("%s: NewReceiver = %v, want ErrInvalidParams", name, err)
		}
	}
}

func TestReceiverPerSourceLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, teststore.SQLite(t, nil), func(o *ferryhttp.ReceiverOptions) {
		for i := range o.Sources {
			if o.Sources[i].Name == "stripe" {
				o.Sources[i].MaxBodyBytes = 100
			}
		}
	})
	small := stripe(stripeBodyOfSize("evt_100", 100))
	if r := b.send(t, small); r.status != 200 {
		t.Fatalf("100 bytes answered %d %s", r.status, r.raw)
	}
	for _, d := range []delivery{stripe(stripeBodyOfSize("evt_101", 101)), chunked(stripe(stripeBodyOfSize("evt_101", 101)))} {
		if r := b.send(t, d); r.status != 413 || !maps.Equal(r.body, rejected("body_too_large")) {
			t.Fatalf("101 bytes (chunked %v) answered %d %s", d.chunked, r.status, r.raw)
		}
	}
	// A Content-Length past the limit is answered unread: a sender that
	// sends only its headers gets the 413.
	if r := headersOnly(t, b, stripe(stripeBodyOfSize("evt_101", 101))); r.status != 413 || !maps.Equal(r.body, rejected("body_too_large")) {
		t.Fatalf("101 bytes named, none sent: answered %d %s", r.status, r.raw)
	}
	// Other sources keep the default.
	if r := b.send(t, github(githubSecret, "gh-200", stripeBodyOfSize("x", 200))); r.status != 200 {
		t.Fatalf("github, 200 bytes, answered %d %s", r.status, r.raw)
	}
}
