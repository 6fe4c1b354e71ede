package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/internal/leaktest"
)

// ferryBin is the real binary as a user builds it, and chaosBin the one
// built with -tags ferrychaos (fault hooks and the chaos harness), each
// built once for every test in this package.
var ferryBin, chaosBin string

func TestMain(m *testing.M) {
	// Under nohup the children would inherit an ignored SIGHUP, which ferry
	// rightly keeps ignoring, and the SIGHUP test would wait in vain. A
	// caught signal is reset to its default at exec, so they hear it.
	if signal.Ignored(syscall.SIGHUP) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	}
	// A race-built process sleeps 1 s at exit (the race runtime's
	// atexit_sleep_ms), and these tests run hundreds of them: 50 ms lets a
	// report already being written finish (a race detected later than that
	// in an exiting child goes unreported). A GORACE the caller set wins.
	os.Setenv("GORACE", strings.TrimSpace("atexit_sleep_ms=50 "+os.Getenv("GORACE")))
	dir, err := os.MkdirTemp("", "ferry-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ferryBin, chaosBin = filepath.Join(dir, "ferry"), filepath.Join(dir, "ferry-chaos")
	for _, args := range [][]string{{"-o", ferryBin}, {"-tags", "ferrychaos", "-o", chaosBin}} {
		build := exec.Command("go", append(append([]string{"build", "-race"}, args...), ".")...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building ferry:", err)
			os.Exit(1)
		}
	}
	code := leaktest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

const (
	stripeSecret  = "whsec_test_stripe_secret"
	forwardSecret = "whsec_ZmVycnktZGVtby1mb3J3YXJkLXNlY3JldA=="
	// forwardSecretNext is the app's next secret, which writeConfig lists
	// after forwardSecret: a roll in progress.
	forwardSecretNext = "whsec_ZmVycnktbmV4dC1mb3J3YXJkLXNlY3JldA=="
)

// writeConfig writes a one-source (stripe) config forwarding to forwardURL,
// signed with forwardSecret and forwardSecretNext.
func writeConfig(t *testing.T, storeURL, forwardURL, workerExtra string) string {
	t.Helper()
	return writeServeConfig(t, storeURL, fmt.Sprintf(`retry_base = "50ms"
retry_cap = "200ms"
%s
[[source]]
name = "stripe"
provider = "stripe"
secrets = [%q]
[source.forward]
url = %q
secrets = [%q, %q]
timeout = "30s"
`, workerExtra, stripeSecret, forwardURL, forwardSecret, forwardSecretNext))
}

// writeServeConfig writes a config for `ferry serve` on storeURL, both
// listeners on free loopback ports and workers polling every 100ms; rest
// follows inside the [worker] table (more worker keys, then the sources).
func writeServeConfig(t *testing.T, storeURL, rest string) string {
	t.Helper()
	return writeServeConfigHTTP(t, storeURL, "", rest)
}

// writeServeConfigHTTP is writeServeConfig with httpKeys in [http].
func writeServeConfigHTTP(t *testing.T, storeURL, httpKeys, rest string) string {
	t.Helper()
	return writeTempFile(t, "ferry.toml", fmt.Sprintf(`
[store]
url = %q
[http]
listen = "127.0.0.1:0"
%s
[admin]
listen = "127.0.0.1:0"
[worker]
poll_interval = "100ms"
`, storeURL, httpKeys)+rest)
}

// writeTempFile writes content, readable by its owner only, to a file
// named name in a fresh temporary directory and returns its path.
func writeTempFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveProc is a running `ferry serve`.
type serveProc struct {
	cmd    *exec.Cmd
	addr   string // the public listener
	admin  string // the admin listener, "" if off
	mu     sync.Mutex
	stderr bytes.Buffer
	exited chan struct{}
	err    error
	// starting and serving get both listeners' addresses (public, then
	// admin) at the "starting" and "serving" lines.
	starting chan [2]string
	serving  chan [2]string
}

func (p *serveProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// startServe runs `ferry serve` and waits for its "serving" line.
func startServe(t *testing.T, config string, args ...string) *serveProc {
	t.Helper()
	return startServeWith(t, ferryBin, nil, config, args...)
}

// startServeWith is startServe of bin, with env added to the environment.
func startServeWith(t *testing.T, bin string, env []string, config string, args ...string) *serveProc {
	t.Helper()
	p := launchServe(t, bin, env, config, args...)
	select {
	case addrs := <-p.serving:
		p.addr, p.admin = addrs[0], addrs[1]
	case <-p.exited:
		t.Fatalf("ferry serve exited at start: %v\n%s", p.err, p.log())
	case <-time.After(60 * time.Second):
		t.Fatalf("ferry serve not serving after 60 s:\n%s", p.log())
	}
	return p
}

// launchServe runs `ferry serve` and returns at once; it is killed when
// the test ends.
func launchServe(t *testing.T, bin string, env []string, config string, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--config", config}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, exited: make(chan struct{}), starting: make(chan [2]string, 1), serving: make(chan [2]string, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			var rec struct{ Msg, Listen, Admin string }
			if json.Unmarshal([]byte(line), &rec) == nil {
				switch rec.Msg {
				case "ferry: starting":
					p.starting <- [2]string{rec.Listen, rec.Admin}
				case "ferry: serving":
					p.serving <- [2]string{rec.Listen, rec.Admin}
				}
			}
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("ferry serve log:\n%s", p.log())
		}
	})
	return p
}

// sendStripe posts a signed Stripe delivery and returns the status.
func sendStripe(t *testing.T, addr, eventID string) int {
	t.Helper()
	body := []byte(fmt.Sprintf(`{"id":%q,"type":"invoice.paid","data":{}}`, eventID))
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/stripe", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = ferrytest.SignStripe(stripeSecret, body, time.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// sendStripeOK is sendStripe that fails the test unless the delivery is
// accepted.
func sendStripeOK(t *testing.T, addr, eventID string) {
	t.Helper()
	if code := sendStripe(t, addr, eventID); code != http.StatusOK {
		t.Fatalf("delivery of %s answered %d", eventID, code)
	}
}

// waitDone waits, 60 s at the most, until the Stripe event eventID is done
// in st.
func waitDone(t *testing.T, st ferry.Store, eventID string) {
	t.Helper()
	waitFor(t, 60*time.Second, eventID+" to be done", func() bool {
		ev := eventState(t, st, eventID)
		return ev != nil && ev.State == ferry.StateDone
	})
}

// terminate sends SIGTERM to the process and waits, 60 s at the most, for
// it to exit.
func (p *serveProc) terminate(t *testing.T) {
	t.Helper()
	p.stop(t, syscall.SIGTERM)
}

// stop sends sig to the process and waits, 60 s at the most, for it to
// exit.
func (p *serveProc) stop(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
}

// wait waits, 60 s at the most, for the process to exit.
func (p *serveProc) wait(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("ferry serve did not exit within 60 s")
	}
}

// waitFor polls cond every 20 ms until it holds, failing after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deadEvent stores source's eventID in st and has it fail dead, with
// errText as its last error; it returns the event's row id. st holds no
// other claimable event of source.
func deadEvent(t *testing.T, st ferry.Store, source, eventID, errText string) int64 {
	t.Helper()
	ctx := context.Background()
	res, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: source, EventID: eventID, Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := st.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "seed", Limit: 1, TTL: time.Minute, Sources: []string{source}})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v, %v", claims, err)
	}
	if _, err := st.EventFail(ctx, &ferry.EventFailParams{Lease: claims[0].Event.Lease(), Error: errText, Dead: true}); err != nil {
		t.Fatal(err)
	}
	return res.ID
}

func eventState(t *testing.T, st ferry.Store, eventID string) *ferry.Event {
	t.Helper()
	ev, err := st.EventGet(context.Background(), &ferry.EventGetParams{Source: "stripe", EventID: eventID})
	if err != nil {
		return nil
	}
	return ev
}

func outcomes(t *testing.T, st ferry.Store, id int64) (out []string) {
	t.Helper()
	list, err := st.AttemptList(context.Background(), &ferry.AttemptListParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list {
		out = append(out, string(a.Outcome)+"@"+a.Worker)
	}
	return out
}

func runFerry(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runBin(t, ferryBin, args...)
}

// wantFerry runs ferry with args and checks its exit code, stdout and
// stderr, each exactly.
func wantFerry(t *testing.T, code int, stdout, stderr string, args ...string) {
	t.Helper()
	if gotOut, gotErr, gotCode := runFerry(t, args...); gotCode != code || gotOut != stdout || gotErr != stderr {
		t.Errorf("ferry %s: exit %d, want %d\nstdout %q\n  want %q\nstderr %q\n  want %q", strings.Join(args, " "), gotCode, code, gotOut, stdout, gotErr, stderr)
	}
}

func runBin(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), 0
}
