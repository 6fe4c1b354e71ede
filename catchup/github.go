package catchup

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-inbox/ferry/ferryhttp"
)

// DefaultGitHubAPI is GitHub's REST API base.
const DefaultGitHubAPI = "https://api.github.com"

// githubRetention is how long GitHub keeps a hook's deliveries.
const githubRetention = 3 * 24 * time.Hour

// githubExpiring is the age, by GitHub's clock, from which a delivery
// GitHub refuses (404, 410, 422) is taken as expired and skipped: an hour
// before GitHub's 3 days, for a pass's own length (a delivery listed at
// its start is fetched minutes later) and clocks apart by more than the
// overlap. A younger one fails the pass, which the next retries: GitHub
// answers 422 when it throttles ("the endpoint has been spammed") and 404
// to credentials that may not read the hook, and a skipped event is never
// caught up. Past this age a skipped event loses at most the hour's
// retries; a delivery that expired while a host clock behind GitHub's
// judged it younger fails one pass, and the next no longer lists it.
const githubExpiring = githubRetention - time.Hour

// GitHubOptions configure a GitHub reconciler. Authenticate with Token, or
// with AppID, PrivateKey and (for a repository or organisation hook)
// InstallationID.
type GitHubOptions struct {
	// Hook is the hook whose deliveries are read: "repos/OWNER/REPO/hooks/ID",
	// "orgs/ORG/hooks/ID" or "app/hook" (a GitHub App's own webhook).
	// Required.
	Hook string
	// Token is a token that may read the hook (admin:repo_hook or
	// admin:org_hook, or a fine-grained "Webhooks: read").
	Token string
	// AppID, PrivateKey (PEM, as GitHub hands it out) and InstallationID
	// authenticate as a GitHub App: an RS256 JWT, exchanged for an
	// installation token except for "app/hook", which takes the JWT itself.
	AppID          string
	PrivateKey     string
	InstallationID string
	// APIBase defaults to DefaultGitHubAPI (GitHub Enterprise:
	// "https://HOST/api/v3").
	APIBase string
	// Rate is requests a second. Defaults to DefaultRate.
	Rate float64
	// HTTPClient defaults to a client with a 30s timeout.
	HTTPClient *http.Client
	// Now defaults to time.Now. Moved by the offset of GitHub's clock that
	// its answers' Date shows, it dates the App's JWT, judges when the
	// installation token expires, and ages a refused delivery.
	Now func() time.Time
}

// GitHub reads a hook's deliveries (GET …/deliveries, newest first, paged
// by the Link header), groups the attempts of each event by GUID, and for
// an event the store lacks fetches the delivery (GET …/deliveries/{id})
// and hands its payload, event type and GUID over to be received: also
// one GitHub delivered, which a store restored from a backup may lack. It does not ask GitHub to redeliver: a redelivery goes through
// the same endpoint that failed, is only queued when the call returns, and
// a pass could not know it was stored; the payload fetched over the
// authenticated API is stored within the pass, and the checkpoint moves
// only once it is.
type GitHub struct {
	opts   GitHubOptions
	base   *url.URL
	hook   string
	key    *rsa.PrivateKey
	client *apiClient

	mu sync.Mutex
	// offset is GitHub's clock less the host's, as the latest answer's
	// Date showed it; jwtOffset, the one the cached JWT was dated with.
	offset, jwtOffset time.Duration
	jwt               string
	jwtExpiry         time.Time
	token             string
	tokenExpiry       time.Time
}

// jwtSlack is the JWT's iat margin: it is issued this long before GitHub's
// now, as GitHub recommends, so a clock that drifts less is never refused.
const jwtSlack = time.Minute

var _ Reconciler = (*GitHub)(nil)

var hookPath = regexp.MustCompile(`^(repos/[^/]+/[^/]+/hooks/[0-9]+|orgs/[^/]+/hooks/[0-9]+|app/hook)$`)

// NewGitHub checks opts and returns the reconciler.
func NewGitHub(opts GitHubOptions) (*GitHub, error) {
	hook := strings.Trim(opts.Hook, "/")
	if !hookPath.MatchString(hook) {
		return nil, fmt.Errorf("%w: github: hook %q: write \"repos/OWNER/REPO/hooks/ID\", \"orgs/ORG/hooks/ID\" or \"app/hook\"", ErrConfig, opts.Hook)
	}
	base, err := parseBase(opts.APIBase, DefaultGitHubAPI)
	if err != nil {
		return nil, err
	}
	g := &GitHub{opts: opts, base: base, hook: hook}
	switch {
	case opts.Token != "" && opts.AppID == "" && opts.PrivateKey == "" && opts.InstallationID == "":
		if hook == "app/hook" { // GitHub lists an App's own deliveries to its JWT only
			return nil, fmt.Errorf("%w: github: hook \"app/hook\" is read with the App's credentials: set app_id and private_key instead of token", ErrConfig)
		}
	case opts.Token == "" && opts.AppID != "" && opts.PrivateKey != "":
		if g.key, err = parseRSAKey(opts.PrivateKey); err != nil {
			return nil, fmt.Errorf("%w: github: private_key: %v", ErrConfig, err)
		}
		if hook != "app/hook" && opts.InstallationID == "" {
			return nil, fmt.Errorf("%w: github: installation_id is required for a repository or organisation hook", ErrConfig)
		}
	default:
		return nil, fmt.Errorf("%w: github: set token, or app_id and private_key (and installation_id), not both", ErrConfig)
	}
	g.client = newAPIClient(opts.HTTPClient, opts.Rate, opts.Token, opts.PrivateKey)
	g.client.limitWait = githubLimitWait
	g.client.authorize = g.authorize
	g.client.dated = g.dated
	g.client.reauthorize = g.renewable
	return g, nil
}

// Retention is 3 days: GitHub keeps a hook's deliveries that long.
func (g *GitHub) Retention() time.Duration { return githubRetention }

func (g *GitHub) unfiltered() {}

type githubDelivery struct {
	ID          int64     `json:"id"`
	GUID        string    `json:"guid"`
	DeliveredAt time.Time `json:"delivered_at"`
}

// List reads the deliveries, newest first, until one is older than w.From
// or the Link header has no next page, and hands each page's events to
// found before it reads the next: a pass cut short (its timeout, an API
// error) keeps what it received, and the next pass finds those known by a
// look-up, without fetching them again.
func (g *GitHub) List(ctx context.Context, w Window, found func(*Candidate) error) error {
	// handed holds the GUIDs found has had: the page an event first shows
	// on (its newest attempts) decides, its older attempts on later pages
	// are passed over.
	handed := map[string]bool{}
	// read holds the pages requested: a Link that points back to one (a
	// cache or proxy that ignores the cursor) fails the listing, which
	// would otherwise loop until the pass's timeout, and forever in
	// `ferry reconcile`, which has none.
	read := map[string]bool{}
	u := g.base.JoinPath(g.hook, "deliveries")
	u.RawQuery = url.Values{"per_page": {"100"}}.Encode()
	next := u.String()
	for next != "" {
		if read[next] {
			return fmt.Errorf("github: list deliveries: the Link header's next page %s was already read in this pass: the answers repeat (a cache or proxy ignoring the cursor?), and reading on would loop", next)
		}
		read[next] = true
		body, header, err := g.client.do(ctx, http.MethodGet, next, nil)
		if err != nil {
			return fmt.Errorf("github: list deliveries: %w", err)
		}
		var page []githubDelivery
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("github: list deliveries: %w", err)
		}
		latest := map[string]int64{} // a delivery id to fetch each event by
		latestAt := map[string]time.Time{}
		first := map[string]time.Time{}
		var order []string
		older := false
		for _, d := range page {
			// GitHub's schema requires delivered_at; one without it (the
			// zero time) is taken as inside the window: read as older, it
			// would end the listing and leave the older pages unread.
			if !d.DeliveredAt.IsZero() && d.DeliveredAt.Before(w.From) {
				older = true
				continue
			}
			if d.DeliveredAt.After(w.To) || d.GUID == "" || handed[d.GUID] {
				continue
			}
			if at, seen := first[d.GUID]; !seen || d.DeliveredAt.Before(at) {
				first[d.GUID] = d.DeliveredAt
			}
			if _, seen := latest[d.GUID]; !seen {
				order = append(order, d.GUID)
			}
			if d.ID > latest[d.GUID] {
				latest[d.GUID], latestAt[d.GUID] = d.ID, d.DeliveredAt
			}
		}
		for _, guid := range order {
			handed[guid] = true
			id, at := latest[guid], latestAt[guid]
			if err := found(&Candidate{ID: guid, Created: first[guid], Fetch: func(ctx context.Context) (*Event, error) {
				return g.fetch(ctx, id, at)
			}}); err != nil {
				return err
			}
		}
		if older {
			break // newest first: every later page is older still
		}
		if next, err = g.nextPage(header.Get("Link")); err != nil {
			return err
		}
	}
	return nil
}

// nextPage returns the next page of deliveries: the Link header's
// rel="next" query (its cursor) on the deliveries URL of api_base. Only the
// query is taken: the token goes wherever the URL points, and GitHub's Link
// names GitHub's own host, which a proxy in api_base does not rewrite.
func (g *GitHub) nextPage(link string) (string, error) {
	for part := range strings.SplitSeq(link, ",") {
		target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
		if !ok || !strings.Contains(strings.ReplaceAll(params, " ", ""), `rel="next"`) {
			continue
		}
		target = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(target), "<"), ">")
		u, err := url.Parse(target)
		if err != nil {
			return "", fmt.Errorf("github: list deliveries: the Link header's next page %q: %w", target, err)
		}
		next := g.base.JoinPath(g.hook, "deliveries")
		next.RawQuery = u.RawQuery
		return next.String(), nil
	}
	return "", nil
}

// fetch reads one delivery, delivered at at, with its request headers and
// payload.
func (g *GitHub) fetch(ctx context.Context, id int64, at time.Time) (*Event, error) {
	u := g.base.JoinPath(g.hook, "deliveries", strconv.FormatInt(id, 10))
	body, _, err := g.client.do(ctx, http.MethodGet, u.String(), nil)
	if errors.Is(err, errTooLarge) {
		return nil, fmt.Errorf("github: get delivery: %w: %w", ErrUnfetchable, err)
	}
	if se, ok := errors.AsType[*StatusError](err); ok && refused(se.Status) {
		if at.IsZero() {
			return nil, fmt.Errorf("github: get delivery %d, listed without delivered_at: HTTP %d is no sign it expired: %w: %w", id, se.Status, ErrRefusedForNow, err)
		}
		age := g.sinceDelivered(at)
		if age >= githubExpiring {
			return nil, fmt.Errorf("github: get delivery %d, delivered %s ago, in the last hour of GitHub's 3 days: taken as expired: %w: %w", id, age, ErrUnfetchable, err)
		}
		return nil, fmt.Errorf("github: get delivery %d, delivered %s ago, within GitHub's 3 days: HTTP %d is no sign it expired (GitHub answers 422 when it throttles, 404 to credentials that may not read the hook): %w: %w", id, age, se.Status, ErrRefusedForNow, err)
	}
	if err != nil {
		return nil, fmt.Errorf("github: get delivery: %w", err)
	}
	var d struct {
		GUID    string `json:"guid"`
		Event   string `json:"event"`
		Request struct {
			Headers map[string]string `json:"headers"`
			Payload json.RawMessage   `json:"payload"`
		} `json:"request"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fmt.Errorf("github: get delivery %d: %w", id, err)
	}
	if len(d.Request.Payload) == 0 || string(d.Request.Payload) == "null" {
		return nil, fmt.Errorf("github: get delivery %d: %w: it has no payload", id, ErrUnfetchable)
	}
	// The headers GitHub sent are kept as the receiver keeps them by
	// default (ferryhttp.DefaultKeepHeaders); signature headers never are.
	headers := http.Header{}
	contentType := ""
	for name, v := range d.Request.Headers {
		switch name = http.CanonicalHeaderKey(name); {
		case name == "Content-Type":
			contentType = v
		case ferryhttp.KeptByDefault(name):
			headers.Set(name, v)
		}
	}
	payload := []byte(d.Request.Payload)
	// The API returns the payload as JSON whatever the hook's content type.
	// A form-encoded hook's deliveries carry it as the field payload, and
	// so does the body stored here: the app gets one format from both.
	if media, _, _ := mime.ParseMediaType(contentType); media == githubFormType {
		payload = []byte(url.Values{"payload": {string(payload)}}.Encode())
		headers.Set("Content-Type", githubFormType)
	} else {
		headers.Set("Content-Type", "application/json")
	}
	return &Event{Type: d.Event, Payload: payload, Headers: headers}, nil
}

// githubFormType is the content type of a hook set to deliver
// application/x-www-form-urlencoded: the JSON in a form field, payload.
const githubFormType = "application/x-www-form-urlencoded"

// refused reports whether GitHub answered a delivery's fetch with a status
// an expired delivery gets (404, 410, 422), which a live one may get too:
// fetch tells them apart by the delivery's age.
func refused(status int) bool {
	return status == http.StatusNotFound || status == http.StatusGone || status == http.StatusUnprocessableEntity
}

// authorize sets the token, the App's JWT, or an installation token.
func (g *GitHub) authorize(ctx context.Context, req *http.Request) error {
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	switch {
	case g.key == nil:
		req.Header.Set("Authorization", "Bearer "+g.opts.Token)
	case g.hook == "app/hook" || strings.HasSuffix(req.URL.Path, "/access_tokens"):
		jwt, err := g.appJWT()
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+jwt)
	default:
		token, err := g.installationToken(ctx)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return nil
}

func (g *GitHub) now() time.Time {
	if g.opts.Now != nil {
		return g.opts.Now()
	}
	return time.Now()
}

// githubNow is GitHub's time: the host's moved by the offset its answers
// show. The caller holds g.mu.
func (g *GitHub) githubNow() time.Time { return g.now().Add(g.offset) }

// sinceDelivered is how long before GitHub's now at was: the host's clock
// moved by the offset GitHub's answers show (the refusal's own, when it
// carries a Date). By the host's clock alone, one running hours ahead
// would take a delivery GitHub still keeps for one in its last hour, skip
// it as expired and move the checkpoint past it.
func (g *GitHub) sinceDelivered(at time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.githubNow().Sub(at).Round(time.Second)
}

// dated takes an answer's Date as GitHub's now. A host clock a minute
// ahead of GitHub's, or nine behind, would otherwise date every JWT
// outside what GitHub takes, and each pass would fail with a 401.
func (g *GitHub) dated(date time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.offset = date.Sub(g.now())
}

// renewable reports, after a 401 to req, whether req is worth sending once
// more with a new credential, which it then makes the next request get: req
// carried the cached JWT, dated by a clock further from GitHub's than half
// its slack (as the 401's own Date shows), or the cached installation
// token, which GitHub revokes before it expires (DELETE
// /installation/token, a leak its secret scanning finds). Any other 401 is
// the credentials'.
func (g *GitHub) renewable(req *http.Request) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch auth := req.Header.Get("Authorization"); {
	case g.jwt != "" && auth == "Bearer "+g.jwt && (g.offset-g.jwtOffset).Abs() >= jwtSlack/2:
		g.jwtExpiry = time.Time{}
		return true
	case g.token != "" && auth == "Bearer "+g.token:
		g.tokenExpiry = time.Time{}
		return true
	}
	return false
}

// appJWT returns the App's RS256 JWT, signed anew when the cached one
// expires within the minute: issued jwtSlack before GitHub's now and
// valid for nine minutes after.
func (g *GitHub) appJWT() (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.githubNow()
	if g.jwt != "" && now.Add(time.Minute).Before(g.jwtExpiry) {
		return g.jwt, nil
	}
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))
	exp := now.Add(9 * time.Minute)
	claims, err := json.Marshal(map[string]any{"iat": now.Add(-jwtSlack).Unix(), "exp": exp.Unix(), "iss": g.opts.AppID})
	if err != nil {
		return "", err
	}
	signing := header + "." + base64.RawURLEncoding.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, g.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("github: sign app jwt: %w", err)
	}
	jwt := signing + "." + base64.RawURLEncoding.EncodeToString(sig)
	g.client.replaceSecret(g.jwt, jwt)
	g.jwt, g.jwtExpiry, g.jwtOffset = jwt, exp, g.offset
	return jwt, nil
}

// installationToken returns a cached installation token, or a new one
// when it expires within the minute.
func (g *GitHub) installationToken(ctx context.Context) (string, error) {
	g.mu.Lock()
	if g.token != "" && g.githubNow().Add(time.Minute).Before(g.tokenExpiry) {
		defer g.mu.Unlock()
		return g.token, nil
	}
	g.mu.Unlock()
	u := g.base.JoinPath("app", "installations", g.opts.InstallationID, "access_tokens")
	body, _, err := g.client.try(ctx, http.MethodPost, u.String(), []byte("{}"))
	if err != nil {
		return "", fmt.Errorf("github: installation token: %w", err)
	}
	var tok struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(body, &tok); err != nil || tok.Token == "" {
		return "", fmt.Errorf("github: installation token: no token in the answer")
	}
	g.mu.Lock()
	g.client.replaceSecret(g.token, tok.Token)
	g.token, g.tokenExpiry = tok.Token, tok.ExpiresAt
	g.mu.Unlock()
	return tok.Token, nil
}

func parseRSAKey(pemText string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(strings.ReplaceAll(pemText, `\n`, "\n")))
	if block == nil {
		return nil, fmt.Errorf("not a PEM key: paste the .pem file GitHub gave you")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not an RSA private key")
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("not an RSA private key")
	}
	return rk, nil
}
