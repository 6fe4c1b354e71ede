package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/ferry-inbox/ferry"
)

// alertBurst is the most warnings of one kind a check logs; the rest are
// summed up in one line, so a thousand events crossing the line at once do
// not flood the log.
const alertBurst = 10

// alertWatcher logs a warning, once per event, when an event becomes at
// risk of outliving its replay window or is held as unknown. Dead events and
// conflicting duplicates are logged where they happen (the client and the
// receiver), with alert=dead and alert=conflicting_duplicate. Every line is
// structured (alert, source, event_id, state, attempt, age) and carries no payload,
// header or secret.
type alertWatcher struct {
	store  ferry.Store
	params *ferry.EventStatsParams
	log    *slog.Logger

	atRisk  map[int64]bool // warned, and still at risk
	beyond  int            // at risk past the list at the last check, counted only
	unknown map[int64]int  // warned, at this attempt
}

func newAlertWatcher(store ferry.Store, params *ferry.EventStatsParams, log *slog.Logger) *alertWatcher {
	p := *params
	p.AtRiskLimit = ferry.EventListLimitMax
	return &alertWatcher{store: store, params: &p, log: log, atRisk: map[int64]bool{}, unknown: map[int64]int{}}
}

// run checks every interval until ctx is done.
func (w *alertWatcher) run(ctx context.Context, interval time.Duration) {
	runEvery(ctx, interval, w.check)
}

// runEvery runs fn at once and then every interval until ctx is done; a
// run that overlaps a tick delays the next one, it never runs twice at once.
func runEvery(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A tick and the end may be ready together; select picks
			// either, and the end wins.
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// check reads the store once and warns about what is new since the last
// check.
func (w *alertWatcher) check(ctx context.Context) {
	stats, err := w.store.EventStats(ctx, w.params)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("ferry: alert check could not read the store", "alert", "stats_unavailable", "err", err)
		}
		return
	}
	total := 0
	for _, s := range stats.Sources {
		total += s.AtRisk
	}
	seen := map[int64]bool{}
	// Beyond the list, events are counted, not seen: what grew since the
	// last check is new, so a steady overflow is not logged every check.
	beyond := total - len(stats.AtRisk)
	logged, suppressed := 0, max(beyond-w.beyond, 0)
	w.beyond = beyond
	for _, e := range stats.AtRisk {
		seen[e.ID] = true
		if w.atRisk[e.ID] {
			continue
		}
		w.atRisk[e.ID] = true
		if logged == alertBurst {
			suppressed++
			continue
		}
		logged++
		// Not the last error: it is stored whole, and an app's answer in
		// it may echo the payload (the worker logs its redacted form).
		w.log.Warn("ferry: event at risk of outliving the provider's replay window",
			"alert", "at_risk", "source", e.Source, "event_id", e.EventID, "state", string(e.State),
			"attempt", e.Attempt, "age", stats.Now.Sub(e.FirstDeliveredAt).Round(time.Second).String())
	}
	for id := range w.atRisk {
		if !seen[id] { // finished, or replayed: warn again if it comes back
			delete(w.atRisk, id)
		}
	}
	if suppressed > 0 {
		w.log.Warn("ferry: more events at risk than logged", "alert", "at_risk", "more", suppressed, "at_risk_total", total)
	}

	res, err := w.store.EventList(ctx, &ferry.EventListParams{States: []ferry.State{ferry.StateUnknown}, Limit: ferry.EventListLimitMax})
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("ferry: alert check could not list unknown events", "alert", "stats_unavailable", "err", err)
		}
		return
	}
	current := map[int64]bool{}
	logged, suppressed = 0, 0
	for _, e := range res.Events {
		current[e.ID] = true
		if w.unknown[e.ID] == e.Attempt {
			continue
		}
		w.unknown[e.ID] = e.Attempt
		if logged == alertBurst {
			suppressed++
			continue
		}
		logged++
		w.log.Warn("ferry: event held as unknown: its lease was lost while its effect may have run; a person decides",
			"alert", "unknown", "source", e.Source, "event_id", e.EventID, "attempt", e.Attempt)
	}
	for id := range w.unknown {
		if !current[id] {
			delete(w.unknown, id)
		}
	}
	if suppressed > 0 {
		w.log.Warn("ferry: more events held as unknown than logged", "alert", "unknown", "more", suppressed)
	}
}
