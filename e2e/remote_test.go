package e2e_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

// checkPluginServes sends one request through listener to the backend and
// checks the plugin counted it, the first request it saw.
func checkPluginServes(t *testing.T, srv *envoy.Server, listener, plugin string) {
	t.Helper()
	if status, body := httpGet(t, "http://"+srv.ListenerAddr(listener)+"/hello"); status != 200 || !strings.Contains(body, `"name":"backend"`) {
		t.Fatalf("through %s: %d %q", plugin, status, body)
	}
	if _, prom := httpGet(t, "http://"+srv.AdminAddr()+"/stats/prometheus"); !strings.Contains(prom, "sluice_requests_total 1") {
		t.Errorf("the plugin did not count the request:\n%s", prom)
	}
}

// builtWasm is the absolute path of build/sluice.wasm. Without it these
// tests prove nothing: in CI that is a failure, locally a skip.
func builtWasm(t *testing.T) string {
	t.Helper()
	return testkit.Built(t, filepath.Join("..", "build", "sluice.wasm"))
}

// echoBackend starts an echo server and returns its host:port.
func echoBackend(t *testing.T) string {
	t.Helper()
	ts := httptest.NewServer(echo.Handler("backend"))
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// onFreePorts moves a shipped config's listeners and admin to free ports
// and its backend cluster to addr, so it can run next to anything else.
func onFreePorts(cfg *envoy.Config, backend string) {
	for _, l := range cfg.Listeners {
		l.Address = "127.0.0.1:0"
	}
	if cfg.Admin != nil {
		cfg.Admin.Address = "127.0.0.1:0"
	}
	for _, c := range cfg.Clusters {
		if c.Name == "backend" {
			c.Endpoints = []string{backend}
		}
	}
}

// startConfig starts cfg and stops it when the test ends; the error is
// Start's.
func startConfig(t *testing.T, cfg *envoy.Config) (*envoy.Server, error) {
	t.Helper()
	return startConfigWith(t, cfg, envoy.Options{})
}

// startConfigWith is startConfig with options; Concurrency and Logger
// default to two workers and no logging.
func startConfigWith(t *testing.T, cfg *envoy.Config, opts envoy.Options) (*envoy.Server, error) {
	t.Helper()
	if opts.Concurrency == 0 {
		opts.Concurrency = 2
	}
	if opts.Logger == nil {
		opts.Logger = envoy.NewLogger(io.Discard, envoy.LevelOff)
	}
	srv := envoy.NewServer(cfg, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		return srv, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return srv, nil
}

// httpGet sends one request on a fresh connection.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// codeServer is a static file server for build/, recording what it was
// asked for, standing in for the HTTP server remote code comes from.
type codeServer struct {
	addr string
	mu   sync.Mutex
	reqs []string // "Host path"
}

func startCodeServer(t *testing.T, dir string) *codeServer {
	t.Helper()
	cs := &codeServer{}
	files := http.FileServer(http.Dir(dir))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.mu.Lock()
		cs.reqs = append(cs.reqs, r.Host+" "+r.URL.Path)
		cs.mu.Unlock()
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	cs.addr = ts.Listener.Addr().String()
	return cs
}

func (cs *codeServer) requests() []string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]string(nil), cs.reqs...)
}

// loadRemoteConfig loads the shipped envoy/envoy-remote.yaml with its code
// cluster pointed at cs.
func loadRemoteConfig(t *testing.T, cs *codeServer) (*envoy.Config, *envoy.WasmFilter) {
	t.Helper()
	cfg, err := envoy.LoadFile("../envoy/envoy-remote.yaml")
	if err != nil {
		t.Fatal(err)
	}
	onFreePorts(cfg, echoBackend(t))
	w := cfg.Listeners[0].HTTPFilters[0].Wasm
	if w == nil || w.Remote == nil {
		t.Fatalf("envoy-remote.yaml: the first http filter has no remote code: %+v", w)
	}
	found := false
	for _, c := range cfg.Clusters {
		if c.Name == w.Remote.Cluster {
			c.Endpoints = []string{cs.addr}
			found = true
		}
	}
	if !found {
		t.Fatalf("envoy-remote.yaml: no cluster %q", w.Remote.Cluster)
	}
	return cfg, w
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestRemoteCodeGoodSHA256 runs envoy/envoy-remote.yaml with the digest of
// the module actually served: the module is fetched through the named
// cluster, loads, and filters traffic.
func TestRemoteCodeGoodSHA256(t *testing.T) {
	wasm := builtWasm(t)
	cs := startCodeServer(t, filepath.Dir(wasm))
	cfg, w := loadRemoteConfig(t, cs)
	w.Remote.SHA256 = fileSHA256(t, wasm)

	srv, err := startConfig(t, cfg)
	if err != nil {
		t.Fatalf("Start with the right sha256: %v", err)
	}
	// Envoy sends the URI's authority and path to whatever host the cluster
	// picks, so the request names 127.0.0.1:8000 while reaching cs.
	if got := cs.requests(); len(got) != 1 || got[0] != "127.0.0.1:8000 /sluice.wasm" {
		t.Errorf("code server saw %q, want one GET for 127.0.0.1:8000 /sluice.wasm", got)
	}
	if n := len(srv.Plugins()); n != 1 {
		t.Fatalf("%d plugins running, want 1", n)
	}
	checkPluginServes(t, srv, cfg.Listeners[0].Name, "the remotely loaded plugin")

	// Validation mode (sluice-envoy --mode validate) fetches through the
	// same cluster without a server.
	code, err := w.LoadCode()
	if err != nil {
		t.Fatalf("LoadCode: %v", err)
	}
	want, _ := os.ReadFile(wasm)
	if string(code) != string(want) {
		t.Errorf("LoadCode returned %d bytes, not the %d of %s", len(code), len(want), wasm)
	}
}

// TestRemoteCodeRefusesToStart: the shipped placeholder digest, a missing
// module and an unreachable server each stop the start with an error that
// says what went wrong, and no listener is ever bound.
// TestRemoteCodeFailureFailsClosed checks Envoy's behaviour when remote code
// cannot be fetched or verified: the proxy still starts, logs why, and the
// filter, having no VM, answers every request per failure_policy (503 with
// envoy-remote.yaml's FAIL_CLOSED) instead of letting it through unfiltered.
func TestRemoteCodeFailureFailsClosed(t *testing.T) {
	wasm := builtWasm(t)
	real := fileSHA256(t, wasm)
	tests := []struct {
		name    string
		modify  func(cfg *envoy.Config, w *envoy.WasmFilter)
		wantErr []string
	}{
		{
			name:    "placeholder sha256",
			modify:  func(*envoy.Config, *envoy.WasmFilter) {},
			wantErr: []string{"sha256 mismatch", strings.Repeat("0", 64), real, "sha256"},
		},
		{
			name: "sha256 of another module",
			modify: func(_ *envoy.Config, w *envoy.WasmFilter) {
				w.Remote.SHA256 = strings.Repeat("ab", 32)
			},
			wantErr: []string{"sha256 mismatch", strings.Repeat("ab", 32), real},
		},
		{
			name: "module not on the server",
			modify: func(_ *envoy.Config, w *envoy.WasmFilter) {
				w.Remote.SHA256 = real
				w.Remote.Path = "/absent.wasm"
			},
			wantErr: []string{"fetch failed", "HTTP 404"},
		},
		{
			name: "server unreachable",
			modify: func(cfg *envoy.Config, w *envoy.WasmFilter) {
				w.Remote.SHA256 = real
				for _, c := range cfg.Clusters {
					if c.Name == w.Remote.Cluster {
						c.Endpoints = []string{testkit.ClosedAddr(t)}
					}
				}
			},
			wantErr: []string{"fetch failed", "wasm_code"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := startCodeServer(t, filepath.Dir(wasm))
			cfg, w := loadRemoteConfig(t, cs)
			tc.modify(cfg, w)
			logs := &testkit.SyncBuffer{}
			srv, err := startConfigWith(t, cfg, envoy.Options{Logger: envoy.NewLogger(logs, envoy.LevelInfo)})
			if err != nil {
				t.Fatalf("Start: %v (Envoy starts and fails the filter instead)", err)
			}
			for _, want := range append(tc.wantErr, "sluice", "http://127.0.0.1:8000/sluice.wasm", "Plugin configured to fail closed failed to load") {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("logs do not contain %q:\n%s", want, logs)
				}
			}
			status, _ := httpGet(t, "http://"+srv.ListenerAddr(cfg.Listeners[0].Name)+"/")
			if status != 503 {
				t.Fatalf("a request through the failed filter got %d, want 503 (FAIL_CLOSED)", status)
			}
			if len(cs.requests()) == 0 && tc.name != "server unreachable" {
				t.Error("the code server was never asked")
			}
		})
	}
}
