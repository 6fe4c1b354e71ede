package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry/internal/testhttp"
	"github.com/ferry-inbox/ferry/internal/testlog"
)

// The README's walk ("## Run it", with its "Two minutes" subsection) is run
// as written against the built binary, and the output it shows is checked.
// The README is the test's input, so the test fails when the two disagree.
//
// What the test reads in that section:
//   - a ```sh block holds commands, each starting "go run ./cmd/ferry" (a
//     trailing backslash continues a line); the "# " lines after a command
//     are output it must print, in order (other lines may come between);
//   - a bare ``` block is output the running echo app must print;
//   - serve and echo run in the background, as in their own terminals; the
//     other commands must exit 0.
//
// In an expected line, a token that is a time ("12:00:01", RFC 3339) matches
// any time, and a token ending in "…" matches any token it begins; a last
// token ending in "…" also matches the rest of the line. Tokens are split on
// white space, so table alignment does not matter.
//
// What the test rewrites, and nothing else: "go run ./cmd/ferry" becomes the
// binary TestMain built; the commands run in a temp dir holding a copy of
// examples/ (so the relative sqlite:ferry.db lands there); and the walk's
// three addresses, 127.0.0.1:8080, 127.0.0.1:8081 (admin) and
// 127.0.0.1:3000, become free loopback ports, in the copied config, the
// commands and the expected output alike, so the test runs beside anything
// else on the machine.

const walkSection, walkCommand = "## Run it", "go run ./cmd/ferry"

// walkStep is one command of the walk, or one block of echo output.
type walkStep struct {
	args   []string // after "go run ./cmd/ferry"; nil for a bare block
	expect []string // output lines the README shows
	line   int      // in README.md, for messages
}

func TestReadmeWalk(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	steps, err := parseWalk(string(readme))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}

	dir := t.TempDir()
	rewrite := strings.NewReplacer("127.0.0.1:8080", freeAddr(t), "127.0.0.1:8081", freeAddr(t), "127.0.0.1:3000", freeAddr(t)).Replace
	copyExamples(t, dir, rewrite)

	var echo *walkProc
	sawDuplicate := false
	for _, step := range steps {
		if step.args == nil {
			if echo == nil {
				t.Fatalf("README.md:%d: echo output shown before echo runs", step.line)
			}
			expect := make([]string, len(step.expect))
			for i, e := range step.expect {
				expect[i] = rewrite(e)
			}
			waitMatch(t, 90*time.Second, fmt.Sprintf("README.md:%d: the echo app's output", step.line), expect, echo.output)
			continue
		}
		args := make([]string, len(step.args))
		for i, a := range step.args {
			args[i] = rewrite(a)
		}
		expect := make([]string, len(step.expect))
		for i, e := range step.expect {
			expect[i] = rewrite(e)
		}
		what := fmt.Sprintf("README.md:%d: ferry %s", step.line, strings.Join(args, " "))
		switch args[0] {
		case "serve":
			serve := startWalkProc(t, dir, args, "ferry: serving")
			t.Cleanup(func() { serve.stop(t, "serve") })
			if len(expect) > 0 {
				waitMatch(t, 30*time.Second, what, expect, serve.output)
			}
		case "echo":
			echo = startWalkProc(t, dir, args, "listening on")
			t.Cleanup(func() { echo.stop(t, "echo") })
		default:
			// Read-only commands are rerun until their output matches: the
			// worker finishes an event a moment after the app answered it.
			readOnly := args[0] == "events" && len(args) > 1 && (args[1] == "list" || args[1] == "show") || args[0] == "doctor"
			deadline := time.Now().Add(60 * time.Second)
			for {
				out, code := runWalkCommand(t, dir, args)
				err := matchLines(expect, out)
				if code == 0 && err == nil {
					break
				}
				if !readOnly || time.Now().After(deadline) {
					t.Fatalf("%s: exit %d (want 0); output check: %v\noutput:\n%s", what, code, err, out)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if args[0] == "send" {
				for _, e := range expect {
					sawDuplicate = sawDuplicate || strings.Contains(e, `{"status":"duplicate"}`)
				}
			}
		}
	}
	// What the README walk is for: a repeated send is a duplicate, and the
	// app sees retries. The checks above hold only what the README says; these
	// keep the README from dropping it.
	if !sawDuplicate {
		t.Errorf("the README's walk no longer shows a send answered duplicate")
	}
	if echo == nil || strings.Count(echo.output(), "attempt=") < 3 {
		t.Errorf("the README's walk no longer shows three attempts at the echo app")
	}
}

// parseWalk reads the steps from the README's walk section.
func parseWalk(readme string) ([]walkStep, error) {
	start := strings.Index(readme, "\n"+walkSection+"\n")
	if start < 0 {
		return nil, fmt.Errorf("no %q section", walkSection)
	}
	firstLine := strings.Count(readme[:start+1], "\n") + 1
	section := readme[start+1:]
	if end := strings.Index(section[len(walkSection):], "\n## "); end >= 0 {
		section = section[:len(walkSection)+end]
	}
	var steps []walkStep
	lines := strings.Split(section, "\n")
	fence := "" // "" outside a block, else "sh", "bare" or "other"
	for i := 0; i < len(lines); i++ {
		n, line := firstLine+i, lines[i]
		if strings.HasPrefix(line, "```") {
			switch {
			case fence != "":
				fence = ""
			case line == "```":
				fence = "bare"
				steps = append(steps, walkStep{line: n + 1})
			case line == "```sh":
				fence = "sh"
			default:
				fence = "other"
			}
			continue
		}
		switch fence {
		case "bare":
			if strings.TrimSpace(line) == "" {
				continue
			}
			steps[len(steps)-1].expect = append(steps[len(steps)-1].expect, line)
		case "sh":
			for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
				i++
				line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
			}
			switch {
			case strings.TrimSpace(line) == "":
			case strings.HasPrefix(line, "# "):
				if len(steps) == 0 || steps[len(steps)-1].args == nil {
					return nil, fmt.Errorf("line %d: output with no command before it", n)
				}
				steps[len(steps)-1].expect = append(steps[len(steps)-1].expect, strings.TrimPrefix(line, "# "))
			case strings.HasPrefix(line, walkCommand+" "):
				if strings.ContainsAny(line, `'"$`) {
					return nil, fmt.Errorf("line %d: quoting or variables in %q: teach walk_test.go to parse them", n, line)
				}
				steps = append(steps, walkStep{args: strings.Fields(strings.TrimPrefix(line, walkCommand)), line: n})
			default:
				return nil, fmt.Errorf("line %d: %q: the walk's commands start %q, and output lines \"# \"", n, line, walkCommand)
			}
		}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no commands in the %q section", walkSection)
	}
	return steps, nil
}

// matchLines checks that expect appears in out in order, each expected
// line matching one line of out.
func matchLines(expect []string, out string) error {
	got := strings.Split(out, "\n")
	j := 0
	for _, e := range expect {
		for j < len(got) && !lineMatches(e, got[j]) {
			j++
		}
		if j == len(got) {
			return fmt.Errorf("no line (after the ones matched before it) matches %q", e)
		}
		j++
	}
	return nil
}

func lineMatches(expect, got string) bool {
	e, g := strings.Fields(expect), strings.Fields(got)
	for i, tok := range e {
		if i >= len(g) {
			return false
		}
		last := i == len(e)-1
		switch {
		case strings.HasSuffix(tok, "…"):
			if !strings.HasPrefix(g[i], strings.TrimSuffix(tok, "…")) {
				return false
			}
			if last {
				return true
			}
		case isTime(tok):
			if !isTime(g[i]) {
				return false
			}
		case tok != g[i]:
			return false
		}
	}
	return len(e) == len(g)
}

func isTime(s string) bool {
	_, err1 := time.Parse(time.TimeOnly, s)
	_, err2 := time.Parse(time.RFC3339, s)
	return err1 == nil || err2 == nil
}

// waitMatch polls output until expect matches it, failing after limit.
func waitMatch(t *testing.T, limit time.Duration, what string, expect []string, output func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := matchLines(expect, output())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after %v: %v\noutput:\n%s", what, limit, err, output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeAddr is a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln := testhttp.Listen(t)
	ln.Close()
	return ln.Addr().String()
}

// copyExamples copies the repository's examples/ into dir, rewritten.
func copyExamples(t *testing.T, dir string, rewrite func(string) string) {
	t.Helper()
	entries, err := os.ReadDir("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("../../examples", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "examples", e.Name()), []byte(rewrite(string(raw))), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func runWalkCommand(t *testing.T, dir string, args []string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ferryBin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// walkProc is a command of the walk that runs in its own terminal.
type walkProc struct {
	cmd    *exec.Cmd
	out    testlog.Buffer // its stdout and stderr
	exited chan struct{}
	err    error
}

func (p *walkProc) output() string { return p.out.String() }

// startWalkProc starts args in dir and waits until its output holds ready.
func startWalkProc(t *testing.T, dir string, args []string, ready string) *walkProc {
	t.Helper()
	p := &walkProc{cmd: exec.Command(ferryBin, args...), exited: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(p.output(), ready) {
		select {
		case <-p.exited:
			t.Fatalf("ferry %s exited at start: %v\n%s", strings.Join(args, " "), p.err, p.output())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.cmd.Process.Kill()
			t.Fatalf("ferry %s: no %q after 60 s:\n%s", strings.Join(args, " "), ready, p.output())
		}
	}
	return p
}

// stop presses Ctrl-C, as the README says, and checks the exit is clean.
func (p *walkProc) stop(t *testing.T, name string) {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("ferry %s still running 60 s after Ctrl-C", name)
	}
	if p.err != nil && !t.Failed() {
		t.Errorf("ferry %s after Ctrl-C: %v, want exit 0\n%s", name, p.err, p.output())
	}
	if t.Failed() {
		t.Logf("ferry %s output:\n%s", name, p.output())
	}
}
