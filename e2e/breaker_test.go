package e2e_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
)

// Breakers end to end: build/sluice.wasm in our Envoy stand-in (two
// workers), real HTTP clients, and a real backend that fails with the
// status a request asks for (/status/<code>) or holds a request carrying
// x-gate until the test releases it. The plugins' clock is stepped by the
// test, so a held request is exactly as slow as the clock moved while the
// backend held it, and open timeouts pass without waiting. The same
// behaviours are checked in more detail by filtertest's breaker cases,
// natively and on the wasm without HTTP.

// breakerEnv is one host with a breaker configuration.
type breakerEnv struct {
	*exampleEnv
	inst    *distInstance
	backend *slowBackend
	clock   *steppedClock
	client  *http.Client
}

func startBreakerEnv(t *testing.T, pluginJSON string) *breakerEnv {
	t.Helper()
	e := &breakerEnv{clock: &steppedClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, client: clientFrom("127.0.0.1")}
	e.backend, _ = newSlowBackend(t)
	statuses := echo.Handler("breaker")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-gate") != "" {
			e.backend.ServeHTTP(w, r)
			return
		}
		statuses.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		e.backend.shutdown() // a held request must not keep Close waiting
		ts.Close()
	})
	e.inst = startInstances(t, 1, func(wasm, _ string) string {
		return pluginYAML(wasm, pluginJSON, ts.Listener.Addr().String(), nil)
	}, envoy.Options{Clock: e.clock.clock, ManualTicks: true})[0]
	e.exampleEnv = &exampleEnv{base: e.inst.base, srv: e.inst.srv}
	return e
}

// answered sends GET path and checks that the backend's own status came
// back.
func (e *breakerEnv) answered(t *testing.T, path string, status int) {
	t.Helper()
	if r := e.send(t, e.client, "GET", path, nil); r.status != status || r.header.Get("retry-after") != "" {
		t.Fatalf("GET %s: %d %s, want the backend's %d", path, r.status, r.body, status)
	}
}

// held starts GET / that the backend holds, and returns it once it is
// there.
func (e *breakerEnv) held(t *testing.T, gate string) *inFlightRequest {
	t.Helper()
	r := e.start(t, e.client, "/", map[string]string{"x-gate": gate})
	if held, res := r.await(t, e.backend); !held {
		t.Fatalf("the request was answered %d %s, want it at the backend", res.status, res.body)
	}
	return r
}

// slow runs GET / with the backend holding it for d of the plugins' time.
func (e *breakerEnv) slow(t *testing.T, d time.Duration) {
	t.Helper()
	r := e.held(t, "slow")
	e.clock.advance(d)
	e.backend.release("slow")
	if res := r.wait(t); res.status != 200 {
		t.Fatalf("slow call: %d %s", res.status, res.body)
	}
}

// rejected sends GET path and checks the breaker's answer.
func (e *breakerEnv) rejected(t *testing.T, path, retryAfter string) {
	t.Helper()
	r := e.send(t, e.client, "GET", path, nil)
	var body map[string]any
	if r.status != 503 || json.Unmarshal(r.body, &body) != nil || body["error"] != "circuit_open" || body["upstream"] != "backend" {
		t.Fatalf("GET %s: %d %s, want the breaker's 503 circuit_open for backend", path, r.status, r.body)
	}
	if got := r.header.Get("retry-after"); got != retryAfter {
		t.Fatalf("GET %s: retry-after %q, want %q", path, got, retryAfter)
	}
}

// wants checks several metrics of one breaker: each name in want, after
// prefix.
func (e *breakerEnv) wants(t *testing.T, prefix string, want map[string]uint64) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(want)) {
		e.want(t, prefix+name, want[name])
	}
}

// want checks a plugin metric.
func (e *breakerEnv) want(t *testing.T, name string, v uint64) {
	t.Helper()
	if got := e.inst.metric(name); got != v {
		t.Fatalf("%s = %d, want %d", name, got, v)
	}
}

func TestBreakerFailureRateEndToEnd(t *testing.T) {
	e := startBreakerEnv(t, `{"breakers":[{"name":"rate","failure_threshold":0,
		"failure_rate":{"threshold_percent":50,"window":4,"minimum_calls":4},"success_threshold":1,"open_timeout":"2s"}]}`)
	// Alternating, so no streak: the rate alone trips, on the 4th call.
	e.answered(t, "/status/503", 503)
	e.answered(t, "/", 200)
	e.answered(t, "/status/500", 500)
	e.want(t, "sluice.breaker.rate.state", 0)
	e.answered(t, "/", 200)
	e.wants(t, "sluice.breaker.rate.", map[string]uint64{"state": 1, "backend.state": 1})
	e.rejected(t, "/", "2")

	e.clock.advance(2 * time.Second)
	probe := e.held(t, "probe")
	e.want(t, "sluice.breaker.rate.state", 2)
	// The only probe slot is taken: no known deadline, the minimum.
	e.rejected(t, "/", "1")
	e.backend.release("probe")
	if r := probe.wait(t); r.status != 200 {
		t.Fatalf("probe: %d", r.status)
	}
	e.want(t, "sluice.breaker.rate.state", 0)
	e.answered(t, "/status/503", 503) // 1 of 4: the window restarted
	e.answered(t, "/", 200)
	e.wants(t, "sluice.breaker.rate.", map[string]uint64{"opens": 1, "closes": 1, "rejected": 2})
}

func TestBreakerSlowCallEndToEnd(t *testing.T) {
	e := startBreakerEnv(t, `{"breakers":[{"name":"latency","failure_threshold":0,
		"failure_rate":{"threshold_percent":100,"window":2,"minimum_calls":2},
		"slow_call":{"duration":"100ms","threshold_percent":50},"success_threshold":1,"open_timeout":"1s"}]}`)
	e.slow(t, 100*time.Millisecond) // not slower than duration
	e.answered(t, "/", 200)
	e.wants(t, "sluice.breaker.latency.", map[string]uint64{"slow_calls": 0, "state": 0})
	e.answered(t, "/", 200)
	e.slow(t, 150*time.Millisecond) // 1 slow of the last 2: 50%
	e.wants(t, "sluice.breaker.latency.", map[string]uint64{"slow_calls": 1, "state": 1})
	e.rejected(t, "/", "1")

	e.clock.advance(time.Second)
	e.slow(t, 150*time.Millisecond) // a slow probe re-opens
	e.want(t, "sluice.breaker.latency.opens", 2)
	e.rejected(t, "/", "1")
	e.clock.advance(time.Second)
	e.answered(t, "/", 200)
	e.wants(t, "sluice.breaker.latency.", map[string]uint64{"state": 0, "failures": 0, "closes": 1})
}

func TestBreakerModesEndToEnd(t *testing.T) {
	e := startBreakerEnv(t, `{"breakers":[
		{"name":"watch","match":{"path_prefix":"/status/"},"mode":"metrics_only","failure_threshold":2,"open_timeout":"5s"},
		{"name":"idle","match":{"path_prefix":"/status/"},"mode":"disabled","failure_threshold":1},
		{"name":"cut","match":{"path_prefix":"/cut"},"mode":"forced_open"}]}`)
	for range 4 {
		e.answered(t, "/status/503", 503)
	}
	e.answered(t, "/status/200", 200)
	// metrics_only opened after two failures and rejected nothing;
	// disabled recorded nothing.
	e.wants(t, "sluice.breaker.watch.", map[string]uint64{"state": 1, "opens": 1, "rejected": 0})
	e.wants(t, "sluice.breaker.idle.", map[string]uint64{"failures": 0, "opens": 0})

	for range 2 {
		e.rejected(t, "/cut", "1")
	}
	e.answered(t, "/", 200) // matched by none
	e.wants(t, "sluice.breaker.cut.", map[string]uint64{"rejected": 2, "opens": 0})
}
