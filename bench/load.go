package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-inbox/ferry/ferrytest"
)

// stripeSecret signs every benchmark delivery; only the Ferry side checks it.
const stripeSecret = "whsec_bench_0123456789abcdef"

// payloadSize is the body size of every delivery.
const payloadSize = 1024

// delivery builds the signed 1 KB Stripe event of key k. The same k always
// gives the same bytes, so a repeated k is a true duplicate, never a
// conflict.
func delivery(prefix string, k int64) ([]byte, http.Header) {
	return signedEvent(stripeSecret, prefix+strconv.FormatInt(k, 10), payloadSize)
}

// signedEvent is the Stripe event id, padded to size bytes, signed with
// secret now.
func signedEvent(secret, id string, size int) ([]byte, http.Header) {
	head := `{"id":"` + id + `","object":"event","type":"invoice.paid","data":{"object":{"pad":"`
	tail := `"}}}`
	body := make([]byte, 0, size)
	body = append(body, head...)
	body = append(body, bytes.Repeat([]byte{'x'}, max(0, size-len(head)-len(tail)))...)
	body = append(body, tail...)
	return body, ferrytest.SignStripe(secret, body, time.Now())
}

// keyFor maps the n-th request to its event key with 10 % duplicates: every
// tenth request repeats a key sent earlier in the run, chosen at random.
func keyFor(n int64) int64 {
	if n%10 != 9 || n < 10 {
		return n
	}
	k := rand.N(n)
	if k%10 == 9 {
		k-- // k-1 is never itself a repeat slot
	}
	return k
}

// loadResult is what one closed-loop run measured.
type loadResult struct {
	ok, failed int
	elapsed    time.Duration
	latencies  []time.Duration // of the 2xx answers
}

func (r *loadResult) rps() float64 { return float64(r.ok) / r.elapsed.Seconds() }

func (r *loadResult) p99() time.Duration { return percentile(r.latencies, 0.99) }

// senderClient is an HTTP client for n concurrent senders to one host: at
// most n connections, all kept for reuse, no compression, and a 30 s
// ceiling a request. Close its idle connections when done.
func senderClient(n int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			MaxIdleConns:        n,
			MaxIdleConnsPerHost: n,
			MaxConnsPerHost:     n,
			DisableCompression:  true,
		},
		Timeout: 30 * time.Second,
	}
}

// closedLoop runs clients concurrent connections against target, each
// sending its next delivery as soon as the last was answered, for warmup
// (not counted) and then dur (counted). Keys run from 0 in one sequence
// shared by all clients, prefixed with prefix.
func closedLoop(ctx context.Context, target, prefix string, clients int, warmup, dur time.Duration) (*loadResult, error) {
	hc := senderClient(clients)
	defer hc.CloseIdleConnections()

	var (
		seq       atomic.Int64
		measuring atomic.Bool
		mu        sync.Mutex
		res       = &loadResult{}
		firstErr  error
		wg        sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			ok, failed := 0, 0
			for ctx.Err() == nil {
				body, header := delivery(prefix, keyFor(seq.Add(1)-1))
				start := time.Now()
				status, err := post(ctx, hc, target, header, body)
				took := time.Since(start)
				if ctx.Err() != nil {
					break // cut off by the end of the run: not an answer
				}
				counted := measuring.Load()
				switch {
				case err == nil && status/100 == 2:
					if counted {
						ok++
						lat = append(lat, took)
					}
				default:
					if counted {
						failed++
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("status %d, err %v", status, err)
					}
					mu.Unlock()
				}
			}
			mu.Lock()
			res.ok += ok
			res.failed += failed
			res.latencies = append(res.latencies, lat...)
			mu.Unlock()
		}()
	}
	if !sleepCtx(ctx, warmup) {
		return nil, ctx.Err()
	}
	measuring.Store(true)
	start := time.Now()
	sleepCtx(ctx, dur)
	measuring.Store(false)
	res.elapsed = time.Since(start)
	cancel()
	wg.Wait()
	if res.ok == 0 {
		return nil, fmt.Errorf("no request succeeded: %v", firstErr)
	}
	return res, nil
}

func post(ctx context.Context, hc *http.Client, target string, header http.Header, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDur(v []time.Duration) time.Duration {
	f := make([]float64, len(v))
	for i, d := range v {
		f[i] = float64(d)
	}
	return time.Duration(median(f))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
