package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-inbox/ferry/internal/testhttp"
)

func TestHealthcheck(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "ferry.db"), "http://127.0.0.1:9/", "")
	p := startServe(t, cfg)

	if _, stderr, code := runFerry(t, "healthcheck", "--url", "http://"+p.addr+"/readyz"); code != 0 {
		t.Errorf("healthcheck on a ready ferry: exit %d, want 0\n%s", code, stderr)
	}
	if _, _, code := runFerry(t, "healthcheck", "--url", "http://"+p.addr+"/no-such-path"); code != 1 {
		t.Errorf("healthcheck on a 404: exit %d, want 1", code)
	}

	ln := testhttp.Listen(t)
	closed := ln.Addr().String()
	ln.Close()
	if _, _, code := runFerry(t, "healthcheck", "--url", "http://"+closed+"/readyz"); code != 1 {
		t.Errorf("healthcheck on a closed port: exit %d, want 1", code)
	}
	// A container's health log keeps what healthcheck prints: the URL's
	// credentials never show, whether it fails to connect or answers.
	for _, target := range []string{closed + "/readyz", p.addr + "/no-such-path"} {
		_, stderr, code := runFerry(t, "healthcheck", "--url", "http://probe:s3cr3tPass@"+target+"?token=s3cr3tToken")
		if code != 1 || stderr == "" || strings.Contains(stderr, "s3cr3t") {
			t.Errorf("healthcheck of %s with credentials in its URL: exit %d, want 1; stderr %q must say why without them", target, code, stderr)
		}
	}
	if _, _, code := runFerry(t, "healthcheck", "extra"); code != 2 {
		t.Errorf("healthcheck with an argument: exit %d, want 2", code)
	}
}
