//go:build unix

package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

// sourceDef is one of the five providers the sender impersonates.
type sourceDef struct {
	name, provider, secret string
}

var sources = []sourceDef{
	{"stripe", "stripe", "whsec_chaos_stripe_secret"},
	{"github", "github", "chaos-github-secret"},
	{"shopify", "shopify", "chaos-shopify-secret"},
	{"svix", "standardwebhooks", "whsec_" + base64.StdEncoding.EncodeToString([]byte("chaos-standard-webhooks-secret"))},
	{"generic", "hmac", "chaos-hmac-secret"},
}

// The generic source's HMAC scheme (see configTOML).
var genericScheme = provider.HMACOptions{Header: "X-Chaos-Signature", Prefix: "sha256="}

// event is one unique webhook event the sender owns.
type event struct {
	src     *sourceDef
	id      string
	typ     string
	key     string // ferry.IdempotencyKey
	body    []byte
	sha     string
	poison  bool // dlq: fails until fixed
	ackedAt atomic.Int64
}

func makeEvents(n int, rng *rand.Rand, runID string) []*event {
	evs := make([]*event, n)
	for i := range evs {
		src := &sources[i%len(sources)]
		id := fmt.Sprintf("evt_%s_%06d", runID, i)
		typ := []string{"invoice.paid", "push", "orders/create", "user.created", "thing.happened"}[i%len(sources)]
		pad := make([]byte, 16+rng.IntN(200))
		for j := range pad {
			pad[j] = 'a' + byte(rng.IntN(26))
		}
		body := fmt.Appendf(nil, `{"id":%q,"type":%q,"created":%d,"data":{"n":%d,"pad":%q}}`, id, typ, time.Now().Unix(), i, pad)
		sum := sha256.Sum256(body)
		evs[i] = &event{src: src, id: id, typ: typ, key: ferry.IdempotencyKey(src.name, id), body: body, sha: hex.EncodeToString(sum[:])}
	}
	return evs
}

// sign signs ev as its provider would, now.
func (ev *event) sign() http.Header {
	var h http.Header
	switch ev.src.provider {
	case "stripe":
		h = ferrytest.SignStripe(ev.src.secret, ev.body, time.Now())
	case "github":
		h = ferrytest.SignGitHub(ev.src.secret, ev.id, ev.typ, ev.body)
	case "shopify":
		h = ferrytest.SignShopify(ev.src.secret, ev.id, ev.typ, ev.body)
	case "standardwebhooks":
		h, _ = ferrytest.SignStandardWebhooks(ev.src.secret, ev.id, time.Now(), ev.body)
	default:
		h, _ = ferrytest.SignHMAC(ev.src.secret, genericScheme, ev.body)
	}
	return h
}

// delivery is one provider delivery of an event; a concurrent one is two
// deliveries of the same event, the second within 5 ms of the first.
type delivery struct {
	ev         *event
	concurrent bool
}

// plan delivers every event once and a fraction dup of them again: some a
// second time, some a third, some concurrently within 5 ms; shuffled.
func plan(evs []*event, dup float64, rng *rand.Rand) []delivery {
	var ds []delivery
	for _, ev := range evs {
		ds = append(ds, delivery{ev: ev})
		if rng.Float64() >= dup {
			continue
		}
		switch r := rng.Float64(); {
		case r < 0.4:
			ds = append(ds, delivery{ev: ev})
		case r < 0.7:
			ds = append(ds, delivery{ev: ev}, delivery{ev: ev})
		default:
			ds = append(ds, delivery{ev: ev, concurrent: true})
		}
	}
	rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	return ds
}

// sender is the provider: it signs each delivery and retries any answer
// but a 2xx, with exponential backoff and full jitter, honouring
// Retry-After, as Stripe does (over minutes here, not three days).
type sender struct {
	targets func() []string // base addresses of the receivers up now
	client  *http.Client
	giveUp  time.Duration // per delivery
	// rng draws the jitter and the receiver of each request, from the run's
	// seed; its senders share it.
	rng *rand.Rand

	requests, non2xx, unavailable, retryAfter, netErrors, gaveUp atomic.Int64
	storeRefused                                                 atomic.Int64 // 503 because the store failed (not draining)
	sent                                                         atomic.Int64 // deliveries finished (acked or given up)
}

func newSender(targets func() []string, giveUp time.Duration, rng *rand.Rand) *sender {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &sender{targets: targets, giveUp: giveUp, rng: rng, client: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

// run sends every delivery with workers senders and returns when all are
// acknowledged or given up.
func (s *sender) run(ctx context.Context, ds []delivery, workers int) {
	work := make(chan delivery)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				if d.concurrent {
					var pair sync.WaitGroup
					pair.Add(1)
					go func() { defer pair.Done(); s.deliver(ctx, d.ev) }()
					time.Sleep(time.Duration(s.rng.IntN(5001)) * time.Microsecond)
					s.deliver(ctx, d.ev)
					pair.Wait()
				} else {
					s.deliver(ctx, d.ev)
				}
				s.sent.Add(1)
			}
		}()
	}
	for _, d := range ds {
		select {
		case work <- d:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
}

// deliver posts ev until a 2xx, and records the acknowledgement.
func (s *sender) deliver(ctx context.Context, ev *event) bool {
	deadline := time.Now().Add(s.giveUp)
	for n := 0; ; n++ {
		if ctx.Err() != nil || time.Now().After(deadline) {
			s.gaveUp.Add(1)
			return false
		}
		wait, ok := s.try(ctx, ev)
		if ok {
			ev.ackedAt.CompareAndSwap(0, time.Now().UnixNano())
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.backoff(n, wait)):
		}
	}
}

// backoff is the pause before retry n+1: exponential with full jitter,
// and at least the Retry-After asked for.
func (s *sender) backoff(n int, retryAfter time.Duration) time.Duration {
	ceiling := min(2*time.Second, 50*time.Millisecond<<min(n, 10))
	return max(time.Duration(s.rng.Int64N(int64(ceiling))+1), retryAfter)
}

// pick chooses the receiver of a request; targets is not empty.
func (s *sender) pick(targets []string) string { return targets[s.rng.IntN(len(targets))] }

// try makes one request; it returns the Retry-After asked for, and whether
// the answer was a 2xx.
func (s *sender) try(ctx context.Context, ev *event) (time.Duration, bool) {
	targets := s.targets()
	if len(targets) == 0 {
		s.netErrors.Add(1)
		return 0, false
	}
	url := "http://" + s.pick(targets) + "/webhooks/" + ev.src.name
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(ev.body))
	if err != nil {
		return 0, false
	}
	req.Header = ev.sign()
	s.requests.Add(1)
	resp, err := s.client.Do(req)
	if err != nil {
		s.netErrors.Add(1)
		return 0, false
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return 0, true
	}
	s.non2xx.Add(1)
	var wait time.Duration
	if resp.StatusCode == http.StatusServiceUnavailable {
		s.unavailable.Add(1)
		var body struct{ Error string }
		_ = json.Unmarshal(answer, &body)
		if body.Error == "store_unavailable" || body.Error == "store_timeout" {
			s.storeRefused.Add(1)
		}
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
			s.retryAfter.Add(1)
			wait = min(time.Duration(secs)*time.Second, 5*time.Second)
		}
	}
	return wait, false
}
