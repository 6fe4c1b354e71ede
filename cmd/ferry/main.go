// Command ferry is the Ferry service: a crash-safe webhook inbox that
// verifies, stores, deduplicates and forwards webhooks.
//
//	ferry serve   --config ferry.toml   receive, work and forward
//	ferry migrate --config ferry.toml   bring the store's schema up to date
//	ferry send    --config ferry.toml --source NAME   sign and send a sample delivery
//	ferry reconcile --config ferry.toml --source NAME   fetch what the provider never delivered
//	ferry echo    --listen 127.0.0.1:3000 --secret whsec_...   a stand-in app that prints what it receives
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
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
		{"events", "list, show and replay events", runEvents},
		{"doctor", "check the config and the store; print what is wrong or at risk, with the fix", runDoctor},
		{"chaos", "prove crash safety: run real ferry processes under faults and check nothing acknowledged is lost", runChaos},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

// run returns the exit code: 0 done, 1 failed, 2 bad usage or config.
func run(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(ctx, args[1:])
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.As(err, new(*exitError)):
				fmt.Fprintf(os.Stderr, "ferry %s: %v\n", c.name, err)
				var e *exitError
				errors.As(err, &e)
				return e.code
			case isUsage(err):
				fmt.Fprintf(os.Stderr, "ferry %s: %v\n", c.name, err)
				return 2
			default:
				fmt.Fprintf(os.Stderr, "ferry %s: %v\n", c.name, err)
				return 1
			}
		}
	}
	fmt.Fprintf(os.Stderr, "ferry: unknown command %q\n\n", args[0])
	printUsage()
	return 2
}

func isUsage(err error) bool {
	var u *usageError
	return errors.As(err, &u) || errors.Is(err, errConfig)
}

func printUsage() {
	fmt.Fprintln(os.Stderr, "usage: ferry COMMAND [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun 'ferry COMMAND -h' for a command's flags.")
}
