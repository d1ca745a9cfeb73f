package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
	"github.com/sluice-proxy/sluice/internal/fixtures/limits"
)

// exampleEnv serves examples/<name>/envoy.yaml on our host with two
// workers, in front of a real echo backend, on free ports. Only addresses
// change; the filter chain and plugin configuration are the shipped ones,
// so this is what `make run EXAMPLE=<name>` serves.
type exampleEnv struct {
	base, admin string
	srv         *envoy.Server
}

func startExample(t *testing.T, name string) *exampleEnv {
	t.Helper()
	return startExampleWith(t, name, echo.Handler(name), nil)
}

// startExampleWith is startExample in front of another backend, with the
// clusters named in upstreams (name → host:port) pointed at servers the
// test runs.
func startExampleWith(t *testing.T, name string, handler http.Handler, upstreams map[string]string) *exampleEnv {
	t.Helper()
	return startExampleEdited(t, name, handler, upstreams, nil)
}

// startExampleEdited is startExampleWith with edit, when not nil, applied
// to the loaded bootstrap before the host starts: for a test that must
// tune one setting of an example, and says why.
func startExampleEdited(t *testing.T, name string, handler http.Handler, upstreams map[string]string, edit func(*envoy.Config)) *exampleEnv {
	t.Helper()
	return startBootstrap(t, filepath.Join("..", "examples", name, "envoy.yaml"), handler, upstreams, edit)
}

// startBootstrap serves the bootstrap at path as startExampleEdited
// serves an example's.
func startBootstrap(t *testing.T, path string, handler http.Handler, upstreams map[string]string, edit func(*envoy.Config)) *exampleEnv {
	t.Helper()
	wasmModule(t, "sluice") // fails under CI when the build is missing
	cfg, err := envoy.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	backend := httptest.NewServer(handler)
	t.Cleanup(backend.Close)
	cfg.Listeners[0].Address = "127.0.0.1:0"
	cfg.Admin.Address = "127.0.0.1:0"
	for _, c := range cfg.Clusters {
		if c.Name == "backend" {
			c.Endpoints = []string{strings.TrimPrefix(backend.URL, "http://")}
		}
		if addr, ok := upstreams[c.Name]; ok {
			c.Endpoints = []string{addr}
		}
	}
	// The YAML names build/sluice.wasm relative to the repository root.
	// Filters before the wasm one (header_to_metadata) come first.
	for _, f := range cfg.Listeners[0].HTTPFilters {
		if f.Wasm != nil {
			f.Wasm.CodeFile = filepath.Join("..", "build", "sluice.wasm")
		}
	}
	srv := envoy.NewServer(cfg, envoy.Options{Concurrency: 2, Logger: envoy.NewLogger(io.Discard, envoy.LevelOff)})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	env := &exampleEnv{base: "http://" + srv.ListenerAddr(cfg.Listeners[0].Name), admin: "http://" + srv.AdminAddr(), srv: srv}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(env.admin + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("host not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling a real condition with a deadline
	}
	return env
}

// clientFrom returns an HTTP client whose connections come from the given
// loopback address, so tests can be several clients on one machine.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}, Timeout: 10 * time.Second}
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func (e *exampleEnv) send(t *testing.T, c *http.Client, method, path string, headers map[string]string) result {
	t.Helper()
	req, err := http.NewRequest(method, e.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, body}
}

// burst sends n requests back to back and returns how many were admitted
// and how long the burst took. Every answer must be 200 or 429.
func (e *exampleEnv) burst(t *testing.T, c *http.Client, n int, method, path string, headers map[string]string) (admitted int, elapsed time.Duration) {
	t.Helper()
	start := time.Now()
	for range n {
		r := e.send(t, c, method, path, headers)
		switch r.status {
		case 200:
			admitted++
		case 429:
		default:
			t.Fatalf("%s %s: status %d %s", method, path, r.status, r.body)
		}
	}
	return admitted, time.Since(start)
}

// wantWithinBucket checks the exactness invariant of a token bucket that
// starts full: over a run of length elapsed it admits at least its
// capacity and never more than capacity + rate × elapsed.
func wantWithinBucket(t *testing.T, what string, admitted int, capacity, ratePerSec float64, elapsed time.Duration) {
	t.Helper()
	upper := capacity + ratePerSec*elapsed.Seconds()
	if float64(admitted) < capacity || float64(admitted) > upper {
		t.Fatalf("%s admitted %d in %v; want between capacity %.0f and %.2f", what, admitted, elapsed, capacity, upper)
	}
}

func (e *exampleEnv) prometheus(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(e.admin + "/stats/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metric returns the value of one Prometheus sample, e.g.
// `sluice_limit_allowed{sluice_limit="per-ip"}`.
func metric(t *testing.T, prom, sample string) float64 {
	t.Helper()
	for _, line := range strings.Split(prom, "\n") {
		if strings.HasPrefix(line, sample+" ") {
			var v float64
			if _, err := fmt.Sscan(strings.TrimPrefix(line, sample+" "), &v); err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no sample %s in /stats/prometheus:\n%s", sample, prom)
	return 0
}

func TestExamplePerIP(t *testing.T) {
	env := startExample(t, "per-ip")
	a, b := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")
	got, el := env.burst(t, a, 20, "GET", "/", nil)
	wantWithinBucket(t, "client 127.0.0.1", got, 7, 5, el)
	r := env.send(t, a, "GET", "/", nil)
	for r.status == 200 { // drain what refilled meanwhile
		r = env.send(t, a, "GET", "/", nil)
	}
	if r.status != 429 || r.header.Get("retry-after") == "" || r.header.Get("x-ratelimit-limit") != "5" {
		t.Fatalf("429 headers: %v", r.header)
	}
	var body map[string]any
	if err := json.Unmarshal(r.body, &body); err != nil || body["error"] != "rate_limited" || body["limit"] != "per-ip" {
		t.Fatalf("429 body %s", r.body)
	}
	if got, el := env.burst(t, b, 3, "GET", "/", nil); got != 3 {
		t.Fatalf("a second client got %d of 3 in %v; its bucket is its own", got, el)
	}
	// X-Forwarded-For from the client is not trusted blindly: Envoy appends
	// the peer, and trusted_hops 1 picks that entry.
	if r := env.send(t, a, "GET", "/", map[string]string{"X-Forwarded-For": "198.51.100.7"}); r.status != 429 {
		t.Fatalf("a forged X-Forwarded-For escaped the limit: status %d", r.status)
	}
	prom := env.prometheus(t)
	if metric(t, prom, `sluice_limit_limited{sluice_limit="per-ip"}`) < 1 {
		t.Fatal("limited counter did not move")
	}
}

func TestExampleAPIKeyTiers(t *testing.T) {
	env := startExample(t, "api-key-tiers")
	c := clientFrom("127.0.0.1")
	basic := map[string]string{"x-api-key": "k1", "x-tier": "basic"}
	premium := map[string]string{"x-api-key": "k2", "x-tier": "premium"}
	got, el := env.burst(t, c, 10, "GET", "/api/x", basic)
	wantWithinBucket(t, "basic", got, 3, 2, el)
	got, el = env.burst(t, c, 40, "GET", "/api/x", premium)
	wantWithinBucket(t, "premium", got, 30, 20, el)
	if r := env.send(t, c, "GET", "/api/x", map[string]string{"x-tier": "basic"}); r.status != 429 {
		t.Fatalf("missing api key with on_missing_key deny: status %d", r.status)
	}
}

func TestExampleTenantScopes(t *testing.T) {
	env := startExample(t, "tenant-scopes")
	c := clientFrom("127.0.0.1")
	h := map[string]string{"x-tenant-id": "t1", "x-policy-id": "p1"}
	got, el := env.burst(t, c, 10, "POST", "/v1/messages", h)
	wantWithinBucket(t, "policy scope", got, 4, 3, el)
	if r := env.send(t, c, "GET", "/v1/other", nil); r.status != 429 {
		t.Fatalf("a request without a tenant: status %d, want 429 (on_missing_key deny)", r.status)
	}
}

func TestExampleHierarchy(t *testing.T) {
	env := startExample(t, "hierarchy")
	c := clientFrom("127.0.0.1")
	got, el := env.burst(t, c, 10, "GET", "/api/users/1", nil)
	wantWithinBucket(t, "/api/users", got, 3, 2, el)
	got, el = env.burst(t, c, 20, "GET", "/api/items", nil)
	wantWithinBucket(t, "/api/items", got, 12, 10, el)
}

func TestExampleBreaker(t *testing.T) {
	env := startExample(t, "breaker")
	c := clientFrom("127.0.0.1")
	for i := range 3 {
		if r := env.send(t, c, "GET", "/status/503", nil); r.status != 503 || strings.Contains(string(r.body), "circuit_open") {
			t.Fatalf("failure %d: %d %s", i, r.status, r.body)
		}
	}
	r := env.send(t, c, "GET", "/", nil)
	var body map[string]any
	if r.status != 503 || json.Unmarshal(r.body, &body) != nil || body["error"] != "circuit_open" || body["upstream"] != "backend" {
		t.Fatalf("open breaker: %d %s", r.status, r.body)
	}
	if ra := r.header.Get("retry-after"); ra != "1" && ra != "2" {
		t.Fatalf("retry-after %q, want the 2s open timeout rounded up", ra)
	}
	prom := env.prometheus(t)
	if metric(t, prom, `sluice_breaker_opens{sluice_breaker="flaky-backend"}`) != 1 ||
		metric(t, prom, `sluice_breaker_state{sluice_breaker="flaky-backend"}`) != 1 ||
		// The per-cluster gauge, labelled through envoy.yaml's stats_tags.
		metric(t, prom, `sluice_breaker_state{sluice_breaker_instance="backend",sluice_breaker="flaky-backend"}`) != 1 {
		t.Fatalf("breaker metrics:\n%s", prom)
	}
}

func TestExampleShadow(t *testing.T) {
	env := startExample(t, "shadow")
	c := clientFrom("127.0.0.1")
	if got, _ := env.burst(t, c, 10, "GET", "/", nil); got != 10 {
		t.Fatalf("shadow mode rejected %d requests", 10-got)
	}
	if metric(t, env.prometheus(t), `sluice_limit_shadow_limited{sluice_limit="per-ip-shadow"}`) < 1 {
		t.Fatal("shadow_limited did not count")
	}
}

// The shadow example tells the real backend which requests it would have
// rejected: exactly the ones counted shadow_limited carry the header, with
// the filter's value replacing the client's.
func TestExampleShadowTellsTheBackend(t *testing.T) {
	var mu sync.Mutex
	var marks []string
	echoShadow := echo.Handler("shadow")
	env := startExampleWith(t, "shadow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		marks = append(marks, strings.Join(r.Header.Values("x-ratelimit-would-limit"), ","))
		mu.Unlock()
		echoShadow.ServeHTTP(w, r)
	}), nil)
	c := clientFrom("127.0.0.1")
	if got, _ := env.burst(t, c, 10, "GET", "/", map[string]string{"x-ratelimit-would-limit": "forged"}); got != 10 {
		t.Fatalf("shadow mode rejected %d requests", 10-got)
	}
	mu.Lock()
	defer mu.Unlock()
	marked := 0
	for i, m := range marks {
		switch m {
		case "true":
			marked++
		case "forged":
			// Admitted: the header is only set on what the limit would
			// reject, and the client's own value passes untouched.
		default:
			t.Fatalf("request %d reached the backend with %q", i, m)
		}
	}
	if len(marks) != 10 || marks[0] != "forged" || marked < 1 {
		t.Fatalf("backend saw %q, want 10 requests, the first admitted", marks)
	}
	if got := metric(t, env.prometheus(t), `sluice_limit_shadow_limited{sluice_limit="per-ip-shadow"}`); got != float64(marked) {
		t.Fatalf("%d requests marked, shadow_limited %v", marked, got)
	}
}

func TestExampleShaping(t *testing.T) {
	env := startExample(t, "shaping")
	c := clientFrom("127.0.0.1")
	got, el := env.burst(t, c, 8, "GET", "/", nil)
	if got != 8 {
		t.Fatalf("shaping rejected %d of 8 sequential requests; each waits at most 200ms of a 1s max_delay", 8-got)
	}
	// Delay keeps the limit exact: 8 admissions from a bucket of 5 at 5/s
	// cannot happen faster than the bucket refills.
	wantWithinBucket(t, "shaped", got, 5, 5, el)
	if metric(t, env.prometheus(t), `sluice_limit_delayed{sluice_limit="shaped"}`) < 3 {
		t.Fatal("delayed counter")
	}
}

// TestExampleBulkhead serves examples/bulkhead in front of a real backend
// that holds every request until the test lets it answer, on two workers.
// Requests start one at a time from new connections, which the host deals
// to the workers in turn, so both workers hold slots. Exactly max_in_flight
// requests reach the backend, the rest are rejected at once; when they end,
// the gauge and every shared-data count are back to zero, and the next
// round admits exactly max_in_flight again.
func TestExampleBulkhead(t *testing.T) {
	const max = 4
	b := &slowBackend{gates: map[string]chan struct{}{}, arrived: make(chan string, 1024)}
	env := startExampleWith(t, "bulkhead", b, nil)
	t.Cleanup(b.shutdown)
	rt := env.srv.Runtime()
	gauge := func(limit string) func() (bool, string) {
		return func() (bool, string) {
			v, ok := promSample(env.prometheus(t), `sluice_concurrency_in_flight{sluice_concurrency="`+limit+`"}`)
			return ok && v == float64(b.inFlight.Load()), fmt.Sprintf("%v (present %v) with %d at the backend", v, ok, b.inFlight.Load())
		}
	}
	for round := 0; round < 2; round++ {
		var held []*inFlightRequest
		rejected := 0
		for range max + 6 {
			r := env.start(t, clientFrom("127.0.0.1"), "/delay/1s", nil)
			if ok, res := r.await(t, b); ok {
				held = append(held, r)
			} else {
				wantRejection(t, res, 503, "slow")
				rejected++
			}
		}
		if len(held) != max || rejected != 6 || b.inFlight.Load() != max {
			t.Fatalf("round %d: %d held (%d at the backend), %d rejected; want exactly %d in flight", round, len(held), b.inFlight.Load(), rejected, max)
		}
		if round == 0 {
			// The heartbeat publishes the gauge within about a second.
			eventually(t, "slow in_flight gauge", gauge("slow"))
			byInstance := countsByInstance(inflightRecords(t, rt, "sluice", "slow"), "slow")
			if len(byInstance) != 2 {
				t.Fatalf("slots held per VM instance %v, want both workers holding", byInstance)
			}
			for id, n := range byInstance {
				if n != max/2 {
					t.Fatalf("instance %d holds %d slots, want %d (requests alternate workers): %v", id, n, max/2, byInstance)
				}
			}
			// Tenants on the default route: 2 each, answered 429.
			tenant := func(id string) map[string]string { return map[string]string{"x-tenant": id} }
			for _, id := range []string{"t1", "t1", "t2"} {
				r := env.start(t, clientFrom("127.0.0.1"), "/", tenant(id))
				if ok, res := r.await(t, b); !ok {
					t.Fatalf("tenant %s refused: %d %s", id, res.status, res.body)
				}
				held = append(held, r)
			}
			r := env.start(t, clientFrom("127.0.0.1"), "/", tenant("t1"))
			if ok, res := r.await(t, b); ok {
				t.Fatal("a third request of tenant t1 reached the backend")
			} else {
				wantRejection(t, res, 429, "per-tenant")
			}
		}
		b.releaseAll()
		for _, r := range held {
			if res := r.wait(t); res.status != 200 {
				t.Fatalf("held request: %d %s", res.status, res.body)
			}
		}
		eventually(t, "gauges back to zero", func() (bool, string) {
			okSlow, s1 := gauge("slow")()
			okTenant, s2 := gauge("per-tenant")()
			return okSlow && okTenant, s1 + "; " + s2
		})
		for _, limit := range []string{"slow", "per-tenant"} {
			for k, es := range inflightRecords(t, rt, "sluice", limit) {
				if len(es) != 0 {
					t.Fatalf("round %d: %s still holds %+v after every request ended", round, k, es)
				}
			}
		}
	}
	if p := b.peak.Load(); p != max+3 {
		t.Fatalf("backend peak %d, want %d slow + 3 tenant requests", p, max)
	}
	prom := env.prometheus(t)
	for s, want := range map[string]float64{
		`sluice_concurrency_admitted{sluice_concurrency="slow"}`:       2 * max,
		`sluice_concurrency_rejected{sluice_concurrency="slow"}`:       12,
		`sluice_concurrency_admitted{sluice_concurrency="per-tenant"}`: 3,
		`sluice_concurrency_rejected{sluice_concurrency="per-tenant"}`: 1,
	} {
		if got := metric(t, prom, s); got != want {
			t.Errorf("%s = %v, want %v", s, got, want)
		}
	}
}

func TestExampleExternalLimits(t *testing.T) {
	svc := limits.Demo()
	ls := httptest.NewServer(svc)
	t.Cleanup(ls.Close)
	premium := httptest.NewServer(echo.Handler("premium"))
	t.Cleanup(premium.Close)
	env := startExampleWith(t, "external-limits", echo.Handler("external-limits"), map[string]string{
		"limits": strings.TrimPrefix(ls.URL, "http://"), "premium": strings.TrimPrefix(premium.URL, "http://")})
	c := clientFrom("127.0.0.1")
	tenant := func(id string) map[string]string { return map[string]string{"x-tenant-id": id, "x-plan": "any"} }
	// umbrella's answer routes it to the premium cluster; mallory's names
	// a backend the example does not allow, and a client cannot pick one.
	for id, want := range map[string]string{"umbrella": "premium", "mallory": "external-limits", "hooli": "external-limits"} {
		h := tenant(id)
		if id == "hooli" {
			h["x-sluice-backend"] = "premium"
		}
		r := env.send(t, c, "GET", "/", h)
		var rep echo.Reply
		if err := json.Unmarshal(r.body, &rep); r.status != 200 || err != nil || rep.Name != want {
			t.Fatalf("%s: %d %s, want it served by %s", id, r.status, r.body, want)
		}
	}
	got, el := env.burst(t, c, 40, "GET", "/", tenant("acme"))
	wantWithinBucket(t, "acme (gold)", got, 30, 20, el)
	got, el = env.burst(t, c, 12, "GET", "/", tenant("initech"))
	wantWithinBucket(t, "initech (silver)", got, 7, 5, el)
	got, el = env.burst(t, c, 6, "GET", "/", tenant("globex"))
	wantWithinBucket(t, "globex (free)", got, 2, 1, el)
	for _, id := range []string{"acme", "initech", "globex"} {
		if n := svc.Count(id); n != 1 {
			t.Errorf("%d lookups for %s within cache_ttl, want 1", n, id)
		}
	}
	r := env.send(t, c, "GET", "/", tenant("globex"))
	if r.status != 429 || r.header.Get("retry-after") == "" {
		t.Fatalf("over quota: %d %v", r.status, r.header)
	}
	var body map[string]any
	if err := json.Unmarshal(r.body, &body); err != nil || body["limit"] != "external" {
		t.Fatalf("429 body %s", r.body)
	}
	prom := env.prometheus(t)
	if metric(t, prom, "sluice_external_cache_hits") < 50 || metric(t, prom, `sluice_limit_limited{sluice_limit="external"}`) < 1 {
		t.Fatalf("external metrics:\n%s", prom)
	}
}
