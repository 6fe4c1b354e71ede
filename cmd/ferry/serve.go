package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferryhttp"
	"github.com/ferry-inbox/ferry/internal/config"
)

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	configPath := fs.String("config", "ferry.toml", "the config `file`")
	role := fs.String("role", "all", "what this process runs: receiver, worker or all")
	listen := fs.String("listen", "", "override http.listen (`host:port`; port 0 picks a free one)")
	noMigrate := fs.Bool("no-migrate", false, "do not migrate the store at start")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *role != "all" && *role != "receiver" && *role != "worker" {
		return usagef("--role %q: use receiver, worker or all", *role)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level %q: use debug, info, warn or error", *logLevel)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.HTTP.Listen = *listen
	}
	runsWorker, runsReceiver := *role != "receiver", *role != "worker"
	if runsWorker {
		for i, s := range cfg.Sources {
			if s.Forward.URL == "" {
				return fmt.Errorf("%w: source[%d] (%s).forward.url: missing: a worker forwards each event to your app; set it, or run this process with --role receiver", errConfig, i, s.Name)
			}
		}
	}

	st, closeStore, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeStore()
	if *cfg.Store.Migrate && !*noMigrate {
		if err := st.Migrate(ctx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}

	mux := http.NewServeMux()
	health := &ferryhttp.Health{Store: st}
	health.Register(mux)
	op, err := newOperator(cfg, st, mux, cfg.HTTP.Listen, log)
	if err != nil {
		return err
	}
	op.start(ctx)

	var receiver *ferryhttp.Receiver
	if runsReceiver {
		if receiver, err = newReceiver(cfg, st, log, op.metrics); err != nil {
			return err
		}
		receiver.Register(mux)
	}

	var client *ferry.Client
	if runsWorker {
		if client, err = newClient(cfg, st, log, op.metrics); err != nil {
			return err
		}
		if err := client.Start(ctx); err != nil {
			return err
		}
		go (&purger{store: st, sources: cfg.Sources, log: log}).run(ctx, purgeInterval)
	}
	if err := startCatchup(ctx, cfg, st, log, op.catchup, instanceName()); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		if client != nil {
			_ = client.Stop(context.Background())
		}
		return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
	}
	server := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- server.Serve(ln) }()
	kind, _, _ := cfg.StoreKind()
	log.Info("ferry: serving", "listen", ln.Addr().String(), "role", *role, "store", kind, "sources", len(cfg.Sources))

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	}

	// Shut down: fail readiness and answer 503 to new deliveries (providers
	// retry), let handlers finish within the grace period and release the
	// rest, then close the listener.
	log.Info("ferry: shutting down")
	health.Stopping()
	if receiver != nil {
		receiver.Drain()
	}
	if client != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), cfg.Worker.ShutdownGrace.Duration+ferry.DefaultShutdownGrace)
		_ = client.Stop(stopCtx)
		cancel()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := server.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("http shutdown: %w", err)
	}
	log.Info("ferry: stopped")
	return nil
}

func newReceiver(cfg *config.Config, st ferry.Store, log *slog.Logger, obs ferryhttp.ReceiveObserver) (*ferryhttp.Receiver, error) {
	var sources []ferryhttp.Source
	for _, s := range cfg.Sources {
		v, err := cfg.Verifier(s)
		if err != nil {
			return nil, fmt.Errorf("%w: source %s: %v", errConfig, s.Name, err)
		}
		sources = append(sources, ferryhttp.Source{Name: s.Name, Verifier: v, MaxBodyBytes: s.MaxBody})
	}
	return ferryhttp.NewReceiver(ferryhttp.ReceiverOptions{
		Store: st, Sources: sources, Logger: log, Observer: obs,
		StoreTimeout: cfg.HTTP.StoreTimeout.Duration, RetryAfter: cfg.HTTP.RetryAfter.Duration,
	})
}

func newClient(cfg *config.Config, st ferry.Store, log *slog.Logger, obs ferry.Observer) (*ferry.Client, error) {
	w := cfg.Worker
	hook, err := chaosHookFromEnv(st, log) // nil unless `ferry chaos` started this process
	if err != nil {
		return nil, err
	}
	if hook != nil {
		obs = hook.observer(obs)
	}
	client, err := ferry.NewClient(&ferry.Config{
		Store: st, Sources: cfg.Policies(), Logger: log, Observer: obs,
		Workers: w.Workers, LeaseTTL: w.LeaseTTL.Duration, HeartbeatInterval: w.Heartbeat.Duration,
		PollInterval: w.PollInterval.Duration, ShutdownGrace: w.ShutdownGrace.Duration,
		RetryBase: w.RetryBase.Duration, RetryCap: w.RetryCap.Duration,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: worker: %v", errConfig, err)
	}
	for _, s := range cfg.Sources {
		fwd, err := ferryhttp.NewForwarder(ferryhttp.ForwarderOptions{URL: s.Forward.URL, Secret: s.Forward.Secret, Timeout: s.Forward.Timeout.Duration})
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
