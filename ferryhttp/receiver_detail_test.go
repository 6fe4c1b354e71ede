package ferryhttp_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
)

// leakyVerifier is a Verifier outside package provider whose error text
// holds the signature it was sent: nothing of it may reach the answer or
// the log.
type leakyVerifier struct{}

func (leakyVerifier) Verify(h http.Header, _ []byte) (*ferry.Verified, error) {
	return nil, fmt.Errorf("%w: cannot read %q", ferry.ErrMalformedSignature, h.Get("X-Leaky-Signature"))
}

// TestReceiverRejectionDetail: a rejection whose verifier says what is
// wrong (a ferry.VerifyError) answers that beside the error code and logs
// it, so a sender can fix its setup: the prefix it left out, the header
// name it should use. An error of another type adds nothing.
func TestReceiverRejectionDetail(t *testing.T) {
	t.Parallel()
	b := setup(t, teststore.SQLite(t, nil), func(o *ferryhttp.ReceiverOptions) {
		o.Sources = append(o.Sources, ferryhttp.Source{Name: "leaky", Verifier: leakyVerifier{}})
	})
	const body = `{"n":1}`
	signed := hmacDelivery(hmacSecret, "acme-detail", body)
	sig := signed.header.Get("X-Acme-Signature")
	const leaked = "LEAKY-SIGNATURE-VALUE"

	cases := []struct {
		name   string
		d      delivery
		status int
		want   map[string]string
	}{
		{"prefix left out", signed.with("X-Acme-Signature", strings.TrimPrefix(sig, "sha256=")),
			401, rejectedWith("malformed_signature", `no "sha256=" prefix`)},
		{"another signature header", signed.with("X-Acme-Signature", "").with("X-Signature", sig),
			401, rejectedWith("missing_signature", "no X-Acme-Signature header")},
		{"no event id header", signed.with("X-Acme-Event-Id", ""),
			400, rejectedWith("missing_event_id", "no X-Acme-Event-Id header")},
		{"another verifier's error", delivery{source: "leaky", header: http.Header{"X-Leaky-Signature": {leaked}}, body: []byte(body)},
			401, rejected("malformed_signature")},
	}
	for _, tc := range cases {
		if r := b.send(t, tc.d); r.status != tc.status || !maps.Equal(r.body, tc.want) {
			t.Errorf("%s: %d %s, want %d %v", tc.name, r.status, r.raw, tc.status, tc.want)
		}
	}
	b.srv.Close() // waits for every handler, so every line is written

	logs := b.logs.String()
	if strings.Contains(logs, leaked) {
		t.Errorf("the log holds another verifier's error text:\n%s", logs)
	}
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("%d log lines for %d deliveries:\n%s", len(lines), len(cases), logs)
	}
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v", i, err)
		}
		want := cases[i].want
		if rec["reason"] != want["error"] {
			t.Errorf("%s: logged reason %v, want %s", cases[i].name, rec["reason"], want["error"])
		}
		if got, _ := rec["detail"].(string); got != want["detail"] {
			t.Errorf("%s: logged detail %q, want %q", cases[i].name, got, want["detail"])
		}
	}
}

// TestReceiverWebhookPaths: on a real loopback server, a delivery to a
// path under /webhooks that is not /webhooks/NAME is answered 404
// bad_path in JSON, saying what the URL should be; it is never redirected
// (providers follow no redirect) nor stored, and /healthz and /readyz
// still answer. Handler(mux) answers every such path; Register alone
// answers those the mux does not redirect.
func TestReceiverWebhookPaths(t *testing.T) {
	t.Parallel()
	st := teststore.SQLite(t, nil)
	b := setup(t, st, nil) // Register only
	mux := http.NewServeMux()
	(&ferryhttp.Health{Store: st}).Register(mux)
	b.recv.Register(mux)
	front := httptest.NewServer(b.recv.Handler(mux))
	t.Cleanup(front.Close)

	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(t *testing.T, base, path, id string) (int, http.Header, []byte) {
		t.Helper()
		d := stripe(`{"id":"` + id + `","type":"t"}`)
		req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(d.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = d.header
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, res.Header, raw
	}
	badPath := func(t *testing.T, base, path string) {
		t.Helper()
		id := "evt_path_" + strings.NewReplacer("/", "s", ".", "d", "%", "p").Replace(path)
		status, header, raw := post(t, base, path, id)
		var body map[string]string
		if status != 404 || header.Get("Content-Type") != "application/json" || json.Unmarshal(raw, &body) != nil ||
			body["error"] != "bad_path" || !strings.Contains(body["detail"], "/webhooks/{source}") || !strings.Contains(body["detail"], "no trailing slash") {
			t.Errorf("POST %s: %d %s %q, want a JSON 404 bad_path saying the URL is /webhooks/{source}", path, status, header.Get("Content-Type"), raw)
		}
		if event(t, st, "stripe", id) != nil {
			t.Errorf("POST %s stored the delivery", path)
		}
	}

	t.Run("Handler", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{
			"/webhooks/stripe/", "/webhooks//stripe", "//webhooks/stripe", "/webhooks/./stripe",
			"/webhooks/stripe/.", "/webhooks/stripe/extra", "/webhooks/", "/webhooks", "/webhooks%2Fstripe",
		} {
			badPath(t, front.URL, path)
		}
		if status, _, raw := post(t, front.URL, "/webhooks/stripe", "evt_path_ok"); status != 200 || event(t, st, "stripe", "evt_path_ok") == nil {
			t.Errorf("POST /webhooks/stripe: %d %s, want 200 and stored", status, raw)
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, _ := testhttp.Get(t, front.URL+path); code != 200 {
				t.Errorf("GET %s = %d, want 200", path, code)
			}
		}
	})
	t.Run("RegisterOnly", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/webhooks/stripe/", "/webhooks/stripe/extra", "/webhooks/", "/webhooks"} {
			badPath(t, b.srv.URL, path)
		}
	})
}

// docs/operations.md's table of answers lists every reason the receiver
// gives (its Reason constants) and no other: an operator reading an answer
// or a metric label finds it there.
func TestOperationsDocListsEveryReason(t *testing.T) {
	t.Parallel()
	file, err := parser.ParseFile(token.NewFileSet(), "receiver.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]bool{}
	for _, decl := range file.Decls {
		if gen, ok := decl.(*ast.GenDecl); ok && gen.Tok == token.CONST {
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				if strings.HasPrefix(vs.Names[0].Name, "Reason") {
					v, err := strconv.Unquote(vs.Values[0].(*ast.BasicLit).Value)
					if err != nil {
						t.Fatal(err)
					}
					reasons[v] = true
				}
			}
		}
	}
	if len(reasons) == 0 {
		t.Fatal("receiver.go declares no Reason constant")
	}
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "## What the receiver answers\n")
	section, _, _ = strings.Cut(section, "\n## ")
	listed := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 3 && strings.Contains(cells[2], "`") {
			for _, code := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(cells[2], -1) {
				listed[code[1]] = true
			}
		}
	}
	for r := range reasons {
		if !listed[r] {
			t.Errorf("docs/operations.md (What the receiver answers) does not list %q", r)
		}
	}
	for r := range listed {
		if !reasons[r] {
			t.Errorf("docs/operations.md (What the receiver answers) lists %q, which the receiver never answers", r)
		}
	}
}
