package ferryhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/internal/teststore"
)

// BenchmarkReceivePostgresParallel is the ingest benchmark's Ferry side in
// process: 64 concurrent deliveries of new events, Stripe-verified, stored
// on PostgreSQL with group commit, through the mux, without the network.
// Profile it to see the receiver's hot path as the bench loads it.
func BenchmarkReceivePostgresParallel(b *testing.B) {
	mux := benchMux(b, teststore.Postgres(b, nil))
	var n atomic.Int64
	b.SetParallelism(32) // × GOMAXPROCS 2: the bench's 64 connections
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := benchBody("evt_" + strconv.FormatInt(n.Add(1), 10))
			req := ferrytest.NewRequest("/webhooks/stripe", ferrytest.SignStripe(stripeSecret, body, testNow), body)
			req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Errorf("answer %d %s", w.Code, w.Body)
				return
			}
		}
	})
}
