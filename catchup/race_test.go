package catchup

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

// An event the provider delivers live while catch-up is fetching it: the
// receiver stores it between catch-up's look-up and its receive. Both
// paths meet at the store's dedupe, and a worker runs it once.
func TestLiveAndCatchupAtOnceRunOnce(t *testing.T) {
	t.Parallel()
	b := setupGitHub(t, GitHubOptions{})
	const secret = "github-webhook-secret"
	verifier, err := provider.NewGitHub(provider.Options{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	receiver, err := ferryhttp.NewReceiver(ferryhttp.ReceiverOptions{
		Store: b.store, Sources: []ferryhttp.Source{{Name: "github", Verifier: verifier}},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	receiver.Register(mux)
	live := httptest.NewServer(mux)
	t.Cleanup(live.Close)

	var ids []string
	for i := range 10 {
		guid := fmt.Sprintf("guid-%02d", i)
		ids = append(ids, guid)
		b.fake.add(guid, "push", base.Add(-time.Hour), 500)
	}
	// GitHub delivers the even ones live just as catch-up fetches them,
	// with the body the API returns.
	b.fake.onFetch = func(guid string) {
		var n int
		fmt.Sscanf(guid, "guid-%d", &n)
		if n%2 == 1 {
			return
		}
		body := fmt.Appendf(nil, `{"action":"opened","guid":%q}`, guid)
		req, _ := http.NewRequest(http.MethodPost, live.URL+"/webhooks/github", bytes.NewReader(body))
		req.Header = ferrytest.SignGitHub(secret, guid, "push", body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("live delivery of %s answered %d", guid, resp.StatusCode)
		}
	}

	res := b.pass(t, PassOptions{})
	wantCounts(t, res, 10, 5, 5) // the 5 that raced count as known

	var (
		mu   sync.Mutex
		runs = map[string]int{}
	)
	client, err := ferry.NewClient(&ferry.Config{Store: b.store, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	client.Handle("github", func(_ context.Context, d *ferry.Delivery) error {
		mu.Lock()
		runs[d.Event.EventID]++
		mu.Unlock()
		return nil
	})
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := b.store.EventList(context.Background(), &ferry.EventListParams{States: []ferry.State{ferry.StateDone}})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Events) == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events done after 30s", len(list.Events), len(ids))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := client.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		ev, err := b.store.EventGet(context.Background(), &ferry.EventGetParams{Source: "github", EventID: id})
		if err != nil {
			t.Fatal(err)
		}
		wantOrigin := ferry.OriginCatchup
		if i%2 == 0 {
			wantOrigin = ferry.OriginDelivery // the live delivery got there first
		}
		if runs[id] != 1 || ev.Deliveries != 2-i%2 || ev.Conflicts != 0 || ev.Origin != wantOrigin {
			t.Errorf("%s: ran %d times, %d deliveries, %d conflicts, origin %q; want once, %d, 0, %q",
				id, runs[id], ev.Deliveries, ev.Conflicts, ev.Origin, 2-i%2, wantOrigin)
		}
	}
}
