package ferryhttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
)

func TestHealth(t *testing.T) {
	t.Parallel()
	serve := func(t *testing.T, h *ferryhttp.Health) *httptest.Server {
		mux := http.NewServeMux()
		h.Register(mux)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv
	}

	t.Run("ready, then stopping", func(t *testing.T) {
		t.Parallel()
		h := &ferryhttp.Health{Store: teststore.SQLite(t, nil)}
		srv := serve(t, h)
		if code, body := testhttp.Get(t, srv.URL+"/healthz"); code != 200 || body != "ok\n" {
			t.Errorf("/healthz = %d %q", code, body)
		}
		if code, body := testhttp.Get(t, srv.URL+"/readyz"); code != 200 || body != "ready\n" {
			t.Errorf("/readyz = %d %q", code, body)
		}
		h.Stopping()
		if code, _ := testhttp.Get(t, srv.URL+"/readyz"); code != 503 {
			t.Errorf("/readyz while stopping = %d, want 503", code)
		}
		if code, _ := testhttp.Get(t, srv.URL+"/healthz"); code != 200 {
			t.Errorf("/healthz while stopping = %d, want 200: the process is still up", code)
		}
	})

	t.Run("store unreachable", func(t *testing.T) {
		t.Parallel()
		st := teststore.SQLite(t, nil)
		st.Close()
		srv := serve(t, &ferryhttp.Health{Store: st})
		if code, _ := testhttp.Get(t, srv.URL+"/readyz"); code != 503 {
			t.Errorf("/readyz with a closed store = %d, want 503", code)
		}
		if code, _ := testhttp.Get(t, srv.URL+"/healthz"); code != 200 {
			t.Errorf("/healthz with a closed store = %d, want 200", code)
		}
	})
}
