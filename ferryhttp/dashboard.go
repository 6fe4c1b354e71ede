package ferryhttp

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry"
)

// ErrDashboardExposed is returned by NewDashboard for a dashboard without
// credentials on an address other than loopback: anyone who can reach it
// could replay events.
var ErrDashboardExposed = errors.New("ferryhttp: dashboard on a non-loopback address needs a token or basic auth")

// DefaultPayloadLimit is how much of a payload the event page shows.
const DefaultPayloadLimit = 64 << 10

// DashboardOptions configure a Dashboard.
type DashboardOptions struct {
	// Store is read and requeued. Required.
	Store ferry.Store
	// AtRiskAfter maps each source to the age past which an unfinished event
	// is at risk (its replay window minus a margin), as in
	// ferry.EventStatsParams.
	AtRiskAfter map[string]time.Duration
	// Addr is the address the server listens on. Unless it is loopback
	// (127.0.0.0/8, ::1, localhost), Token or User and Password are required.
	Addr string
	// Token, if set, is accepted as "Authorization: Bearer TOKEN" or through
	// the login form, which keeps it in an HttpOnly, SameSite=Strict cookie.
	Token string
	// User and Password, if set, are accepted as HTTP basic auth.
	User, Password string
	// PayloadLimit caps the payload shown on an event page. Defaults to
	// DefaultPayloadLimit (64 KiB).
	PayloadLimit int
	// PageSize is the number of events a page lists. Defaults to 50.
	PageSize int
	// Logger gets one line per replay: who cannot be known, so what and
	// from where. Defaults to slog.Default().
	Logger *slog.Logger
}

// Dashboard is the operator's web page at /ui/: counts by state and source,
// the events at risk first, a filterable event table, an event page with
// its payload, headers and attempt ledger, and replay buttons. It is
// server-rendered HTML with no script at all. Every POST is checked against
// cross-origin requests (CSRF) by http.CrossOriginProtection.
type Dashboard struct {
	opts    DashboardOptions
	pages   *template.Template
	handler http.Handler
}

//go:embed ui
var uiFS embed.FS

// NewDashboard checks opts, refusing a credential-less dashboard on a
// non-loopback Addr with ErrDashboardExposed.
func NewDashboard(opts DashboardOptions) (*Dashboard, error) {
	if opts.Store == nil {
		return nil, errors.New("ferryhttp: DashboardOptions.Store is required")
	}
	if (opts.User == "") != (opts.Password == "") {
		return nil, errors.New("ferryhttp: dashboard basic auth needs both User and Password")
	}
	if !opts.hasAuth() && !isLoopbackAddr(opts.Addr) {
		return nil, fmt.Errorf("%w: %s", ErrDashboardExposed, opts.Addr)
	}
	if opts.PayloadLimit <= 0 {
		opts.PayloadLimit = DefaultPayloadLimit
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 50
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	pages, err := template.New("").Funcs(template.FuncMap{
		"ago":   func(now, t time.Time) string { return ago(now.Sub(t)) },
		"time":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"state": func(s ferry.State) string { return string(s) },
		"count": func(s *ferry.SourceStats, st string) int { return s.States[ferry.State(st)] },
	}).ParseFS(uiFS, "ui/*.html")
	if err != nil {
		return nil, err
	}
	d := &Dashboard{opts: opts, pages: pages}
	mux := http.NewServeMux()
	static, _ := fs.Sub(uiFS, "ui/static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/login", d.login)
	mux.HandleFunc("POST /ui/login", d.login)
	mux.HandleFunc("GET /ui/{$}", d.overview)
	mux.HandleFunc("GET /ui/events/{id}", d.event)
	mux.HandleFunc("POST /ui/events/{id}/replay", d.replayOne)
	mux.HandleFunc("POST /ui/replay", d.replayDead)
	d.handler = http.NewCrossOriginProtection().Handler(d.guard(mux))
	return d, nil
}

// Register mounts the dashboard at /ui/ on mux.
func (d *Dashboard) Register(mux *http.ServeMux) {
	mux.Handle("/ui/", d)
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
}

func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	d.handler.ServeHTTP(w, r)
}

func (o *DashboardOptions) hasAuth() bool { return o.Token != "" || o.User != "" }

const tokenCookie = "ferry_ui"

// guard lets a request through when it carries a credential, or, with none
// configured, when it names a loopback host (a DNS-rebinding page cannot).
func (d *Dashboard) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/ui/static/") || r.URL.Path == "/ui/login" {
			next.ServeHTTP(w, r)
			return
		}
		if !d.opts.hasAuth() {
			if !isLoopbackAddr(r.Host) && !isLoopbackHost(r.Host) {
				http.Error(w, "the dashboard answers only to localhost; configure ui.token to reach it by another name", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if d.authorized(r) {
			next.ServeHTTP(w, r)
			return
		}
		if d.opts.User != "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="ferry", charset="UTF-8"`)
		}
		if d.opts.Token != "" && r.Method == http.MethodGet && d.opts.User == "" {
			http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
			return
		}
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
}

func (d *Dashboard) authorized(r *http.Request) bool {
	if d.opts.Token != "" {
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(bearer, d.opts.Token) {
			return true
		}
		if c, err := r.Cookie(tokenCookie); err == nil && equal(c.Value, d.opts.Token) {
			return true
		}
	}
	if d.opts.User != "" {
		if u, p, ok := r.BasicAuth(); ok && equal(u, d.opts.User) && equal(p, d.opts.Password) {
			return true
		}
	}
	return false
}

// equal compares in constant time, whatever the lengths.
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	data := map[string]any{"Error": ""}
	if r.Method == http.MethodPost {
		if d.opts.Token != "" && equal(r.PostFormValue("token"), d.opts.Token) {
			http.SetCookie(w, &http.Cookie{
				Name: tokenCookie, Value: d.opts.Token, Path: "/ui/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: 12 * 3600,
			})
			http.Redirect(w, r, "/ui/", http.StatusSeeOther)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		data["Error"] = "wrong token"
	}
	d.render(w, "login.html", data)
}

// overviewData is what overview.html shows.
type overviewData struct {
	Stats   *ferry.EventStats
	Totals  map[ferry.State]int
	States  []ferry.State
	Sources []string
	Events  []*ferry.Event
	Filter  struct{ State, Source, Q string }
	Next    string // the next page's query string, or ""
	Flash   string
	AtRisk  func(*ferry.Event) bool
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	var data overviewData
	data.Filter.State, data.Filter.Source, data.Filter.Q = q.Get("state"), q.Get("source"), q.Get("q")
	data.Flash = q.Get("flash")
	params := &ferry.EventListParams{Source: data.Filter.Source, EventIDContains: data.Filter.Q, Limit: d.opts.PageSize}
	if st := ferry.State(data.Filter.State); st.Valid() {
		params.States = []ferry.State{st}
	}
	params.Before, _ = strconv.ParseInt(q.Get("before"), 10, 64)

	stats, err := d.opts.Store.EventStats(ctx, &ferry.EventStatsParams{AtRiskAfter: d.opts.AtRiskAfter, AtRiskLimit: 100})
	if err != nil {
		d.fail(w, r, "read stats", err)
		return
	}
	list, err := d.opts.Store.EventList(ctx, params)
	if err != nil {
		d.fail(w, r, "list events", err)
		return
	}
	data.Stats, data.States, data.Events = stats, ferry.States, list.Events
	data.Totals = map[ferry.State]int{}
	for _, s := range stats.Sources {
		data.Sources = append(data.Sources, s.Source)
		for st, n := range s.States {
			data.Totals[st] += n
		}
	}
	for src := range d.opts.AtRiskAfter {
		if !slices.Contains(data.Sources, src) {
			data.Sources = append(data.Sources, src)
		}
	}
	slices.Sort(data.Sources)
	if list.NextBefore != 0 {
		next := url.Values{"state": {data.Filter.State}, "source": {data.Filter.Source}, "q": {data.Filter.Q}, "before": {strconv.FormatInt(list.NextBefore, 10)}}
		data.Next = next.Encode()
	}
	data.AtRisk = d.atRisk(stats.Now)
	d.render(w, "overview.html", data)
}

// atRisk says whether e is at risk at now, as EventStats counts it.
func (d *Dashboard) atRisk(now time.Time) func(*ferry.Event) bool {
	return func(e *ferry.Event) bool {
		after := d.opts.AtRiskAfter[e.Source]
		unfinished := e.State == ferry.StatePending || e.State == ferry.StateInProgress || e.State == ferry.StateUnknown
		return after > 0 && unfinished && !e.FirstDeliveredAt.After(now.Add(-after))
	}
}

// header is one stored header as the event page shows it.
type header struct {
	Name, Value string
	Redacted    bool
}

type eventData struct {
	Event      *ferry.Event
	Now        time.Time
	AtRisk     bool
	Attempts   []*ferry.Attempt
	Conflicts  int
	Headers    []header
	Payload    string
	PayloadLen int
	Truncated  bool
	Replayable bool
	Flash      string
}

func (d *Dashboard) event(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	e, err := d.opts.Store.EventGet(ctx, &ferry.EventGetParams{ID: id})
	if errors.Is(err, ferry.ErrNotFound) {
		http.NotFound(w, r)
		return
	}
	if err != nil {
		d.fail(w, r, "get event", err)
		return
	}
	attempts, err := d.opts.Store.AttemptList(ctx, &ferry.AttemptListParams{ID: id})
	if err != nil {
		d.fail(w, r, "list attempts", err)
		return
	}
	stats, err := d.opts.Store.EventStats(ctx, &ferry.EventStatsParams{})
	if err != nil {
		d.fail(w, r, "read clock", err)
		return
	}
	data := eventData{
		Event: e, Now: stats.Now, AtRisk: d.atRisk(stats.Now)(e), Attempts: attempts,
		PayloadLen: len(e.Payload), Flash: r.URL.Query().Get("flash"),
		Replayable: e.State.Terminal(),
	}
	data.Payload, data.Truncated = prettyPayload(e.Payload, d.opts.PayloadLimit)
	for name, values := range e.Headers {
		for _, v := range values {
			h := header{Name: name, Value: v}
			if sensitiveHeader(name) {
				h.Value, h.Redacted = "redacted", true
			}
			data.Headers = append(data.Headers, h)
		}
	}
	slices.SortFunc(data.Headers, func(a, b header) int { return strings.Compare(a.Name, b.Name) })
	d.render(w, "event.html", data)
}

// sensitiveHeader reports headers whose value is never shown: signatures
// (which the receiver does not store anyway) and anything credential-like.
func sensitiveHeader(name string) bool {
	if signatureHeaders[http.CanonicalHeaderKey(name)] {
		return true
	}
	n := strings.ToLower(name)
	for _, word := range []string{"signature", "secret", "token", "authorization", "cookie", "api-key", "hmac"} {
		if strings.Contains(n, word) {
			return true
		}
	}
	return false
}

// prettyPayload indents JSON (other bytes are shown as text) and cuts it at
// limit bytes, on a UTF-8 boundary.
func prettyPayload(payload []byte, limit int) (string, bool) {
	var buf bytes.Buffer
	if json.Indent(&buf, payload, "", "  ") != nil {
		buf.Reset()
		buf.Write(payload)
	}
	s := buf.String()
	if len(s) <= limit {
		return s, false
	}
	return strings.ToValidUTF8(s[:limit], ""), true // drops a rune cut in half
}

func (d *Dashboard) replayOne(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	n, err := d.opts.Store.EventRequeue(r.Context(), &ferry.EventRequeueParams{IDs: []int64{id}})
	if err != nil {
		d.fail(w, r, "replay", err)
		return
	}
	flash := "replayed: the event is pending and a worker will take it"
	if n == 0 {
		flash = "not replayed: the event is already pending or running"
	}
	d.opts.Logger.Info("ferry: dashboard replay", "id", id, "replayed", n, "remote", r.RemoteAddr)
	http.Redirect(w, r, fmt.Sprintf("/ui/events/%d?flash=%s", id, url.QueryEscape(flash)), http.StatusSeeOther)
}

func (d *Dashboard) replayDead(w http.ResponseWriter, r *http.Request) {
	source := r.PostFormValue("source")
	if source == "" {
		http.Error(w, "name a source", http.StatusBadRequest)
		return
	}
	n, err := d.opts.Store.EventRequeue(r.Context(), &ferry.EventRequeueParams{Source: source, States: []ferry.State{ferry.StateDead}})
	if err != nil {
		d.fail(w, r, "replay", err)
		return
	}
	d.opts.Logger.Info("ferry: dashboard replay of dead events", "source", source, "replayed", n, "remote", r.RemoteAddr)
	flash := fmt.Sprintf("replayed %d dead events of %s", n, source)
	http.Redirect(w, r, "/ui/?source="+url.QueryEscape(source)+"&flash="+url.QueryEscape(flash), http.StatusSeeOther)
}

func (d *Dashboard) render(w http.ResponseWriter, name string, data any) {
	var buf bytes.Buffer
	if err := d.pages.ExecuteTemplate(&buf, name, data); err != nil {
		d.opts.Logger.Error("ferry: dashboard template", "page", name, "err", err)
		http.Error(w, "template error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, op string, err error) {
	d.opts.Logger.Warn("ferry: dashboard: store error", "op", op, "path", r.URL.Path, "err", err)
	http.Error(w, "the store did not answer: "+op, http.StatusServiceUnavailable)
}

// ago writes a duration the way an operator reads it: "3d 4h", "12m".
func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

// isLoopbackAddr reports whether host:port is on loopback.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return isLoopbackHost(host)
}

func isLoopbackHost(host string) bool {
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
