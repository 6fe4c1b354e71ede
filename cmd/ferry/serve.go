package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/config"
)

func runServe(ctx context.Context, args []string) error {
	fs := newFlags("serve", "[flags]",
		`Receives webhooks at /webhooks/{source}, stores each before answering 2xx, and
works them: forwards each event to its source's app until it succeeds or dies.
Also serves /healthz and /readyz; /metrics and the dashboard at /ui are on
admin.listen (the public listener answers 404 for them). SIGINT, SIGTERM or
SIGHUP stops it gracefully (exit 0); SIGHUP not when started with it ignored
(nohup). A second signal cuts worker.shutdown_grace and http.shutdown_delay
short: running handlers are cancelled at once and their events released (a
lost_lease = "hold" source's are left to lapse and held as unknown).`)
	configPath := fs.String("config", "ferry.toml", "the config `file`")
	role := fs.String("role", "all", roleUsage)
	listen := fs.String("listen", "", "override http.listen, the public listener (`host:port`; port 0 picks a free one)")
	noMigrate := fs.Bool("no-migrate", false, "do not migrate the store at start; a schema that lacks a migration stops the start (run ferry migrate first)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json (one object a line) or text (key=value)")
	if err := fs.parseFlagsOnly(args); err != nil {
		return err
	}
	runsReceiver, runsWorker, err := parseRole(*role)
	if err != nil {
		return err
	}
	log, err := newLogger(os.Stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}

	var overrides []func(*config.Config)
	if *listen != "" {
		overrides = append(overrides, config.ListenFlag("--listen", *listen))
	}
	cfg, err := loadConfig(*configPath, overrides...)
	if err != nil {
		return err
	}
	if runsWorker {
		if err := missingForward(cfg); err != nil {
			return err
		}
	}

	memLimit := setMemoryLimit(cfg, runsReceiver, runsWorker, os.Getenv)

	// Deferred first, so it runs last: the spans of the final attempts and
	// of the drain are flushed after the client and the servers stop.
	tracerProvider, stopTracing, err := newTracing(ctx, cfg.Telemetry, os.Getenv, log)
	if err != nil {
		return err
	}
	stopTracing = sync.OnceFunc(stopTracing) // also called beside the store's close
	defer stopTracing()

	work := &ferry.Workload{}
	if runsReceiver {
		work.ReceiveBatches = ferryhttp.DefaultReceiveConcurrency
	}
	if runsWorker {
		work.Workers = cmp.Or(cfg.Worker.Workers, ferry.DefaultWorkers)
		work.TxHandlers = chaosTxHandlers != nil && chaosTxHandlers()
	}
	// Without migrating, serve needs the store that is there: a missing
	// SQLite file is a mistyped store.url, not a store to make.
	use := creatingStore
	if !*cfg.Store.Migrate || *noMigrate {
		use = existingStore
	}
	st, closeStore, err := openStore(ctx, cfg, work, use)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while connecting
		}
		return err
	}
	// Last, the store closes while the traces flush, within the flush's
	// time: a PostgreSQL server that stopped answering would otherwise hold
	// the exit for as long as the driver waits on it, past the stop budget
	// deploy.md gives.
	defer func() {
		deadline := time.Now().Add(tracingFlushTimeout)
		closed := make(chan struct{})
		go func() { defer close(closed); closeStore() }()
		stopTracing()
		select {
		case <-closed: // first: the flush may have used up the time
			return
		default:
		}
		select {
		case <-closed:
		case <-time.After(time.Until(deadline)):
			log.Warn("ferry: the store did not close in time; exiting without it")
		}
	}()

	// The public listener serves what a provider needs and nothing else;
	// the dashboard and /metrics are on the admin listener. It answers from
	// here on: /healthz says the process is up while migrations and the
	// first archive pass run (an orchestrator must not restart it for
	// them), /readyz and deliveries say it is starting.
	mux := http.NewServeMux()
	health := &ferryhttp.Health{Store: st}
	health.Starting()
	health.Register(mux)
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w%s", cfg.HTTP.Listen, err, portTaken(err, "http.listen (or --listen)"))
	}
	// The admin listener binds now too, before anything claims or
	// forwards: a port in use must stop the start before the workers
	// have taken (and then released) every due event.
	var aln net.Listener
	if cfg.AdminServed() {
		if aln, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
			_ = ln.Close()
			return fmt.Errorf("admin.listen %s: %w%s", cfg.Admin.Listen, err, portTaken(err, "admin.listen"))
		}
	}
	// Once the receiver is made, its Handler fronts the mux: the mux would
	// redirect a path under /webhooks with a doubled slash, and providers
	// follow no redirect. Gate answers deliveries 503 starting until then.
	var routes atomic.Pointer[http.Handler]
	routes.Store(new(http.Handler(mux)))
	public := newPublicServer(health.Gate(swapped(&routes), cfg.HTTP.RetryAfter.Duration), log, cfg.HTTP)
	servers := []*http.Server{public}
	served := make(chan error, 2)
	go func() { served <- public.Serve(ln) }()
	defer public.Close() // an early return; after Shutdown a no-op
	// The admin listener's pages and /metrics answer 503 starting too (a
	// scrape or the dashboard gets an answer, not a hang; Gate passes
	// /healthz and /readyz, which only the public listener serves), until
	// the admin handler serves it at the same moment as the public one.
	var adminRoutes atomic.Pointer[http.Handler]
	adminRoutes.Store(new(http.NotFoundHandler()))
	adminAddr := ""
	if aln != nil {
		adminSrv := newServer(health.Gate(swapped(&adminRoutes), cfg.HTTP.RetryAfter.Duration), log, adminIdleTimeout)
		servers = append(servers, adminSrv)
		adminAddr = aln.Addr().String()
		go func() { served <- adminSrv.Serve(aln) }()
		defer adminSrv.Close() // an early return; after Shutdown a no-op
	}
	log.Info("ferry: starting", "listen", ln.Addr().String(), "admin", adminAddr)

	// A role that may not do what Ferry's statements do would pass the
	// start and answer every delivery 503 (or fail reading the migration
	// ledger, exit 1): like a store.url the store refuses, it stops the
	// start, with the GRANTs. Ping's other errors are /readyz's to report.
	if err := st.Ping(ctx); errors.Is(err, ferry.ErrMisconfigured) {
		return storeRefused(err)
	}
	if *cfg.Store.Migrate && !*noMigrate {
		err = migrateAtStart(ctx, st)
	} else {
		err = schemaCurrent(ctx, st, !*cfg.Store.Migrate, *noMigrate)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return err
	}

	op, err := newOperator(cfg, st, log)
	if err != nil {
		return err
	}
	// Tasks that hold leases (alerts, catch-up, archive maintenance) give
	// them up when ctx ends; the store must outlive that.
	var bg sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(ctx)
	defer waitBackground(&bg, log)
	defer stopBackground()
	op.start(bgCtx, &bg)

	var receiver *ferryhttp.Receiver
	if runsReceiver {
		if receiver, err = newReceiver(cfg, st, log, op.metrics, tracerProvider); err != nil {
			return err
		}
		receiver.Register(mux)
		routes.Store(new(receiver.Handler(mux)))
		op.watchReceiver(receiver)
	}

	var client *ferry.Client
	if runsWorker {
		if client, err = newClient(cfg, st, log, op.metrics, tracerProvider); err != nil {
			return err
		}
		(&purger{store: st, sources: cfg.Sources, log: log, owner: client.ID()}).start(bgCtx, &bg, purgeInterval)
		if ctx.Err() != nil {
			return nil // stopped during the first archive pass
		}
		if err := client.Start(ctx); err != nil {
			return err
		}
	}
	// The workers' stop: the client's grace, then DefaultShutdownGrace
	// more to release what is left. A second signal ends the grace.
	stopBudget := cfg.Worker.ShutdownGrace.Duration + ferry.DefaultShutdownGrace
	stopClient := func() error {
		if client == nil {
			return nil
		}
		stopCtx, cancel := context.WithTimeout(context.Background(), stopBudget)
		defer cancel()
		stopped := make(chan struct{})
		defer close(stopped)
		go func() {
			select {
			case <-secondSignal:
				log.Info("ferry: a second signal; cancelling the running handlers now")
				_ = client.StopAndCancel(stopCtx) // the Stop below reports
			case <-stopped:
			}
		}()
		return client.Stop(stopCtx)
	}
	if err := startCatchup(bgCtx, &bg, cfg, st, log, op.catchup, instanceName()); err != nil {
		_ = stopClient()
		return err
	}
	if op.admin != nil {
		adminRoutes.Store(&op.admin)
	}
	health.Started()
	kind, _, _ := cfg.StoreKind()
	log.Info("ferry: serving", "listen", ln.Addr().String(), "admin", adminAddr, "role", *role, "store", kind, "sources", len(cfg.Sources), "memory_limit", memLimit)

	// A listener that fails stops the process as a signal would: the
	// workers still release what they hold.
	var failed error
	select {
	case <-ctx.Done():
	case err := <-served:
		failed = fmt.Errorf("http server: %w", err)
		log.Error("ferry: a listener failed; stopping", "err", err)
	}
	stopBackground() // as a signal would

	// Shut down: fail readiness, let handlers finish within the grace
	// period and release the rest while the receiver still stores
	// deliveries, for http.shutdown_delay at least (a load balancer stops
	// sending here meanwhile), then answer 503 (providers retry) and close
	// the listeners. A second signal ends the grace and the delay.
	delay := cfg.HTTP.ShutdownDelay.Duration
	if failed != nil || receiver == nil {
		delay = 0 // nothing to store, or nothing reaches a failed listener
	}
	log.Info("ferry: shutting down", "shutdown_delay", delay.String())
	health.Stopping()
	delayed := time.NewTimer(delay)
	defer delayed.Stop()
	if err := stopClient(); err != nil {
		log.Warn("ferry: workers did not stop in time; what they hold is taken again when its lease lapses", "waited", stopBudget.String())
	}
	select {
	case <-delayed.C:
	case <-secondSignal:
		log.Info("ferry: a second signal; closing the listeners now")
	case err := <-served:
		if failed == nil {
			failed = fmt.Errorf("http server: %w", err)
			log.Error("ferry: a listener failed while stopping", "err", err)
		}
	}
	if receiver != nil {
		receiver.Drain()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		if err := s.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) && failed == nil {
			failed = fmt.Errorf("http shutdown: %w", err)
		}
	}
	log.Info("ferry: stopped")
	return failed
}

// swapped serves the handler h holds at each request.
func swapped(h *atomic.Pointer[http.Handler]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.Load()).ServeHTTP(w, r) })
}

// migrateAtStart is serve's migration, ferry.MigrateRolling: a migration
// that needs older instances stopped stops the start (exit 2), unless the
// store is new.
func migrateAtStart(ctx context.Context, st ferry.Store) error {
	err := ferry.MigrateRolling(ctx, st)
	switch {
	case errors.Is(err, ferry.ErrMigrationExclusive):
		return fmt.Errorf("%w: %w: stop them, then run `ferry migrate`; serve does not apply it on its own", errUpgrade, err)
	case err != nil:
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// schemaCurrent is serve's check when it does not migrate: a schema that
// lacks a migration would pass /readyz yet fail every delivery and claim,
// so it stops the start (exit 2, as a store.url the store refuses does)
// with the fix. fileOff and flagOff say what turned migrating off:
// store.migrate = false, --no-migrate.
func schemaCurrent(ctx context.Context, st ferry.Store, fileOff, flagOff bool) error {
	steps, err := st.MigratePlan(ctx)
	if err != nil {
		return fmt.Errorf("migrate plan: %w", err)
	}
	if len(steps) == 0 {
		return nil
	}
	var off, fix []string
	if fileOff {
		off, fix = append(off, "store.migrate = false"), append(fix, "set store.migrate = true")
	}
	if flagOff {
		off, fix = append(off, "--no-migrate"), append(fix, "drop --no-migrate")
	}
	return fmt.Errorf("%w: %s and serve does not migrate (%s): run `ferry migrate`, or %s",
		errConfig, lacking(steps), strings.Join(off, ", "), strings.Join(fix, " and "))
}

// backgroundStopBudget bounds the wait for the background tasks at stop.
const backgroundStopBudget = 10 * time.Second

// waitBackground waits for bg's tasks to give up their leases, within
// backgroundStopBudget: a store that does not answer leaves them to lapse.
func waitBackground(bg *sync.WaitGroup, log *slog.Logger) {
	done := make(chan struct{})
	go func() { bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(backgroundStopBudget):
		log.Warn("ferry: background tasks did not stop in time; their leases will lapse", "waited", backgroundStopBudget.String())
	}
}

// maxHeaderBytes bounds a request's header block on both listeners (431
// past it). A provider's delivery sends a few KiB; net/http's default is
// 1 MiB, which anyone reaching the receiver could hold per connection for
// ReadHeaderTimeout before a signature is checked.
const maxHeaderBytes = 64 << 10

// publicIdleTimeout is how long the public listener keeps a keep-alive
// connection with no request in flight: 30 seconds. Anyone can open one and
// hold it for free (8,000 idle connections hold 183 MB of RSS), so the wait
// is short; a
// provider that delivers in bursts still reuses its connection within one.
// It bounds how long a connection idles, not how many there are: the proxy
// in front must limit connections per client (docs/security.md).
const publicIdleTimeout = 30 * time.Second

// adminIdleTimeout is the admin listener's: 2 minutes. Only operators and
// Prometheus reach it (loopback by default, credentials otherwise), so it
// keeps their connections longer.
const adminIdleTimeout = 2 * time.Minute

// newServer returns the server of one listener: its handler h, errors
// logged to log, and a keep-alive connection closed once idle for idle.
func newServer(h http.Handler, log *slog.Logger, idle time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		MaxHeaderBytes:    maxHeaderBytes,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       idle,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// answerMargin is what newPublicServer's timeouts allow past http.body_timeout
// and http.store_timeout: verifying, logging and writing the answer.
const answerMargin = 5 * time.Second

// newPublicServer returns the public listener's server. Its ReadTimeout and
// WriteTimeout are newServer's 30s, longer when http.body_timeout and
// http.store_timeout need it: a receipt may take both, and a connection
// cut before its answer is written loses a 200 for a stored event (the
// provider sends it again) or a 503's Retry-After.
func newPublicServer(h http.Handler, log *slog.Logger, cfg config.HTTP) *http.Server {
	s := newServer(h, log, publicIdleTimeout)
	// ReadTimeout runs from the request's first byte, WriteTimeout from the
	// end of its headers.
	s.ReadTimeout = max(s.ReadTimeout, s.ReadHeaderTimeout+cfg.BodyTimeout.Duration+answerMargin)
	s.WriteTimeout = max(s.WriteTimeout, cfg.BodyTimeout.Duration+cfg.StoreTimeout.Duration+answerMargin)
	return s
}

func newReceiver(cfg *config.Config, st ferry.Store, log *slog.Logger, obs ferryhttp.ReceiveObserver, tracer trace.TracerProvider) (*ferryhttp.Receiver, error) {
	var sources []ferryhttp.Source
	for _, s := range cfg.Sources {
		v, err := cfg.Verifier(s)
		if err != nil {
			return nil, fmt.Errorf("%w: source %s: %v", errConfig, s.Name, err)
		}
		sources = append(sources, ferryhttp.Source{Name: s.Name, Verifier: v, MaxBodyBytes: s.MaxBody, ReplayWindow: s.ReceiveReplayWindow()})
	}
	return ferryhttp.NewReceiver(ferryhttp.ReceiverOptions{
		Store: st, Sources: sources, Logger: log, Observer: obs,
		StoreTimeout: cfg.HTTP.StoreTimeout.Duration, RetryAfter: cfg.HTTP.RetryAfter.Duration,
		MaxInFlightBytes: cfg.HTTP.MaxInFlight, BodyTimeout: cfg.HTTP.BodyTimeout.Duration,
		TracerProvider: tracer,
	})
}

// chaosHook is the crash points, broken mode and handler swaps `ferry chaos`
// switches on in its children. Only a binary built with -tags ferrychaos
// has one (chaos_hook.go sets newChaosHook); in any other build
// newChaosHook is nil and serve runs the ordinary forwarder, whatever the
// environment or config says.
type chaosHook interface {
	observer(next ferry.Observer) ferry.Observer
	register(c *ferry.Client, source string, fwd ferry.HandlerFunc) error
}

var newChaosHook func(st ferry.Store, log *slog.Logger) (chaosHook, error)

// chaosTxHandlers reports, before the store opens, whether the chaos hook
// will register transactional handlers, so the pool is sized for them; nil
// in any other build.
var chaosTxHandlers func() bool

func newClient(cfg *config.Config, st ferry.Store, log *slog.Logger, obs ferry.Observer, tracer trace.TracerProvider) (*ferry.Client, error) {
	w := cfg.Worker
	var hook chaosHook
	if newChaosHook != nil {
		var err error
		if hook, err = newChaosHook(st, log); err != nil { // nil unless `ferry chaos` started this process
			return nil, err
		}
	}
	if hook != nil {
		obs = hook.observer(obs)
	}
	client, err := ferry.NewClient(&ferry.Config{
		Store: st, Sources: cfg.Policies(), Logger: log, Observer: obs,
		Workers: w.Workers, LeaseTTL: w.LeaseTTL.Duration, HeartbeatInterval: w.Heartbeat.Duration,
		PollInterval: w.PollInterval.Duration, ShutdownGrace: w.ShutdownGrace.Duration,
		RetryBase: w.RetryBase.Duration, RetryCap: w.RetryCap.Duration,
		TracerProvider: tracer,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: worker: %v", errConfig, err)
	}
	for _, s := range cfg.Sources {
		fwd, err := ferryhttp.NewForwarder(ferryhttp.ForwarderOptions{
			URL: s.Forward.URL, Secrets: s.Forward.SigningSecrets(), Timeout: s.Forward.Timeout.Duration,
			Connections: cmp.Or(w.Workers, ferry.DefaultWorkers), TracerProvider: tracer,
		})
		if err != nil {
			return nil, fmt.Errorf("%w: source %s: %v", errConfig, s.Name, err)
		}
		if hook != nil {
			if err := hook.register(client, s.Name, fwd.Handle); err != nil {
				return nil, err
			}
			continue
		}
		client.Handle(s.Name, fwd.Handle)
	}
	return client, nil
}

// roleUsage is the --role flag's usage, for serve and doctor alike.
const roleUsage = "what this process runs: receiver, worker or all"

// parseRole reads --role: receiver, worker or all.
func parseRole(role string) (runsReceiver, runsWorker bool, err error) {
	if role != "all" && role != "receiver" && role != "worker" {
		return false, false, usagef("--role %q: use receiver, worker or all", role)
	}
	return role != "worker", role != "receiver", nil
}

// missingForward is the config error of a process that runs workers for a
// source with no forward.url: a worker would have nowhere to deliver.
func missingForward(cfg *config.Config) error {
	for i, s := range cfg.Sources {
		if s.Forward.URL == "" {
			return fmt.Errorf("%w: %s.forward.url: missing: a worker forwards each event to your app; set it, or run this process with --role receiver", errConfig, config.SourceKey(i, s.Name))
		}
	}
	return nil
}

// portTaken is the fix for a listen error that says the port is in use
// (another ferry serve, often, with the same config), or "".
func portTaken(err error, key string) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return ""
	}
	return "; another process holds that port (a ferry serve already running with this config?): stop it, or give " + key + " another port"
}
