package ferryhttp_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/internal/teststore"
)

// BenchmarkReceive measures the receiver's hot path in process: a Stripe
// signature check and a durable SQLite receive (WAL, synchronous=FULL, so
// an fsync per new event), through the mux, without the network. Signing
// each delivery is inside the loop; it costs one HMAC, as verifying does.
func BenchmarkReceive(b *testing.B) {
	run := func(b *testing.B, unique bool) {
		mux := benchMux(b, teststore.SQLite(b, nil))
		want := http.StatusOK
		i := 0
		for b.Loop() {
			id := "evt_bench"
			if unique {
				id += strconv.Itoa(i)
			}
			i++
			body := benchBody(id)
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, ferrytest.NewRequest("/webhooks/stripe", ferrytest.SignStripe(stripeSecret, body, testNow), body))
			if w.Code != want {
				b.Fatalf("answer %d %s", w.Code, w.Body)
			}
		}
	}
	b.Run("new", func(b *testing.B) { run(b, true) })
	b.Run("duplicate", func(b *testing.B) { run(b, false) })
}

// benchMux is a receiver for every provider on store, logging nowhere,
// behind a mux.
func benchMux(b *testing.B, store ferry.Store) *http.ServeMux {
	recv, err := ferryhttp.NewReceiver(ferryhttp.ReceiverOptions{
		Store: store, Sources: sources(b),
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	recv.Register(mux)
	return mux
}

// benchBody is a Stripe invoice.paid event of a realistic size.
func benchBody(eventID string) []byte {
	return []byte(`{"id":"` + eventID + `","type":"invoice.paid","data":{"object":{"amount":2000,"currency":"eur","customer":"cus_123"}}}`)
}
