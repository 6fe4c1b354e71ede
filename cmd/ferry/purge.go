package main

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/config"
)

// purgeInterval is how often serve deletes done events past their source's
// retention. Retention is hours to days, so hourly is precise enough.
const purgeInterval = time.Hour

// purger enforces each source's retention: done events completed longer ago
// than retention are deleted, never sooner than the replay window (the store
// refuses that). Without it the inbox grows for ever.
//
// It first runs the store's ArchiveMaintain for the longest retention of
// every source and the longest replay window, under the store's lease (one
// instance at a time): on PostgreSQL partitions are created ahead and
// dropped whole, keys are purged past the longer of the two; on SQLite done
// events past both are deleted in short batches. Only sources whose
// retention is shorter than the longest are then purged one by one
// (EventPurge).
type purger struct {
	store   ferry.Store
	sources []config.Source
	log     *slog.Logger
	// owner names this instance for the archive maintenance lease.
	owner string
	// firstPass bounds the pass start waits for; 0 is firstPassTimeout.
	firstPass time.Duration
}

// firstPassTimeout bounds the pass serve waits for before it takes
// traffic: a fresh PostgreSQL store's partitions (a week ahead) take about
// 1 s on 2 slow cores, a long SQLite purge may take minutes.
const firstPassTimeout = 10 * time.Second

// start runs the first pass now, before the caller serves, then one every
// interval in bg until ctx is done. On a fresh PostgreSQL store
// the first pass creates a week of partitions ahead: that DDL beside traffic
// held completions off for up to 100 ms in the first second (e2e_pg). A
// first pass cut short by its bound goes on in the background at once.
func (p *purger) start(ctx context.Context, bg *sync.WaitGroup, interval time.Duration) {
	bound := cmp.Or(p.firstPass, firstPassTimeout)
	first, cancel := context.WithTimeout(ctx, bound)
	p.purgeAll(first)
	cut := errors.Is(first.Err(), context.DeadlineExceeded)
	cancel()
	if cut {
		p.log.Warn("ferry: archive maintenance not done before serving; it goes on in the background", "waited", bound.String())
	}
	bg.Go(func() {
		if !cut {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
		}
		runEvery(ctx, interval, p.purgeAll)
	})
}

func (p *purger) purgeAll(ctx context.Context) {
	var longest, window time.Duration
	for _, s := range p.sources {
		longest = max(longest, s.Retention.Duration)
		window = max(window, s.ReplayWindow.Duration)
	}
	if longest > 0 {
		// KeyRetention is left to its default, the longer of the two.
		res, err := p.store.ArchiveMaintain(ctx, &ferry.ArchiveMaintainParams{Owner: p.owner, Retention: longest, ReplayWindow: window})
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, ferry.ErrMisconfigured): // no retry passes it: the role must change
			p.log.Error("ferry: archive maintenance failed", "err", err)
		case err != nil:
			p.log.Warn("ferry: archive maintenance failed; will try again", "err", err)
		case res.Created > 0 || res.Dropped > 0 || res.Events > 0 || res.Keys > 0:
			p.log.Info("ferry: archive maintained", "partitions_created", res.Created, "partitions_dropped", res.Dropped,
				"events_dropped", res.Events, "keys_purged", res.Keys, "retention", longest.String())
		}
	}
	for _, s := range p.sources {
		if s.Retention.Duration >= longest {
			// ArchiveMaintain enforced it (on PostgreSQL the default
			// partition's strays too).
			continue
		}
		n, err := p.store.EventPurge(ctx, &ferry.EventPurgeParams{
			Source: s.Name, Retention: s.Retention.Duration, ReplayWindow: s.ReplayWindow.Duration,
		})
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			p.log.Warn("ferry: purge failed; will try again", "source", s.Name, "err", err)
		case n > 0:
			p.log.Info("ferry: purged done events past retention", "source", s.Name, "events", n, "retention", s.Retention.Duration.String())
		}
	}
}
