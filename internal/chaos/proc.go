package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one `ferry serve` child. Its stderr is read line by line: the
// harness keeps counters of the lines it cares about and the last few lines
// for a failure report, and writes no log file.
type proc struct {
	slot   int
	addr   string
	cmd    *exec.Cmd
	pid    int
	ready  chan struct{}
	exited chan struct{}
	err    error

	mu       sync.Mutex
	tail     []string
	killedAt time.Time // SIGKILL or SIGSTOP sent by the harness, or the crash line read
	stopped  []span    // each time the harness held it stopped (SIGSTOP to SIGCONT)
}

// span is a stretch of time; an open one has a zero end.
type span struct{ from, to time.Time }

// stoppedTogether is when every one of workers was stopped at once.
func stoppedTogether(workers [][]span) []span {
	if len(workers) == 0 {
		return nil
	}
	out := workers[0]
	for _, w := range workers[1:] {
		out = intersect(out, w)
	}
	return out
}

// intersect is the stretches both a and b cover.
func intersect(a, b []span) []span {
	var out []span
	for _, x := range a {
		for _, y := range b {
			from, to := x.from, x.to
			if y.from.After(from) {
				from = y.from
			}
			if to.IsZero() || (!y.to.IsZero() && y.to.Before(to)) {
				to = y.to
			}
			if to.IsZero() || to.After(from) {
				out = append(out, span{from, to})
			}
		}
	}
	return out
}

// overlap is how much of [from, to] the spans cover, an open span up to to.
func overlap(spans []span, from, to time.Time) time.Duration {
	var d time.Duration
	for _, s := range spans {
		end := s.to
		if end.IsZero() || end.After(to) {
			end = to
		}
		begin := s.from
		if begin.Before(from) {
			begin = from
		}
		if end.After(begin) {
			d += end.Sub(begin)
		}
	}
	return d
}

// lineCounter is told of every line a child logs.
type lineCounter func(p *proc, msg string, rec map[string]any)

// startProc runs `ferry serve --config config --listen addr` with extra
// environment. It does not wait for readiness: call waitReady.
func startProc(ctx context.Context, bin string, slot int, config, addr string, env []string, count lineCounter) (*proc, error) {
	cmd := exec.Command(bin, "serve", "--config", config, "--listen", addr, "--log-level", "info")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = childAttr()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("chaos: start ferry serve: %w", err)
	}
	p := &proc{slot: slot, addr: addr, cmd: cmd, pid: cmd.Process.Pid, ready: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		readyOnce := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			var rec map[string]any
			msg := ""
			if json.Unmarshal([]byte(line), &rec) == nil {
				msg, _ = rec["msg"].(string)
			}
			p.mu.Lock()
			if len(p.tail) >= 40 {
				p.tail = p.tail[1:]
			}
			p.tail = append(p.tail, line)
			p.mu.Unlock()
			if msg == "ferry: serving" {
				readyOnce.Do(func() { close(p.ready) })
			}
			if count != nil {
				count(p, msg, rec)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// waitReady waits for the "serving" line, the child's exit or limit.
func (p *proc) waitReady(ctx context.Context, limit time.Duration) error {
	select {
	case <-p.ready:
		return nil
	case <-p.exited:
		return fmt.Errorf("chaos: ferry serve (slot %d) exited at start: %v\n%s", p.slot, p.err, p.logTail())
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(limit):
		return fmt.Errorf("chaos: ferry serve (slot %d) not serving after %v\n%s", p.slot, limit, p.logTail())
	}
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *proc) logTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

func (p *proc) markKilled(t time.Time) {
	p.mu.Lock()
	if p.killedAt.IsZero() {
		p.killedAt = t
	}
	p.mu.Unlock()
}

func (p *proc) killTime() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killedAt
}

// sigstop stops the child, and records when.
func (p *proc) sigstop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	p.stopped = append(p.stopped, span{from: time.Now()})
	return nil
}

// sigcont resumes the child, and records when.
func (p *proc) sigcont() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.cmd.Process.Signal(syscall.SIGCONT)
	if n := len(p.stopped); n > 0 && p.stopped[n-1].to.IsZero() {
		p.stopped[n-1].to = time.Now()
	}
	return err
}

// lastStopped is when the harness last stopped the child, or zero.
func (p *proc) lastStopped() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.stopped); n > 0 {
		return p.stopped[n-1].from
	}
	return time.Time{}
}

func (p *proc) stoppedSpans() []span {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.stopped)
}

// kill SIGKILLs the child and waits for it to be gone.
func (p *proc) kill() {
	if p.alive() {
		p.markKilled(time.Now())
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.exited
}

// stop asks the child to shut down gracefully (SIGTERM), and SIGKILLs it
// after limit.
func (p *proc) stop(limit time.Duration) {
	if !p.alive() {
		return
	}
	_ = p.sigcont() // a stopped child cannot handle SIGTERM
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(limit):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}
