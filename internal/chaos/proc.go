//go:build unix

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
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
	killedAt time.Time // SIGKILL sent by the harness, or the crash line read
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
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a stopped child cannot handle SIGTERM
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(limit):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}
