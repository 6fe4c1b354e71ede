package main

import (
	"context"
	"log/slog"
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
type purger struct {
	store   ferry.Store
	sources []config.Source
	log     *slog.Logger
}

// run purges at once and then every interval until ctx is done.
func (p *purger) run(ctx context.Context, interval time.Duration) {
	runEvery(ctx, interval, p.purgeAll)
}

func (p *purger) purgeAll(ctx context.Context) {
	for _, s := range p.sources {
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
