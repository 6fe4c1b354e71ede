package ferryhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/teststore"
)

// batchWatcher is a real store that records the size of every
// EventReceiveMany batch and holds the first one until released.
type batchWatcher struct {
	ferry.Store
	release chan struct{}

	mu    sync.Mutex
	sizes []int
}

func (s *batchWatcher) EventReceiveMany(ctx context.Context, p *ferry.EventReceiveManyParams) ([]ferry.EventReceiveManyResult, error) {
	s.mu.Lock()
	first := len(s.sizes) == 0
	s.sizes = append(s.sizes, len(p.Receipts))
	s.mu.Unlock()
	if first {
		<-s.release
	}
	return s.Store.EventReceiveMany(ctx, p)
}

func (s *batchWatcher) batches() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sizes)
}

// Deliveries that arrive while a batch is being written share the next
// commit, and each is answered 200 once its own is stored.
func TestReceiverBatchesConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	const n = 20
	st := &batchWatcher{Store: teststore.SQLite(t, nil), release: make(chan struct{})}
	b := setup(t, st, func(o *ferryhttp.ReceiverOptions) { o.ReceiveConcurrency = 1 })

	replies := make(chan reply, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			d := stripe(fmt.Sprintf(`{"id":"evt_%d"}`, i))
			d.header.Set("X-Test-Case", fmt.Sprint(i))
			r, err := b.do(d)
			if err != nil {
				errs <- err
				return
			}
			replies <- r
		}()
	}
	// Read state, no sleep: every request has reached the receiver and the
	// first batch is being written (held), so the others queue behind it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b.mu.Lock()
		entered := len(b.contentLengths)
		b.mu.Unlock()
		if entered == n && len(st.batches()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %d of %d requests in, batches %v", entered, n, st.batches())
		}
		time.Sleep(time.Millisecond) // polling interval, not a proof
	}
	close(st.release)
	for range n {
		select {
		case r := <-replies:
			if r.status != http.StatusOK {
				t.Fatalf("answer %d %s", r.status, r.raw)
			}
		case err := <-errs:
			t.Fatal(err)
		}
	}
	sizes := st.batches()
	if len(sizes) >= n || slices.Max(sizes) < 2 {
		t.Fatalf("batches %v for %d concurrent deliveries: none shared a commit", sizes, n)
	}
	for i := range n {
		if event(t, st, "stripe", fmt.Sprintf("evt_%d", i)) == nil {
			t.Fatalf("evt_%d answered 200 but not stored", i)
		}
	}
}
