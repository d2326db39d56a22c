package bakery_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helper returns a command re-running this test binary as a worker process.
func helper(t *testing.T, mode, name string, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "BAKERY_URL="+serverURL, "BAKERY_NAME="+name)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// runAll runs cmds at once and returns their outputs.
func runAll(t *testing.T, cmds []*exec.Cmd) [][]byte {
	t.Helper()
	outs := make([]*bytes.Buffer, len(cmds))
	for i, cmd := range cmds {
		outs[i] = &bytes.Buffer{}
		cmd.Stdout = outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	res := make([][]byte, len(outs))
	for i, o := range outs {
		res[i] = o.Bytes()
	}
	return res
}

func TestProcessesIdsDistinctAndIncreasing(t *testing.T) {
	name := unique("ids")
	var cmds []*exec.Cmd
	for i := 0; i < 4; i++ {
		cmds = append(cmds, helper(t, "ids", name))
	}
	seen := map[uint64]int{}
	for p, out := range runAll(t, cmds) {
		lines := strings.Fields(string(out))
		if len(lines) != 1000 {
			t.Fatalf("process %d printed %d ids, want 1000", p, len(lines))
		}
		var last uint64
		for i, l := range lines {
			id, err := strconv.ParseUint(l, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 && id <= last {
				t.Fatalf("process %d: id %d after %d: not increasing", p, id, last)
			}
			last = id
			if q, dup := seen[id]; dup {
				t.Fatalf("id %d handed out to process %d and %d", id, q, p)
			}
			seen[id] = p
		}
	}
	if len(seen) != 4000 {
		t.Fatalf("%d distinct ids, want 4000", len(seen))
	}
}

// runTogether runs cmds (helpers of criticalSections) at once: it waits
// for every one to say "ready", then lets them all start.
func runTogether(t *testing.T, cmds []*exec.Cmd) {
	t.Helper()
	var stdins []io.WriteCloser
	var readers []*bufio.Reader
	for _, cmd := range cmds {
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stdins = append(stdins, in)
		readers = append(readers, bufio.NewReader(out))
	}
	defer func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Kill()
		}
	}()
	for i, r := range readers {
		if l, err := r.ReadString('\n'); err != nil || l != "ready\n" {
			t.Fatalf("process %d said %q (%v), want ready", i, l, err)
		}
	}
	for _, in := range stdins {
		if _, err := io.WriteString(in, "go\n"); err != nil {
			t.Fatal(err)
		}
		in.Close()
	}
	for i, cmd := range cmds {
		_, _ = io.Copy(io.Discard, readers[i])
		if err := cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
}

// checkLockLog checks a log of enter/exit lines written by processes
// sharing one lock: no two enters without an exit between them, fencing
// tokens increasing, 4 processes writing 20 sections each.
func checkLockLog(data []byte) error {
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 4*20*2 {
		return fmt.Errorf("%d lines, want %d", len(lines), 4*20*2)
	}
	var holder string // "pid token" inside, or ""
	var lastToken uint64
	pids := map[string]bool{}
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			return fmt.Errorf("line %d: %q", i+1, l)
		}
		who := f[1] + " " + f[2]
		pids[f[1]] = true
		tok, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return err
		}
		switch f[0] {
		case "enter":
			if holder != "" {
				return fmt.Errorf("line %d: %s enters while %s holds the lock: overlap", i+1, who, holder)
			}
			if tok <= lastToken {
				return fmt.Errorf("line %d: token %d after %d: fencing tokens must increase", i+1, tok, lastToken)
			}
			holder, lastToken = who, tok
		case "exit":
			if holder != who {
				return fmt.Errorf("line %d: %s exits but %q holds the lock: overlap", i+1, who, holder)
			}
			holder = ""
		default:
			return fmt.Errorf("line %d: %q", i+1, l)
		}
	}
	if len(pids) != 4 {
		return fmt.Errorf("%d processes wrote, want 4", len(pids))
	}
	return nil
}

func lockLog(t *testing.T, mode string) []byte {
	t.Helper()
	name := unique("lock")
	file := filepath.Join(t.TempDir(), "log")
	var cmds []*exec.Cmd
	for i := 0; i < 4; i++ {
		cmds = append(cmds, helper(t, mode, name, "BAKERY_FILE="+file))
	}
	runTogether(t, cmds)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestProcessesLockNeverOverlaps(t *testing.T) {
	if err := checkLockLog(lockLog(t, "lock")); err != nil {
		t.Fatal(err)
	}
}

// The negative control of the overlap check: the same critical sections
// without the lock must be caught overlapping.
func TestProcessesWithoutTheLockOverlap(t *testing.T) {
	err := checkLockLog(lockLog(t, "unguarded"))
	if err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Fatalf("the checker on an unguarded log: %v, want an overlap", err)
	}
	t.Logf("caught: %v", err)
}

func TestProcessStoppedPastTTLLosesItsLock(t *testing.T) {
	name := unique("stopped")
	const ttl = 1500 * time.Millisecond
	cmd := helper(t, "hold", name, fmt.Sprintf("BAKERY_TTL_MS=%d", ttl.Milliseconds()))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
	}()
	var first string
	select {
	case first = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatal("the holder did not acquire within 30 s")
	}
	f := strings.Fields(first)
	if len(f) != 2 || f[0] != "acquired" {
		t.Fatalf("holder said %q", first)
	}
	holderToken, _ := strconv.ParseUint(f[1], 10, 64)

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c := newClient(t)
	ctx := within(t, 30*time.Second)
	g, err := c.Lock(name).Acquire(ctx)
	if err != nil {
		t.Fatalf("the waiter did not get the lock of the stopped holder: %v", err)
	}
	if g.Token() <= holderToken {
		t.Fatalf("waiter's token %d not above the holder's %d", g.Token(), holderToken)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case l, ok := <-lines:
		f := strings.Fields(l)
		if !ok || len(f) != 2 || f[0] != "lost" {
			t.Fatalf("holder said %q (open %v), want lost MS", l, ok)
		}
		ms, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		// The holder's keepalive is bounded by TTL/3 and its TTL timer is
		// overdue: lost fires within TTL/3 + 1 s of the SIGCONT.
		t.Logf("the holder's lost fired %d ms after its SIGCONT", ms)
		if limit := (ttl / 3).Milliseconds() + 1000; ms > limit {
			t.Fatalf("the holder's lost fired %d ms after SIGCONT, want at most TTL/3 + 1 s = %d ms", ms, limit)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the holder's lost did not fire within 30 s of SIGCONT")
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("holder: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the holder did not exit")
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestProcessesOnceRunsExactlyOnce(t *testing.T) {
	name := unique("once")
	file := filepath.Join(t.TempDir(), "runs")
	var cmds []*exec.Cmd
	for i := 0; i < 4; i++ {
		cmds = append(cmds, helper(t, "once", name, "BAKERY_FILE="+file))
	}
	outs := runAll(t, cmds)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	runs := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(runs) != 1 {
		t.Fatalf("the function ran %d times: %q", len(runs), runs)
	}
	ranBy := strings.TrimPrefix(runs[0], "ran ")
	for i, out := range outs {
		if got := strings.TrimSpace(string(out)); got != "result of "+ranBy {
			t.Fatalf("process %d got %q, want the result of %s", i, got, ranBy)
		}
	}
}
