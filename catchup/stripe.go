package catchup

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultStripeAPI is Stripe's API base.
const DefaultStripeAPI = "https://api.stripe.com"

// stripeRetention is how long Stripe lists events.
const stripeRetention = 30 * 24 * time.Hour

// stripeTypesPerCall is the most types[] Stripe takes in one list call;
// more types are listed a group at a time.
const stripeTypesPerCall = 20

// StripeOptions configure a Stripe reconciler.
type StripeOptions struct {
	// APIKey is a secret key or a restricted key with read access to
	// events. Required.
	APIKey string
	// APIBase defaults to DefaultStripeAPI.
	APIBase string
	// Types are the event types listed: the ones the webhook endpoint is
	// subscribed to (its enabled_events), any number (Stripe takes 20 a
	// call: more are listed 20 at a time), or ["*"] alone for every type
	// (no types[] filter is sent). ["*"] lists more than an endpoint
	// subscribed with Stripe's own "*" gets: that one leaves out the
	// types that need explicit selection. Required:
	// GET /v1/events lists every event of the account, of types the
	// endpoint never subscribed to and for the account's other endpoints,
	// and each one the store lacks would be received as new and sent to
	// the app.
	Types []string
	// OnlyFailed lists only events whose delivery to some endpoint of the
	// account failed (delivery_success=false): fewer calls, but an event
	// Stripe never tried to send (an endpoint that was disabled) is missed.
	// Defaults to false: every event, the known ones skipped by a look-up.
	OnlyFailed bool
	// APIVersion is the Stripe API version the webhook endpoint is sent
	// events in: its own api_version if it has one, else the account's
	// default. The events API gives each event as the account's version
	// of the time rendered it; one in another version is a body the
	// endpoint is never sent, so it is skipped with a warning (Stripe's
	// retries, or a resend from its dashboard, deliver it in the
	// endpoint's version). Like "2024-06-20" or "2025-03-31.basil".
	// Defaults to "": every version is taken.
	APIVersion string
	// Rate is requests a second. Defaults to DefaultRate.
	Rate float64
	// HTTPClient defaults to a client with a 30s timeout.
	HTTPClient *http.Client
}

// Stripe lists events with GET /v1/events, newest first, a hundred a page.
// The event object the API returns is the body Stripe delivers to a
// webhook endpoint, and its id the event id the receiver stores. The list
// is the key's own account's: a Connect endpoint's source (connected
// accounts' events) must not use it, or the platform's own events would
// reach the app and the connected accounts' would be missed.
type Stripe struct {
	opts   StripeOptions
	base   *url.URL
	client *apiClient
}

var _ Reconciler = (*Stripe)(nil)

// OptionError is NewStripe's or NewGitHub's error for an option it
// refuses; it wraps ErrConfig. Option is the setting as a config file names
// it ("types", "api_version", "api_base"); Problem says what is wrong and
// what to write without naming it, so that a config file can name its own
// key.
type OptionError struct{ Option, Problem string }

// Error names ErrConfig, the option and the problem.
func (e *OptionError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrConfig, e.Option, e.Problem)
}

// Unwrap makes errors.Is(err, ErrConfig) true.
func (e *OptionError) Unwrap() error { return ErrConfig }

// stripeVersion is the form of a Stripe API version: a date, then a
// release's name since 2024-09-30.
var stripeVersion = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}(\.[a-z]+)?$`)

// NewStripe checks opts and returns the reconciler.
func NewStripe(opts StripeOptions) (*Stripe, error) {
	if opts.APIKey == "" {
		return nil, fmt.Errorf("%w: stripe: an API key is required", ErrConfig)
	}
	switch {
	case len(opts.Types) == 0:
		return nil, &OptionError{"types", `missing: Stripe's events API lists every event of the account, including types this endpoint is not subscribed to and events for its other endpoints, and catch-up would send each to the app as new; list the types this endpoint is subscribed to (its enabled_events in the Stripe dashboard), or ["*"] for every type the API lists (more than Stripe's own "*" subscription gets)`}
	case len(opts.Types) > 1 && slices.Contains(opts.Types, "*"):
		return nil, &OptionError{"types", `lists "*" with other types: "*" is every type; write ["*"] alone, or only the types`}
	}
	if v := opts.APIVersion; v != "" && !stripeVersion.MatchString(v) {
		return nil, &OptionError{"api_version", fmt.Sprintf(`%q is not a Stripe API version: write it as the webhook endpoint's "API version" in Stripe's dashboard shows it, like "2024-06-20" or "2025-03-31.basil", or leave it out to take every version`, v)}
	}
	opts.Types = slices.Clone(opts.Types) // a caller's later change would slip past the checks
	base, err := parseBase(opts.APIBase, DefaultStripeAPI)
	if err != nil {
		return nil, err
	}
	s := &Stripe{opts: opts, base: base, client: newAPIClient(opts.HTTPClient, opts.Rate, opts.APIKey)}
	s.client.authorize = func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+opts.APIKey)
		return nil
	}
	return s, nil
}

// Retention is 30 days: Stripe lists events that long.
func (s *Stripe) Retention() time.Duration { return stripeRetention }

// List lists the window's events of each group of at most 20 types in
// turn (Stripe's limit a call), or of every type for "*". An error in any
// group fails the List, so the runner moves the checkpoint only past a
// step whose every group was listed.
func (s *Stripe) List(ctx context.Context, w Window, found func(*Candidate) error) error {
	if s.opts.Types[0] == "*" { // NewStripe takes "*" only alone
		return s.list(ctx, w, nil, found)
	}
	for group := range slices.Chunk(s.opts.Types, stripeTypesPerCall) {
		if err := s.list(ctx, w, group, found); err != nil {
			return err
		}
	}
	return nil
}

// list pages through the window's events of types (nil: every type) with
// starting_after until has_more is false. A page that ends where an earlier
// one did (a cache or proxy that ignores the query) fails the listing:
// asking again would loop until the pass's timeout, and forever in
// `ferry reconcile`, which has none.
func (s *Stripe) list(ctx context.Context, w Window, types []string, found func(*Candidate) error) error {
	q := url.Values{}
	q.Set("created[gte]", strconv.FormatInt(w.From.Unix(), 10))
	q.Set("created[lte]", strconv.FormatInt(w.To.Unix(), 10))
	q.Set("limit", "100")
	if len(types) > 0 {
		q["types[]"] = types
	}
	if s.opts.OnlyFailed {
		q.Set("delivery_success", "false")
	}
	used := map[string]bool{} // the cursors sent
	for {
		u := s.base.JoinPath("v1", "events")
		u.RawQuery = q.Encode()
		body, _, err := s.client.do(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return fmt.Errorf("stripe: list events: %w", err)
		}
		var page struct {
			Data    []json.RawMessage `json:"data"`
			HasMore bool              `json:"has_more"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("stripe: list events: %w", err)
		}
		var last string
		for _, raw := range page.Data {
			var head struct {
				ID         string `json:"id"`
				Type       string `json:"type"`
				Created    int64  `json:"created"`
				APIVersion string `json:"api_version"`
			}
			if err := json.Unmarshal(raw, &head); err != nil || head.ID == "" {
				return fmt.Errorf("stripe: list events: an event without an id")
			}
			c := &Candidate{ID: head.ID, Fetch: s.fetch(raw, head.Type, head.APIVersion)}
			if head.Created > 0 {
				c.Created = time.Unix(head.Created, 0).UTC()
			}
			if err := found(c); err != nil {
				return err
			}
			last = head.ID
		}
		if !page.HasMore {
			return nil
		}
		if last == "" {
			return fmt.Errorf("stripe: list events: has_more with an empty page")
		}
		if used[last] {
			return fmt.Errorf("stripe: list events: has_more, but the page ends at %s, where an earlier page of this listing ended: the answers repeat (a cache or proxy ignoring starting_after?), and asking again would loop", last)
		}
		used[last] = true
		q.Set("starting_after", last)
	}
}

// fetch returns a listed event's Fetch: the event as listed, or
// ErrUnfetchable when it is rendered in another version than the
// endpoint's.
func (s *Stripe) fetch(raw json.RawMessage, typ, version string) func(context.Context) (*Event, error) {
	return func(context.Context) (*Event, error) {
		if want := s.opts.APIVersion; want != "" && version != want {
			return nil, fmt.Errorf("%w: stripe: the events API renders it in API version %q, the endpoint is sent %q (api_version); Stripe's retries, or a resend from its dashboard, deliver it in the endpoint's version", ErrUnfetchable, version, want)
		}
		return &Event{Type: typ, Payload: raw, Headers: http.Header{"Content-Type": {"application/json; charset=utf-8"}}}, nil
	}
}

// parseBase reads an api_base setting.
func parseBase(raw, def string) (*url.URL, error) {
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err == nil && u.User != nil {
		// Never sent (a request carries its own Authorization), and the
		// API's URLs, built on this one, reach errors and log lines.
		return nil, &OptionError{"api_base", `holds credentials before its "@", which catch-up never sends (each request carries its own Authorization) and which would reach log lines: write it without them, like "https://HOST"`}
	}
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%w: api_base %q is not an http(s) URL", ErrConfig, raw)
	}
	return u, nil
}
