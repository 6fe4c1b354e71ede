package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry"
)

// alertLease is the store's named lease whose holder pushes alerts.
const alertLease = "alerts"

// alertListLimit is the most events or notices one check reads per kind and
// source; more events are counted, and more notices left for the next
// message.
const alertListLimit = ferry.EventListLimitMax

// alertNoticeGrace is how far behind the store's now a notice cursor
// stays at least. PostgreSQL takes a notice's id at insert, not at commit,
// so a receipt still open may commit a notice below one already read; the
// grace outlasts any receipt.
const alertNoticeGrace = time.Minute

// alertNamesShown is the most event ids one message names.
const alertNamesShown = 10

// alertRule is one kind of alert. An event kind names the events in a
// condition now (at risk, dead, unknown): a message announces those not
// announced before. A notice kind pages through rows that only grow
// (conflicting deliveries, suspected replays) after a cursor. A new kind is
// one more line in alertRules.
type alertRule struct {
	kind string
	// one and many phrase the message: count, source.
	one, many string
	// state lists an event kind by state; at risk is read from the stats.
	state ferry.State
	// notices lists a notice kind.
	notices func(ferry.Store, context.Context, *ferry.NoticeListParams) ([]*ferry.Notice, error)
}

var alertRules = []alertRule{
	{kind: "at_risk",
		one:  "%d event on %s is newly at risk of outliving the provider's replay window",
		many: "%d events on %s are newly at risk of outliving the provider's replay window"},
	{kind: "dead", state: ferry.StateDead,
		// An event dies of a spent budget, of a permanent answer (a 4xx) on
		// any attempt, or of a failure past its source's replay window: the
		// text holds for each, and the event's last error says which.
		one:  "%d event on %s is dead: nothing retries it (a permanent failure, its attempts spent, or too old to retry); replay it once the cause is fixed, or resolve it",
		many: "%d events on %s are dead: nothing retries them (a permanent failure, their attempts spent, or too old to retry); replay them once the cause is fixed, or resolve them"},
	{kind: "unknown", state: ferry.StateUnknown,
		one:  "%d event on %s is held as unknown: its lease was lost while its effect may have run; a person decides",
		many: "%d events on %s are held as unknown: their leases were lost while their effects may have run; a person decides"},
	{kind: "conflicting", notices: ferry.Store.ConflictNoticeList,
		one:  "%d conflicting delivery on %s: a known event id with other bytes; the first body was kept",
		many: "%d conflicting deliveries on %s: known event ids with other bytes; the first bodies were kept"},
	{kind: "suspected_replay", notices: ferry.Store.ReplayNoticeList,
		one:  "%d suspected replay on %s: a stored body under another event id, answered and not processed",
		many: "%d suspected replays on %s: stored bodies under other event ids, answered and not processed"},
}

// alertMessage is the JSON body POSTed to alerts.url. Text alone makes a
// Slack message; the other fields are for receivers that route or count.
type alertMessage struct {
	Text   string `json:"text"`
	Kind   string `json:"kind"`
	Source string `json:"source"`
	// New counts what this message announces for the first time.
	New int `json:"new"`
	// Total counts the events in this condition now (event kinds); for
	// notice kinds it equals New.
	Total int `json:"total"`
	// EventIDs are the provider's ids of the newly announced events, at
	// most alertNamesShown, in their list's order: dead and unknown the
	// newest first; at risk, conflicts and replays the oldest first.
	EventIDs []string `json:"event_ids"`
	// DashboardURL opens the event, or the source's list, when
	// admin.public_url is set.
	DashboardURL string `json:"dashboard_url,omitempty"`
}

// alertMark is what was already announced of one kind about one source,
// kept as the checkpoint "alerts:KIND:SOURCE" so a restart or a failover
// does not announce it again.
type alertMark struct {
	// SentAt is the database time of the last message.
	SentAt time.Time `json:"sent_at"`
	// Keys are the events in the condition at the last message (alertKey).
	Keys []string `json:"keys,omitempty"`
	// IDs are the row ids marks held before Keys; read, never written.
	IDs []int64 `json:"ids,omitempty"`
	// After is the cursor: every notice up to it was announced.
	After int64 `json:"after,omitempty"`
	// Held are the notices past After announced within the grace: at most
	// one list.
	Held []int64 `json:"held,omitempty"`
}

// alertPusher POSTs alerts to one URL, from one instance of a cluster at a
// time: each check it takes (or renews) the store's lease "alerts" and does
// nothing unless it holds it. At most one message per kind and source goes
// out per interval; what happens meanwhile is rolled up into the next one.
// A failed POST is retried with backoff, then at the next check; the mark
// is written only after a 2xx, so a crash between the two may send one
// message twice, never lose one. The URL is a secret and never logged.
type alertPusher struct {
	store   ferry.Store
	url     string
	sources []string
	params  ferry.EventStatsParams
	// interval is the least time between two messages of one kind about
	// one source.
	interval time.Duration
	// leaseTTL outlasts one check with its retries; renewed before each POST.
	leaseTTL time.Duration
	// publicURL is admin.public_url, for dashboard links; may be empty.
	publicURL string
	owner     string
	client    *http.Client
	// retries and retryBase shape the backoff of one message: retryBase,
	// twice that, and so on.
	retries   int
	retryBase time.Duration
	// listLimit is alertListLimit; tests lower it.
	listLimit int
	// grace is how far behind the store's now notice cursors stay.
	grace time.Duration
	log   *slog.Logger
}

type alertPusherOptions struct {
	Store     ferry.Store
	URL       string
	Sources   []string
	Params    *ferry.EventStatsParams
	Interval  time.Duration
	Check     time.Duration
	PublicURL string
	// StoreTimeout bounds a receipt (http.store_timeout): the notice
	// grace outlasts it.
	StoreTimeout time.Duration
	Log          *slog.Logger
}

func newAlertPusher(o alertPusherOptions) *alertPusher {
	p := *o.Params
	p.AtRiskLimit = 0 // counts only: current lists each source's own
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &alertPusher{
		store: o.Store, url: o.URL, sources: o.Sources, params: p, interval: o.Interval,
		leaseTTL:  2*o.Check + time.Minute,
		publicURL: strings.TrimRight(o.PublicURL, "/"),
		owner:     fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b)),
		client: &http.Client{
			Timeout: 10 * time.Second,
			// A redirect would carry the message elsewhere; a 3xx is a failure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		retries: 3, retryBase: time.Second, listLimit: alertListLimit, log: o.Log,
		grace: max(alertNoticeGrace, 2*o.StoreTimeout),
	}
}

// run checks every interval until ctx is done, then gives the lease up so
// another instance takes over at once.
func (p *alertPusher) run(ctx context.Context, every time.Duration) {
	runEvery(ctx, every, p.check)
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = p.store.LeaseRelease(rctx, &ferry.LeaseReleaseParams{Name: alertLease, Owner: p.owner})
	cancel()
}

// check sends what is new since the marks, if this instance holds the lease.
func (p *alertPusher) check(ctx context.Context) {
	if !p.hold(ctx) {
		return
	}
	stats, err := p.store.EventStats(ctx, &p.params)
	if err != nil {
		p.warn(ctx, "ferry: alerts could not read the store", err)
		return
	}
	bySource := map[string]*ferry.SourceStats{}
	for _, s := range stats.Sources {
		bySource[s.Source] = s
	}
	for _, source := range p.sources {
		for _, rule := range alertRules {
			if ctx.Err() != nil {
				return
			}
			err := p.checkOne(ctx, rule, source, stats, bySource[source])
			// A message sent is told even once serve is stopping: it
			// may reach the receiver again.
			switch {
			case errors.Is(err, errSentNotRemembered):
				p.log.Warn("ferry: alert pushed, but another instance took the alerts over before it was remembered; it may push it again", "kind", rule.kind, "source", source, "err", err)
			case errors.Is(err, errNotRemembered):
				p.log.Warn("ferry: alert pushed, but not remembered; the next check may push it again", "kind", rule.kind, "source", source, "err", err)
			case err != nil:
				p.warn(ctx, "ferry: alert not pushed; retrying at the next check", err, "kind", rule.kind, "source", source)
			}
		}
	}
}

// hold takes or renews the lease; false means another instance sends.
func (p *alertPusher) hold(ctx context.Context) bool {
	held, err := p.store.LeaseAcquire(ctx, &ferry.LeaseAcquireParams{Name: alertLease, Owner: p.owner, TTL: p.leaseTTL})
	if err != nil {
		p.warn(ctx, "ferry: alerts could not take their lease", err)
		return false
	}
	return held
}

func (p *alertPusher) checkOne(ctx context.Context, rule alertRule, source string, stats *ferry.EventStats, ss *ferry.SourceStats) error {
	name := "alerts:" + rule.kind + ":" + source
	var mark alertMark
	switch cp, err := p.store.CheckpointGet(ctx, &ferry.CheckpointGetParams{Name: name}); {
	case errors.Is(err, ferry.ErrNotFound):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal([]byte(cp.Value), &mark); err != nil {
			return fmt.Errorf("checkpoint %s: %w", name, err)
		}
	}
	if !mark.SentAt.IsZero() && stats.Now.Sub(mark.SentAt) < p.interval {
		return nil // rolled up into the next message
	}
	msg := &alertMessage{Kind: rule.kind, Source: source}
	var rowIDs []int64
	next := alertMark{SentAt: stats.Now}
	// moved: the notice cursor passed held notices though nothing is new.
	var moved bool
	if rule.notices != nil {
		notices, err := rule.notices(p.store, ctx, &ferry.NoticeListParams{Source: source, AfterID: mark.After, Limit: p.listLimit})
		if err != nil {
			return err
		}
		held := make(map[int64]bool, len(mark.Held))
		for _, id := range mark.Held {
			held[id] = true
		}
		// The cursor passes a notice older than the grace: no receipt still
		// open can commit one below it.
		next.After = mark.After
		settled := stats.Now.Add(-p.grace)
		for _, n := range notices {
			if !n.ReceivedAt.After(settled) {
				next.After = n.ID
			}
		}
		for _, n := range notices {
			if n.ID > next.After {
				next.Held = append(next.Held, n.ID)
			}
			if !held[n.ID] {
				msg.EventIDs = append(msg.EventIDs, n.EventID)
				rowIDs = append(rowIDs, n.EventRowID)
			}
		}
		msg.New, msg.Total = len(rowIDs), len(rowIDs)
		// Else a list full of held notices would hide the newer ones.
		moved = next.After > mark.After
	} else {
		events, total, err := p.current(ctx, rule, source, ss)
		if err != nil {
			return err
		}
		announced := make(map[string]bool, len(mark.Keys)+len(mark.IDs))
		for _, k := range mark.Keys {
			announced[k] = true
		}
		for _, id := range mark.IDs {
			announced[strconv.FormatInt(id, 10)] = true
		}
		for _, e := range events {
			key := alertKey(e)
			next.Keys = append(next.Keys, key)
			if !announced[key] {
				msg.EventIDs = append(msg.EventIDs, e.EventID)
				rowIDs = append(rowIDs, e.ID)
			}
		}
		// Events past the list are counted in the total and named once
		// they are among the listed: a count of them cannot tell one that
		// moved into the list from one new to the condition.
		msg.New, msg.Total = len(rowIDs), max(total, len(events))
	}
	if msg.New == 0 {
		if !moved || !p.hold(ctx) {
			return nil
		}
		next.SentAt = mark.SentAt // not a message: the interval still runs
		return p.remember(ctx, name, next)
	}
	if len(msg.EventIDs) > alertNamesShown {
		msg.EventIDs = msg.EventIDs[:alertNamesShown]
	}
	msg.DashboardURL = p.dashboardLink(rule, source, rowIDs)
	msg.Text = p.text(rule, msg)
	if !p.hold(ctx) { // the lease may have lapsed during a slow check
		return nil
	}
	if err := p.post(ctx, msg); err != nil {
		return err
	}
	// Sent: the mark is written even if serve is stopping meanwhile, or the
	// next holder of the lease would push the message again.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), alertRememberTimeout)
	defer cancel()
	if err := p.remember(rctx, name, next); err != nil {
		if errors.Is(err, ferry.ErrLeaseLost) {
			err = fmt.Errorf("%w: %w", errSentNotRemembered, err)
		}
		return fmt.Errorf("%w (the next holder may send it again): %w", errNotRemembered, err)
	}
	p.log.Info("ferry: alert pushed", "kind", rule.kind, "source", source, "new", msg.New, "total", msg.Total)
	return nil
}

// alertRememberTimeout bounds the write of a sent message's mark, which a
// stop does not cut short.
const alertRememberTimeout = 5 * time.Second

// errNotRemembered is a message pushed whose mark could not be written.
var errNotRemembered = errors.New("sent, but not remembered")

// errSentNotRemembered is a message pushed whose mark another instance's
// lease kept from being written: that instance may push it again.
var errSentNotRemembered = errors.New("the alerts' lease passed to another instance")

// remember writes mark as the checkpoint name.
func (p *alertPusher) remember(ctx context.Context, name string, mark alertMark) error {
	value, err := json.Marshal(mark)
	if err != nil {
		return err
	}
	return p.store.CheckpointPut(ctx, &ferry.CheckpointPutParams{Name: name, Value: string(value), Lease: alertLease, Owner: p.owner})
}

// alertKey names an event in an alert's mark: its row id, and when it was
// last requeued, so that an event replayed and back in the condition (dead
// again, at risk again) is announced again.
func alertKey(e *ferry.Event) string {
	if e.RequeuedAt.IsZero() {
		return strconv.FormatInt(e.ID, 10)
	}
	return strconv.FormatInt(e.ID, 10) + "@" + strconv.FormatInt(e.RequeuedAt.UnixMicro(), 10)
}

// current lists the events of one source in an event kind's condition now,
// and how many there are in all.
func (p *alertPusher) current(ctx context.Context, rule alertRule, source string, ss *ferry.SourceStats) ([]*ferry.Event, int, error) {
	if ss == nil {
		return nil, 0, nil
	}
	if rule.state == "" { // at risk
		if ss.AtRisk == 0 {
			return nil, 0, nil
		}
		// A list over every source would be the oldest there, and could
		// hold none of this one's: ask for this source alone.
		own, err := p.store.EventStats(ctx, &ferry.EventStatsParams{AtRiskAfter: map[string]time.Duration{source: p.params.AtRiskAge(source)}, AtRiskLimit: p.listLimit})
		if err != nil {
			return nil, 0, err
		}
		return own.AtRisk, own.AtRiskCount(), nil
	}
	if ss.States[rule.state] == 0 {
		return nil, 0, nil
	}
	res, err := p.store.EventList(ctx, &ferry.EventListParams{Source: source, States: []ferry.State{rule.state}, Limit: p.listLimit})
	if err != nil {
		return nil, 0, err
	}
	return res.Events, ss.States[rule.state], nil
}

func (p *alertPusher) text(rule alertRule, msg *alertMessage) string {
	format := rule.many
	if msg.New == 1 {
		format = rule.one
	}
	text := "ferry: " + fmt.Sprintf(format, msg.New, msg.Source)
	if rule.notices == nil {
		text += fmt.Sprintf(" (%d in all)", msg.Total)
	}
	quoted := make([]string, len(msg.EventIDs))
	for i, id := range msg.EventIDs {
		quoted[i] = slackCode(id)
	}
	ids := strings.Join(quoted, ", ")
	if msg.New > len(msg.EventIDs) {
		ids += fmt.Sprintf(" and %d more", msg.New-len(msg.EventIDs))
	}
	text += ": " + ids
	if msg.DashboardURL != "" {
		text += " <" + msg.DashboardURL + "|open>"
	}
	return text
}

// slackCode quotes a provider-chosen id as inline code, so that it forms
// no Slack markup: no link, mention, bold or list of its own ("a, b and 40
// more"). A backtick in it, which would end the code, becomes a quote.
func slackCode(id string) string {
	return "`" + slackEscape.Replace(id) + "`"
}

var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "`", "'")

// dashboardLink is the event's page when a message names one event, else
// the source's list in the kind's state.
func (p *alertPusher) dashboardLink(rule alertRule, source string, rowIDs []int64) string {
	if p.publicURL == "" {
		return ""
	}
	distinct := map[int64]bool{}
	for _, id := range rowIDs {
		distinct[id] = true
	}
	if len(distinct) == 1 {
		return p.publicURL + "/ui/events/" + strconv.FormatInt(rowIDs[0], 10)
	}
	q := url.Values{"source": {source}}
	if rule.state != "" {
		q.Set("state", string(rule.state))
	}
	return p.publicURL + "/ui/?" + q.Encode()
}

// post sends msg, retrying with backoff; the error never holds the URL.
func (p *alertPusher) post(ctx context.Context, msg *alertMessage) error {
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	delay := p.retryBase
	for attempt := 0; ; attempt++ {
		err = p.postOnce(ctx, body)
		if err == nil || attempt == p.retries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay *= 2
	}
}

func (p *alertPusher) postOnce(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return errors.New("alerts.url: cannot build a request")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ferry-alerts")
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("POST alerts.url: %w", withoutURL(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("alerts.url answered %s", resp.Status)
	}
	return nil
}

// withoutURL is an HTTP client's error without the *url.Error around it,
// which names the URL whole (its user, password and query: alerts.url is a
// secret): the caller names the URL itself, redacted or by its key.
func withoutURL(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

func (p *alertPusher) warn(ctx context.Context, msg string, err error, attrs ...any) {
	if ctx.Err() != nil {
		return
	}
	p.log.Warn(msg, append(attrs, "err", err)...)
}
