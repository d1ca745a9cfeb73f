package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-proxy/sluice/e2e/host"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/tools/ocibuild/wasmimage"
)

// shippedPluginConfig returns the pluginConfig of envoy/istio/wasmplugin.yaml
// as the JSON string Istio hands Envoy, plus its failStrategy.
func shippedPluginConfig(t *testing.T) (configJSON []byte, failStrategy string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "envoy", "istio", "wasmplugin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var wp struct {
		Spec struct {
			PluginConfig map[string]any `yaml:"pluginConfig"`
			FailStrategy string         `yaml:"failStrategy"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &wp); err != nil {
		t.Fatal(err)
	}
	if wp.Spec.PluginConfig == nil {
		t.Fatal("wasmplugin.yaml has no pluginConfig")
	}
	configJSON, err = json.Marshal(wp.Spec.PluginConfig)
	if err != nil {
		t.Fatal(err)
	}
	return configJSON, wp.Spec.FailStrategy
}

// envoyFailurePolicy maps Istio's failStrategy to the Envoy failure_policy
// Istio generates for it.
func envoyFailurePolicy(t *testing.T, istio string) string {
	switch istio {
	case "FAIL_OPEN":
		return "FAIL_OPEN"
	case "", "FAIL_CLOSE":
		return "FAIL_CLOSED"
	case "FAIL_RELOAD":
		return "FAIL_RELOAD"
	}
	t.Fatalf("unknown failStrategy %q", istio)
	return ""
}

// logSink keeps plugin logs for failure messages.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) log(level host.LogLevel, plugin, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, fmt.Sprintf("[%s][%s] %s", level, plugin, msg))
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// pulledPlugin pushes module as variant v to the registry at addr, pulls it
// back the way Istio does, and starts it in the test host with the shipped
// WasmPlugin's pluginConfig and failStrategy.
func pulledPlugin(t *testing.T, addr string, module []byte, v wasmimage.Variant) (*host.Plugin, *logSink) {
	t.Helper()
	ctx := context.Background()
	pluginJSON, failStrategy := shippedPluginConfig(t)
	img, err := wasmimage.Build(module, v, wasmimage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ref := addr + "/sluice/runnable:" + string(v)
	if _, err := wasmimage.Push(ctx, img, ref, wasmimage.RemoteOptions{}); err != nil {
		t.Fatal(err)
	}
	code, variant, err := wasmimage.ExtractWasm(fetchLikeIstio(t, ref))
	if err != nil || variant != v {
		t.Fatalf("extracting from %s: %q, %v", ref, variant, err)
	}
	if !bytes.Equal(code, module) {
		t.Fatalf("pulled module differs from build/sluice.wasm")
	}

	logs := &logSink{}
	rt := host.NewRuntime(host.RuntimeOptions{Logger: logs.log, LogLevel: host.LogInfo})
	t.Cleanup(func() { _ = rt.Close(ctx) })
	p, err := rt.NewPlugin(ctx, host.PluginConfig{
		// Istio names the filter <namespace>.<name> of the WasmPlugin.
		Name: "istio-ingress.sluice", VMID: "sluice",
		Code: code, Configuration: pluginJSON,
		FailurePolicy: envoyFailurePolicy(t, failStrategy),
	})
	if err != nil {
		t.Fatalf("loading the pulled module: %v\nlogs:\n%s", err, logs)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	return p, logs
}

func serveFrom(t *testing.T, p *host.Plugin, logs *logSink, source string) int {
	t.Helper()
	req := &host.Request{
		Headers:       [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "shop.example.com"}, {":scheme", "https"}},
		SourceAddress: source, DestinationAddress: "10.0.0.2:8443",
		RouteName: "default", ClusterName: "backend",
	}
	upstream := func(ctx context.Context, req *host.Request) (*host.Response, error) {
		return &host.Response{Status: 200, Body: []byte("ok")}, nil
	}
	resp, err := p.Serve(context.Background(), req, upstream)
	if err != nil {
		t.Fatalf("serve: %v\nlogs:\n%s", err, logs)
	}
	return resp.Status
}

// requireModule returns build/sluice.wasm; the header-only stand-in the
// registry test can use would not start.
func requireModule(t *testing.T) []byte {
	t.Helper()
	modulePath := filepath.Join(repoRoot(t), "build", "sluice.wasm")
	module, err := os.ReadFile(modulePath)
	if err != nil {
		if inCI() {
			t.Fatalf("%s is missing; run make build first (CI=true): %v", modulePath, err)
		}
		t.Skipf("%s not found (%v); run make build", modulePath, err)
	}
	return module
}

// TestPulledImageRunsInHost is what a user's proxy does with a release: pull
// the image, take the module out as Istio does, start it with the shipped
// WasmPlugin's configuration, and serve a request through it.
func TestPulledImageRunsInHost(t *testing.T) {
	module := requireModule(t)
	addr := startRegistry(t)
	for _, v := range wasmimage.Variants {
		t.Run(string(v), func(t *testing.T) {
			p, logs := pulledPlugin(t, addr, module, v)
			if s := serveFrom(t, p, logs, "203.0.113.7:40000"); s != 200 {
				t.Fatalf("first request: status %d\nlogs:\n%s", s, logs)
			}
			if p.Traps() != 0 || p.Failed(0) {
				t.Fatalf("%d traps, failed %v\nlogs:\n%s", p.Traps(), p.Failed(0), logs)
			}
		})
	}
}

// TestPulledImageEnforcesShippedLimit checks that the per-IP limit in
// envoy/istio/wasmplugin.yaml is what the pulled module enforces.
func TestPulledImageEnforcesShippedLimit(t *testing.T) {
	module := requireModule(t)
	pluginJSON, _ := shippedPluginConfig(t)
	cfg, err := config.Parse(pluginJSON)
	if err != nil {
		t.Fatalf("shipped pluginConfig: %v", err)
	}
	if len(cfg.Limits) != 1 || cfg.ClientIP.Source != config.ClientIPPeer {
		t.Fatalf("this test expects one per-peer-IP limit in wasmplugin.yaml, got %d limits, client_ip %v", len(cfg.Limits), cfg.ClientIP.Source)
	}
	limit := cfg.Limits[0]
	capacity := limit.Rate.Capacity(limit.Algorithm)
	perSecond := float64(limit.Rate.Limit) / limit.Rate.Window.Seconds()

	addr := startRegistry(t)
	// One variant suffices: both carry the same bytes, which the other test
	// and TestPushAndFetchLikeIstio already establish.
	p, logs := pulledPlugin(t, addr, module, wasmimage.Compat)

	// Enough requests to drain the bucket even if refill is generous.
	requests := int(capacity) * 3
	start := time.Now()
	admitted, limited := 0, 0
	for i := 0; i < requests; i++ {
		switch s := serveFrom(t, p, logs, "203.0.113.7:40000"); s {
		case 200:
			admitted++
		case 429:
			limited++
		default:
			t.Fatalf("request %d: status %d\nlogs:\n%s", i, s, logs)
		}
	}
	elapsed := time.Since(start)
	// The bound comes from the elapsed time rather than a deadline: a slow
	// machine admits a few more, never fewer.
	most := capacity + int64(math.Ceil(perSecond*elapsed.Seconds())) + 1
	if int64(admitted) < capacity || int64(admitted) > most || limited == 0 {
		t.Fatalf("one client: %d admitted, %d limited in %v; want between %d and %d admitted and some limited",
			admitted, limited, elapsed, capacity, most)
	}
	if s := serveFrom(t, p, logs, "198.51.100.9:40000"); s != 200 {
		t.Fatalf("a second client got %d: the limit is per IP, so it must pass", s)
	}
	t.Logf("%d admitted, %d limited in %v (capacity %d, %.0f/s)", admitted, limited, elapsed, capacity, perSecond)
}
