//go:build linux

package chaos

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/sqlite"
)

// holdEnv, set to "FILE START LEN", makes the test binary a lock holder
// (see TestMain) instead of running the tests.
const holdEnv = "FERRY_CHAOS_TEST_HOLD_LOCK"

// SQLite's WAL-index locks are bytes of the -shm file: the write lock at
// 120, then the checkpoint and recovery locks, then the five read marks'
// locks at 123-127.
const (
	walWriteLock = 120
	walReadLocks = 123
)

// TestMain runs the tests, or, with holdEnv set, holds an exclusive lock on
// the bytes it names until its stdin closes, as a stopped worker would.
func TestMain(m *testing.M) {
	if hold := os.Getenv(holdEnv); hold != "" {
		var file string
		var lk syscall.Flock_t
		_, err := fmt.Sscan(hold, &file, &lk.Start, &lk.Len)
		var f *os.File
		if err == nil {
			f, err = os.OpenFile(file, os.O_RDWR, 0)
		}
		if err == nil {
			lk.Type, lk.Whence = syscall.F_WRLCK, io.SeekStart
			err = syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("held")
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	// A race-built child sleeps 1 s at exit (the race runtime's
	// atexit_sleep_ms), and the scenarios kill and restart hundreds: 50 ms
	// lets a report already being written finish. A GORACE the caller set
	// wins.
	os.Setenv("GORACE", strings.TrimSpace("atexit_sleep_ms=50 "+os.Getenv("GORACE")))
	dir, err := os.MkdirTemp("", "ferry-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestStoppedLockHolderIsResumed: a worker stopped while it holds the
// WAL-index lock new readers need makes every new read of the file fail,
// after SQLite's ten seconds of retries, with SQLITE_PROTOCOL. The zombie
// scenario must take such a stop back and give its probe round up, not
// fail the run: it failed once on a loaded machine with "locking protocol
// (15)". Holding all five read-mark locks forces that answer on every read
// path; a worker stopped between setting the read mark every reader picks
// and unlocking it holds one, with the same effect.
func TestStoppedLockHolderIsResumed(t *testing.T) {
	t.Parallel()
	s, holder, lease := lockedStore(t, walReadLocks, 5)
	pr := &zombieProbes{}
	var probeErr error
	var wg sync.WaitGroup
	wg.Go(func() { probeErr = s.probe(t.Context(), []ferry.Lease{lease}, pr) })
	paused, err := s.pause(t.Context(), &proc{cmd: holder, pid: holder.Process.Pid}, 0)
	wg.Wait()
	if err != nil || paused {
		t.Errorf("pause of the lock holder: paused=%v, %v; want it taken back", paused, err)
	}
	if stopped(t, holder.Process.Pid) {
		t.Errorf("the lock holder was left stopped")
	}
	if probeErr != nil || pr.busy != 1 || pr.expired+pr.reclaimed+pr.other != 0 {
		t.Errorf("probe: %v, %+v; want the round given up (busy=1) and nothing counted as probed", probeErr, pr)
	}
}

// TestProbeRefusedTheWriteLockIsNotTested: a stale write whose BEGIN waited
// out the busy timeout behind another process's write lock never reached
// the fence: its round is given up, neither a refusal nor a failed run.
func TestProbeRefusedTheWriteLockIsNotTested(t *testing.T) {
	t.Parallel()
	s, _, lease := lockedStore(t, walWriteLock, 1)
	pr := &zombieProbes{}
	if err := s.probe(t.Context(), []ferry.Lease{lease}, pr); err != nil || pr.busy != 1 || pr.expired+pr.refused+pr.accepted != 0 {
		t.Errorf("probe: %v, %+v; want the round given up (busy=1), nothing refused or accepted", err, pr)
	}
}

// lockedStore makes a SQLite store holding one event whose lease has
// expired, and a child process holding n lock bytes of its -shm file from
// start; it returns a run on the store, the child and the lease.
func lockedStore(t *testing.T, start, n int) (*run, *exec.Cmd, ferry.Lease) {
	t.Helper()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "ferry.db")
	st, err := sqlite.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_1", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	claims, err := st.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "zombie", Limit: 1, TTL: time.Millisecond})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v, %v", claims, err)
	}
	lease := claims[0].Event.Lease()

	holder := exec.Command(os.Args[0])
	holder.Env = append(os.Environ(), fmt.Sprintf("%s=%s-shm %d %d", holdEnv, path, start, n))
	holder.Stderr = os.Stderr
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = holder.Process.Signal(syscall.SIGCONT)
		_ = stdin.Close()
		_ = holder.Wait()
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "held\n" {
		t.Fatalf("the holder said %q, %v", line, err)
	}
	return &run{env: &env{opts: &Options{TTL: time.Second}, dbPath: path, store: st, lite: st}, r: &Result{}}, holder, lease
}

// stopped reports whether process pid is stopped by a signal, from its
// state in /proc/pid/stat.
func stopped(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ...: comm may hold spaces, so read after its ")".
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	return strings.HasPrefix(strings.TrimSpace(rest), "T")
}
