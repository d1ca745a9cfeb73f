package host

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
	"github.com/sluice-proxy/sluice/internal/fixtures/wabt"
)

func repoRoot(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// guest loads build/<name>.wasm from the repository root.
func guest(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(testkit.Built(t, filepath.Join(repoRoot(t), "build", name)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wat compiles WAT source with wat2wasm.
func wat(t testing.TB, src string) []byte {
	t.Helper()
	return wabt.Bytes(t, src)
}

type logLine struct {
	level  LogLevel
	plugin string
	msg    string
}

type logSink struct {
	mu    sync.Mutex
	lines []logLine
}

func (l *logSink) log(level LogLevel, plugin, msg string) {
	l.mu.Lock()
	l.lines = append(l.lines, logLine{level, plugin, msg})
	l.mu.Unlock()
}

func (l *logSink) contains(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.lines {
		if strings.Contains(x.msg, sub) {
			return true
		}
	}
	return false
}

func (l *logSink) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, len(l.lines))
	for i, x := range l.lines {
		out[i] = x.msg
	}
	return out
}

func newRT(t testing.TB, p Profile) (*Runtime, *logSink) {
	t.Helper()
	sink := &logSink{}
	r := NewRuntime(RuntimeOptions{Profile: p, Logger: sink.log})
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r, sink
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
}

func okUpstream(status int, body string, headers ...[2]string) Upstream {
	return func(ctx context.Context, req *Request) (*Response, error) {
		return &Response{Status: status, Body: []byte(body), Headers: headers}, nil
	}
}

func getReq(worker int, path string) *Request {
	return &Request{Worker: worker, Headers: [][2]string{{":method", "GET"}, {":path", path}, {":authority", "example.com"}, {":scheme", "http"}},
		SourceAddress: "10.0.0.1:1234", DestinationAddress: "127.0.0.1:10000", RouteName: "default", ClusterName: "backend", RequestID: "rid-1"}
}

type stringsBuilder = strings.Builder

var (
	probeOnce sync.Once
	probeCode []byte
	probeErr  error
	probeDir  string
)

// probe builds testdata/probe with the same bridge and flags as
// build/sluice.wasm (needs `make build` to have prepared build/go.wasm.mod).
func probe(t testing.TB) []byte {
	t.Helper()
	root := repoRoot(t)
	mod := testkit.Built(t, filepath.Join(root, "build", "go.wasm.mod"))
	probeOnce.Do(func() {
		probeDir, probeErr = os.MkdirTemp("", "hostprobe")
		if probeErr != nil {
			return
		}
		out := filepath.Join(probeDir, "probe.wasm")
		cmd := exec.Command("go", "build", "-modfile="+mod, "-tags", "sluice_bridge", "-buildmode=c-shared", "-trimpath", "-o", out, "./e2e/host/testdata/probe")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if msg, err := cmd.CombinedOutput(); err != nil {
			probeErr = err
			probeCode = msg
			return
		}
		probeCode, probeErr = os.ReadFile(out)
	})
	if probeErr != nil {
		t.Fatalf("building probe guest: %v\n%s", probeErr, probeCode)
	}
	return probeCode
}

func TestMain(m *testing.M) {
	code := m.Run()
	if probeDir != "" {
		os.RemoveAll(probeDir)
	}
	os.Exit(code)
}

func (l *logSink) containsAll(subs ...string) bool {
	for _, m := range l.messages() {
		all := true
		for _, s := range subs {
			if !strings.Contains(m, s) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}
