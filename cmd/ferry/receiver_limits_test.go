package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/internal/testhttp"
)

// startReceiver runs `ferry serve --role receiver` on SQLite with httpKeys
// in its [http] table. Its source's max_body is 4 KiB, so a max_in_flight
// as small passes the config check.
func startReceiver(t *testing.T, httpKeys string) *serveProc {
	t.Helper()
	cfg := writeServeConfigHTTP(t, "sqlite:"+filepath.Join(t.TempDir(), "ferry.db"), httpKeys,
		fmt.Sprintf("[[source]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecrets = [%q]\nmax_body = 4096\n", stripeSecret))
	return startServe(t, cfg, "--role", "receiver")
}

// sendHead sends a Stripe delivery's headers with a Content-Length of
// length, then sent bytes of its body, and then nothing.
func sendHead(t *testing.T, addr string, length, sent int) net.Conn {
	t.Helper()
	return testhttp.PartialPost(t, addr, "/webhooks/stripe", nil, length, strings.Repeat("x", sent))
}

// answer reads the receiver's answer on conn: its status and body.
func answer(t *testing.T, conn net.Conn) (int, string) {
	t.Helper()
	status, _, raw := testhttp.ReadResponse(t, conn)
	return status, string(raw)
}

// The [http] keys reach the receiver: max_in_flight bounds the bodies it
// holds (and /metrics shows them), body_timeout cuts a body that stalls.
func TestServeReceiverLimits(t *testing.T) {
	t.Parallel()
	t.Run("MaxInFlight", func(t *testing.T) {
		t.Parallel()
		p := startReceiver(t, "max_in_flight = 4096\nbody_timeout = \"1m\"")
		stalled := sendHead(t, p.addr, 3500, 3000)
		waitFor(t, time.Minute, "the stalled body's bytes on /metrics", func() bool {
			return inFlightBytes(t, p.admin) >= 3000
		})
		// 3000 held + 2000 claimed > 4096: refused before its body is read.
		if code, body := answer(t, sendHead(t, p.addr, 2000, 0)); code != http.StatusServiceUnavailable || !strings.Contains(body, "memory_budget") {
			t.Fatalf("a body past max_in_flight: %d %s, want 503 memory_budget", code, body)
		}
		stalled.Close()
		waitFor(t, time.Minute, "the stalled body's bytes given back", func() bool {
			return inFlightBytes(t, p.admin) == 0
		})
	})
	t.Run("HeaderLimit", func(t *testing.T) {
		t.Parallel()
		p := startReceiver(t, "")
		// Past maxHeaderBytes and far short of net/http's 1 MiB default.
		pad := http.Header{"X-Pad": {strings.Repeat("x", 2*maxHeaderBytes)}}
		if code, _ := answer(t, testhttp.PartialPost(t, p.addr, "/webhooks/stripe", pad, 0, "")); code != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("a %d KiB header: %d, want 431", 2*maxHeaderBytes>>10, code)
		}
	})
	t.Run("BodyTimeout", func(t *testing.T) {
		t.Parallel()
		p := startReceiver(t, "body_timeout = \"1s\"")
		conn := sendHead(t, p.addr, 1024, 10)
		// Nine times the configured 1s, and short of the 10s default:
		// only a body_timeout that never reached the receiver passes it.
		_ = conn.SetDeadline(time.Now().Add(9 * time.Second))
		if code, body := answer(t, conn); code != http.StatusRequestTimeout || !strings.Contains(body, "body_timeout") {
			t.Fatalf("a stalled body: %d %s, want 408 body_timeout", code, body)
		}
	})
}

// inFlightBytes reads ferry_receiver_in_flight_bytes from /metrics.
func inFlightBytes(t *testing.T, admin string) int64 {
	t.Helper()
	_, metrics := testhttp.Get(t, "http://"+admin+"/metrics")
	sc := bufio.NewScanner(strings.NewReader(metrics))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ferry_receiver_in_flight_bytes "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(n)
		}
	}
	t.Fatal("no ferry_receiver_in_flight_bytes on /metrics")
	return 0
}

// A listener's server closes a keep-alive connection once it has been idle
// for the server's idle timeout (publicIdleTimeout on the public listener,
// too long to wait for here: the test gives its own).
func TestServerClosesIdleConnections(t *testing.T) {
	t.Parallel()
	const idle = 200 * time.Millisecond
	srv := newServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), slog.New(slog.DiscardHandler), idle)
	ln := testhttp.Listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: ferry.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Short of the 30s ReadTimeout, which net/http would idle for without
	// an IdleTimeout, and a hundred times the one given.
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Close {
		t.Fatal("the server closed the connection with its answer; want it kept alive, then closed when idle")
	}
	if b, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: read %q, %v; want the server to close it", b, err)
	}
}

// A real `ferry serve` answers a provider URL with a trailing or doubled
// slash with a JSON 404 that says what the URL is, never a redirect (no
// provider follows one) or the mux's plain-text 404; a rejection says what
// to fix; /healthz and /readyz still answer.
func TestServeWebhookPaths(t *testing.T) {
	t.Parallel()
	p := startReceiver(t, "")
	post := func(path string, header http.Header, body string) (int, http.Header, map[string]string) {
		t.Helper()
		status, h, raw := testhttp.ReadResponse(t, testhttp.PartialPost(t, p.addr, path, header, len(body), body))
		var answer map[string]string
		if err := json.Unmarshal(raw, &answer); err != nil {
			t.Errorf("POST %s: %d %q is not a JSON object", path, status, raw)
		}
		return status, h, answer
	}
	body := `{"id":"evt_path","type":"invoice.paid"}`
	signed := ferrytest.SignStripe(stripeSecret, []byte(body), time.Now())
	for _, path := range []string{"/webhooks/stripe/", "/webhooks//stripe", "//webhooks/stripe", "/webhooks/stripe/x"} {
		status, h, answer := post(path, signed, body)
		if status != http.StatusNotFound || h.Get("Location") != "" || answer["error"] != "bad_path" || !strings.Contains(answer["detail"], "/webhooks/{source}") {
			t.Errorf("POST %s: %d %v (Location %q), want 404 bad_path naming /webhooks/{source}", path, status, answer, h.Get("Location"))
		}
	}
	if status, _, answer := post("/webhooks/stripe", nil, body); status != http.StatusUnauthorized || answer["detail"] != "no Stripe-Signature header" {
		t.Errorf("unsigned POST: %d %v, want 401 naming Stripe-Signature", status, answer)
	}
	if status, _, answer := post("/webhooks/stripe", signed, body); status != http.StatusOK || answer["status"] != "accepted" {
		t.Errorf("POST /webhooks/stripe: %d %v, want 200 accepted", status, answer)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := testhttp.Get(t, "http://"+p.addr+path); code != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", path, code)
		}
	}
}
