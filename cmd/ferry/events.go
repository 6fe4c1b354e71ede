package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/config"
)

// errEventNotFound is the error (exit 3) of show, replay, retry-now and
// resolve when a named event does not exist.
var errEventNotFound = &exitError{exitNotFound, noSuchEvent{}}

// noSuchEvent is ferry.ErrNotFound worded once for the command line: the
// store's "ferry: event not found" after "ferry events show:" repeats the
// prefix.
type noSuchEvent struct{}

func (noSuchEvent) Error() string        { return "no such event" }
func (noSuchEvent) Is(target error) bool { return target == ferry.ErrNotFound }

func runEvents(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, eventsUsage)
		return usagef("name a subcommand: list, show, replay, retry-now or resolve")
	}
	if args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(os.Stdout, eventsUsage)
		return flag.ErrHelp
	}
	var err error
	switch args[0] {
	case "list":
		out := bufio.NewWriter(os.Stdout) // --all may print millions of lines
		err = runEventsList(ctx, args[1:], out, os.Stderr)
		if ferr := out.Flush(); err == nil {
			err = ferr
		}
	case "show":
		err = runEventsShow(ctx, args[1:], os.Stdout)
	case "replay":
		err = runEventsReplay(ctx, args[1:], os.Stdout)
	case "retry-now":
		err = eventsRetryNow.run(ctx, args[1:], os.Stdout)
	case "resolve":
		err = eventsResolve.run(ctx, args[1:], os.Stdout)
	default:
		if strings.HasPrefix(args[0], "-") { // the flags belong to a subcommand
			return usagef("%q is a flag: name a subcommand first (list, show, replay, retry-now or resolve), then its flags, like: ferry events list --config FILE", args[0])
		}
		return usagef("unknown subcommand %q: use list, show, replay, retry-now or resolve", args[0])
	}
	if err != nil {
		return &subcommandError{args[0], err}
	}
	return nil
}

const eventsUsage = `usage:
  ferry events list   [--state S] [--source X] [--since 24h|RFC3339] [--id SUBSTR] [--at-risk | --unfinished-attempts] [--limit N] [--before ID | --all] [--json]
  ferry events show   SOURCE EVENT_ID [--payload] [--json]
  ferry events replay SOURCE EVENT_ID... [--dry-run] [--actor NAME]
  ferry events replay --state done|dead|unknown --source X [--dry-run] [--actor NAME]
  ferry events retry-now SOURCE EVENT_ID... | --source X [--actor NAME]
  ferry events resolve   SOURCE EVENT_ID... [--actor NAME]

Every subcommand takes --config FILE (default ferry.toml); 'ferry events
SUBCOMMAND -h' (list -h, show -h, ...) says what it does and lists its flags.
Exit codes: 0 done, 1 failed, 2 bad usage or config, 3 event not found,
5 an event named was left as it is (replay, retry-now, resolve).
`

// eventLine is one event as list --json prints it, one object a line.
type eventLine struct {
	ID            int64      `json:"id"`
	Source        string     `json:"source"`
	EventID       string     `json:"event_id"`
	Type          string     `json:"type"`
	State         string     `json:"state"`
	Attempt       int        `json:"attempt"`
	Deliveries    int        `json:"deliveries"`
	Conflicts     int        `json:"conflicts"`
	ReceivedAt    time.Time  `json:"received_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	CompletedAt   *time.Time `json:"completed_at,omitempty"`
	LastError     string     `json:"last_error"`
	AtRisk        bool       `json:"at_risk"`
}

// atRiskFunc says whether an event is at risk at the store's now.
func atRiskFunc(cfg *config.Config, now time.Time) func(*ferry.Event) bool {
	params := cfg.StatsParams(0)
	return func(e *ferry.Event) bool { return params.AtRisk(e, now) }
}

func newEventLine(e *ferry.Event, atRisk bool) eventLine {
	l := eventLine{
		ID: e.ID, Source: e.Source, EventID: e.EventID, Type: e.Type, State: string(e.State),
		Attempt: e.Attempt, Deliveries: e.Deliveries, Conflicts: e.Conflicts,
		ReceivedAt: e.FirstDeliveredAt, LastError: e.LastError, AtRisk: atRisk,
	}
	if e.State == ferry.StatePending {
		l.NextAttemptAt = &e.NextAttemptAt
	}
	if !e.CompletedAt.IsZero() {
		l.CompletedAt = &e.CompletedAt
	}
	return l
}

// listPageMax is the most events one store read returns; --all reads
// page after page of it.
const listPageMax = ferry.EventListLimitMax

func runEventsList(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("events list", "[flags]",
		`Lists events, newest first, one page at a time (--limit, default 100). After a
full page it prints the cursor of the next one to stderr ("next: --before ID");
pass it back to read on. --all prints every matching event instead, reading the
store a page at a time, so --all --json exports the inbox as JSON lines.
--at-risk lists the events at risk of outliving their replay window, oldest
first (at most --limit of them). --unfinished-attempts keeps the events with
an attempt that ended without a verdict, whose effect may or may not have
happened: its worker died or stalled past the lease (lease_expired in 'ferry
events show'; ferry_attempts_unfinished counts them).`)
	configPath := fs.String("config", "ferry.toml", "the config `file`")
	state := fs.String("state", "", "only events in this `state` (pending, in_progress, done, dead, unknown); comma-separate several")
	source := fs.String("source", "", "only events of this `source`")
	since := fs.String("since", "", "only events first delivered since this `time`: a duration back from now (\"24h\") or RFC 3339")
	idContains := fs.String("id", "", "only events whose event id contains this `text`")
	atRisk := fs.Bool("at-risk", false, "only events at risk of outliving their replay window, oldest first")
	lapsed := fs.Bool("unfinished-attempts", false, "only events with an attempt that ended without a verdict (lease_expired)")
	limit := fs.Int("limit", 100, "the most events to print, 1 to 1000")
	before := fs.Int64("before", 0, "the cursor: start below this row `ID` (printed as \"next: --before ID\" after a full page)")
	all := fs.Bool("all", false, "print every matching event, page after page")
	asJSON := fs.Bool("json", false, "print one JSON object a line")
	if err := fs.parseFlagsOnly(args); err != nil {
		return err
	}
	params := &ferry.EventListParams{Source: *source, EventIDContains: *idContains, LapsedAttempts: *lapsed, Limit: *limit, Before: *before}
	switch {
	case *limit <= 0 || *limit > listPageMax:
		return usagef("--limit %d: use 1 to %d (--all reads every page)", *limit, listPageMax)
	case *before < 0:
		return usagef("--before %d: use a cursor printed by a previous list", *before)
	case *atRisk && (*all || *before != 0):
		return usagef("--at-risk lists one page, oldest first: drop --all and --before")
	case *atRisk && *lapsed:
		return usagef("--at-risk and --unfinished-attempts are two lists: use one at a time")
	case *all && isSet(fs, "limit"):
		return usagef("--all prints every matching event: drop --limit, or drop --all and page with --before")
	}
	if *all {
		params.Limit = listPageMax
	}
	if *state != "" {
		for _, s := range strings.Split(*state, ",") {
			st := ferry.State(strings.TrimSpace(s))
			if !st.Valid() {
				return usagef("--state %q: use pending, in_progress, done, dead or unknown", s)
			}
			params.States = append(params.States, st)
		}
	}
	if *since != "" {
		if d, err := time.ParseDuration(*since); err == nil {
			if d < 0 { // a time ahead of now: an empty list that says nothing
				return usagef("--since %v: use a positive duration back from now, like 24h", d)
			}
			params.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, *since); err == nil {
			params.Since = t
		} else {
			return usagef("--since %q: write a duration back from now (\"24h\") or an RFC 3339 time (\"2026-01-02T15:04:05Z\")", *since)
		}
	}

	env, err := openConfigured(ctx, *configPath, "", existingStore)
	if err != nil {
		return err
	}
	if err := env.listable(ctx, *source); err != nil {
		env.close()
		return err
	}
	defer env.close()
	statsLimit := *limit
	if *atRisk {
		// The filters apply to the at-risk list, so read as much of it as
		// the store lists: other sources' older events must not fill the page.
		statsLimit = ferry.EventListLimitMax
	}
	stats, err := env.store.EventStats(ctx, env.cfg.StatsParams(statsLimit))
	if err != nil {
		return fmt.Errorf("read stats: %w", err)
	}
	isAtRisk := atRiskFunc(env.cfg, stats.Now)

	var print func(e *ferry.Event) error
	flush := func() error { return nil }
	if *asJSON {
		enc := json.NewEncoder(out)
		print = func(e *ferry.Event) error { return enc.Encode(newEventLine(e, isAtRisk(e))) }
	} else {
		// A table is aligned per page, so --all streams rather than holding
		// every event for one alignment.
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SOURCE\tEVENT ID\tTYPE\tSTATE\tATTEMPT\tDELIVERIES\tRECEIVED\tLAST ERROR")
		print = func(e *ferry.Event) error {
			st := string(e.State)
			if isAtRisk(e) {
				st += " (AT RISK)"
			}
			_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", e.Source, e.EventID, e.Type, st, e.Attempt, e.Deliveries,
				e.FirstDeliveredAt.Format(time.RFC3339), oneLine(e.LastError, 60))
			return err
		}
		flush = tw.Flush
	}

	if *atRisk {
		shown := 0
		for _, e := range stats.AtRisk {
			if shown == *limit {
				break
			}
			if matches(e, params) {
				if err := print(e); err != nil {
					return err
				}
				shown++
			}
		}
		if shown < *limit && stats.AtRiskCount() > len(stats.AtRisk) {
			fmt.Fprintf(errOut, "note: %d events are at risk; only the oldest %d were searched\n", stats.AtRiskCount(), len(stats.AtRisk))
		}
		return flush()
	}
	for {
		res, err := env.store.EventList(ctx, params)
		if err != nil {
			return err
		}
		for _, e := range res.Events {
			if err := print(e); err != nil {
				return err
			}
		}
		if err := flush(); err != nil {
			return err
		}
		if res.NextBefore == 0 {
			return nil
		}
		if !*all {
			fmt.Fprintf(errOut, "next: --before %d\n", res.NextBefore)
			return nil
		}
		params.Before = res.NextBefore
	}
}

// isSet says whether the command line set the named flag.
func isSet(fs *flagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// matches applies list filters to an at-risk event.
func matches(e *ferry.Event, p *ferry.EventListParams) bool {
	if p.Source != "" && e.Source != p.Source {
		return false
	}
	if len(p.States) > 0 && !containsState(p.States, e.State) {
		return false
	}
	if !p.Since.IsZero() && e.FirstDeliveredAt.Before(p.Since) {
		return false
	}
	return strings.Contains(e.EventID, p.EventIDContains)
}

func containsState(states []ferry.State, s ferry.State) bool {
	for _, x := range states {
		if x == s {
			return true
		}
	}
	return false
}

// oneLine fits stored text (an error, an actor, a header) on one table
// row: whitespace runs become one space, any other control or bidi control
// character its Go escape (an app's status line must not move the cursor,
// retitle the terminal or reorder what follows), and text over max
// characters is cut with "…".
func oneLine(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.Join(strings.Fields(s), " ") {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	out := b.String()
	if utf8.RuneCountInString(out) > max {
		return string([]rune(out)[:max-1]) + "…"
	}
	return out
}

// eventDetail is show --json.
type eventDetail struct {
	eventLine
	Origin          string              `json:"origin"`
	LeaseOwner      string              `json:"lease_owner,omitempty"`
	LeaseExpiresAt  *time.Time          `json:"lease_expires_at,omitempty"`
	LastDeliveredAt time.Time           `json:"last_delivered_at"`
	RequeuedAt      *time.Time          `json:"requeued_at,omitempty"`
	PayloadSHA256   string              `json:"payload_sha256"`
	PayloadBytes    int                 `json:"payload_bytes"`
	Headers         map[string][]string `json:"headers,omitempty"`
	Payload         json.RawMessage     `json:"payload,omitempty"`
	PayloadText     string              `json:"payload_text,omitempty"`
	// LeaseExpired is an in-progress event whose lease has lapsed by the
	// store's clock: its worker stopped heartbeating, and the next claim
	// takes it back.
	LeaseExpired bool          `json:"lease_expired,omitempty"`
	Attempts     []attemptLine `json:"attempts"`
	Actions      []actionLine  `json:"actions"`
	// Replays are the kept deliveries of this body under other ids: the
	// first ferry.NoticeKeep, the rest only counted (ferry.Event.Replays).
	Replays []replayLine `json:"replays"`
	// ConflictsKept are the deliveries of this key whose payload differed
	// from the event's: the first ferry.NoticeKeep are kept, the rest
	// counted (Deliveries and eventLine.Conflicts, "conflicts" as in list
	// --json). Named apart from that count, which it would hide.
	ConflictsKept []conflictLine `json:"conflicts_kept"`
}

// actionLine is one operator action: who requeued, replayed, retried or
// resolved, and when.
type actionLine struct {
	At     time.Time `json:"at"`
	Action string    `json:"action"`
	Actor  string    `json:"actor"`
}

// replayLine is one delivery of this event's body under another id, with
// the headers it came with (who sent it), redacted as the event's are.
type replayLine struct {
	ReceivedAt     time.Time           `json:"received_at"`
	ClaimedEventID string              `json:"claimed_event_id"`
	ClaimedType    string              `json:"claimed_type"`
	Headers        map[string][]string `json:"headers,omitempty"`
}

// conflictLine is one kept delivery of this key with another payload; the
// payload itself only with --payload, as the event's own.
type conflictLine struct {
	ReceivedAt    time.Time           `json:"received_at"`
	PayloadSHA256 string              `json:"payload_sha256"`
	PayloadBytes  int                 `json:"payload_bytes"`
	Headers       map[string][]string `json:"headers,omitempty"`
	Payload       json.RawMessage     `json:"payload,omitempty"`
	PayloadText   string              `json:"payload_text,omitempty"`
}

type attemptLine struct {
	Attempt    int        `json:"attempt"`
	Worker     string     `json:"worker"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Outcome    string     `json:"outcome"`
	Error      string     `json:"error,omitempty"`
}

func runEventsShow(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("events show", "SOURCE EVENT_ID [flags]",
		`Shows one event: its state, attempt ledger, operator actions (who replayed,
retried or resolved it, when), conflicting deliveries of its id (received,
size, sha256), suspected replays of its body with the headers each came with,
delivery count and headers (anything signature- or credential-like redacted,
and a generic HMAC source's signature header), and with --payload its payload
and the conflicting ones. SOURCE is a source of the config, or one the store
still holds events of. Exits 3 when the event does not exist.`)
	configPath := fs.String("config", "ferry.toml", "the config `file`")
	payload := fs.Bool("payload", false, "print the payload too (it may hold personal data)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(positional) != 2 {
		return usagef("want SOURCE EVENT_ID, got %d arguments", len(positional))
	}
	env, err := openConfigured(ctx, *configPath, "", existingStore)
	if err != nil {
		return err
	}
	defer env.close()
	// As list does: a retired source's events are still shown, and a
	// mistyped source is a usage error, not "no such event".
	if err := env.listable(ctx, positional[0]); err != nil {
		return err
	}
	e, err := env.store.EventGet(ctx, &ferry.EventGetParams{Source: positional[0], EventID: positional[1]})
	if errors.Is(err, ferry.ErrNotFound) {
		return fmt.Errorf("%s %s: %w", positional[0], positional[1], errEventNotFound)
	}
	if err != nil {
		return err
	}
	attempts, err := env.store.AttemptList(ctx, &ferry.AttemptListParams{ID: e.ID})
	if err != nil {
		return err
	}
	actions, err := env.store.ActionList(ctx, &ferry.ActionListParams{ID: e.ID})
	if err != nil {
		return err
	}
	replays, err := env.store.ReplayList(ctx, &ferry.ReplayListParams{ID: e.ID})
	if err != nil {
		return err
	}
	var conflicts []*ferry.Conflict
	if e.Conflicts > 0 {
		conflicts, err = env.store.ConflictList(ctx, &ferry.ConflictListParams{ID: e.ID, Limit: ferry.NoticeKeep})
		if err != nil {
			return err
		}
	}
	stats, err := env.store.EventStats(ctx, &ferry.EventStatsParams{})
	if err != nil {
		return err
	}
	redaction := env.cfg.Redaction()
	sensitive := func(name string) bool { return redaction.Redacted(e.Source, name) }
	d := eventDetail{
		eventLine:       newEventLine(e, atRiskFunc(env.cfg, stats.Now)(e)),
		LeaseOwner:      e.LeaseOwner,
		LastDeliveredAt: e.LastDeliveredAt,
		PayloadSHA256:   fmt.Sprintf("%x", e.PayloadSHA256),
		PayloadBytes:    len(e.Payload),
		Origin:          string(e.Origin),
		Headers:         shownHeaders(e.Headers, sensitive),
		// The lease lapses on the store's clock, as a claim judges it.
		LeaseExpired:  e.State == ferry.StateInProgress && !e.LeaseExpiresAt.After(stats.Now),
		Attempts:      []attemptLine{},
		Actions:       []actionLine{},
		Replays:       []replayLine{},
		ConflictsKept: []conflictLine{},
	}
	for _, a := range actions {
		d.Actions = append(d.Actions, actionLine{At: a.At, Action: a.Action, Actor: a.Actor})
	}
	for _, r := range replays {
		d.Replays = append(d.Replays, replayLine{ReceivedAt: r.ReceivedAt, ClaimedEventID: r.ClaimedEventID, ClaimedType: r.ClaimedType,
			Headers: shownHeaders(r.Headers, sensitive)})
	}
	if !e.LeaseExpiresAt.IsZero() {
		d.LeaseExpiresAt = &e.LeaseExpiresAt
	}
	if !e.RequeuedAt.IsZero() {
		d.RequeuedAt = &e.RequeuedAt
	}
	for _, c := range conflicts {
		l := conflictLine{ReceivedAt: c.ReceivedAt, PayloadSHA256: fmt.Sprintf("%x", c.PayloadSHA256), PayloadBytes: len(c.Payload), Headers: shownHeaders(c.Headers, sensitive)}
		if *payload {
			l.Payload, l.PayloadText = shownPayload(c.Payload)
		}
		d.ConflictsKept = append(d.ConflictsKept, l)
	}
	if *payload {
		d.Payload, d.PayloadText = shownPayload(e.Payload)
	}
	for _, a := range attempts {
		l := attemptLine{Attempt: a.Attempt, Worker: a.Worker, StartedAt: a.StartedAt, Outcome: string(a.Outcome), Error: a.Error}
		if !a.FinishedAt.IsZero() {
			l.FinishedAt = &a.FinishedAt
		}
		d.Attempts = append(d.Attempts, l)
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	state := d.State
	if d.AtRisk {
		state += " (AT RISK: unfinished and close to outliving the provider's replay window)"
	}
	row("source", e.Source)
	row("event id", e.EventID)
	row("type", e.Type)
	row("state", state)
	row("attempt", fmt.Sprint(e.Attempt))
	row("deliveries", fmt.Sprintf("%d (conflicting: %d)", e.Deliveries, e.Conflicts))
	if e.Replays > 0 {
		row("replays", fmt.Sprintf("%d (SUSPECTED REPLAY: this body under other event ids, answered 200, not processed)", e.Replays))
	}
	row("received", e.FirstDeliveredAt.Format(time.RFC3339))
	if e.Origin == ferry.OriginCatchup {
		row("origin", "catchup (fetched from the provider's API: it was never delivered)")
	}
	row("last delivered", e.LastDeliveredAt.Format(time.RFC3339))
	if e.State == ferry.StatePending {
		row("next attempt", e.NextAttemptAt.Format(time.RFC3339))
	}
	if e.LeaseOwner != "" {
		lease := oneLine(e.LeaseOwner, 80) + " until " + e.LeaseExpiresAt.Format(time.RFC3339)
		if d.LeaseExpired {
			lease += " (expired: the worker stopped heartbeating; the next claim takes it back)"
		}
		row("lease", lease)
	}
	if e.LastError != "" {
		row("last error", oneLine(e.LastError, 200))
	}
	row("payload", fmt.Sprintf("%d bytes, sha256 %s", len(e.Payload), d.PayloadSHA256))
	for _, name := range slices.Sorted(maps.Keys(d.Headers)) {
		row("header "+oneLine(name, 80), oneLine(strings.Join(d.Headers[name], ", "), 200))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeSection(out, "attempts", "#\tWORKER\tSTARTED\tFINISHED\tOUTCOME\tERROR", len(d.Attempts), func(tw io.Writer, i int) {
		a := d.Attempts[i]
		finished := "-"
		if a.FinishedAt != nil {
			finished = a.FinishedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, oneLine(a.Worker, 80), a.StartedAt.Format(time.RFC3339), finished, a.Outcome, oneLine(a.Error, 80))
	}); err != nil {
		return err
	}
	if len(d.Actions) > 0 {
		if err := writeSection(out, "actions", "AT\tACTION\tBY", len(d.Actions), func(tw io.Writer, i int) {
			a := d.Actions[i]
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", a.At.Format(time.RFC3339), a.Action, oneLine(a.Actor, 80))
		}); err != nil {
			return err
		}
	}
	if err := writeKeptSection(out, "replays (this body under other ids, not processed", "RECEIVED\tCLAIMED ID\tCLAIMED TYPE\tHEADERS", len(d.Replays), e.Replays, func(tw io.Writer, i int) {
		r := d.Replays[i]
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.ReceivedAt.Format(time.RFC3339), oneLine(r.ClaimedEventID, 80), oneLine(r.ClaimedType, 80), headerLine(r.Headers))
	}); err != nil {
		return err
	}
	if err := writeKeptSection(out, "conflicts (deliveries of this id with another payload, not processed", "RECEIVED\tBYTES\tPAYLOAD SHA256", len(d.ConflictsKept), e.Conflicts, func(tw io.Writer, i int) {
		c := d.ConflictsKept[i]
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", c.ReceivedAt.Format(time.RFC3339), c.PayloadBytes, c.PayloadSHA256)
	}); err != nil {
		return err
	}
	if *payload {
		fmt.Fprintf(out, "\npayload:\n%s\n", e.Payload)
		for i, c := range conflicts {
			fmt.Fprintf(out, "\nconflicting payload %d (received %s):\n%s\n", i+1, c.ReceivedAt.Format(time.RFC3339), c.Payload)
		}
	}
	return nil
}

// shownPayload is p as show --json prints it: itself when it is JSON,
// else as text.
func shownPayload(p []byte) (asJSON json.RawMessage, asText string) {
	if json.Valid(p) {
		return p, ""
	}
	return nil, string(p)
}

// writeKeptSection writes the section (writeSection) of the rows a store
// kept of those it counted, when it kept any; the title (open is up to its
// parenthesis) says how many were kept when it kept fewer.
func writeKeptSection(out io.Writer, open, header string, kept, counted int, row func(tw io.Writer, i int)) error {
	if kept == 0 {
		return nil
	}
	title := open + ")"
	if counted > kept {
		title = fmt.Sprintf("%s; the first %d of %d are kept)", open, kept, counted)
	}
	return writeSection(out, title, header, kept, row)
}

// writeSection writes a titled, tab-aligned table of n rows to out after a
// blank line; row writes row i, indented two spaces, to tw.
func writeSection(out io.Writer, title, header string, n int, row func(tw io.Writer, i int)) error {
	fmt.Fprintf(out, "\n%s:\n", title)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  "+header)
	for i := range n {
		row(tw, i)
	}
	return tw.Flush()
}

func runEventsReplay(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("events replay", "SOURCE EVENT_ID... | --state done|dead|unknown --source X [--dry-run]",
		`Puts done, dead or unknown events back to pending, due now, with a fresh attempt
budget: named ones, or every event of a source in one of those states. Events
queued or running are left as they are. --dry-run says what would be replayed and
changes nothing. Exits 3 when a named event does not exist, 5 when one is left as
it is (the others are still replayed).`)
	configPath := fs.String("config", "ferry.toml", "the config `file`")
	state := fs.String("state", "", "bulk: replay every event in this `state` (done, dead or unknown) of --source")
	source := fs.String("source", "", "bulk: the `source` whose events to replay (required with --state)")
	actor := fs.String("actor", defaultActor(), "who asks (a `name`), kept with each replayed event; ferry events show lists it")
	dryRun := fs.Bool("dry-run", false, "count or list what would be replayed; change nothing")
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	bulk := *state != "" || *source != ""
	switch {
	case bulk && len(positional) > 0:
		return usagef("give SOURCE EVENT_ID... or --state and --source, not both")
	case bulk && (*state == "" || *source == ""):
		return usagef("a bulk replay needs both --state (done, dead or unknown) and --source")
	case bulk && !ferry.State(*state).Terminal():
		return usagef("--state %q: bulk replay takes done, dead or unknown (queued and running events are left as they are)", *state)
	case !bulk && len(positional) < 2:
		return usagef("want SOURCE EVENT_ID..., or --state dead --source X")
	case *actor == "":
		return usagef("--actor is empty: name who asks for the replay")
	}
	// A replayed event waits for a worker: its source must be configured,
	// named by --source or by SOURCE (a usage error), and the store takes
	// only configured sources' events (Runnable).
	named := *source
	if !bulk {
		named = positional[0]
	}
	env, err := openConfigured(ctx, *configPath, named, existingStore)
	if err != nil {
		return err
	}
	defer env.close()

	if bulk {
		n, err := env.store.EventRequeue(ctx, &ferry.EventRequeueParams{Source: *source, States: []ferry.State{ferry.State(*state)}, Actor: *actor, DryRun: *dryRun,
			Runnable: env.cfg.SourceNames()})
		if err != nil {
			return err
		}
		if *dryRun {
			fmt.Fprintf(out, "would replay %s of %s (dry run: nothing changed)\n", countOf(n, *state+" event"), *source)
			return nil
		}
		fmt.Fprintf(out, "replayed %s of %s\n", countOf(n, *state+" event"), *source)
		return nil
	}
	done, refused := "replayed", "not replayed, already queued or running"
	if *dryRun {
		done, refused = "would replay", "would not replay, already queued or running"
	}
	return eachNamed(ctx, env.store, out, "replay", done, refused, positional, func(e *ferry.Event) (bool, error) {
		n, err := env.store.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{e.ID}, Actor: *actor, DryRun: *dryRun, Runnable: env.cfg.SourceNames()})
		return n > 0, err
	})
}

// eachNamed runs act on each event named by positional (SOURCE EVENT_ID...),
// one at a time, and prints "DONE SOURCE EVENT_ID" for each it changed
// (done is the past tense: "replayed"); verb names the step in errors.
// After the others are done, the ones that do not exist are the error
// (exit 3), and the ones act left as they are, named with their state after
// refusedText, are the error or its tail (exit 5 when none is missing): a
// script that asked for an event to change learns it did not.
func eachNamed(ctx context.Context, st ferry.Store, out io.Writer, verb, done, refusedText string, positional []string, act func(*ferry.Event) (bool, error)) error {
	src := positional[0]
	var missing, refused []string
	for _, id := range positional[1:] {
		e, err := st.EventGet(ctx, &ferry.EventGetParams{Source: src, EventID: id})
		if errors.Is(err, ferry.ErrNotFound) {
			missing = append(missing, id)
			continue
		}
		if err == nil {
			var changed bool
			if changed, err = act(e); err == nil && !changed {
				refused = append(refused, fmt.Sprintf("%s (%s)", id, e.State))
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("%s %s %s: %w", verb, src, id, err)
		}
		fmt.Fprintf(out, "%s %s %s\n", done, src, id)
	}
	var left string
	if len(refused) > 0 {
		left = fmt.Sprintf("%s %s: %s", src, strings.Join(refused, ", "), refusedText)
	}
	if len(missing) > 0 {
		err := fmt.Errorf("%s %s: %w", src, strings.Join(missing, ", "), errEventNotFound)
		if left != "" {
			err = fmt.Errorf("%w; %s", err, left)
		}
		return err
	}
	if left != "" {
		return &exitError{exitLeft, errors.New(left)}
	}
	return nil
}

// namedAction is an events subcommand that changes the events named by
// SOURCE EVENT_ID..., one at a time, on behalf of --actor.
type namedAction struct {
	name, help string // the subcommand and its -h text
	what       string // what the actor does, for the --actor flag: "asks", "resolves"
	verb, done string // eachNamed's
	refused    string // eachNamed's refusedText
	// retired accepts a source no longer in the config (listable): nothing
	// will run its events. Otherwise the source must be configured: a
	// worker must take them.
	retired bool
	// bulk takes --source NAME in place of SOURCE EVENT_ID...: every event
	// of the source in state bulk is acted on (act leaves those it does
	// not apply to); bulkUsage is the flag's help.
	bulk      ferry.State
	bulkUsage string
	act       func(ctx context.Context, st ferry.Store, e *ferry.Event, actor string) (bool, error)
}

func (a *namedAction) run(ctx context.Context, args []string, out io.Writer) error {
	usage, want := "SOURCE EVENT_ID...", "want SOURCE EVENT_ID..."
	var source *string
	if a.bulk != "" {
		usage, want = usage+" | --source SOURCE", want+", or --source SOURCE for all"
	}
	fs := newFlags("events "+a.name, usage, a.help)
	configPath := fs.String("config", "ferry.toml", "the config `file`")
	actor := fs.String("actor", defaultActor(), "who "+a.what+" (a `name`), kept with each event; ferry events show lists it")
	if a.bulk != "" {
		source = fs.String("source", "", a.bulkUsage)
	}
	positional, err := fs.parse(args)
	if err != nil {
		return err
	}
	bulk := source != nil && *source != ""
	switch {
	case bulk && len(positional) > 0:
		return usagef("give --source or SOURCE EVENT_ID..., not both")
	case bulk:
		positional = []string{*source}
	case len(positional) < 2:
		return usagef("%s", want)
	}
	if *actor == "" {
		return usagef("--actor is empty: name who %s", a.what)
	}
	configured := positional[0]
	if a.retired {
		configured = ""
	}
	env, err := openConfigured(ctx, *configPath, configured, existingStore)
	if err != nil {
		return err
	}
	defer env.close()
	if err := env.listable(ctx, positional[0]); err != nil {
		return err
	}
	if bulk {
		return a.each(ctx, env.store, out, *source, *actor, ferry.EventListLimitMax)
	}
	return eachNamed(ctx, env.store, out, a.verb, a.done, a.refused, positional, func(e *ferry.Event) (bool, error) {
		return a.act(ctx, env.store, e, *actor)
	})
}

// each acts on every event of source in state a.bulk, newest first, page
// events at a time, and prints how many it changed and how many it left.
func (a *namedAction) each(ctx context.Context, st ferry.Store, out io.Writer, source, actor string, page int) error {
	var changed, left int
	params := &ferry.EventListParams{Source: source, States: []ferry.State{a.bulk}, Limit: page}
	for {
		list, err := st.EventList(ctx, params)
		if err != nil {
			return err
		}
		for _, e := range list.Events {
			ok, err := a.act(ctx, st, e, actor)
			if err != nil { // the count says how far it got: run it again for the rest
				return fmt.Errorf("%s %s %s: %w (%s %s of %s before it)", a.verb, source, e.EventID, err, a.done, countOf(changed, "event"), source)
			}
			if ok {
				changed++
			} else {
				left++
			}
		}
		if list.NextBefore == 0 {
			break
		}
		params.Before = list.NextBefore
	}
	fmt.Fprintf(out, "%s %s of %s; %s left as they are\n", a.done, countOf(changed, "event"), source, countOf(left, "other "+string(a.bulk)+" event"))
	return nil
}

var eventsRetryNow = namedAction{
	name: "retry-now",
	help: `Makes pending events that are waiting out a backoff due now, so a worker takes
them at once, as the dashboard's "retry now" does. The attempt budget is not
reset (that is replay's, for done, dead or unknown events); events that are not
pending, or already due, are left as they are. Exits 3 when a named event does
not exist, 5 when one is left as it is (the others are still retried). With
--source and no EVENT_ID, every pending event of the source waiting out a
backoff is made due (after an outage of the app, say); that exits 0 whatever
it leaves.`,
	what: "asks", verb: "retry now", done: "retried", bulk: ferry.StatePending,
	bulkUsage: "every pending event of this `source` that waits out a backoff, in place of SOURCE EVENT_ID...",
	refused:   "not retried, not pending in a backoff (running, finished, or already due; a dead or unknown one: ferry events replay or resolve)",
	act: func(ctx context.Context, st ferry.Store, e *ferry.Event, actor string) (bool, error) {
		return st.EventRetryNow(ctx, &ferry.EventRetryNowParams{ID: e.ID, Actor: actor})
	},
}

var eventsResolve = namedAction{
	name: "resolve",
	help: `Marks dead or unknown events done without running them again: an unknown
event whose effect you have confirmed did happen, or a dead one you decide to
discard. Each is recorded with --actor (ferry events show lists who resolved it,
and when); the attempt ledger is kept as it was. Events in any other state are
left as they are. A source no longer in the config is accepted: nothing needs
to run. Exits 3 when a named event does not exist, 5 when one is left as it is
(the others are still resolved).`,
	what: "resolves", verb: "resolve", done: "resolved",
	refused: "not resolved, only dead or unknown events can be",
	retired: true,
	act: func(ctx context.Context, st ferry.Store, e *ferry.Event, actor string) (bool, error) {
		n, err := st.EventResolve(ctx, &ferry.EventResolveParams{IDs: []int64{e.ID}, Actor: actor})
		return n > 0, err
	},
}

// defaultActor names the person at the terminal: "cli:" and $USER, or the
// user the process runs as when $USER is not set (a root shell, a
// container), or "cli" when neither is known. A store keeps it as text:
// bytes that are not UTF-8 become U+FFFD (an environment holds no NUL).
func defaultActor() string {
	name := os.Getenv("USER")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	if name == "" {
		return "cli"
	}
	return "cli:" + strings.ToValidUTF8(name, "\uFFFD")
}

// headerLine is headers on one table cell, sorted by name: "Name: value,
// value; Name: value", each part fit by oneLine.
func headerLine(h map[string][]string) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(h)) {
		parts = append(parts, oneLine(name, 80)+": "+oneLine(strings.Join(h[name], ", "), 120))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// shownHeaders is h with the value of every header sensitive names
// (config.Config.Redaction) replaced by "redacted".
func shownHeaders(h http.Header, sensitive func(name string) bool) map[string][]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string][]string, len(h))
	for name, vs := range h {
		if sensitive(name) {
			vs = slices.Repeat([]string{"redacted"}, len(vs))
		}
		out[name] = vs
	}
	return out
}
