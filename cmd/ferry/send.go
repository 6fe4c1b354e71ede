package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/ferry-inbox/ferry/internal/config"
	"github.com/ferry-inbox/ferry/provider"
)

func runSend(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	configPath := fs.String("config", "ferry.toml", "the config `file` (for the source's provider and secret)")
	sourceName := fs.String("source", "", "the source to send as (required)")
	to := fs.String("to", "", "ferry's base `URL`; defaults to http://<http.listen>")
	eventID := fs.String("event-id", "", "the event id; defaults to a random one (send the same id twice to see deduplication)")
	eventType := fs.String("type", "demo.event", "the event type")
	bodyPath := fs.String("body", "", "a `file` with the JSON body to send instead of a sample")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *sourceName == "" {
		return usagef("--source is required: name one of the config's [[source]] tables")
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	var src *config.Source
	for i := range cfg.Sources {
		if cfg.Sources[i].Name == *sourceName {
			src = &cfg.Sources[i]
		}
	}
	if src == nil {
		return usagef("--source %q is not in %s", *sourceName, *configPath)
	}
	if *eventID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		*eventID = "evt_" + hex.EncodeToString(b[:])
	}
	body, err := sampleBody(*bodyPath, src, *eventID, *eventType)
	if err != nil {
		return err
	}
	header, err := sign(src, *eventID, *eventType, body)
	if err != nil {
		return err
	}
	base := *to
	if base == "" {
		base = "http://" + cfg.HTTP.Listen
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhooks/"+src.Name, bytes.NewReader(body))
	if err != nil {
		return usagef("--to %q: %v", base, err)
	}
	req.Header = header
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Printf("%s %s -> %s %s", src.Name, *eventID, resp.Status, answer)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("ferry answered %s", resp.Status)
	}
	return nil
}

func sampleBody(path string, src *config.Source, eventID, eventType string) ([]byte, error) {
	if path != "" {
		return os.ReadFile(path)
	}
	doc := map[string]any{"id": eventID, "type": eventType, "created": time.Now().Unix(), "data": map[string]any{"demo": true}}
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
	signer, err := provider.NewSigner(src.Provider, provider.Options{
		Secrets: src.Secrets,
		HMAC: provider.HMACOptions{
			Header: src.HMAC.Header, Prefix: src.HMAC.Prefix,
			Encoding: provider.Encoding(src.HMAC.Encoding), Algorithm: provider.Algorithm(src.HMAC.Algorithm),
			EventIDHeader: src.HMAC.EventIDHeader, EventIDField: src.HMAC.EventIDField,
			TypeHeader: src.HMAC.TypeHeader, TypeField: src.HMAC.TypeField,
		},
	})
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	signer.Sign(h, &provider.Message{ID: eventID, Type: eventType, Body: body})
	return h, nil
}
