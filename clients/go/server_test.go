package bakery_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bakery "github.com/bakery-rs/bakery/clients/go"
)

// serverURL is the base URL of the server TestMain started.
var serverURL string

// helperEnv names the helper mode when the test binary is re-executed as a
// worker process of a multi-process test.
const helperEnv = "BAKERY_GO_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	srv, err := startServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	serverURL = srv.url
	code := m.Run()
	srv.stop()
	os.Exit(code)
}

// server is a `bakery serve` process started for the tests.
type server struct {
	url  string
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// bakeryBin is the server binary: $BAKERY_BIN, or target/debug/bakery of
// the repository this client lives in.
func bakeryBin() (string, error) {
	bin := os.Getenv("BAKERY_BIN")
	if bin == "" {
		_, file, _, _ := runtime.Caller(0)
		bin = filepath.Join(filepath.Dir(file), "..", "..", "target", "debug", "bakery")
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		return "", fmt.Errorf("the bakery server binary %s is missing: build it with "+
			"`cargo build -p bakery-cli --features serve` at the repository root, or set BAKERY_BIN to a built `bakery`", bin)
	}
	return bin, nil
}

func startServer() (*server, error) {
	bin, err := bakeryBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bakery-go-test-")
	if err != nil {
		return nil, err
	}
	uri := os.Getenv("BAKERY_TEST_URI")
	if uri == "" {
		uri = "sqlite://" + filepath.Join(dir, "ids.db")
	}
	cmd := exec.Command(bin, "--uri", uri, "serve", "--listen", "127.0.0.1:0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &server{cmd: cmd, dir: dir, done: make(chan struct{})}
	first := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		first <- line
		_, _ = io.Copy(io.Discard, r)
	}()
	go func() { _ = cmd.Wait(); close(s.done) }()
	select {
	case line := <-first:
		const prefix = "listening on "
		if !strings.HasPrefix(line, prefix) {
			s.stop()
			return nil, fmt.Errorf("the server's first line is %q, want %q...", line, prefix)
		}
		s.url = strings.TrimSpace(strings.TrimPrefix(line, prefix))
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, fmt.Errorf("the server printed no address within 30 s")
	}
	return s, nil
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	os.RemoveAll(s.dir)
}

var uniq atomic.Int64

// unique returns a name no other test (or run) uses.
func unique(prefix string) string {
	return fmt.Sprintf("go-%s-%d-%d-%d", prefix, time.Now().UnixNano(), os.Getpid(), uniq.Add(1))
}

// newClient returns a client of the test server, closed when t ends.
func newClient(t testing.TB, opts ...bakery.Option) *bakery.Client {
	t.Helper()
	c, err := bakery.NewClient(serverURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

// within returns a context that ends after d (and when t ends).
func within(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
