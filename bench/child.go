package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// ferryBinary builds cmd/ferry of this checkout into the temp directory,
// once per run. The bench runs from bench/, so the checkout is "..".
func ferryBinary(ctx context.Context, tmp string) (string, error) {
	buildOnce.Do(func() {
		binPath = filepath.Join(tmp, "ferry")
		// Built in Ferry's own module, with its own go.mod: the binary
		// users get, not one resolved against the bench's dependencies.
		cmd := exec.CommandContext(ctx, "go", "build", "-o", binPath, "./cmd/ferry")
		cmd.Dir = ".."
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		buildErr = cmd.Run()
	})
	return binPath, buildErr
}

// configTOML is a one-source (Stripe) ferry config on storeURL forwarding
// to forwardURL, with Ferry's default settings for everything else: worker,
// when not empty, is the body of the [worker] table, and forwardTimeout,
// when not zero, the forward's timeout.
func configTOML(storeURL, forwardURL, worker string, forwardTimeout time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[store]\nurl = %q\n", storeURL)
	// Several children run at once (reclaim): each takes a free admin port.
	b.WriteString("\n[admin]\nlisten = \"127.0.0.1:0\"\n")
	if worker != "" {
		fmt.Fprintf(&b, "\n[worker]\n%s", worker)
	}
	fmt.Fprintf(&b, "\n[[source]]\nname = \"stripe\"\nprovider = \"stripe\"\nsecrets = [%q]\n\n[source.forward]\nurl = %q\n", stripeSecret, forwardURL)
	if forwardTimeout > 0 {
		fmt.Fprintf(&b, "timeout = %q\n", forwardTimeout.String())
	}
	return b.String()
}

// child is one running `ferry serve`.
type child struct {
	cmd   *exec.Cmd
	addr  string // the listen address it logged
	admin string // the admin listen address it logged, "" if off
	done  chan struct{}
}

// startServe runs `ferry serve` with config text and role, and waits for its
// "ferry: serving" line.
func startServe(ctx context.Context, tmp, name, configText, role string) (*child, error) {
	bin, err := ferryBinary(ctx, tmp)
	if err != nil {
		return nil, fmt.Errorf("build ferry: %w", err)
	}
	return startServeBin(ctx, bin, tmp, name, configText, role)
}

// startServeBin is startServe of the binary bin.
func startServeBin(ctx context.Context, bin, tmp, name, configText, role string) (*child, error) {
	cfgPath := filepath.Join(tmp, name+".toml")
	if err := os.WriteFile(cfgPath, []byte(configText), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--listen", "127.0.0.1:0", "--role", role, "--log-level", "info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	addr := make(chan [2]string, 1)
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		warned := 0
		for sc.Scan() {
			if skipLogLine(sc.Bytes()) {
				continue
			}
			var line struct {
				Msg    string `json:"msg"`
				Listen string `json:"listen"`
				Admin  string `json:"admin"`
				Level  string `json:"level"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "ferry: serving" {
				select {
				case addr <- [2]string{line.Listen, line.Admin}:
				default:
				}
			}
			if strings.HasPrefix(sc.Text(), "{") && (line.Level == "ERROR" || line.Level == "WARN") {
				// The first few say what went wrong; a flood would bury
				// the bench's own lines.
				if warned++; warned <= 10 {
					fmt.Fprintf(os.Stderr, "  %s: %s\n", name, sc.Text())
				} else if warned == 11 {
					fmt.Fprintf(os.Stderr, "  %s: (further warnings not shown)\n", name)
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
	}()
	select {
	case a := <-addr:
		c.addr, c.admin = a[0], a[1]
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("ferry serve (%s) exited before serving", name)
	case <-time.After(30 * time.Second):
		c.kill()
		return nil, fmt.Errorf("ferry serve (%s) did not start in 30s", name)
	case <-ctx.Done():
		c.kill()
		return nil, ctx.Err()
	}
}

// skipLogLine reports whether a log line of the child needs no decoding:
// it logs a line a delivery at info, and decoding only the lines looked for
// (serving, warnings, errors) keeps reading them cheap for the load
// generator in this process. A delivery the load generator cut off at the
// end of a closed-loop run (reason client_gone) is expected, not a warning
// to show.
func skipLogLine(b []byte) bool {
	if !bytes.HasPrefix(b, []byte("{")) || bytes.Contains(b, []byte("ferry: serving")) {
		return false
	}
	if bytes.Contains(b, []byte(`"reason":"client_gone"`)) {
		return true
	}
	return !bytes.Contains(b, []byte(`"level":"WARN"`)) && !bytes.Contains(b, []byte(`"level":"ERROR"`))
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// stop sends SIGTERM and waits up to 30 s before killing.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.kill()
	}
}
