package ferryhttp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/internal/leaktest"
	"github.com/ferry-inbox/ferry/internal/testlog"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/provider"
)

func TestMain(m *testing.M) { os.Exit(leaktest.Run(m)) }

// testNow is the verifiers' clock: deliveries are signed at it, so the
// timestamp checks never depend on the wall clock.
var testNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Distinctive secrets, so the log test can look for them.
var (
	stripeSecret  = "whsec_stripe-SECRET-7f3a9c"
	githubSecret  = "github-SECRET-41d2e8"
	shopifySecret = "shopify-SECRET-88e1b0"
	swKey         = "standardwebhooks-SECRET-0b5e"
	swSecret      = "whsec_" + base64.StdEncoding.EncodeToString([]byte(swKey))
	hmacSecret    = "hmac-SECRET-c0ffee"
	secrets       = []string{stripeSecret, githubSecret, shopifySecret, swKey, swSecret, hmacSecret}
)

// hmacScheme is the generic HMAC sender of the tests.
var hmacScheme = provider.HMACOptions{
	Header: "X-Acme-Signature", Prefix: "sha256=",
	EventIDHeader: "X-Acme-Event-Id", TypeHeader: "X-Acme-Event-Type",
}

// sentSignatureHeaders are every header that carries a signature in the
// tests; none may be stored or logged.
var sentSignatureHeaders = []string{
	"Stripe-Signature", "X-Hub-Signature-256", "X-Shopify-Hmac-Sha256",
	"Webhook-Signature", "Svix-Signature", "X-Acme-Signature",
}

// sources returns one source per provider, all on the fixed clock.
func sources(t testing.TB) []ferryhttp.Source {
	t.Helper()
	now := func() time.Time { return testNow }
	build := []struct {
		name    string
		secret  string
		options provider.Options
	}{
		{"stripe", stripeSecret, provider.Options{}},
		{"github", githubSecret, provider.Options{}},
		{"shopify", shopifySecret, provider.Options{}},
		{"standardwebhooks", swSecret, provider.Options{}},
		{"hmac", hmacSecret, provider.Options{HMAC: hmacScheme}},
	}
	var out []ferryhttp.Source
	for _, b := range build {
		b.options.Secrets = []string{b.secret}
		b.options.Now = now
		v, err := provider.New(b.name, b.options)
		if err != nil {
			t.Fatalf("provider %s: %v", b.name, err)
		}
		out = append(out, ferryhttp.Source{Name: b.name, Verifier: v})
	}
	return out
}

// storeKind opens one kind of real store for a test.
type storeKind struct {
	name string
	open func(t testing.TB) ferry.Store
}

var storeKinds = []storeKind{
	{"sqlite", func(t testing.TB) ferry.Store { return teststore.SQLite(t, nil) }},
	{"postgres", func(t testing.TB) ferry.Store { return teststore.Postgres(t, nil) }},
}

// forEachStore runs test as a parallel subtest for each kind of store;
// open makes a fresh, migrated store of that kind.
func forEachStore(t *testing.T, test func(t *testing.T, open func(testing.TB) ferry.Store)) {
	t.Helper()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			test(t, kind.open)
		})
	}
}

// bundle is a receiver on a real store behind a real loopback server.
type bundle struct {
	store ferry.Store
	srv   *httptest.Server
	recv  *ferryhttp.Receiver
	logs  *testlog.Buffer

	mu             sync.Mutex
	contentLengths map[string]int64 // X-Test-Case → the length the server saw
}

// reached reports whether the request of X-Test-Case name reached the
// receiver.
func (b *bundle) reached(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.contentLengths[name]
	return ok
}

// setup starts a receiver for every provider on st; edit may change the
// options first. Log lines go to b.logs as JSON.
func setup(t testing.TB, st ferry.Store, edit func(*ferryhttp.ReceiverOptions)) *bundle {
	t.Helper()
	b := &bundle{store: st, logs: &testlog.Buffer{}, contentLengths: map[string]int64{}}
	opts := ferryhttp.ReceiverOptions{
		Store: st, Sources: sources(t),
		Logger: slog.New(slog.NewJSONHandler(b.logs, nil)),
	}
	if edit != nil {
		edit(&opts)
	}
	recv, err := ferryhttp.NewReceiver(opts)
	if err != nil {
		t.Fatal(err)
	}
	b.recv = recv
	mux := http.NewServeMux()
	recv.Register(mux)
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := r.Header.Get("X-Test-Case"); c != "" {
			b.mu.Lock()
			b.contentLengths[c] = r.ContentLength
			b.mu.Unlock()
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// delivery is one request to the receiver.
type delivery struct {
	method  string // POST when empty
	source  string
	header  http.Header
	body    []byte
	chunked bool // send without a Content-Length
}

// reply is what the receiver answered.
type reply struct {
	status int
	header http.Header
	body   map[string]string
	raw    []byte
}

// send delivers d and fails t if no answer comes back.
func (b *bundle) send(t testing.TB, d delivery) reply {
	t.Helper()
	r, err := b.do(d)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// do delivers d; it is safe to call from any goroutine.
func (b *bundle) do(d delivery) (reply, error) {
	method := d.method
	if method == "" {
		method = http.MethodPost
	}
	var body io.Reader = bytes.NewReader(d.body)
	if d.chunked {
		body = io.MultiReader(body) // hides the length from the transport
	}
	req, err := http.NewRequest(method, b.srv.URL+"/webhooks/"+d.source, body)
	if err != nil {
		return reply{}, err
	}
	if d.chunked {
		req.ContentLength = -1
	}
	for k, v := range d.header {
		req.Header[k] = append([]string(nil), v...)
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s /webhooks/%s: %w", method, d.source, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		return r, fmt.Errorf("reply %d is not a JSON object of strings: %q", resp.StatusCode, raw)
	}
	return r, nil
}

// event returns the stored event of (source, eventID), or nil if there is
// none.
func event(t testing.TB, st ferry.Store, source, eventID string) *ferry.Event {
	t.Helper()
	ev, err := st.EventGet(context.Background(), &ferry.EventGetParams{Source: source, EventID: eventID})
	if errors.Is(err, ferry.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// Signed deliveries, one helper per provider, all signed at testNow.

func stripeAt(secret, body string, at time.Time) delivery {
	return delivery{source: "stripe", header: ferrytest.SignStripe(secret, []byte(body), at), body: []byte(body)}
}

func stripe(body string) delivery { return stripeAt(stripeSecret, body, testNow) }

func github(secret, id, body string) delivery {
	return delivery{source: "github", header: ferrytest.SignGitHub(secret, id, "push", []byte(body)), body: []byte(body)}
}

func shopify(secret, id, body string) delivery {
	return delivery{source: "shopify", header: ferrytest.SignShopify(secret, id, "orders/create", []byte(body)), body: []byte(body)}
}

func standardWebhooks(secret, id, body string, at time.Time) delivery {
	h, err := ferrytest.SignStandardWebhooks(secret, id, at, []byte(body))
	if err != nil {
		panic(err)
	}
	return delivery{source: "standardwebhooks", header: h, body: []byte(body)}
}

// svix is a Standard Webhooks delivery under Svix's header names.
func svix(id, body string) delivery {
	d := standardWebhooks(swSecret, id, body, testNow)
	for _, name := range []string{"Id", "Timestamp", "Signature"} {
		d.header.Set("Svix-"+name, d.header.Get("Webhook-"+name))
		d.header.Del("Webhook-" + name)
	}
	return d
}

func hmacDelivery(secret, id, body string) delivery {
	h, err := ferrytest.SignHMAC(secret, hmacScheme, []byte(body))
	if err != nil {
		panic(err)
	}
	h.Set("X-Acme-Event-Id", id)
	h.Set("X-Acme-Event-Type", "thing.happened")
	return delivery{source: "hmac", header: h, body: []byte(body)}
}

// with returns d with header name set to value ("" deletes it).
func (d delivery) with(name, value string) delivery {
	h := d.header.Clone()
	if value == "" {
		h.Del(name)
	} else {
		h.Set(name, value)
	}
	d.header = h
	return d
}

// stripeBodyOfSize returns a Stripe event of exactly n bytes.
func stripeBodyOfSize(id string, n int) string {
	head := `{"id":"` + id + `","type":"big","pad":"`
	tail := `"}`
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}
