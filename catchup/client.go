package catchup

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ferry-inbox/ferry/internal/retryafter"
)

// Defaults of the provider API client.
const (
	// DefaultRate is the request rate to a provider's API: well under
	// Stripe's 25 requests a second in test mode (100 live). It does not
	// keep GitHub within its 5,000 calls an hour (5 a second is 18,000 an
	// hour): a pass's GitHub calls are bounded by its pages and the
	// deliveries it misses, not by the rate, and a rate-limit 403 waits
	// for the reset GitHub names (or fails the pass past maxWait).
	DefaultRate = 5.0
	// maxTries is how many times one request is sent before the pass fails.
	maxTries = 6
	// maxWait caps one wait for Retry-After or backoff; a provider asking
	// for longer fails the pass, which the next interval retries.
	maxWait = 2 * time.Minute
	// maxBody caps one API response.
	maxBody = 32 << 20
	// githubLimitWait is the least a GitHub rate limit waits when it is a
	// secondary limit or names no wait: GitHub asks for a minute, then
	// longer each time it answers so again.
	githubLimitWait = time.Minute
)

// apiClient sends the reconcilers' requests: at most rate a second, 429, 5xx
// and GitHub's rate-limit 403 retried after the wait they name or an
// exponential backoff, and every secret it was given scrubbed from the
// errors it returns.
type apiClient struct {
	http    *http.Client
	rate    float64
	backoff time.Duration // first backoff; doubles per try
	// limitWait, when set, is the least wait of a rate limit that names
	// none, or is a secondary limit (GitHub's); it doubles with each limit
	// answered to the same request.
	limitWait time.Duration
	// authorize sets the request's credentials.
	authorize func(ctx context.Context, req *http.Request) error
	// dated, when set, is given the Date of every answer that has one and
	// is the API's own (JSON, not a 5xx).
	dated func(date time.Time)
	// reauthorize, when set, is asked after a 401 to req whether it may
	// pass if sent again at once (a credential it has renewed); it is
	// asked once a request.
	reauthorize func(req *http.Request) bool
	// now and pause are the clock the rate, backoff and waits run on:
	// time.Now and sleep, or a test's fake clock.
	now   func() time.Time
	pause func(ctx context.Context, d time.Duration) error

	mu      sync.Mutex
	secrets []string
	next    time.Time // earliest start of the next request
}

func newAPIClient(hc *http.Client, rate float64, secrets ...string) *apiClient {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	if !(rate > 0) { // NaN too: it would space requests by nothing
		rate = DefaultRate
	}
	c := &apiClient{http: hc, rate: rate, backoff: time.Second, now: time.Now, pause: sleep}
	c.addSecret(secrets...)
	return c
}

// addSecret registers values that must never appear in an error: keys,
// tokens, and credentials obtained later (an installation token).
func (c *apiClient) addSecret(secrets ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range secrets {
		if s != "" {
			c.secrets = append(c.secrets, s)
		}
	}
}

// replaceSecret registers new in place of old: a credential that replaces
// its predecessor (a fresh JWT or installation token) keeps the list short.
func (c *apiClient) replaceSecret(old, new string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.secrets = slices.DeleteFunc(c.secrets, func(s string) bool { return s == old || s == new })
	if new != "" {
		c.secrets = append(c.secrets, new)
	}
}

// redact returns err with every secret replaced. The result does not wrap
// err (an unwrapped cause would still print the secret), but what callers
// test stays recognisable: a cancelled context and a response over maxBody
// with errors.Is, a StatusError (scrubbed) with errors.As.
func (c *apiClient) redact(err error) error {
	if err == nil {
		return nil
	}
	out := &redactedError{msg: c.scrub(err.Error())}
	for _, kind := range []error{context.Canceled, context.DeadlineExceeded, errTooLarge} {
		if errors.Is(err, kind) {
			out.kinds = append(out.kinds, kind)
		}
	}
	if se, ok := errors.AsType[*StatusError](err); ok {
		out.kinds = append(out.kinds, &StatusError{Method: se.Method, Path: c.scrub(se.Path), Status: se.Status, Body: c.scrub(se.Body),
			ContentType: c.scrub(se.ContentType), NotJSON: se.NotJSON, RateLimited: se.RateLimited})
	}
	return out
}

// redactedError is an error's text with the secrets replaced; it unwraps
// to what callers test, never to the error itself.
type redactedError struct {
	msg   string
	kinds []error
}

func (e *redactedError) Error() string   { return e.msg }
func (e *redactedError) Unwrap() []error { return e.kinds }

// errTooLarge is a 2xx response over maxBody: sending again cannot help.
var errTooLarge = fmt.Errorf("response over %d MiB", maxBody>>20)

// scrub returns s with every secret replaced.
func (c *apiClient) scrub(s string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, secret := range c.secrets {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	return s
}

// StatusError is a provider API answer that is neither a success nor worth
// retrying now.
type StatusError struct {
	Method, Path string
	Status       int
	// Body is the start of the response on one line, secrets scrubbed.
	Body string
	// ContentType is the response's Content-Type.
	ContentType string
	// NotJSON is an answer whose body is not JSON: not the provider API's
	// own error (its APIs answer errors in JSON) but a proxy's, gateway's
	// or captive portal's page, whose status says nothing of the
	// credentials catch-up sent.
	NotJSON bool
	// RateLimited is a 429, or a 403 that asked to wait (Retry-After,
	// X-RateLimit-Remaining 0, or GitHub's "secondary rate limit"
	// message): a limit, not a refused credential.
	RateLimited bool
}

// Error names the request and the status, then the scrubbed body; an
// answer that is not JSON is named as such, with its Content-Type.
func (e *StatusError) Error() string {
	if e.NotJSON {
		return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.Path, e.Status, notJSON(e.ContentType, e.Body))
	}
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.Path, e.Status, e.Body)
}

// notJSON names an answer that is not JSON, of any status: its
// Content-Type, and excerpt (snippet's line) when there is one. The
// decoder's "invalid character '<'", or a whole page over many terminal
// lines, would not say who answered what.
func notJSON(contentType, excerpt string) string {
	s := fmt.Sprintf("the API answered something that is not JSON (Content-Type %q)", contentType)
	if excerpt == "" {
		return s + ", with no body"
	}
	return s + ": " + excerpt
}

// do sends one request (built anew for each try) and returns the body of a
// 2xx response and its headers.
func (c *apiClient) do(ctx context.Context, method, rawURL string, body []byte) ([]byte, http.Header, error) {
	data, header, err := c.try(ctx, method, rawURL, body)
	return data, header, c.redact(err)
}

func (c *apiClient) try(ctx context.Context, method, rawURL string, body []byte) ([]byte, http.Header, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("api url: %w", err)
	}
	path := u.Path
	asked := false // reauthorize, after a 401
	limits := 0    // rate limits answered so far
	for try := 1; ; try++ {
		if err := c.wait(ctx); err != nil {
			return nil, nil, err
		}
		var reader io.Reader
		if body != nil {
			reader = strings.NewReader(string(body))
		}
		req, err := http.NewRequestWithContext(ctx, method, u.String(), reader)
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", "ferry-catchup")
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if err := c.authorize(ctx, req); err != nil {
			return nil, nil, err
		}
		resp, err := c.http.Do(req)
		var retryAfter time.Duration
		var date time.Time // the answer's Date; zero without one
		if err == nil {
			if d, dateErr := http.ParseTime(resp.Header.Get("Date")); dateErr == nil {
				date = d
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, fmt.Errorf("%s %s: %w", method, path, ctx.Err())
			}
			if ue, ok := errors.AsType[*url.Error](err); ok {
				err = ue.Err // the URL is printed once, below
			}
			err = fmt.Errorf("%s %s: %w", method, path, err)
			if lasting(err) {
				return nil, nil, err
			}
		} else {
			data, readErr := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
			resp.Body.Close()
			providerDate := time.Time{} // the Date of the API's own answer; zero for any other
			if !date.IsZero() && resp.StatusCode < 500 && readErr == nil && json.Valid(data) {
				// The API's own answer, not a proxy's or gateway's page:
				// its Date is the provider's clock.
				providerDate = date
				observeDate(ctx, date)
				if c.dated != nil {
					c.dated(date)
				}
			}
			switch {
			case resp.StatusCode >= 200 && resp.StatusCode < 300 && readErr == nil && len(data) > maxBody:
				return nil, nil, fmt.Errorf("%s %s: %w", method, path, errTooLarge)
			case resp.StatusCode >= 200 && resp.StatusCode < 300 && readErr == nil && !json.Valid(data):
				// A proxy's or captive portal's page.
				return nil, nil, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, notJSON(resp.Header.Get("Content-Type"), c.snippet(data)))
			case resp.StatusCode >= 200 && resp.StatusCode < 300 && readErr == nil:
				return data, resp.Header, nil
			case readErr != nil:
				err = fmt.Errorf("%s %s: read: %w", method, path, readErr)
			case resp.StatusCode == http.StatusUnauthorized && !asked && c.reauthorize != nil && c.reauthorize(req):
				asked = true
				continue
			default:
				// The reset and a dated Retry-After are on the provider's
				// clock: read against its Date, a host clock that is off
				// does not stretch or skip the wait.
				clock := c.now()
				if !providerDate.IsZero() {
					clock = providerDate
				}
				again, wait := retryable(resp, data, clock, c.limitWait<<limits)
				limited := again && resp.StatusCode < 500
				err = &StatusError{Method: method, Path: path, Status: resp.StatusCode, Body: c.snippet(data),
					ContentType: resp.Header.Get("Content-Type"), NotJSON: !json.Valid(data),
					RateLimited: limited}
				if !again {
					return nil, nil, err
				}
				if limited {
					limits++
				}
				retryAfter = wait
			}
		}
		if try >= maxTries { // >=: a resend after a 401 counts as a try
			return nil, nil, fmt.Errorf("after %d tries: %w", try, err)
		}
		delay := retryAfter
		if delay <= 0 {
			delay = c.backoff << (try - 1)
			delay += rand.N(delay/2 + 1) // jitter, so instances do not retry in step
		}
		if delay > maxWait {
			return nil, nil, fmt.Errorf("provider asks to wait %s, more than %s: %w", delay, maxWait, err)
		}
		if err := c.pause(ctx, delay); err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
}

// lasting reports whether a request's transport error is one the same
// request meets again at once: a host name that does not exist, or a
// certificate not trusted for it. The pass fails on it now, saying why,
// rather than after maxTries and half a minute of backoff.
func lasting(err error) bool {
	if de, ok := errors.AsType[*net.DNSError](err); ok && de.IsNotFound {
		return true
	}
	_, unknownAuthority := errors.AsType[x509.UnknownAuthorityError](err)
	_, wrongHost := errors.AsType[x509.HostnameError](err)
	_, invalid := errors.AsType[x509.CertificateInvalidError](err)
	return unknownAuthority || wrongHost || invalid
}

// retryable reports whether resp (body its start) is worth sending again,
// and the wait it names (0: none, back off): a 429 or a 5xx, or GitHub's
// rate-limit 403. A rate limit names its wait in Retry-After, or with
// X-RateLimit-Remaining 0 and the reset in X-RateLimit-Reset (Unix
// seconds); GitHub sends either with a 403 or a 429, and its secondary
// limit may send neither, only its message. A rate limit that names no
// wait, or is a secondary limit, waits at least floor (GitHub's minute;
// 0 for a provider that asks for none). A wait past maxWait fails the
// pass, which the next interval retries.
func retryable(resp *http.Response, body []byte, now time.Time, floor time.Duration) (bool, time.Duration) {
	const limit = 24 * time.Hour
	h := resp.Header
	exhausted := h.Get("X-RateLimit-Remaining") == "0"
	// The message opens the answer; the cut keeps a large body cheap.
	secondary := strings.Contains(strings.ToLower(string(body[:min(len(body), 4<<10)])), "secondary rate limit")
	wait := retryafter.Parse(h.Get("Retry-After"), now, limit)
	if wait == 0 && exhausted {
		if reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64); err == nil {
			wait = min(max(time.Unix(reset, 0).Sub(now), 0), limit)
		}
	}
	limited := resp.StatusCode == http.StatusTooManyRequests ||
		resp.StatusCode == http.StatusForbidden && (h.Get("Retry-After") != "" || exhausted || secondary)
	switch {
	case limited && (secondary || wait == 0):
		return true, max(wait, floor)
	case limited || resp.StatusCode >= 500:
		return true, wait
	}
	return false, 0
}

// providerClock is the provider's time as the Date header of a pass's
// first answer from the API itself (JSON, below 500: not a gateway's page)
// gave it: the runner bounds the window's end by it, so
// that a host clock running ahead never moves the checkpoint past what the
// provider has yet created. Every answer of Stripe's and GitHub's APIs
// carries Date (RFC 9110 has origin servers send it).
type providerClock struct {
	mu   sync.Mutex
	date time.Time
}

type providerClockKey struct{}

// withProviderClock returns ctx whose API answers set pc.
func withProviderClock(ctx context.Context, pc *providerClock) context.Context {
	return context.WithValue(ctx, providerClockKey{}, pc)
}

// observeDate records an answer's Date in ctx's providerClock, if it has
// none yet.
func observeDate(ctx context.Context, date time.Time) {
	pc, _ := ctx.Value(providerClockKey{}).(*providerClock)
	if pc == nil {
		return
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.date.IsZero() {
		pc.date = date.UTC()
	}
}

// get returns the recorded Date; zero if no answer has carried one.
func (pc *providerClock) get() time.Time {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.date
}

// wait holds the caller until the rate allows another request.
func (c *apiClient) wait(ctx context.Context) error {
	c.mu.Lock()
	now := c.now()
	start := now
	if c.next.After(now) {
		start = c.next
	}
	c.next = start.Add(time.Duration(float64(time.Second) / c.rate))
	c.mu.Unlock()
	return c.pause(ctx, start.Sub(now))
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// snippet is the start of an error body on one line: scrubbed before it
// is cut (a secret cut in two would no longer match, and its start would
// show), whitespace runs made one space and other control characters
// dropped (a proxy's page must not spread over the terminal, nor drive
// it), at most 200 bytes.
func (c *apiClient) snippet(b []byte) string {
	const n = 200
	s := c.scrub(string(b))
	s = strings.ToValidUTF8(s[:min(len(s), 16*n)], "") // enough to fill n after the runs shrink
	s = strings.Join(strings.Fields(s), " ")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
