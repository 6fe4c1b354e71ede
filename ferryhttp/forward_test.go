package ferryhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
	"github.com/ferry-inbox/ferry/internal/testtrace"
	"github.com/ferry-inbox/ferry/provider"
	"github.com/ferry-inbox/ferry/sqlite"
	"github.com/ferry-inbox/ferry/storetest"
)

// forwardSecret is the secret Ferry and the app share.
var forwardSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("forward-key-0123456789abcdef"))

// recorded is one request the app received.
type recorded struct {
	header http.Header
	body   []byte
}

// app starts a loopback app that records every request and answers with
// answer; it returns the server and the channel of recorded requests.
func app(t *testing.T, answer http.HandlerFunc) (*httptest.Server, <-chan recorded) {
	t.Helper()
	got := make(chan recorded, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("app read: %v", err)
		}
		got <- recorded{header: r.Header.Clone(), body: body}
		if answer != nil {
			answer(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// hangingApp is an app that answers no request until the request is
// cancelled or the test ends.
func hangingApp(t *testing.T) (*httptest.Server, <-chan recorded) {
	release := make(chan struct{})
	srv, got := app(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // before srv.Close, which waits for the handler
	return srv, got
}

func newForwarder(t *testing.T, opts ferryhttp.ForwarderOptions) *ferryhttp.Forwarder {
	t.Helper()
	f, err := ferryhttp.NewForwarder(opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// testDelivery is an attempt of a Stripe event whose body is not valid
// UTF-8, so that any re-encoding would show.
func testDelivery() *ferry.Delivery {
	return &ferry.Delivery{
		Event: &ferry.Event{
			Source: "stripe", EventID: "evt_fwd", Type: "invoice.paid",
			Payload: []byte("a=1&b=\x00\xff\xfe\r\n{\"id\":\"evt_fwd\"}"),
			Headers: http.Header{"Content-Type": {"application/x-www-form-urlencoded; charset=latin1"}},
		},
		Attempt:        3,
		IdempotencyKey: ferry.IdempotencyKey("stripe", "evt_fwd"),
	}
}

func TestForwarderRequest(t *testing.T) {
	t.Parallel()

	t.Run("headers, body and signature", func(t *testing.T) {
		t.Parallel()
		srv, got := app(t, nil)
		now := func() time.Time { return testNow }
		f := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL + "/hooks", Secrets: []string{forwardSecret}, Now: now})
		d := testDelivery()
		if err := f.Handle(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		r := <-got
		want := map[string]string{
			"Idempotency-Key":  d.IdempotencyKey,
			"Ferry-Event-Id":   "evt_fwd",
			"Ferry-Source":     "stripe",
			"Ferry-Attempt":    "3",
			"User-Agent":       "ferry",
			"Ferry-Event-Type": "invoice.paid",
			"Content-Type":     "application/x-www-form-urlencoded; charset=latin1",
		}
		for name, value := range want {
			if r.header.Get(name) != value {
				t.Errorf("%s = %q, want %q", name, r.header.Get(name), value)
			}
		}
		if string(r.body) != string(d.Event.Payload) {
			t.Errorf("body = %q, want the payload byte for byte", r.body)
		}

		v, err := provider.NewStandardWebhooks(provider.Options{Secrets: []string{forwardSecret}, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		verified, err := v.Verify(r.header, r.body)
		if err != nil {
			t.Fatalf("the app cannot verify the request: %v", err)
		}
		if verified.EventID != d.IdempotencyKey {
			t.Errorf("webhook-id = %q, want the idempotency key, stable across attempts", verified.EventID)
		}
		if _, err := v.Verify(r.header, append(r.body, ' ')); !errors.Is(err, ferry.ErrBadSignature) {
			t.Errorf("a changed body verified: %v", err)
		}
		other, _ := provider.NewStandardWebhooks(provider.Options{Secrets: []string{"whsec_b3RoZXI="}, Now: now})
		if _, err := other.Verify(r.header, r.body); !errors.Is(err, ferry.ErrBadSignature) {
			t.Errorf("another secret verified: %v", err)
		}
	})

	t.Run("defaults without a type, a content type or a secret", func(t *testing.T) {
		t.Parallel()
		srv, got := app(t, nil)
		f := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL})
		d := testDelivery()
		d.Event.Type, d.Event.Headers = "", nil
		if err := f.Handle(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q, want application/json", ct)
		}
		for _, name := range []string{"Ferry-Event-Type", "Webhook-Signature", "Webhook-Id", "Webhook-Timestamp"} {
			if v, ok := r.header[name]; ok {
				t.Errorf("%s sent: %q", name, v)
			}
		}
	})

	// The provider's identity headers kept with the event reach the app
	// under their own names (a Shopify order's body does not name its
	// shop); Ferry's own names (stored in any case), the Standard Webhooks
	// and Svix ones, a signature, hop-by-hop and trace headers and a value
	// the transport would refuse do not, and the last does not fail the
	// attempt. No secret: nothing of Ferry's hides a Webhook-* forwarded.
	t.Run("the provider's identity headers", func(t *testing.T) {
		t.Parallel()
		srv, got := app(t, nil)
		f := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL})
		d := testDelivery()
		d.Event.Headers = http.Header{
			"Content-Type":          {"application/json"},
			"User-Agent":            {"Shopify-Captain-Hook"},
			"X-Shopify-Shop-Domain": {"shop-1.myshopify.com"},
			"X-Shopify-Topic":       {"orders/create"},
			"X-Github-Event":        {"push"},
			"Webhook-Id":            {"msg_sender"},
			"Svix-Id":               {"msg_sender"},
			"Ferry-Headers-Dropped": {"X-Long"},
			"X-Shopify-Hmac-Sha256": {"c2lnbmF0dXJl"},
			"Connection":            {"close"},
			"Traceparent":           {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			"X-Broken":              {"a\nb"},
			"idempotency-key":       {"the sender's"},
			"user-agent":            {"the sender's"},
		}
		if err := f.Handle(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		r := <-got
		for name, want := range map[string]string{
			"X-Shopify-Shop-Domain": "shop-1.myshopify.com",
			"X-Shopify-Topic":       "orders/create",
			"X-Github-Event":        "push",
		} {
			if got := r.header.Get(name); got != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
		}
		for name, want := range map[string]string{"Idempotency-Key": d.IdempotencyKey, "User-Agent": "ferry"} {
			if got := r.header.Values(name); len(got) != 1 || got[0] != want {
				t.Errorf("%s = %q, want Ferry's alone, %q", name, got, want)
			}
		}
		for _, name := range []string{"Webhook-Id", "Svix-Id", "Ferry-Headers-Dropped", "X-Shopify-Hmac-Sha256", "X-Broken", "Connection", "Traceparent"} {
			if v, ok := r.header[name]; ok {
				t.Errorf("%s forwarded: %q", name, v)
			}
		}
	})

	t.Run("a bad secret is refused", func(t *testing.T) {
		t.Parallel()
		if _, err := ferryhttp.NewForwarder(ferryhttp.ForwarderOptions{URL: "http://127.0.0.1", Secrets: []string{"whsec_!!"}}); !errors.Is(err, ferry.ErrInvalidParams) {
			t.Fatalf("NewForwarder with a secret that is not base64: err = %v, want ErrInvalidParams", err)
		}
	})
}

// A program that replaced http.DefaultTransport with another RoundTripper
// (a test double, a wrapper) gets a forwarder on Go's defaults, not a
// panic in NewForwarder; the standard one is cloned, never changed.
func TestForwarderBaseTransport(t *testing.T) {
	t.Parallel()
	other := ferryhttp.BaseTransport(roundTripper(func(*http.Request) (*http.Response, error) { return nil, errors.New("no") }))
	if other == nil || other.Proxy == nil || other.TLSHandshakeTimeout == 0 {
		t.Fatalf("transport for a replaced DefaultTransport = %+v, want Go's defaults", other)
	}
	std := http.DefaultTransport.(*http.Transport)
	if clone := ferryhttp.BaseTransport(std); clone == std || clone.IdleConnTimeout != std.IdleConnTimeout {
		t.Fatal("the standard transport was not cloned")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestForwarderURL pins which URLs NewForwarder takes: each refused one
// would fail every attempt, and once stored its parse error quoted the URL,
// the app's token with it.
func TestForwarderURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"http://127.0.0.1:3000/hooks?token=" + appToken,
		"https://app.example/hooks",
		"https://user:" + appToken + "@app.example/hooks", // sent as basic auth
	} {
		if _, err := ferryhttp.NewForwarder(ferryhttp.ForwarderOptions{URL: u}); err != nil {
			t.Errorf("NewForwarder(%q): %v", u, err)
		}
	}
	for _, u := range []string{
		"",
		"127.0.0.1:3000/hooks?token=" + appToken, // no scheme: unparseable
		"localhost:3000/hooks?token=" + appToken, // "localhost" taken for the scheme
		appToken + ":" + appToken + "@app.example/hooks",
		"ftp://app.example/hooks?token=" + appToken,
		"http:///hooks?token=" + appToken,
		"https://user:" + appToken + "@/hooks",
		"/hooks?token=" + appToken,
		"http://127.0.0.1:99999/hooks?token=" + appToken,
		"http://127.0.0.1:0/hooks?token=" + appToken,
	} {
		_, err := ferryhttp.NewForwarder(ferryhttp.ForwarderOptions{URL: u})
		if !errors.Is(err, ferry.ErrInvalidParams) {
			t.Errorf("NewForwarder(%q): err = %v, want ErrInvalidParams", u, err)
			continue
		}
		assertNoToken(t, err)
	}
}

// TestForwarderCallersClient checks that a Client of the caller's, which
// follows redirects, does not follow them for the forwarder: a 307 would
// re-POST the signed body to another host and count as done.
func TestForwarderCallersClient(t *testing.T) {
	t.Parallel()
	elsewhere, reached := app(t, nil)
	redirecting, _ := app(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/stolen", http.StatusTemporaryRedirect)
	})
	client := &http.Client{Timeout: time.Minute}
	f := newForwarder(t, ferryhttp.ForwarderOptions{URL: redirecting.URL, Secrets: []string{forwardSecret}, Client: client})
	err := f.Handle(context.Background(), testDelivery())
	if !ferry.IsPermanent(err) || !strings.Contains(err.Error(), "307") {
		t.Fatalf("err = %v, want the 307 as a permanent failure", err)
	}
	select {
	case r := <-reached:
		t.Fatalf("the redirect was followed: the other host got %s", r.header.Get("Webhook-Signature"))
	default:
	}
	if client.CheckRedirect != nil {
		t.Error("NewForwarder changed the caller's Client")
	}
}

// TestForwarderResendOnReusedConnection pins what docs/configuration.md
// says: a request the app read on a reused keep-alive connection that then
// dropped without an answer is sent again by Go's transport within the same
// attempt (it carries an Idempotency-Key, so net/http deems it
// replayable), with the same Ferry-Attempt; the attempt succeeds.
func TestForwarderResendOnReusedConnection(t *testing.T) {
	t.Parallel()
	var served atomic.Int32
	srv, got := app(t, func(w http.ResponseWriter, _ *http.Request) {
		if served.Add(1) != 2 { // the 2nd is the first on a reused connection
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	})
	f := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL})
	if err := f.Handle(context.Background(), testDelivery()); err != nil {
		t.Fatal(err)
	}
	<-got
	d := testDelivery()
	d.Attempt = 4
	if err := f.Handle(context.Background(), d); err != nil {
		t.Fatalf("attempt on a reused connection that dropped: %v", err)
	}
	if n := served.Load(); n != 3 {
		t.Fatalf("app served %d requests, want 3 (one resent)", n)
	}
	for range 2 {
		if r := <-got; r.header.Get("Ferry-Attempt") != "4" || r.header.Get("Idempotency-Key") != d.IdempotencyKey {
			t.Fatalf("app got Ferry-Attempt %q, Idempotency-Key %q", r.header.Get("Ferry-Attempt"), r.header.Get("Idempotency-Key"))
		}
	}
}

func TestForwarderStatus(t *testing.T) {
	t.Parallel()
	var followed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/followed", func(http.ResponseWriter, *http.Request) { followed.Add(1) })
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.PathValue("code"))
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/followed")
		}
		w.WriteHeader(code)
		io.WriteString(w, "the app says so")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	cases := []struct {
		codes     []int
		err       bool
		permanent bool
	}{
		{codes: []int{200, 201, 202, 204, 299}},
		{codes: []int{407, 408, 409, 425, 429, 500, 502, 503, 504, 599}, err: true},
		{codes: []int{400, 401, 403, 404, 405, 410, 413, 422, 451, 301, 302, 303, 304, 307, 308}, err: true, permanent: true},
	}
	for _, tc := range cases {
		for _, code := range tc.codes {
			t.Run(strconv.Itoa(code), func(t *testing.T) {
				t.Parallel()
				f := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL + "/status/" + strconv.Itoa(code)})
				err := f.Handle(context.Background(), testDelivery())
				if (err != nil) != tc.err || ferry.IsPermanent(err) != tc.permanent {
					t.Fatalf("err = %v (permanent %v), want error %v, permanent %v", err, ferry.IsPermanent(err), tc.err, tc.permanent)
				}
				if err != nil && !strings.Contains(err.Error(), strconv.Itoa(code)) {
					t.Errorf("error %q does not record the status", err)
				}
			})
		}
	}
	t.Cleanup(func() { // after every parallel subtest
		if n := followed.Load(); n != 0 {
			t.Errorf("a redirect was followed %d times", n)
		}
	})
}

// An app may write a reason phrase of its own, of any length, echoing the
// payload ("HTTP/1.1 400 bad payload {...}"): the error names the status
// by its code and standard text. A log line and the forward span get no
// word of the app's, not its reason phrase and not its body.
func TestForwarderKeepsTheAppsWordsOutOfTheLog(t *testing.T) {
	t.Parallel()
	reason := "bad payload PAYLOADMARK " + strings.Repeat("R", 32<<10)
	appURL := rawApp(t, fmt.Sprintf("HTTP/1.1 400 %s\r\nContent-Length: 15\r\nConnection: close\r\n\r\nBODYMARK echoed", reason))
	rec, tp := testtrace.NewRecorder()
	f := newForwarder(t, ferryhttp.ForwarderOptions{URL: appURL, TracerProvider: tp})
	err := f.Handle(context.Background(), testDelivery())
	var r interface{ Redacted() string }
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want one with a Redacted text", err)
	}
	if got := r.Redacted(); got != "forward: app answered 400 Bad Request (15-byte body)" {
		t.Errorf("Redacted() = %.200q, want the status and size only", got)
	}
	if msg := err.Error(); strings.Contains(msg, "PAYLOADMARK") || !strings.Contains(msg, "400 Bad Request") || !strings.Contains(msg, "BODYMARK") {
		t.Errorf("Error() = %.200q, want the standard status text and the body's start, not the reason phrase", msg)
	}
	if s := oneSpan(t, rec); s.Status().Description != "400 Bad Request" {
		t.Errorf("span status %.200q, want the standard status text", s.Status().Description)
	}
}

// rawApp is an app on loopback that reads each request and writes answer,
// byte for byte, whatever it is; it returns the app's URL.
func rawApp(t *testing.T, answer string) string {
	t.Helper()
	return "http://" + testhttp.Serve(t, func(conn net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(conn)); err == nil {
			fmt.Fprint(conn, answer)
		}
	})
}

// An app whose answer is not HTTP (one that echoes what it reads) has its
// bytes quoted by the transport's error: the event's last error keeps that,
// and the log line (Redacted) and the span say only that no HTTP answer
// came. A refused connection, an untrusted certificate and plain HTTP to an
// https URL keep their own words in both.
func TestForwarderKeepsANonHTTPAnswerOutOfTheLog(t *testing.T) {
	t.Parallel()
	rec, tp := testtrace.NewRecorder()
	f := newForwarder(t, ferryhttp.ForwarderOptions{URL: rawApp(t, "ECHO {\"card\":\"CARDMARK\"}\r\n\r\n"), TracerProvider: tp})
	err := f.Handle(context.Background(), testDelivery())
	var r interface{ Redacted() string }
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want one with a Redacted text", err)
	}
	if got := r.Redacted(); strings.Contains(got, "CARDMARK") || !strings.Contains(got, "no HTTP answer") {
		t.Errorf("Redacted() = %q, want no word of the app's", got)
	}
	if !strings.Contains(err.Error(), "CARDMARK") {
		t.Errorf("Error() = %q, want the transport's words kept for the event's last error", err)
	}
	if s := oneSpan(t, rec); strings.Contains(s.Status().Description, "CARDMARK") {
		t.Errorf("span status %q quotes the app", s.Status().Description)
	}

	closed := testhttp.Listen(t)
	addr := closed.Addr().String()
	closed.Close()
	untrusted := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(untrusted.Close)
	plain, _ := app(t, nil)
	for url, want := range map[string]string{
		"http://" + addr: "connection refused",
		untrusted.URL:    "certificate signed by unknown authority",
		"https://" + strings.TrimPrefix(plain.URL, "http://"): "server gave HTTP response to HTTPS client",
	} {
		f = newForwarder(t, ferryhttp.ForwarderOptions{URL: url})
		if err := f.Handle(context.Background(), testDelivery()); !errors.As(err, &r) || !strings.Contains(r.Redacted(), want) {
			t.Errorf("%s: Redacted() of %v does not say %q", url, err, want)
		}
	}
}

// An app that answers without end is read no further than the ledger's
// snippet and a megabyte drained for the connection's reuse.
func TestForwarderReadsABoundedAnswer(t *testing.T) {
	t.Parallel()
	srv, _ := app(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	var read atomic.Int64
	client := &http.Client{Transport: countingTransport{base: http.DefaultTransport, read: &read}}
	f := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL, Client: client, Timeout: time.Minute})
	if err := f.Handle(context.Background(), testDelivery()); err == nil {
		t.Fatal("a 502 forwarded without error")
	}
	if n, most := read.Load(), int64(ferry.ResponseLimit+1<<20); n > most {
		t.Errorf("read %d bytes of the answer, want at most %d", n, most)
	}
}

// countingTransport adds the bytes read from each response body to read.
type countingTransport struct {
	base http.RoundTripper
	read *atomic.Int64
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err == nil {
		resp.Body = countingBody{ReadCloser: resp.Body, read: c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	read *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func TestForwarderNetworkErrors(t *testing.T) {
	t.Parallel()

	t.Run("nothing listening", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL + "/hooks?token=" + appToken
		srv.Close()
		err := newForwarder(t, ferryhttp.ForwarderOptions{URL: url}).Handle(context.Background(), testDelivery())
		if err == nil || ferry.IsPermanent(err) {
			t.Fatalf("err = %v, want a retryable error", err)
		}
		assertNoToken(t, err)
	})

	t.Run("connection dropped before an answer", func(t *testing.T) {
		t.Parallel()
		srv, _ := app(t, func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.Close()
		})
		err := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL}).Handle(context.Background(), testDelivery())
		if err == nil || ferry.IsPermanent(err) {
			t.Fatalf("err = %v, want a retryable error", err)
		}
	})

	t.Run("answer headers past 64 KiB", func(t *testing.T) {
		t.Parallel()
		// Past the forwarder's bound and far short of Go's 10 MiB default.
		srv, _ := app(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Pad", strings.Repeat("x", 70<<10))
		})
		err := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL}).Handle(context.Background(), testDelivery())
		if err == nil || ferry.IsPermanent(err) {
			t.Fatalf("err = %v, want a retryable error", err)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		srv, _ := hangingApp(t)
		f := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL + "?token=" + appToken, Timeout: 50 * time.Millisecond})
		err := f.Handle(context.Background(), testDelivery())
		if !errors.Is(err, context.DeadlineExceeded) || ferry.IsPermanent(err) || !strings.Contains(err.Error(), "no answer within the forward timeout, 50ms") {
			t.Fatalf("err = %v, want a retryable deadline error naming the forward timeout", err)
		}
		assertNoToken(t, err)
	})

	t.Run("handler context cancelled", func(t *testing.T) {
		t.Parallel()
		srv, got := hangingApp(t)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-got; cancel() }()
		err := newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL}).Handle(ctx, testDelivery())
		if !errors.Is(err, context.Canceled) || ferry.IsPermanent(err) || strings.Contains(err.Error(), "forward timeout") {
			t.Fatalf("err = %v, want a retryable cancellation, not blamed on the forward timeout", err)
		}
	})
}

// appToken is a credential in the forward URL's query, as apps often take
// one. Errors are logged and stored, so they must not repeat it.
const appToken = "APP-TOKEN-5e3d1c"

func assertNoToken(t *testing.T, err error) {
	t.Helper()
	if strings.Contains(err.Error(), appToken) {
		t.Errorf("error %q repeats the URL's token", err)
	}
}

// attemptDone tells a test when the client has recorded an attempt.
type attemptDone chan ferry.Outcome

func (a attemptDone) AttemptFinished(_ string, o ferry.Outcome, _ bool, _ time.Duration) { a <- o }

// TestForwarderThroughClient runs the forwarder as the service does, as a
// client's handler, and reads the verdict from the store: a Retry-After in
// seconds or as a date sets the next attempt, and a permanent answer
// kills the event with the status recorded.
func TestForwarderThroughClient(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock() // shared: only the store and the forwarder read it
	cases := []struct {
		name      string
		answer    http.HandlerFunc
		outcome   ferry.Outcome
		state     ferry.State
		nextIn    time.Duration // pending only
		lastError string
	}{
		{"2xx completes", func(w http.ResponseWriter, _ *http.Request) {}, ferry.OutcomeDone, ferry.StateDone, 0, ""},
		{"503 with Retry-After seconds", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(503)
		}, ferry.OutcomeFailed, ferry.StatePending, time.Hour, "503 Service Unavailable"},
		{"429 with Retry-After date", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", clock.Now().Add(2*time.Hour).Format(http.TimeFormat))
			w.WriteHeader(429)
		}, ferry.OutcomeFailed, ferry.StatePending, 2 * time.Hour, "429 Too Many Requests"},
		{"404 is permanent", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(404)
		}, ferry.OutcomeDead, ferry.StateDead, 0, "404 Not Found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := teststore.SQLite(t, &sqlite.Config{Now: clock.Now})
			res, err := st.EventReceive(context.Background(), &ferry.EventReceiveParams{
				Source: "stripe", EventID: "evt_1", Payload: []byte(`{"id":"evt_1"}`),
			})
			if err != nil {
				t.Fatal(err)
			}
			srv, _ := app(t, tc.answer)
			done := make(attemptDone, 4)
			c, err := ferry.NewClient(&ferry.Config{
				Store: st, PollInterval: 20 * time.Millisecond,
				// Backoff far below the Retry-After, so the wait seen is the app's.
				RetryBase: time.Millisecond, RetryCap: time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: done,
			})
			if err != nil {
				t.Fatal(err)
			}
			c.Handle("stripe", newForwarder(t, ferryhttp.ForwarderOptions{URL: srv.URL, Now: clock.Now}).Handle)
			if err := c.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			outcome := <-done
			if err := c.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if outcome != tc.outcome {
				t.Fatalf("attempt outcome = %s, want %s", outcome, tc.outcome)
			}
			ev, err := st.EventGet(context.Background(), &ferry.EventGetParams{ID: res.ID})
			if err != nil {
				t.Fatal(err)
			}
			if ev.State != tc.state || !strings.Contains(ev.LastError, tc.lastError) {
				t.Fatalf("event %s, last error %q; want %s, %q", ev.State, ev.LastError, tc.state, tc.lastError)
			}
			if tc.state == ferry.StatePending {
				if got := ev.NextAttemptAt.Sub(clock.Now()); got != tc.nextIn {
					t.Errorf("next attempt in %s, want %s", got, tc.nextIn)
				}
			}
		})
	}
}
