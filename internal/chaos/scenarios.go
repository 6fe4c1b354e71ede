//go:build unix

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferry-inbox/ferry"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// run is one scenario in progress.
type run struct {
	*env
	r    *Result
	rng  *rand.Rand
	name string
	cfg  string
	evs  []*event
	snd  *sender
	// lockedPauses counts SIGSTOPs taken back because the process held
	// a lock of the SQLite file (see pause).
	lockedPauses int
}

var scenarioFuncs = map[string]func(*run, context.Context) error{
	"duplicates": (*run).duplicates,
	"kill":       (*run).kill,
	"zombie":     (*run).zombie,
	"dbfaults":   (*run).dbfaults,
	"pgcrash":    (*run).pgcrash,
	"storefull":  (*run).storefull,
	"crashloop":  (*run).crashloop,
	"dlq":        (*run).dlq,
}

// giveUp is how long the sender retries one delivery: far longer than any
// fault a scenario injects, so giving up is itself a failure.
const giveUp = 3 * time.Minute

// pacedSenders is how many senders the scenarios that measure reclaim
// time use by default. Ferry claims the oldest due work first, and an
// expired lease is due from its expiry, so in a saturated inbox a dead
// worker's events wait behind the whole backlog received before their lease
// lapsed: reclaim time is then queueing time. These scenarios keep the
// inbox busy but not saturated, so max_reclaim_ms measures the lease
// mechanism; --senders 32 shows the saturated case.
var pacedSenders = map[string]int{"kill": 4, "zombie": 4, "crashloop": 4}

func (s *run) senders() int {
	if s.opts.Senders > 0 {
		return s.opts.Senders
	}
	if n, ok := pacedSenders[s.name]; ok {
		return n
	}
	return 32
}

// begin writes the config, starts n children and makes the events.
func (s *run) begin(ctx context.Context, n int, storeVia string) error {
	cfg, err := s.writeConfig("ferry", s.storeURL(storeVia))
	if err != nil {
		return err
	}
	s.cfg = cfg
	for slot := range n {
		if _, err := s.start(ctx, slot, cfg); err != nil {
			return err
		}
	}
	s.evs = makeEvents(s.opts.Events, s.rng, s.id)
	s.snd = newSender(s.targets, giveUp, s.stream())
	return nil
}

// sendAsync sends ds in the background with s.senders() senders; the channel closes
// when every delivery is acknowledged or given up.
func (s *run) sendAsync(ctx context.Context, ds []delivery) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.snd.run(ctx, ds, s.senders())
	}()
	return done
}

// sendAfter sends ds once after is closed; its channel closes when both
// sends are done.
func (s *run) sendAfter(ctx context.Context, after <-chan struct{}, ds []delivery) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-after
		s.snd.run(ctx, ds, s.senders())
	}()
	return done
}

// finish drains, stops the children, collects and checks.
func (s *run) finish(ctx context.Context) error {
	drainLimit := time.Minute + time.Duration(s.opts.Events)*10*time.Millisecond
	if err := s.drain(ctx, drainLimit); err != nil {
		s.r.fail("%v", err)
	}
	s.stopAll()
	o, err := s.collect(ctx, s.evs)
	if err != nil {
		return err
	}
	check(o, s.r)
	s.r.detail("sender requests=%d non_2xx=%d 503=%d (store_failed=%d) with_retry_after=%d network_errors=%d gave_up=%d",
		s.snd.requests.Load(), s.snd.non2xx.Load(), s.snd.unavailable.Load(), s.snd.storeRefused.Load(), s.snd.retryAfter.Load(), s.snd.netErrors.Load(), s.snd.gaveUp.Load())
	s.r.detail("workers lease_lost=%d heartbeat_failed=%d claim_failed=%d completion_refused=%d",
		s.lineCount("lease_lost"), s.lineCount("heartbeat_failed"), s.lineCount("claim_failed"), s.lineCount("completion_refused"))
	if n := s.snd.gaveUp.Load(); n > 0 {
		s.r.fail("the sender gave up on %d deliveries after retrying for %v", n, giveUp)
	}
	return nil
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// stream is a generator of its own, seeded from the scenario's: draws made
// in other goroutines (the sender's, the restarts') then leave the
// scenario's own sequence alone.
func (s *run) stream() *rand.Rand {
	return newRand(s.rng.Uint64(), s.rng.Uint64())
}

func (s *run) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

// duplicates: N unique events across the five providers, 30 % delivered
// again (twice, three times, or two at once within 5 ms), shuffled, 32
// senders, two instances receiving.
func (s *run) duplicates(ctx context.Context) error {
	if err := s.begin(ctx, 2, ""); err != nil {
		return err
	}
	ds := plan(s.evs, 0.30, s.rng)
	s.r.detail("deliveries=%d unique=%d", len(ds), len(s.evs))
	<-s.sendAsync(ctx, ds)
	return s.finish(ctx)
}

var crashPoints = []string{"after-claim", "after-effect", "after-commit"}

// kill: three instances; every 100–900 ms one, at random, is SIGKILLed and
// restarted 200 ms later. Every (re)start is also armed to SIGKILL itself
// at one of the three crash points, in turn from after-claim, within its
// first three attempts: an instance on a busy machine may live for only a
// few events before a random SIGKILL.
func (s *run) kill(ctx context.Context) error {
	var armed atomic.Bool
	armed.Store(true)
	s.extraEnv = s.crashArming(&armed)
	s.supervised.Store(true)
	s.measureReclaim = true
	if err := s.begin(ctx, 3, ""); err != nil {
		return err
	}
	done := s.sendAsync(ctx, plan(s.evs, 0.10, s.rng))
	kills := s.killUntil(ctx, done, 100*time.Millisecond, 900*time.Millisecond, func() int { return s.rng.IntN(3) })
	armed.Store(false)
	<-done
	s.r.detail("sigkills=%d restarts=%d crash_points after-claim=%d after-effect=%d after-commit=%d",
		kills, s.restarts.Load(), s.lineCount("crash:after-claim"), s.lineCount("crash:after-effect"), s.lineCount("crash:after-commit"))
	for _, p := range crashPoints {
		if s.lineCount("crash:"+p) == 0 {
			s.r.fail("crash point %s was never hit; send more events", p)
		}
	}
	if kills == 0 {
		s.r.fail("no worker was SIGKILLed; send more events")
	}
	return s.finish(ctx)
}

// crashArming returns kill's extraEnv: while armed, each start is armed to
// crash at the next point in turn, the 1st to 3rd time it reaches it. A
// start is armed while its crash point has been hit fewer than target
// times, so each point is hit on purpose a few times and the random
// SIGKILLs do the rest.
func (s *run) crashArming(armed *atomic.Bool) func(slot int) []string {
	var starts atomic.Int64
	target := max(2, s.opts.Events/500)
	arm := s.stream() // children restart from their own goroutines
	return func(int) []string {
		k := starts.Add(1)
		point := crashPoints[(k-1)%3]
		if !armed.Load() || s.lineCount("crash:"+point) >= target {
			return nil
		}
		return []string{fmt.Sprintf("FERRY_CHAOS_CRASH_POINT=%s:%d", point, 1+arm.IntN(3))}
	}
}

// killUntil SIGKILLs instance pick() if it is alive, first once a tenth
// of the deliveries are in and then after a pause of lo–hi before each try,
// until done is closed, ctx ends or 10,000 kills; it returns how many it
// killed.
func (s *run) killUntil(ctx context.Context, done <-chan struct{}, lo, hi time.Duration, pick func() int) int {
	kills := 0
	for try := 0; kills < 10000; try++ {
		if try == 0 {
			s.waitFirstFault(ctx, done)
		} else {
			sleep(ctx, s.between(lo, hi))
		}
		if isDone(done) || ctx.Err() != nil {
			break
		}
		if p := s.proc(pick()); p != nil && p.alive() {
			p.kill()
			kills++
		}
	}
	return kills
}

// waitFirstFault waits until a tenth of the deliveries have finished, so
// the first fault of a run always lands during ingest however fast the
// machine is; later faults follow the scenario's own timing.
func (s *run) waitFirstFault(ctx context.Context, done <-chan struct{}) {
	for s.snd.sent.Load() < int64(len(s.evs)/10) && !isDone(done) && ctx.Err() == nil {
		sleep(ctx, 5*time.Millisecond)
	}
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// zombie: a worker is SIGSTOPped while it holds leases, then resumed.
// While it sleeps the harness replays its heartbeat, failure and completion
// with its stale leases, as a woken zombie would, at the two moments when
// only the lease fence can refuse them: once its leases have expired and
// nobody has reclaimed them (the survivor is paused too), and while the
// survivor runs them under a later attempt (the survivor paused
// mid-attempt). Each must be refused. Then the zombie itself wakes and
// sends its own late heartbeats.
func (s *run) zombie(ctx context.Context) error {
	// Each attempt takes at least 30 ms, so a worker holds leases at any
	// moment of the run; longer would cap a worker at 10 slots / delay and
	// saturate the survivor. Reclaim time is not measured here: the
	// harness stops the survivor too and makes the zombie's events slow on
	// purpose, so it would measure the harness. kill measures it.
	s.extraEnv = func(int) []string { return []string{"FERRY_CHAOS_HANDLER_DELAY=30ms"} }
	if err := s.begin(ctx, 2, ""); err != nil {
		return err
	}
	ds := plan(s.evs, 0.10, s.rng)
	// Half is held back and sent a few at a time whenever the zombie holds
	// no lease to catch: on a loaded machine a pause is often taken back
	// (the zombie held the SQLite write lock), and an inbox drained
	// meanwhile would leave nothing to catch.
	first, reserve := ds[:len(ds)/2], ds[len(ds)/2:]
	done := s.sendAsync(ctx, first)
	for s.snd.sent.Load() < int64(len(ds)/4) && !isDone(done) && ctx.Err() == nil {
		sleep(ctx, 20*time.Millisecond)
	}
	z, survivor := s.proc(0), s.proc(1)
	var leases []ferry.Lease
	// The survivor's attempts at them take a while (the app answers them
	// two TTLs late, its heartbeats keeping the lease), so it can be caught
	// in one even on a loaded machine, where a SQLite pause is often undone
	// because the survivor holds the write lock.
	var slow map[string]bool
	for t0 := time.Now(); len(leases) == 0 && time.Since(t0) < 2*time.Minute && ctx.Err() == nil; {
		var err error
		if leases, err = s.leasesOf(ctx, z.pid); err != nil {
			return err
		}
		if len(leases) == 0 {
			if isDone(done) {
				if len(reserve) == 0 {
					break
				}
				n := min(len(reserve), 20)
				done, reserve = s.sendAsync(ctx, reserve[:n]), reserve[n:]
			}
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		if paused, err := s.pause(ctx, z, 200*time.Millisecond); err != nil || !paused {
			leases = nil
			if err != nil {
				return err
			}
			continue
		}
		// Leases read before the stop may have completed meanwhile;
		// read again now that the zombie cannot move.
		leases, err = s.leasesOf(ctx, z.pid)
		if err == nil {
			slow, err = s.keysOf(ctx, leases)
		}
		if err != nil && !sqliteContended(err) {
			return err
		}
		if err != nil || len(leases) == 0 {
			// A read that SQLite refused means the zombie was stopped
			// holding a lock of the file: that stop is taken back too.
			leases = nil
			_ = z.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	done = s.sendAfter(ctx, done, reserve)
	if len(leases) == 0 {
		s.r.fail("the zombie never held a lease to lose; send more events")
		<-done
		return s.finish(ctx)
	}
	stoppedAt := time.Now()
	beforeResume := s.lineCount("lease_lost") + s.lineCount("completion_refused")
	pr := &zombieProbes{}
	s.sink.setDelay(func(key string) time.Duration {
		if slow[key] {
			return 2 * s.opts.TTL
		}
		return 0
	})

	// 1. The leases lapse with nobody to reclaim them: only the expiry
	// refuses the zombie's writes.
	survivorPaused, err := s.pauseWithin(ctx, survivor, s.opts.TTL)
	if err != nil {
		return err
	}
	sleep(ctx, time.Until(stoppedAt.Add(s.opts.TTL+250*time.Millisecond)))
	if survivorPaused {
		if err := s.probe(ctx, leases, pr); err != nil {
			return err
		}
	}
	if survivorPaused {
		if err := survivor.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			return err
		}
	}

	// 2. The survivor reclaims them: pause it while it runs one under a
	// later attempt, so only the attempt refuses the zombie's writes.
	byID := map[int64]int{}
	for _, l := range leases {
		byID[l.ID] = l.Attempt
	}
	// With SQLite and --handler tx the survivor's attempt holds the one
	// write lock for all of its run, so no write can be probed during it.
	txLite := s.lite != nil && s.opts.Handler == "tx"
	checked := time.Now()
	for t0 := time.Now(); !txLite && pr.reclaimed == 0 && time.Since(t0) < 30*time.Second && ctx.Err() == nil; {
		held, err := s.leasesOf(ctx, survivor.pid)
		if sqliteContended(err) {
			pr.busy++ // the stopped zombie holds a lock of the file
			break
		} else if err != nil {
			return err
		}
		reclaimed := slices.ContainsFunc(held, func(l ferry.Lease) bool { a, ok := byID[l.ID]; return ok && l.Attempt > a })
		if !reclaimed {
			if time.Since(checked) > 100*time.Millisecond {
				checked = time.Now()
				open, err := s.anyOpen(ctx, leases)
				if sqliteContended(err) {
					pr.busy++
					break
				} else if err != nil {
					return err
				} else if !open {
					break // every one ended before the survivor could be caught with it
				}
			}
			sleep(ctx, 2*time.Millisecond)
			continue
		}
		if paused, err := s.pause(ctx, survivor, 0); err != nil {
			return err
		} else if !paused {
			continue
		}
		err = s.probe(ctx, leases, pr)
		if cerr := survivor.cmd.Process.Signal(syscall.SIGCONT); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	s.sink.setDelay(nil)
	s.r.StaleWritesAccepted += pr.accepted
	if err := z.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	stoppedFor := time.Since(stoppedAt)
	<-done
	sleep(ctx, s.opts.TTL) // the zombie's heartbeat loop runs at least once more
	s.r.detail("zombie pauses_retried_because_the_process_held_a_sqlite_lock=%d survivor_paused_while_leases_lapsed=%v", s.lockedPauses, survivorPaused)
	s.r.detail("zombie pid=%d stopped_for=%v leases_held=%d probes expired_lease=%d reclaimed_under_later_attempt=%d not_in_progress=%d refused=%d accepted=%d zombie_refused_after_wake=%d",
		z.pid, stoppedFor.Round(100*time.Millisecond), len(leases), pr.expired, pr.reclaimed, pr.other, pr.refused, pr.accepted, s.lineCount("lease_lost")+s.lineCount("completion_refused")-beforeResume)
	s.r.detail("zombie probes (lease → event state/attempt when probed): %s", strings.Join(pr.seen, " "))
	if pr.busy > 0 {
		s.r.detail("zombie probe rounds or searches given up because another process held a lock of the SQLite file past SQLite's waits: %d", pr.busy)
	}
	// A moment the harness could not arrange is said, not failed: on a
	// loaded machine a SQLite worker may be caught holding the write lock
	// at every try, which says nothing of the fence. What was probed
	// still fails the run on any stale write that took effect.
	if pr.expired == 0 {
		s.r.detail("not tested: no stale probe ran while the zombie's lease had expired unreclaimed (the survivor could not be paused in time)")
	}
	if pr.reclaimed == 0 {
		if txLite {
			s.r.detail("zombie: no probe under a later attempt: with SQLite and --handler tx the survivor holds the write lock for its whole attempt")
		} else {
			s.r.detail("not tested: no stale probe ran while the survivor held the event under a later attempt (it could not be caught in one)")
		}
	}
	return s.finish(ctx)
}

// zombieProbes counts the stale probes by what fenced them.
type zombieProbes struct {
	// expired: in progress under the probed attempt, its lease lapsed;
	// reclaimed: in progress under a later attempt; other: not in
	// progress (refused for that alone, so proving nothing of the fence).
	expired, reclaimed, other int
	refused, accepted         int
	// busy counts probe rounds, and searches for the survivor holding a
	// reclaimed lease, given up because SQLite refused the harness a lock
	// another process held: the write lock past the busy timeout, or the
	// WAL-index lock a stopped worker holds.
	busy int
	seen []string // the first few, for the report
}

// giveUp takes back a round whose probes did not all reach the fence or
// could not be checked: its lease, counted under kind, and its refusals.
// Accepted stale writes stay counted.
func (pr *zombieProbes) giveUp(kind string, refusedBefore int) {
	pr.busy++
	pr.refused = refusedBefore
	switch kind {
	case "expired":
		pr.expired--
	case "later_attempt":
		pr.reclaimed--
	default:
		pr.other--
	}
}

// sqliteContended reports whether err is SQLite (never PostgreSQL, never
// nil) giving up on a lock another process holds: SQLITE_BUSY (the write lock, past the busy timeout) or
// SQLITE_PROTOCOL (the WAL-index lock new readers need, held through
// SQLite's ten seconds of retries, as by a worker the harness stopped
// while it held it). On a loaded machine a stop can land there.
func sqliteContended(err error) bool {
	var e *msqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_PROTOCOL:
		return true
	}
	return false
}

// keysOf reads the idempotency keys of the leases' events.
func (s *run) keysOf(ctx context.Context, leases []ferry.Lease) (map[string]bool, error) {
	keys := map[string]bool{}
	for _, l := range leases {
		ev, err := s.store.EventGet(ctx, &ferry.EventGetParams{ID: l.ID})
		if err != nil {
			return nil, err
		}
		keys[ferry.IdempotencyKey(ev.Source, ev.EventID)] = true
	}
	return keys, nil
}

// anyOpen reports whether an event of leases is still pending or in
// progress.
func (s *run) anyOpen(ctx context.Context, leases []ferry.Lease) (bool, error) {
	for _, l := range leases {
		ev, err := s.store.EventGet(ctx, &ferry.EventGetParams{ID: l.ID})
		if err != nil {
			return false, err
		}
		if ev.State == ferry.StatePending || ev.State == ferry.StateInProgress {
			return true, nil
		}
	}
	return false, nil
}

// probe replays a heartbeat, a failure and a completion with each stale
// lease, recording the event's state and attempt before each lease's
// probes, and reading it again after them. The workers must be paused
// (their statements already sent may still commit).
func (s *run) probe(ctx context.Context, leases []ferry.Lease, pr *zombieProbes) error {
	for _, l := range leases {
		ev, err := s.store.EventGet(ctx, &ferry.EventGetParams{ID: l.ID})
		if sqliteContended(err) {
			pr.busy++ // a stopped worker holds a lock of the file
			return nil
		} else if err != nil {
			return fmt.Errorf("zombie probe: %w", err)
		}
		kind := "not_in_progress"
		switch {
		case ev.State != ferry.StateInProgress:
			pr.other++
		case ev.Attempt > l.Attempt:
			kind = "later_attempt"
			pr.reclaimed++
		case ev.Attempt == l.Attempt && !ev.LeaseExpiresAt.After(time.Now()):
			kind = "expired"
			pr.expired++
		default:
			// The zombie's own lease still holds: not stale yet.
			continue
		}
		probes := []func() error{
			func() error {
				_, err := s.store.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: l, TTL: s.opts.TTL})
				return err
			},
			func() error {
				_, err := s.store.EventFail(ctx, &ferry.EventFailParams{Lease: l, Error: "zombie"})
				return err
			},
			func() error { return s.store.EventComplete(ctx, &ferry.EventCompleteParams{Lease: l}) },
		}
		acceptedBefore, refusedBefore := pr.accepted, pr.refused
		for _, probe := range probes {
			switch err := probe(); {
			case errors.Is(err, ferry.ErrLeaseLost):
				pr.refused++
			case err == nil:
				pr.accepted++
				s.r.note("a stale write with lease %d/%d was accepted while the event was %s under attempt %d (%s)", l.ID, l.Attempt, ev.State, ev.Attempt, kind)
			case sqliteContended(err) && strings.Contains(err.Error(), ": begin: ") && pr.accepted == acceptedBefore:
				// Another process held a lock the write's BEGIN needs past
				// SQLite's waits (a loaded machine): the probe never reached
				// the fence, so this lease's moment is not tested. A stale
				// write this lease's probes got accepted still fails.
				pr.giveUp(kind, refusedBefore)
				return nil
			case sqliteContended(err) && strings.Contains(err.Error(), ": commit: "):
				// The store commits only what its fence let through (a
				// refusal rolls back): the fence failed, whatever the commit
				// did.
				pr.accepted++
				s.r.note("a stale write with lease %d/%d passed the fence while the event was %s under attempt %d (%s); its commit then failed: %v", l.ID, l.Attempt, ev.State, ev.Attempt, kind, err)
			default:
				return fmt.Errorf("zombie probe: %w", err)
			}
		}
		// A change under the probed attempt while its lease had expired is
		// a stale write that took effect, whatever it answered. Nothing else
		// is counted: a paused worker's statement already in the database
		// still commits (on PostgreSQL the survivor's claim took an expired
		// event to a later attempt mid-probe), and under a later attempt
		// the survivor's own heartbeat or completion may land; there the
		// probes' answers are what count.
		if kind == "expired" {
			after, err := s.store.EventGet(ctx, &ferry.EventGetParams{ID: l.ID})
			switch {
			case sqliteContended(err) && pr.accepted == acceptedBefore:
				// Unread, the event's change cannot be checked: not tested.
				pr.giveUp(kind, refusedBefore)
				return nil
			case sqliteContended(err):
				// An accepted stale write already fails the run.
			case err != nil:
				return fmt.Errorf("zombie probe: %w", err)
			default:
				changed := after.Attempt == ev.Attempt && (after.State != ev.State || !after.LeaseExpiresAt.Equal(ev.LeaseExpiresAt))
				if changed && pr.accepted == acceptedBefore {
					pr.accepted++
					s.r.note("stale writes with lease %d/%d were refused but changed the event (%s)", l.ID, l.Attempt, kind)
				}
				if changed {
					s.r.note("lease %d/%d: the event was %s/%d with its lease until %s, and is now %s/%d until %s", l.ID, l.Attempt,
						ev.State, ev.Attempt, ev.LeaseExpiresAt.Format(time.StampMilli), after.State, after.Attempt, after.LeaseExpiresAt.Format(time.StampMilli))
				}
			}
		}
		if len(pr.seen) < 12 {
			pr.seen = append(pr.seen, fmt.Sprintf("%d/%d→%s/%d(%s)", l.ID, l.Attempt, ev.State, ev.Attempt, kind))
		}
	}
	return nil
}

// pause SIGSTOPs p unless that leaves it holding the SQLite write lock:
// SQLite has one write lock per file, and a process stopped inside a write
// transaction stalls every other writer for as long as it sleeps (an
// availability limit of multi-process SQLite, not a lease question); so
// does one stopped holding the WAL-index lock the check's own read needs,
// which SQLite reports only after ten seconds of retries. It
// then resumes p and reports false. The lock is waited for up to wait,
// which another running writer needs to finish its transaction; with every
// other child paused, only p can hold it and waiting is pointless.
func (s *run) pause(ctx context.Context, p *proc, wait time.Duration) (bool, error) {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return false, err
	}
	locked, err := s.writeLocked(ctx, wait)
	if err == nil && !locked {
		return true, nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	if locked {
		s.lockedPauses++
		sleep(ctx, 10*time.Millisecond)
	}
	return false, err
}

// pauseWithin tries to pause p, the only child running, until limit has
// passed.
func (s *run) pauseWithin(ctx context.Context, p *proc, limit time.Duration) (bool, error) {
	for t0 := time.Now(); time.Since(t0) < limit && ctx.Err() == nil; {
		if paused, err := s.pause(ctx, p, 0); paused || err != nil {
			return paused, err
		}
	}
	return false, nil
}

// writeLocked reports whether another process holds the SQLite write lock
// after waiting up to wait for it, or the WAL-index lock that beginning a
// write needs (SQLite waits about ten seconds for that one, whatever wait
// says). Always false on PostgreSQL.
func (s *run) writeLocked(ctx context.Context, wait time.Duration) (bool, error) {
	if s.lite == nil {
		return false, nil
	}
	db, err := sql.Open("sqlite", fmt.Sprintf("file:%s?_pragma=busy_timeout%%28%d%%29", s.dbPath, wait.Milliseconds()))
	if err != nil {
		return false, err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		if sqliteContended(err) {
			return true, nil
		}
		return false, err
	}
	_, err = conn.ExecContext(ctx, "ROLLBACK")
	return false, err
}

// leasesOf lists the leases the child with pid holds now.
func (s *run) leasesOf(ctx context.Context, pid int) ([]ferry.Lease, error) {
	var out []ferry.Lease
	var before int64
	for range 100 {
		res, err := s.store.EventList(ctx, &ferry.EventListParams{States: []ferry.State{ferry.StateInProgress}, Before: before, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, ev := range res.Events {
			if pidOf(ev.LeaseOwner) == pid {
				out = append(out, ev.Lease())
			}
		}
		if res.NextBefore == 0 {
			break
		}
		before = res.NextBefore
	}
	return out, nil
}

// dbfaults: between Ferry and PostgreSQL sits a TCP proxy that resets every
// connection, slows every packet, or black-holes them; and the children's
// backends are terminated with pg_terminate_backend. During ingest and work.
func (s *run) dbfaults(ctx context.Context) error {
	px, err := newProxy(s.pgTarget)
	if err != nil {
		return err
	}
	defer px.close()
	if err := s.begin(ctx, 2, px.addr()); err != nil {
		return err
	}
	done := s.sendAsync(ctx, plan(s.evs, 0.10, s.rng))
	counts := map[string]int{}
	// The kinds take turns in a shuffled order that never starts with a
	// slowdown, so even a short run breaks connections at least once.
	kinds := s.rng.Perm(4)
	if kinds[0] == 1 {
		kinds[0], kinds[1] = kinds[1], kinds[0]
	}
	for i := 0; i < 10000 && !isDone(done) && ctx.Err() == nil; i++ {
		if i == 0 {
			s.waitFirstFault(ctx, done)
		} else {
			sleep(ctx, s.between(200*time.Millisecond, 800*time.Millisecond))
		}
		switch kinds[i%len(kinds)] {
		case 0:
			counts["reset_connections"] += px.reset()
		case 1:
			px.setMode(proxySlow, s.between(20*time.Millisecond, 150*time.Millisecond))
			sleep(ctx, s.between(500*time.Millisecond, 1500*time.Millisecond))
			px.setMode(proxyPass, 0)
			counts["slow"]++
		case 2:
			px.setMode(proxyBlackhole, 0)
			sleep(ctx, s.between(300*time.Millisecond, 1200*time.Millisecond))
			counts["blackhole_reset_connections"] += px.reset()
			px.setMode(proxyPass, 0)
			counts["blackhole"]++
		case 3:
			n, err := s.terminateBackends(ctx)
			if err != nil {
				return err
			}
			counts["terminated_backends"] += n
		}
	}
	px.setMode(proxyPass, 0)
	<-done
	s.r.detail("faults slow=%d blackhole=%d reset_connections=%d blackhole_reset_connections=%d terminated_backends=%d",
		counts["slow"], counts["blackhole"], counts["reset_connections"], counts["blackhole_reset_connections"], counts["terminated_backends"])
	if counts["reset_connections"]+counts["terminated_backends"]+counts["blackhole"] == 0 {
		s.r.fail("no database fault was injected; send more events")
	}
	return s.finish(ctx)
}

// terminateBackends ends the children's backends, and only theirs: the
// harness's own connections have another application_name.
func (s *run) terminateBackends(ctx context.Context) (int, error) {
	var n int
	err := s.pg.Pool().QueryRow(ctx,
		`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`,
		s.appName()).Scan(&n)
	return n, err
}

// pgcrash: PostgreSQL is stopped with -m immediate twice during the run and
// started again 3 s later. Only with --allow-pg-restart.
func (s *run) pgcrash(ctx context.Context) error {
	if err := s.begin(ctx, 2, ""); err != nil {
		return err
	}
	ds := plan(s.evs, 0.10, s.rng)
	done := s.sendAsync(ctx, ds)
	crashes := 0
	for _, at := range []float64{0.25, 0.6} {
		for float64(s.snd.sent.Load()) < at*float64(len(ds)) && !isDone(done) && ctx.Err() == nil {
			sleep(ctx, 20*time.Millisecond)
		}
		if err := pgCluster(ctx, "stop", "-m", "immediate"); err != nil {
			return err
		}
		crashes++
		sleep(ctx, 3*time.Second)
		if err := pgCluster(ctx, "start"); err != nil {
			return err
		}
		for i := 0; i < 60 && exec.CommandContext(ctx, "pg_isready", "-q", "-h", "127.0.0.1").Run() != nil; i++ {
			sleep(ctx, 500*time.Millisecond)
		}
	}
	<-done
	s.r.detail("postgres_immediate_stops=%d", crashes)
	return s.finish(ctx)
}

func pgCluster(ctx context.Context, args ...string) error {
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) == 0 {
		return fmt.Errorf("pgcrash: no cluster under /etc/postgresql: %v", err)
	}
	cmd := exec.CommandContext(ctx, "pg_ctlcluster", append([]string{"--skip-systemctl-redirect", versions[0].Name(), "main"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctlcluster %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// storefull: the store cannot write for a while (SQLite: capped at its
// current page count with max_page_count, as a full disk; PostgreSQL:
// every write to Ferry's tables raises read_only_sql_transaction, as a
// failed-over read-only primary). The receiver must answer 503 with
// Retry-After; after recovery the sender's retries succeed.
func (s *run) storefull(ctx context.Context) error {
	if err := s.begin(ctx, 1, ""); err != nil {
		return err
	}
	ds := plan(s.evs, 0.10, s.rng)
	a, b := len(ds)*3/10, len(ds)*7/10
	<-s.sendAsync(ctx, ds[:a])
	full, err := s.makeUnwritable(ctx)
	if err != nil {
		return err
	}
	done := s.sendAsync(ctx, ds[a:b])
	t0 := time.Now()
	for s.snd.storeRefused.Load() < 20 && time.Since(t0) < 15*time.Second && !isDone(done) {
		sleep(ctx, 50*time.Millisecond)
	}
	sleep(ctx, time.Second)
	refusedWhileFull := s.snd.storeRefused.Load()
	if err := s.makeWritable(ctx, full); err != nil {
		return err
	}
	<-done
	<-s.sendAsync(ctx, ds[b:])
	s.r.detail("unwritable_for=%v how=%q 503_store_unavailable_while_unwritable=%d", time.Since(t0).Round(100*time.Millisecond), full, refusedWhileFull)
	if refusedWhileFull == 0 {
		s.r.fail("the store never refused a write: nothing was tested")
	}
	if s.snd.retryAfter.Load() < s.snd.unavailable.Load() {
		s.r.fail("%d 503 answers came without a Retry-After", s.snd.unavailable.Load()-s.snd.retryAfter.Load())
	}
	return s.finish(ctx)
}

func (s *run) makeUnwritable(ctx context.Context) (string, error) {
	if s.pg != nil {
		stmts := []string{`CREATE FUNCTION chaos_read_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'chaos: the store is read-only' USING ERRCODE = 'read_only_sql_transaction'; END $$`}
		for _, t := range []string{"ferry_event", "ferry_attempt", "ferry_conflict"} {
			stmts = append(stmts, fmt.Sprintf(`CREATE TRIGGER chaos_read_only BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH STATEMENT EXECUTE FUNCTION chaos_read_only()`, t))
		}
		return "postgres read-only (trigger raising SQLSTATE 25006 on ferry_*)", s.execSQL(ctx, stmts...)
	}
	var pages int
	if err := s.sqlDB().QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		return "", err
	}
	cfg, err := s.writeConfig("full", "sqlite:file:"+s.dbPath+"?_pragma=max_page_count%28"+fmt.Sprint(pages)+"%29")
	if err != nil {
		return "", err
	}
	s.proc(0).stop(10 * time.Second)
	if _, err := s.start(ctx, 0, cfg); err != nil {
		return "", err
	}
	return fmt.Sprintf("sqlite max_page_count=%d (the current size)", pages), nil
}

func (s *run) makeWritable(ctx context.Context, how string) error {
	if s.pg != nil {
		return s.execSQL(ctx, `DROP FUNCTION chaos_read_only() CASCADE`)
	}
	s.proc(0).stop(10 * time.Second)
	_, err := s.start(ctx, 0, s.cfg)
	return err
}

// crashloop: the single-binary deployment (receiver and worker in one
// process) is SIGKILLed about every second during ingest and restarted at
// once; every acknowledged id must be there after the last restart.
func (s *run) crashloop(ctx context.Context) error {
	s.supervised.Store(true)
	s.restartIn = 50 * time.Millisecond
	if err := s.begin(ctx, 1, ""); err != nil {
		return err
	}
	done := s.sendAsync(ctx, plan(s.evs, 0.10, s.rng))
	kills := s.killUntil(ctx, done, 800*time.Millisecond, 1200*time.Millisecond, func() int { return 0 })
	<-done
	s.r.detail("sigkills=%d restarts=%d (max_reclaim_ms is not measured here: no worker survives a kill to take a lease back; the restarted process does, after its own start)", kills, s.restarts.Load())
	if kills == 0 {
		s.r.fail("the process was never killed; send more events")
	}
	return s.finish(ctx)
}

// dlq: 1 % of the events fail deterministically (the app answers 500, or
// the tx handler errors) until fixed. Exactly those must end dead; after
// the fix and `ferry events replay --state dead`, they complete with one
// effect each.
func (s *run) dlq(ctx context.Context) error {
	s.maxAttempts = 3
	evs := makeEvents(s.opts.Events, s.rng, s.id)
	poison := map[string]*event{}
	for i, ev := range evs {
		if i%100 == 37 || len(evs) < 100 && i == 0 {
			ev.poison = true
			poison[ev.key] = ev
		}
	}
	var fixed atomic.Bool
	if s.opts.Handler == "tx" {
		for _, ev := range poison {
			if err := s.execSQL(ctx, fmt.Sprintf(`INSERT INTO chaos_poison (source, event_id) VALUES ('%s', '%s')`, ev.src.name, ev.id)); err != nil {
				return err
			}
		}
	} else {
		s.sink.setFail(func(key string) int {
			if _, bad := poison[key]; bad && !fixed.Load() {
				return 500
			}
			return 0
		})
	}
	if err := s.begin(ctx, 2, ""); err != nil {
		return err
	}
	s.evs = evs
	<-s.sendAsync(ctx, plan(evs, 0.10, s.rng))
	if err := s.drain(ctx, time.Minute+time.Duration(len(evs))*10*time.Millisecond); err != nil {
		return err
	}
	dead := map[string]bool{}
	res, err := s.store.EventList(ctx, &ferry.EventListParams{States: []ferry.State{ferry.StateDead}, Limit: 1000})
	if err != nil {
		return err
	}
	for _, ev := range res.Events {
		key := ferry.IdempotencyKey(ev.Source, ev.EventID)
		dead[key] = true
		if _, ok := poison[key]; !ok {
			s.r.fail("%s/%s went dead but was never poisoned", ev.Source, ev.EventID)
		}
	}
	for key, ev := range poison {
		if !dead[key] {
			s.r.fail("poisoned %s/%s did not end dead", ev.src.name, ev.id)
		}
	}
	fixed.Store(true)
	if s.opts.Handler == "tx" {
		if err := s.execSQL(ctx, `DELETE FROM chaos_poison`); err != nil {
			return err
		}
	}
	replayed := 0
	for _, src := range sources {
		out, err := exec.CommandContext(ctx, s.opts.Bin, "events", "replay", "--config", s.cfg, "--state", "dead", "--source", src.name).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ferry events replay: %v: %s", err, out)
		}
		n, err := replayedCount(out)
		if err != nil {
			return err
		}
		replayed += n
	}
	s.r.detail("poisoned=%d dead_before_replay=%d replayed=%d (ferry events replay --state dead)", len(poison), len(dead), replayed)
	if replayed != len(poison) {
		s.r.fail("ferry events replay --state dead replayed %d events, but %d were poisoned (and dead)", replayed, len(poison))
	}
	if err := s.finish(ctx); err != nil {
		return err
	}
	// One effect per poisoned event, whatever its failed attempts did.
	if s.opts.Handler != "tx" {
		ok := map[string]int{}
		for _, f := range s.sink.snapshot() {
			if f.status/100 == 2 {
				ok[f.key]++
			}
		}
		for key, ev := range poison {
			if ok[key] != 1 {
				s.r.fail("poisoned %s has %d effects after the replay, want 1", ev.id, ok[key])
			}
		}
	}
	return nil
}

// replayedCount reads the count of `ferry events replay --state dead`'s
// answer ("replayed N dead events of SOURCE").
func replayedCount(out []byte) (int, error) {
	var n int
	if _, err := fmt.Sscanf(string(out), "replayed %d dead event", &n); err != nil {
		return 0, fmt.Errorf("ferry events replay answered %q, not how many it replayed: %w", out, err)
	}
	return n, nil
}
