package ferryhttp

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/retryafter"
	"github.com/ferry-inbox/ferry/provider"
)

// ForwarderOptions configure a Forwarder.
type ForwarderOptions struct {
	// URL receives the POST of each event attempt: an http or https URL
	// with a host (CheckForwardURL). Required.
	URL string
	// Secrets, if any, sign each request the Standard Webhooks way
	// ("whsec_" + base64), so the app can verify it came from Ferry: one
	// signature per secret, any of which the app's verifier accepts. To
	// roll the app's secret, list the new one beside the old, switch the
	// app, then drop the old. Unsigned when empty.
	Secrets []string
	// Timeout bounds one request. Defaults to DefaultForwardTimeout.
	Timeout time.Duration
	// Client sends the requests. It never follows a redirect (a redirect is
	// a permanent failure, reported, not silently followed): a Client of
	// the caller's is used through a copy that stops at the first answer,
	// and is itself left unchanged. Defaults to a client on a transport of
	// its own that keeps Connections idle connections to the app for reuse,
	// speaks HTTP/2 to an app that offers it over TLS, and fails (to retry)
	// an answer whose headers pass 64 KiB.
	Client *http.Client
	// Connections is how many connections to the app the default Client
	// keeps open between requests: set it to the client's Workers, so that
	// every worker reuses one instead of opening a new TCP (and TLS)
	// connection per event. Defaults to ferry.DefaultWorkers.
	Connections int
	// Now is the clock for the signature timestamp. Defaults to time.Now.
	Now func() time.Time
	// TracerProvider, if set, makes each request a client span, a child of
	// the handler's context (the attempt's span, when the Client traces),
	// and sends its W3C traceparent and tracestate to the app, so the app's
	// own spans join the trace. The URL is recorded as its scheme and host
	// only. Defaults to none: no span, no trace header.
	TracerProvider trace.TracerProvider
}

// Forwarder is the service's ready-made handler: it POSTs the original body
// to the app, with the original content type and the headers
// Idempotency-Key, Ferry-Event-Id, Ferry-Event-Type, Ferry-Source and
// Ferry-Attempt, until the app answers 2xx.
//
// 407, 408, 409, 425, 429, 5xx and network errors are retried (a Retry-After
// is honoured, up to ferry.MaxRetryAfter); any other answer is permanent and
// the event goes dead with the status and the start of the response
// recorded. Every answer's status and
// first ferry.ResponseLimit bytes go to the attempt ledger
// (ferry.Delivery.SetResponse).
//
// One attempt is one request, which Go's transport may send twice: when a
// reused keep-alive connection closes after the request went out and before
// any byte of the answer came, net/http resends it on another connection,
// since its Idempotency-Key marks it replayable. The app may then see the
// same Ferry-Attempt twice, and dedupes on the key as it must across
// attempts anyway; this spares a failed attempt and a backoff each time the
// app closes an idle connection just as a request goes out.
type Forwarder struct {
	opts   ForwarderOptions
	signer *provider.StandardWebhooksSigner // nil without Secrets
}

// maxResponseHeaderBytes bounds the headers of an app's answer on the
// default Client: 64 KiB. Ferry reads only the status and Retry-After, and
// Go's default of 10 MiB would let a broken app make every worker hold that
// much per attempt. Past it the attempt fails and is retried.
const maxResponseHeaderBytes = 64 << 10

// CheckForwardURL returns an error wrapping ferry.ErrInvalidParams unless
// rawURL is an http or https URL with a host: any other would fail every
// attempt. The error never quotes rawURL, whose query or userinfo may hold
// the app's token.
func CheckForwardURL(rawURL string) error {
	const fix = `write it like "http://127.0.0.1:3000/webhooks"`
	if rawURL == "" {
		return fmt.Errorf("%w: ferryhttp: ForwarderOptions.URL is required", ferry.ErrInvalidParams)
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Not even the scheme is named: in "user:key@host" it is the user.
		return fmt.Errorf("%w: ferryhttp: ForwarderOptions.URL is not an http or https URL with a host: %s", ferry.ErrInvalidParams, fix)
	}
	if p := u.Port(); p != "" {
		// url.Parse takes any digits; a dial to port 0 or past 65535 fails.
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("%w: ferryhttp: ForwarderOptions.URL has a port outside 1-65535: %s", ferry.ErrInvalidParams, fix)
		}
	}
	return nil
}

// DefaultForwardTimeout is ForwarderOptions.Timeout's default, 10 seconds:
// an app's answer is a round trip and its work.
const DefaultForwardTimeout = 10 * time.Second

// NewForwarder checks opts and fills in defaults. An error wraps
// ferry.ErrInvalidParams.
func NewForwarder(opts ForwarderOptions) (*Forwarder, error) {
	if err := CheckForwardURL(opts.URL); err != nil {
		return nil, err
	}
	f := &Forwarder{opts: opts}
	if f.opts.Timeout <= 0 {
		f.opts.Timeout = DefaultForwardTimeout
	}
	if f.opts.Client == nil {
		conns := cmp.Or(opts.Connections, ferry.DefaultWorkers)
		transport := baseTransport(http.DefaultTransport)
		transport.MaxIdleConnsPerHost = conns
		transport.MaxIdleConns = max(transport.MaxIdleConns, conns)
		transport.ForceAttemptHTTP2 = true
		transport.MaxResponseHeaderBytes = maxResponseHeaderBytes
		f.opts.Client = &http.Client{Transport: transport}
	} else {
		own := *opts.Client // the caller's may follow redirects elsewhere
		f.opts.Client = &own
	}
	f.opts.Client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if f.opts.Now == nil {
		f.opts.Now = time.Now
	}
	if opts.TracerProvider != nil {
		f.opts.Client = tracedClient(f.opts.Client, opts.TracerProvider)
	}
	if len(opts.Secrets) > 0 {
		signer, err := provider.NewStandardWebhooksSigner(provider.Options{Secrets: opts.Secrets, Now: f.opts.Now})
		if err != nil {
			return nil, fmt.Errorf("%w: ferryhttp: forward secret: %w", ferry.ErrInvalidParams, err)
		}
		f.signer = signer
	}
	return f, nil
}

// Handle forwards one delivery; it is a ferry.HandlerFunc.
func (f *Forwarder) Handle(ctx context.Context, d *ferry.Delivery) error {
	attempt := ctx
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	ev := d.Event
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.opts.URL, bytes.NewReader(ev.Payload))
	if err != nil {
		return ferry.Permanent(fmt.Errorf("forward: %w", err))
	}
	for name, values := range ev.Headers {
		if forwarded(name, values) {
			// Canonical, so that Ferry's own headers, set below, replace a
			// stored "idempotency-key" rather than sit beside it.
			req.Header[http.CanonicalHeaderKey(name)] = slices.Clone(values)
		}
	}
	contentType := ev.Headers.Get("Content-Type")
	if contentType == "" {
		contentType = "application/json"
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", "ferry")
	req.Header.Set("Idempotency-Key", d.IdempotencyKey)
	req.Header.Set("Ferry-Event-Id", ev.EventID)
	req.Header.Set("Ferry-Source", ev.Source)
	req.Header.Set("Ferry-Attempt", strconv.Itoa(d.Attempt))
	if ev.Type != "" {
		req.Header.Set("Ferry-Event-Type", ev.Type)
	}
	if ev.Origin == ferry.OriginCatchup {
		req.Header.Set("Ferry-Origin", string(ev.Origin)) // fetched by catch-up, never delivered
	}
	if f.signer != nil {
		// The idempotency key is the message id: stable across attempts, so
		// the app's Standard Webhooks library dedupes on it.
		f.signer.Sign(req.Header, &provider.Message{ID: d.IdempotencyKey, Body: ev.Payload})
	}

	resp, err := f.opts.Client.Do(req)
	if err != nil {
		// The URL may carry the app's token in its query, and this error is
		// logged and stored as the event's last error: keep the cause, drop
		// the URL.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		prefix := "forward: POST"
		if ctx.Err() != nil && attempt.Err() == nil { // the app's time ran out, not the attempt's
			prefix = fmt.Sprintf("forward: POST: no answer within the forward timeout, %s", f.opts.Timeout)
		}
		return &postError{prefix: prefix, err: err}
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, ferry.ResponseLimit))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused
	// The ledger keeps the app's answer beside the attempt: its status and
	// first bytes, which are the app's own words, never Ferry's secret.
	d.SetResponse(resp.StatusCode, snippet)

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	err = &appError{status: resp.StatusCode, snippet: snippet}
	if !retryable(resp.StatusCode) {
		return ferry.Permanent(err)
	}
	// At most a day, so a broken header cannot park an event for ever.
	if wait := retryafter.Parse(resp.Header.Get("Retry-After"), f.opts.Now(), ferry.MaxRetryAfter); wait > 0 {
		return ferry.RetryAfter(err, wait)
	}
	return err
}

func retryable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusProxyAuthRequired: // a proxy's answer, not the app's: fixed there, the next attempt gets through
		return true
	}
	return status >= 500
}

// appError is a non-2xx answer from the app. Its Error text keeps the start
// of the response, for the event's last error and the attempt ledger; its
// Redacted text, which is all a log line gets, keeps only the status and
// size, since an app may echo the payload back.
type appError struct {
	status  int
	snippet []byte
}

func (e *appError) Error() string {
	return fmt.Sprintf("forward: app answered %s: %q", statusText(e.status), e.snippet)
}

func (e *appError) Redacted() string {
	return fmt.Sprintf("forward: app answered %s (%d-byte body)", statusText(e.status), len(e.snippet))
}

// postError is a POST that got no HTTP answer. Its text, kept as the
// event's last error, is the transport's, which quotes the app's bytes when
// they are not HTTP (malformed HTTP response "…", an HTTP/2 GOAWAY's debug
// data): an app that echoes what it reads echoes the payload. Redacted,
// for log lines and spans, keeps the text only of errors that quote
// nothing of the app's.
type postError struct {
	prefix string
	err    error
}

func (e *postError) Error() string    { return e.prefix + ": " + e.err.Error() }
func (e *postError) Unwrap() error    { return e.err }
func (e *postError) Redacted() string { return e.prefix + ": " + transportText(e.err) }

// statusText names an answer's status by its code and the standard text for
// it ("400 Bad Request"), never by the reason phrase the app wrote: that is
// the app's words, of any length, and may echo the payload.
func statusText(code int) string {
	return strings.TrimSpace(strconv.Itoa(code) + " " + http.StatusText(code))
}

// forwarded reports whether a header kept with the event goes to the app
// under its own name: the provider's identity headers
// (X-Shopify-Shop-Domain names the shop, which an order's body does not;
// X-GitHub-Event, X-Shopify-Topic). Handle sets Content-Type, User-Agent
// and Idempotency-Key after, and the transport writes Host and
// Content-Length itself. Not Ferry-*, nor Webhook-* and Svix-*, which a
// Standard Webhooks library would take for the signature's and then find
// no signature of; not a hop-by-hop header, a sender's trace context
// (security.md) or a signature; and not a name or value the transport
// would refuse, which would fail every attempt.
func forwarded(name string, values []string) bool {
	name = http.CanonicalHeaderKey(name)
	switch name {
	case "Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Traceparent", "Tracestate":
		return false
	}
	for _, prefix := range []string{"Ferry-", "Webhook-", "Svix-", "Proxy-"} {
		if strings.HasPrefix(name, prefix) {
			return false
		}
	}
	if !httpguts.ValidHeaderFieldName(name) || SensitiveHeader(name) {
		return false
	}
	for _, v := range values {
		if !httpguts.ValidHeaderFieldValue(v) {
			return false
		}
	}
	return true
}

// baseTransport is a clone of rt, http.DefaultTransport, or, where a
// program replaced that with another RoundTripper (a test double, a
// wrapper), a transport with Go's defaults: a type assertion alone would
// panic in NewForwarder. A caller that wants its own passes Client. Its
// dials need no timeout of their own: the forward timeout bounds each.
func baseTransport(rt http.RoundTripper) *http.Transport {
	if t, ok := rt.(*http.Transport); ok {
		return t.Clone()
	}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}
