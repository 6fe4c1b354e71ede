package main

import (
	"net"
	"path/filepath"
	"testing"
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

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	if _, _, code := runFerry(t, "healthcheck", "--url", "http://"+closed+"/readyz"); code != 1 {
		t.Errorf("healthcheck on a closed port: exit %d, want 1", code)
	}
	if _, _, code := runFerry(t, "healthcheck", "extra"); code != 2 {
		t.Errorf("healthcheck with an argument: exit %d, want 2", code)
	}
}
