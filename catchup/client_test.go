package catchup

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry/storetest"
)

// fakeAPIClock is an API client's clock in a test: a pause moves it on at
// once and is recorded, so the rate and the waits are read, not timed.
type fakeAPIClock struct {
	*storetest.Clock
	mu     sync.Mutex
	pauses []time.Duration
}

func useFakeClock(c *apiClient) *fakeAPIClock {
	f := &fakeAPIClock{Clock: storetest.NewClock()}
	c.now = f.Now
	c.pause = func(ctx context.Context, d time.Duration) error {
		if d > 0 {
			f.mu.Lock()
			f.pauses = append(f.pauses, d)
			f.mu.Unlock()
			f.Advance(d)
		}
		return ctx.Err()
	}
	return f
}

func (f *fakeAPIClock) longest() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var most time.Duration
	for _, d := range f.pauses {
		most = max(most, d)
	}
	return most
}

// threeEventsOnFakeClock is a Stripe bundle that lists three events, its
// API client on a fake clock.
func threeEventsOnFakeClock(t *testing.T) (*stripeBundle, *apiClient, *fakeAPIClock) {
	t.Helper()
	b := setupStripe(t, StripeOptions{})
	b.fake.add(3, base.Add(-30*time.Minute), "a")
	client := b.runner.Reconciler.(*Stripe).client
	return b, client, useFakeClock(client)
}

func TestAPIClient(t *testing.T) {
	t.Parallel()

	// Requests start at most rate a second: 5 pages at 4 a second span a
	// second of the client's clock, a quarter apart. A rate that is not
	// positive, NaN too, is the default's 5 a second, never no limit.
	for name, tc := range map[string]struct {
		rate float64
		gap  time.Duration
	}{
		"RateSpacesRequests":       {4, 250 * time.Millisecond},
		"NaNRateIsTheDefault":      {math.NaN(), time.Second / DefaultRate},
		"NegativeRateIsTheDefault": {-1, time.Second / DefaultRate},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupStripe(t, StripeOptions{Rate: tc.rate})
			b.runner.Lookback = time.Hour // one step: every request is a page
			b.fake.add(450, base.Add(-30*time.Minute), "a")
			clock := useFakeClock(b.runner.Reconciler.(*Stripe).client)
			var (
				mu     sync.Mutex
				starts []time.Time
			)
			b.fake.fail = func(int, http.ResponseWriter, *http.Request) bool {
				mu.Lock()
				defer mu.Unlock()
				starts = append(starts, clock.Now())
				return false
			}
			wantCounts(t, b.pass(t, PassOptions{}), 450, 450, 0)
			mu.Lock()
			defer mu.Unlock()
			if len(starts) != 5 {
				t.Fatalf("%d requests, want 5 pages", len(starts))
			}
			for i := 1; i < len(starts); i++ {
				if gap := starts[i].Sub(starts[i-1]); gap != tc.gap {
					t.Fatalf("request %d started %v after the one before, want %v at rate %v", i, gap, tc.gap, tc.rate)
				}
			}
		})
	}

	// A provider asking to wait longer than maxWait fails the pass at once,
	// which the next interval retries, rather than hold it.
	t.Run("WaitPastMaxWaitFailsThePass", func(t *testing.T) {
		t.Parallel()
		b, _, clock := threeEventsOnFakeClock(t)
		b.fake.fail = func(n int, w http.ResponseWriter, _ *http.Request) bool {
			if n > 1 {
				return false
			}
			w.Header().Set("Retry-After", "180")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}
		_, err := b.runner.Pass(context.Background(), PassOptions{})
		if err == nil || !strings.Contains(err.Error(), "more than 2m0s") {
			t.Fatalf("err = %v, want the pass failed on a 3m wait", err)
		}
		if n := len(b.fake.requests.all()); n != 1 {
			t.Fatalf("%d requests, want 1: a wait past 2m is not waited", n)
		}
		if most := clock.longest(); most >= maxWait {
			t.Fatalf("the client waited %v", most)
		}
	})

	// A resend after a 401 (reauthorize: a JWT signed anew) counts as a
	// try: a 401 on the last try, then rate limits, still end the request
	// after maxTries + 1 sends, rather than retry until the pass times out.
	t.Run("ResendAfter401CountsAsATry", func(t *testing.T) {
		t.Parallel()
		b, client, _ := threeEventsOnFakeClock(t)
		client.reauthorize = func(*http.Request) bool { return true }
		b.fake.fail = func(n int, w http.ResponseWriter, _ *http.Request) bool {
			switch {
			case n < maxTries:
				w.WriteHeader(http.StatusInternalServerError)
			case n == maxTries:
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"error":{"message":"expired"}}`))
			default:
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
			}
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a backstop: the bug retried until it
		defer cancel()
		_, err := b.runner.Pass(ctx, PassOptions{})
		if n := len(b.fake.requests.all()); err == nil || n != maxTries+1 || !strings.Contains(err.Error(), "HTTP 429") {
			t.Fatalf("%d requests, err = %v; want %d, failing on the 429", n, err, maxTries+1)
		}
	})

	// Only the API's own answers tell its clock: a gateway's 5xx page, or
	// a page that is not JSON, may carry its own host's Date.
	t.Run("DatedOnlyByTheAPIsAnswers", func(t *testing.T) {
		t.Parallel()
		b, client, _ := threeEventsOnFakeClock(t)
		var mu sync.Mutex
		var dates []time.Time
		client.dated = func(d time.Time) { mu.Lock(); defer mu.Unlock(); dates = append(dates, d) }
		gateway := base.Add(time.Hour)
		b.fake.fail = func(n int, w http.ResponseWriter, _ *http.Request) bool {
			if n > 3 {
				return false
			}
			w.Header().Set("Date", gateway.Format(http.TimeFormat))
			if n == 3 {
				// JSON, but a 5xx: a gateway's or load balancer's, whose
				// clock is not the API's.
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"message":"upstream unavailable"}`))
				return true
			}
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader([]int{http.StatusBadGateway, http.StatusTooManyRequests}[n-1])
			_, _ = w.Write([]byte("<html>gateway</html>"))
			return true
		}
		b.pass(t, PassOptions{})
		mu.Lock()
		defer mu.Unlock()
		if len(dates) == 0 || slices.ContainsFunc(dates, func(d time.Time) bool { return d.Equal(gateway) }) {
			t.Fatalf("dated by %v; want the API's answers' Dates only, not the gateway's %v", dates, gateway)
		}
	})

	// A 2xx that is not JSON (a proxy's login page) fails the pass saying
	// so, with the status, not with the decoder's "invalid character '<'".
	t.Run("AnswerNotJSONSaysSo", func(t *testing.T) {
		t.Parallel()
		b := setupStripe(t, StripeOptions{})
		b.fake.fail = func(_ int, w http.ResponseWriter, _ *http.Request) bool {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html>sign in</html>"))
			return true
		}
		_, err := b.runner.Pass(context.Background(), PassOptions{})
		if err == nil || !strings.Contains(err.Error(), `HTTP 200: the API answered something that is not JSON (Content-Type "text/html"): <html>sign in</html>`) {
			t.Fatalf("err = %v, want the non-JSON answer named with its status", err)
		}
	})

	// An error answer that is not JSON (a proxy's or gateway's page) is
	// named the same way, on one short line rather than its whole page,
	// and marked NotJSON: no key is blamed for a proxy's 401. The
	// provider's own JSON error is kept as it said it.
	t.Run("ErrorNotJSONSaysSoOnOneLine", func(t *testing.T) {
		t.Parallel()
		page := "<html>\n<head><title>401 Authorization Required</title></head>\n" +
			strings.Repeat("<p>\r\n  the proxy says no\x1b[2J</p>\n", 200) + "</html>\n"
		for _, tc := range []struct {
			status  int
			ctype   string
			body    string
			notJSON bool
			want    string
		}{
			{401, "text/html", page, true, `HTTP 401: the API answered something that is not JSON (Content-Type "text/html"): <html> <head><title>401 Authorization Required</title></head> <p> the proxy says no[2J</p>`},
			{502, "text/html; charset=utf-8", page, true, `HTTP 502: the API answered something that is not JSON (Content-Type "text/html; charset=utf-8"): <html>`},
			{403, "text/plain", "", true, `HTTP 403: the API answered something that is not JSON (Content-Type "text/plain"), with no body`},
			{401, "application/json", "{\n  \"error\": {\"message\": \"Invalid API Key provided\"}\n}", false, `HTTP 401: { "error": {"message": "Invalid API Key provided"} }`},
		} {
			b := setupStripe(t, StripeOptions{})
			useFakeClock(b.runner.Reconciler.(*Stripe).client) // the 502's retries wait on it, not the host's
			b.fake.fail = func(_ int, w http.ResponseWriter, _ *http.Request) bool {
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
				return true
			}
			_, err := b.runner.Pass(context.Background(), PassOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.ContainsAny(err.Error(), "\n\r\x1b") || len(err.Error()) > 600 {
				t.Errorf("HTTP %d %s: err = %q, want one short line with %q", tc.status, tc.ctype, err, tc.want)
			}
			if se, ok := errors.AsType[*StatusError](err); !ok || se.Status != tc.status || se.NotJSON != tc.notJSON || se.ContentType != tc.ctype {
				t.Errorf("HTTP %d %s: err = %#v, want a StatusError with NotJSON %v and its Content-Type", tc.status, tc.ctype, err, tc.notJSON)
			}
		}
	})
}

// A host name that does not exist, or a certificate not trusted for the
// host, fails the request on its first try: neither passes if sent again.
func TestAPIClientDoesNotRetryLastingFailures(t *testing.T) {
	t.Parallel()
	tlsServer := httptest.NewTLSServer(http.NotFoundHandler()) // its certificate is trusted by no client but its own
	t.Cleanup(tlsServer.Close)
	noSuchHost := &http.Client{Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, &net.DNSError{Err: "no such host", Name: "api.example.invalid", IsNotFound: true}
		},
	}}
	for name, tc := range map[string]struct {
		client *http.Client
		url    string
		want   string
	}{
		"UntrustedCertificate": {nil, tlsServer.URL + "/v1/events", "certificate"},
		"NoSuchHost":           {noSuchHost, "https://api.example.invalid/v1/events", "no such host"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			client := newAPIClient(tc.client, 1000)
			client.authorize = func(context.Context, *http.Request) error { return nil }
			clock := useFakeClock(client)
			_, _, err := client.do(context.Background(), http.MethodGet, tc.url, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
			if n := len(clock.pauses); n != 0 {
				t.Fatalf("the client waited %d times (%v) to send it again, want it failed on the first try", n, clock.pauses)
			}
		})
	}
}
