package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry/internal/config"
	"github.com/ferry-inbox/ferry/provider"
)

func runSend(ctx context.Context, args []string) error {
	fs := newFlags("send", "--source NAME [flags]",
		`Signs a delivery as the source's provider would, with the config's first secret,
and posts it to a running ferry. The body is the same bytes for the same event id
and type, so sending an id twice shows deduplication ("duplicate"). A --body
file's own event id (Stripe's "id") is the one ferry stores and send prints; an
--event-id that disagrees with it is refused (exit 2). Prints the answer; exits 1
unless ferry answered 2xx.`)
	configPath := fs.String("config", "ferry.toml", "the config `file` (for the source's provider and secret)")
	sourceName := fs.String("source", "", "the source to send as (required)")
	to := fs.String("to", "", "ferry's base `URL`, with http:// or https://; defaults to http://<http.listen>")
	eventID := fs.String("event-id", "", "the event id; defaults to a random one, or the --body file's own (send the same id twice to see deduplication)")
	eventType := fs.String("type", "demo.event", "the event type")
	bodyPath := fs.String("body", "", "a `file` with the JSON body to send instead of a sample")
	if err := fs.parseFlagsOnly(args); err != nil {
		return err
	}
	if *sourceName == "" {
		return usagef("--source is required: name one of the config's [[source]] tables")
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	src, err := sourceFlag(cfg, *sourceName)
	if err != nil {
		return err
	}
	named := *eventID != ""
	if !named {
		var b [8]byte
		_, _ = rand.Read(b[:])
		*eventID = "evt_" + hex.EncodeToString(b[:])
	}
	body, err := sampleBody(*bodyPath, src, *eventID, *eventType)
	if err != nil {
		return usagef("--body: %v", err)
	}
	header, err := sign(src, *eventID, *eventType, body)
	if err != nil {
		return err
	}
	// A --body file may carry its own id (Stripe's "id"), which the
	// receiver stores: the id printed is the one ferry keeps, and an
	// --event-id it would not keep is refused.
	if v, err := cfg.Verifier(*src); err == nil {
		if got, err := v.Verify(header, body); err == nil && got.EventID != *eventID {
			if named {
				return usagef("--event-id %s, but the --body file's event id is %s, which ferry would store: drop --event-id, or make them agree", *eventID, got.EventID)
			}
			*eventID = got.EventID
		}
	}
	// A trailing slash would make the path //webhooks/…; a --to that is the
	// webhook URL itself would post to …/webhooks/stripe/webhooks/stripe.
	base := strings.TrimRight(*to, "/")
	if base == "" {
		base = "http://" + cfg.HTTP.Listen
	}
	if u, err := url.Parse(*to); err == nil && (strings.HasSuffix(u.Path, "/webhooks/") || strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/webhooks/"+src.Name)) {
		return usagef("--to is the webhook URL; give ferry's base URL (the part before /webhooks/), and send adds /webhooks/%s", src.Name)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhooks/"+src.Name, bytes.NewReader(body))
	// Without its scheme, "127.0.0.1:8080" does not parse and
	// "localhost:8080" parses as the scheme "localhost".
	// The value is not echoed: without its scheme no rule finds the
	// credentials it may carry.
	if err != nil || req.URL.Scheme != "http" && req.URL.Scheme != "https" || req.URL.Host == "" {
		return usagef("--to is not ferry's base URL: write it with http:// or https:// in front, like http://%s", cfg.HTTP.Listen)
	}
	req.Header = header
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w (is ferry serve running at %s?)", config.RedactURL(req.URL.String()), withoutURL(err), config.RedactURL(base))
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Printf("%s %s -> %s %s", src.Name, *eventID, resp.Status, answer)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("ferry answered %s", resp.Status)
	}
	return nil
}

// sampleBody is the body to send: the --body file, or a sample that is the
// same bytes for the same event id and type. A provider's redelivery is
// byte-for-byte the first delivery; a body carrying the send time would be
// stored as a conflicting duplicate instead.
func sampleBody(path string, src *config.Source, eventID, eventType string) ([]byte, error) {
	if path != "" {
		return os.ReadFile(path)
	}
	doc := map[string]any{"id": eventID, "type": eventType, "data": map[string]any{"demo": true}}
	if src.Provider == "hmac" && src.HMAC.EventIDField != "" {
		doc[src.HMAC.EventIDField] = eventID
	}
	if src.Provider == "hmac" && src.HMAC.TypeField != "" {
		doc[src.HMAC.TypeField] = eventType
	}
	return json.Marshal(doc)
}

// sign signs body as the source's provider would, with its first secret.
func sign(src *config.Source, eventID, eventType string, body []byte) (http.Header, error) {
	signer, err := provider.NewSigner(src.Provider, src.ProviderOptions())
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	signer.Sign(h, &provider.Message{ID: eventID, Type: eventType, Body: body})
	return h, nil
}
