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

// holdEnv, set to a -shm file, makes the test binary a lock holder (see
// TestMain) instead of running the tests.
const holdEnv = "FERRY_CHAOS_TEST_HOLD_WAL_INDEX"

// TestMain runs the tests, or, with holdEnv set, holds the five read-mark
// locks of SQLite's WAL index (bytes 123-127 of the -shm file, after the
// write, checkpoint and recovery locks at 120-122) until its stdin closes:
// what a worker stopped while it updates a read mark holds, as far as a
// reader can tell.
func TestMain(m *testing.M) {
	if shm := os.Getenv(holdEnv); shm != "" {
		f, err := os.OpenFile(shm, os.O_RDWR, 0)
		if err == nil {
			err = syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: 123, Len: 5})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("held")
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStoppedLockHolderIsResumed: a worker stopped while it holds a lock of
// SQLite's WAL index makes every new read of the file fail, after SQLite's
// ten seconds of retries, with SQLITE_PROTOCOL. The zombie scenario must
// take such a stop back and give its probe round up, not fail the run: it
// failed once on a loaded machine with "locking protocol (15)".
func TestStoppedLockHolderIsResumed(t *testing.T) {
	t.Parallel()
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
	holder.Env = append(os.Environ(), holdEnv+"="+path+"-shm")
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

	s := &run{env: &env{opts: &Options{TTL: time.Second}, dbPath: path, store: st, lite: st}, r: &Result{}}
	pr := &zombieProbes{}
	var probeErr error
	var wg sync.WaitGroup
	wg.Go(func() { probeErr = s.probe(ctx, []ferry.Lease{lease}, pr) })
	paused, err := s.pause(ctx, &proc{cmd: holder, pid: holder.Process.Pid}, 0)
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

// stopped reports whether process pid is stopped by a signal, from its
// state in /proc/pid/stat.
func stopped(t *testing.T, pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ...: comm may hold spaces, so read after its ")".
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	return strings.HasPrefix(strings.TrimSpace(rest), "T")
}
