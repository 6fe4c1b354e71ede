package ferryhttp

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry"
)

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
	// PayloadLimit caps the payload shown on an event page. Defaults to
	// DefaultPayloadLimit (64 KiB).
	PayloadLimit int
	// PageSize is the number of events a page lists. Defaults to 50.
	PageSize int
	// Logger gets one line per replay: what, how many and who (the actor
	// Admin authenticated), never a payload. Defaults to slog.Default().
	Logger *slog.Logger
}

// Dashboard is the operator's web page at /ui/: counts by state and source,
// the events at risk first, a filterable event table, an event page with
// its payload, headers and attempt ledger, and replay buttons. It is
// server-rendered HTML with no script at all. Every POST is checked against
// cross-origin requests (CSRF) by http.CrossOriginProtection.
//
// It has no credentials of its own: serve it through an Admin, on a
// listener apart from the receiver's.
type Dashboard struct {
	opts    DashboardOptions
	pages   *template.Template
	routes  http.Handler // the pages and actions; Admin wraps them in its own CSRF check
	handler http.Handler // routes behind the CSRF check, for use without an Admin
}

//go:embed ui
var uiFS embed.FS

// NewDashboard checks opts and parses the pages.
func NewDashboard(opts DashboardOptions) (*Dashboard, error) {
	if opts.Store == nil {
		return nil, errors.New("ferryhttp: DashboardOptions.Store is required")
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
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	d := &Dashboard{opts: opts, pages: pages}
	mux := http.NewServeMux()
	static, _ := fs.Sub(uiFS, "ui/static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/{$}", d.overview)
	mux.HandleFunc("GET /ui/events/{id}", d.event)
	mux.HandleFunc("POST /ui/events/{id}/replay", d.replayOne)
	mux.HandleFunc("POST /ui/replay", d.replayDead)
	d.routes, d.handler = mux, http.NewCrossOriginProtection().Handler(mux)
	return d, nil
}

// Register mounts the dashboard at /ui/ on mux, with no credentials: mount
// it on an admin listener of its own, or use Admin.
func (d *Dashboard) Register(mux *http.ServeMux) {
	mux.Handle("/ui/", d)
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
}

func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	d.handler.ServeHTTP(w, r)
}

func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func parsePages() (*template.Template, error) {
	return template.New("").Funcs(template.FuncMap{
		"ago":   func(now, t time.Time) string { return ago(now.Sub(t)) },
		"time":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"state": func(s ferry.State) string { return string(s) },
		"count": func(s *ferry.SourceStats, st string) int { return s.States[ferry.State(st)] },
	}).ParseFS(uiFS, "ui/*.html")
}

// chrome is what every page's frame shows: its title and who is signed in.
type chrome struct {
	Title   string
	Actor   string
	SignOut bool // signed in through the login form, so there is a session to end
}

func (c *chrome) frame() *chrome { return c }

type page interface{ frame() *chrome }

// overviewData is what overview.html shows.
type overviewData struct {
	chrome
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
	data := overviewData{chrome: chrome{Title: "Events"}}
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
	d.render(w, r, "overview.html", &data)
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
	chrome
	Event      *ferry.Event
	Now        time.Time
	AtRisk     bool
	Attempts   []*ferry.Attempt
	Actions    []*ferry.Action
	Replays    []*ferry.Replay
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
	actions, err := d.opts.Store.ActionList(ctx, &ferry.ActionListParams{ID: id})
	if err != nil {
		d.fail(w, r, "list actions", err)
		return
	}
	replays, err := d.opts.Store.ReplayList(ctx, &ferry.ReplayListParams{ID: id})
	if err != nil {
		d.fail(w, r, "list replays", err)
		return
	}
	stats, err := d.opts.Store.EventStats(ctx, &ferry.EventStatsParams{})
	if err != nil {
		d.fail(w, r, "read clock", err)
		return
	}
	data := eventData{
		chrome: chrome{Title: e.EventID},
		Event:  e, Now: stats.Now, AtRisk: d.atRisk(stats.Now)(e), Attempts: attempts,
		Actions: actions, Replays: replays,
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
	d.render(w, r, "event.html", &data)
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
	actor := actorOf(r.Context())
	n, err := d.requeue(r.Context(), actor, &ferry.EventRequeueParams{IDs: []int64{id}})
	if err != nil {
		d.fail(w, r, "replay", err)
		return
	}
	flash := "replayed: the event is pending and a worker will take it"
	if n == 0 {
		flash = "not replayed: the event is already pending or running"
	}
	d.opts.Logger.Info("ferry: dashboard replay", "id", id, "replayed", n, "actor", actor)
	http.Redirect(w, r, fmt.Sprintf("/ui/events/%d?flash=%s", id, url.QueryEscape(flash)), http.StatusSeeOther)
}

func (d *Dashboard) replayDead(w http.ResponseWriter, r *http.Request) {
	source := r.PostFormValue("source")
	if source == "" {
		http.Error(w, "name a source", http.StatusBadRequest)
		return
	}
	actor := actorOf(r.Context())
	n, err := d.requeue(r.Context(), actor, &ferry.EventRequeueParams{Source: source, States: []ferry.State{ferry.StateDead}})
	if err != nil {
		d.fail(w, r, "replay", err)
		return
	}
	d.opts.Logger.Info("ferry: dashboard replay of dead events", "source", source, "replayed", n, "actor", actor)
	flash := fmt.Sprintf("replayed %d dead events of %s", n, source)
	http.Redirect(w, r, "/ui/?source="+url.QueryEscape(source)+"&flash="+url.QueryEscape(flash), http.StatusSeeOther)
}

// requeue is the one place a dashboard action reaches the store, and so
// the one place that hands the store who asked for it.
func (d *Dashboard) requeue(ctx context.Context, actor string, params *ferry.EventRequeueParams) (int, error) {
	params.Actor = actor // kept with each requeued event (Store.ActionList)
	return d.opts.Store.EventRequeue(ctx, params)
}

// actorOf is who the Admin in front authenticated, or "unknown" when the
// dashboard is served without one.
func actorOf(ctx context.Context) string {
	if p, ok := principalOf(ctx); ok {
		return p.actor
	}
	return "unknown"
}

func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, name string, data page) {
	if p, ok := principalOf(r.Context()); ok {
		data.frame().Actor, data.frame().SignOut = p.actor, p.session != nil
	}
	renderPage(w, d.pages, d.opts.Logger, name, data)
}

func renderPage(w http.ResponseWriter, pages *template.Template, log *slog.Logger, name string, data any) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		log.Error("ferry: dashboard template", "page", name, "err", err)
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
