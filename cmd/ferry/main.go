// Command ferry is the Ferry service: a crash-safe webhook inbox that
// verifies, stores, deduplicates and forwards webhooks.
//
//	ferry serve   --config ferry.toml   receive, work and forward
//	ferry migrate --config ferry.toml   bring the store's schema up to date
//	ferry send    --config ferry.toml --source NAME   sign and send a sample delivery
//	ferry reconcile --config ferry.toml --source NAME   fetch what the provider never delivered
//	ferry echo    --listen 127.0.0.1:3000 --secret whsec_...   a stand-in app that prints what it receives
//	ferry events  list|show|replay|retry-now|resolve   look at, replay, retry and resolve events
//	ferry doctor  --config ferry.toml   what needs a human, each with its fix
//	ferry version                       print the version, commit, Go version and build date
//
// Exit codes: 0 done, 1 failed, 2 bad usage or config, 3 an event named was
// not found, 4 doctor found a problem, 5 an event named was left as it is.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ferry-inbox/ferry"
)

// usageError is a mistake in the command line: exit 2 with a hint.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"serve", "receive webhooks, work them and forward them to your app", runServe},
		{"migrate", "bring the store's schema up to date", runMigrate},
		{"send", "sign and send a sample delivery to a running ferry", runSend},
		{"reconcile", "fetch from the provider's API the events it never delivered (one catch-up pass)", runReconcile},
		{"echo", "a stand-in app: print each forwarded event and verify its signature", runEcho},
		{"events", "list, show, replay, retry now and resolve events", runEvents},
		{"doctor", "check the config and the store; print what is wrong or at risk, with the fix", runDoctor},
		{"chaos", "prove crash safety: run real ferry processes under faults and check nothing acknowledged is lost", runChaos},
		{"healthcheck", "exit 0 if a ferry answers 2xx on /readyz (the container's HEALTHCHECK)", runHealthcheck},
		{"version", "print the version, commit, Go version and build date", runVersion},
	}
}

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals()...)
	go func() {
		<-sigs
		cancel()
		<-sigs
		close(secondSignal)
	}()
	os.Exit(run(ctx, os.Args[1:]))
}

// secondSignal is closed by a second stop signal: serve then ends its
// shutdown delay at once.
var secondSignal = make(chan struct{})

// stopSignals are the signals that stop ferry gracefully. SIGHUP too: a
// closed terminal or a stray reload stops ferry as SIGTERM does, releasing
// what it holds, not as the default kill. Not when it starts ignored
// (nohup): Notify would undo that.
func stopSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// Exit codes, as docs/operations.md lists them.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2 // bad usage or config
	exitNotFound = 3 // an event named does not exist
	exitProblems = 4 // doctor found something that needs a human
	exitLeft     = 5 // an event named is in a state the action does not take
)

// exitError carries an exit code of its own to run. A nil err means the
// command has already said what went wrong (a child process did), so run
// prints nothing more.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// subcommandError is a subcommand's error, printed as "ferry COMMAND
// SUBCOMMAND: message".
type subcommandError struct {
	name string
	err  error
}

func (e *subcommandError) Error() string { return e.err.Error() }
func (e *subcommandError) Unwrap() error { return e.err }

// run returns the exit code; every error is printed once, as
// "ferry COMMAND: message".
func run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		printUsage(os.Stderr)
		return exitUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(os.Stdout)
		return exitOK
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:])
		if err == nil || errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		name := c.name
		if sub, ok := errors.AsType[*subcommandError](err); ok {
			name += " " + sub.name
		}
		if e, ok := errors.AsType[*exitError](err); !ok || e.err != nil {
			fmt.Fprintf(os.Stderr, "ferry %s: %v\n", name, err)
		}
		return exitCode(err)
	}
	fmt.Fprintf(os.Stderr, "ferry: unknown command %q\n\n", args[0])
	printUsage(os.Stderr)
	return exitUsage
}

func exitCode(err error) int {
	var e *exitError
	var u *usageError
	switch {
	case errors.As(err, &e):
		return e.code
	case errors.As(err, &u), errors.Is(err, errConfig), errors.Is(err, errUpgrade), errors.Is(err, ferry.ErrSchemaNewer),
		errors.Is(err, ferry.ErrInvalidParams): // input the store refuses, as the dashboard's 400: asking again fails again
		return exitUsage
	}
	return exitFailed
}

// printUsage lists the commands on w: stdout when help is asked for (so
// `ferry help | less` shows it), stderr when it answers a mistake.
func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: ferry COMMAND [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'ferry COMMAND -h' for what a command does and its flags.")
	fmt.Fprintln(w, "Exit codes: 0 done, 1 failed, 2 bad usage or config, 3 an event named was not found, 4 doctor found a problem, 5 an event named was left as it is.")
}

// flagSet is a subcommand's flags with its help: -h prints the usage line,
// what the command does and its flags on stdout, and exits 0; a bad flag is a usage
// error (exit 2) printed once by run, without the whole help.
type flagSet struct {
	*flag.FlagSet
	synopsis, description string
}

func newFlags(name, synopsis, description string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), synopsis: synopsis, description: description}
	fs.SetOutput(io.Discard) // errors are returned and printed by run
	fs.Usage = func() {}     // help is printed by parse, only when asked for
	return fs
}

// parse parses args; flags may follow positional arguments ("show stripe
// evt_1 --json"), which flag.Parse alone stops at. It returns the
// positional arguments.
func (fs *flagSet) parse(args []string) ([]string, error) {
	var positional []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fs.printHelp()
			return nil, err
		}
		if err != nil {
			return nil, usagef("%v (see 'ferry %s -h')", err, fs.Name())
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// parseFlagsOnly is parse for a command that takes no positional argument.
func (fs *flagSet) parseFlagsOnly(args []string) error {
	positional, err := fs.parse(args)
	if err == nil && len(positional) > 0 {
		return usagef("unexpected argument %q: %s takes only flags (see 'ferry %s -h')", positional[0], fs.Name(), fs.Name())
	}
	return err
}

func (fs *flagSet) printHelp() {
	fmt.Fprintf(os.Stdout, "usage: %s\n\n%s\n", strings.TrimSpace("ferry "+fs.Name()+" "+fs.synopsis), fs.description)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if !hasFlags {
		return
	}
	fmt.Fprint(os.Stdout, "\nflags:\n")
	fs.SetOutput(os.Stdout)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// newLogger is the logger of a command that logs (serve): format "json" (one
// object a line, the default) or "text" (key=value). Durations print as
// strings ("1.5s"), not slog's integer nanoseconds in JSON.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: durationString}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q: use text or json", format)
}

// durationString logs a time.Duration as its String form.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
