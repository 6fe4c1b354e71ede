package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ferry-inbox/ferry/internal/config"
)

// runHealthcheck probes a running ferry over HTTP and exits 0 on a 2xx, 1
// otherwise. The container image has no curl or wget, so its HEALTHCHECK runs
// this instead.
func runHealthcheck(ctx context.Context, args []string) error {
	fs := newFlags("healthcheck", "[--url URL] [--timeout 3s]",
		`Probes a running ferry over HTTP: exits 0 when --url answers 2xx, 1 otherwise.
The container image has no curl or wget; its HEALTHCHECK runs this.`)
	url := fs.String("url", "http://"+config.DefaultListen+"/readyz", "the `URL` to probe: ferry's /readyz (or /healthz for liveness only)")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return usagef("healthcheck takes no arguments, got %q; the URL goes in --url", positional)
	}
	if *timeout <= 0 {
		return usagef("--timeout %s: must be positive", *timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	// The URL is shown only redacted: its user or password may be a
	// credential, and a container's health log keeps what this prints.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return usagef("--url cannot be read as a URL (the value is not shown: it may hold a credential): write it like http://%s/readyz", config.DefaultListen)
	}
	shown := config.RedactURL(*url)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", shown, withoutURL(err))
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s: %s", shown, resp.Status)
	}
	return nil
}
