package e2e_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/e2e/host"
	"github.com/sluice-proxy/sluice/internal/fixtures/limits"
)

// The external limit end to end: build/sluice.wasm served from Envoy YAML
// on our host with two workers, a "limits" cluster pointing at a real
// limits service on 127.0.0.1, real HTTP clients. The plugins' clock is
// stepped by the test and their ticks fired by it, so cache and breaker
// times are exact; the clock stands still while a request is served.

// limitsFront serves the limits service with the faults the tests need.
type limitsFront struct {
	svc     *limits.Service
	addr    string
	arrived atomic.Int64 // lookups received, failed ones included
	down    atomic.Bool  // answer 503
	// gate holds lookups, like a slow database.
	gate *holdGate
}

func startLimits(t *testing.T, svc *limits.Service) *limitsFront {
	t.Helper()
	f := &limitsFront{svc: svc, gate: newHoldGate()}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.arrived.Add(1)
		if !f.gate.wait(r.Context()) {
			return
		}
		if f.down.Load() {
			http.Error(w, "limits database unavailable", http.StatusServiceUnavailable)
			return
		}
		svc.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		f.gate.release()
		ts.Close()
	})
	f.addr = ts.Listener.Addr().String()
	return f
}

// extEnv is Envoy instances on a clock the test steps.
type extEnv struct {
	insts []*distInstance

	steppedClock
}

func startExternal(t *testing.T, n int, pluginJSON string, clusters map[string]string) *extEnv {
	t.Helper()
	e := &extEnv{steppedClock: steppedClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	e.insts = startInstances(t, n, func(wasm, backendAddr string) string {
		return pluginYAML(wasm, pluginJSON, backendAddr, clusters)
	}, envoy.Options{Clock: e.clock, ManualTicks: true})
	return e
}

// steppedClock is the plugins' clock in tests that step time themselves;
// the host's goroutines read it.
type steppedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *steppedClock) clock() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *steppedClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// tick fires the tick on every worker of every instance, as Envoy's timer
// would; time does not move.
func (e *extEnv) tick() {
	for _, in := range e.insts {
		for _, p := range in.srv.Plugins() {
			for w := range p.Concurrency() {
				p.Tick(w)
			}
		}
	}
}

// parked counts the paused requests of instance i by worker.
func (e *extEnv) parked(i int) []int {
	var out []int
	for _, p := range e.insts[i].srv.Plugins() {
		for w := range p.Concurrency() {
			out = append(out, p.ParkedStreams(w))
		}
	}
	return out
}

// oneConn is a client that keeps one connection, so all its requests go
// to the worker that accepted it.
func oneConn() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
}

func tenantRequest(t *testing.T, c *http.Client, base, tenant string) int {
	req, err := http.NewRequest("GET", base+"/api/orders?token=s3cret", nil)
	if err != nil {
		t.Error(err)
		return 0
	}
	req.Header.Set("x-tenant-id", tenant)
	req.Header.Set("x-plan", "standard")
	req.Header.Set("authorization", "Bearer s3cret")
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("GET: %v", err)
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// await fires ticks until every request in done has answered.
func (e *extEnv) await(t *testing.T, done <-chan int, n int) []int {
	t.Helper()
	var out []int
	deadline := time.After(30 * time.Second)
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	for len(out) < n {
		select {
		case st := <-done:
			out = append(out, st)
		case <-poll.C:
			e.tick()
		case <-deadline:
			t.Fatalf("%d of %d requests unanswered after 30s", n-len(out), n)
		}
	}
	return out
}

// get sends one request of tenant to instance i through c.
func (e *extEnv) get(t *testing.T, c *http.Client, i int, tenant string) int {
	t.Helper()
	done := make(chan int, 1)
	go func() { done <- tenantRequest(t, c, e.insts[i].base, tenant) }()
	return e.await(t, done, 1)[0]
}

// admitted sends n requests of tenant, alternating between the clients
// (and so the workers), and counts the 200s; anything but 200 or 429
// fails the test.
func (e *extEnv) admitted(t *testing.T, clients []*http.Client, tenant string, n int) int {
	t.Helper()
	ok := 0
	for i := range n {
		switch st := e.get(t, clients[i%len(clients)], i%len(e.insts), tenant); st {
		case 200:
			ok++
		case 429:
		default:
			t.Fatalf("%s: status %d", tenant, st)
		}
	}
	return ok
}

func (e *extEnv) metric(name string) uint64 { return sumMetric(e.insts, name) }

func twoWorkers(t *testing.T, e *extEnv) []*http.Client {
	t.Helper()
	a, b := oneConn(), oneConn()
	// The first connection goes to worker 0, the second to worker 1.
	for _, c := range []*http.Client{a, b} {
		if st := e.get(t, c, 0, "warm-up"); st != 200 && st != 429 {
			t.Fatalf("warm-up: %d", st)
		}
	}
	return []*http.Client{a, b}
}

func externalJSON(extra string) string {
	return `{"external":{"cluster":"limits","timeout":"2s","forward_headers":["x-tenant-id","x-plan"],` +
		`"cache_ttl":"60s","stale_ttl":"10s","max_cached":1000,` +
		`"fallback":{"limit":4,"window":"1h","key":["header:x-tenant-id"]}` + extra + `}}`
}

// hourPlans keep refills out of the way: a tenant gets its quota exactly.
func hourPlans() *limits.Service {
	return limits.New(map[string]limits.Plan{
		"small": {Limit: 3, Window: "1h"},
		"big":   {Limit: 6, Window: "1h"},
		"ten":   {Limit: 10, Window: "1h"},
	}, map[string]string{"acme": "small", "initech": "big", "warm-up": "big"}, "")
}

func TestExternalTenantsEndToEnd(t *testing.T) {
	lf := startLimits(t, hourPlans())
	e := startExternal(t, 1, externalJSON(""), map[string]string{"limits": lf.addr})
	clients := twoWorkers(t, e)
	if got := e.admitted(t, clients, "acme", 5); got != 3 {
		t.Errorf("acme admitted %d of 5 on two workers, want its quota 3", got)
	}
	if got := e.admitted(t, clients, "initech", 8); got != 6 {
		t.Errorf("initech admitted %d of 8, want its quota 6", got)
	}
	// The second worker found the first one's answer in shared data.
	if a, i := lf.svc.Count("acme"), lf.svc.Count("initech"); a != 1 || i != 1 {
		t.Errorf("lookups: acme %d, initech %d; want 1 each, the rest cache hits", a, i)
	}
	if got := e.metric("sluice.external.cache_hits"); got != 4+7+1 {
		t.Errorf("cache hits %d, want 12 (acme 4, initech 7, the second warm-up)", got)
	}
	for _, l := range lf.svc.Lookups() {
		if l.Headers["x-plan"] != "standard" || l.Path != "/api/orders" || l.Method != "GET" {
			t.Errorf("lookup %+v: want method, path without query, and x-plan", l)
		}
		if _, leaked := l.Headers["authorization"]; leaked {
			t.Errorf("authorization was forwarded: %+v", l)
		}
	}
	// A tenant the service does not know (404) gets the fallback, and
	// after 5 failed lookups its breaker stops asking.
	if got := e.admitted(t, clients, "hooli", 7); got != 4 {
		t.Errorf("unknown tenant admitted %d of 7, want the fallback's 4", got)
	}
	if got := lf.svc.Count("hooli"); got != 5 {
		t.Errorf("%d lookups for the unknown tenant, want 5 before the breaker opens", got)
	}
	if got := e.metric("sluice.external.breaker.opens"); got != 1 {
		t.Errorf("breaker opens %d", got)
	}
}

// TestExternalOneLookupAcrossWorkers holds the service while first
// requests of one tenant arrive on both workers: one lookup is made, and
// every request resumes when it answers.
func TestExternalOneLookupAcrossWorkers(t *testing.T) {
	lf := startLimits(t, hourPlans())
	e := startExternal(t, 1, externalJSON(""), map[string]string{"limits": lf.addr})
	lf.gate.hold()
	oneLookupAcrossWorkers(t, e, lf.arrived.Load, lf.gate.release, func() int { return lf.svc.Count("initech") })
}

// oneLookupAcrossWorkers sends first requests of initech (quota 6) to
// both workers while the service holds its lookups (arrived counts the
// lookups received, release lets them answer, lookups counts those
// answered for initech): one lookup is made, and every request resumes
// when it answers.
func oneLookupAcrossWorkers(t *testing.T, e *extEnv, arrived func() int64, release func(), lookups func() int) {
	t.Helper()
	// A new connection per request: connections alternate between workers.
	spread := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	const n = 8
	done := make(chan int, n)
	for range n {
		go func() { done <- tenantRequest(t, spread, e.insts[0].base, "initech") }()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		e.tick()
		p := e.parked(0)
		if arrived() >= 1 && p[0]+p[1] == n {
			if p[0] == 0 || p[1] == 0 {
				t.Fatalf("parked by worker %v: the requests did not reach both workers", p)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lookups %d, parked %v: the requests never all waited", arrived(), p)
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	for range 20 { // every worker polls the entry meanwhile
		e.tick()
	}
	if got := arrived(); got != 1 {
		t.Fatalf("%d lookups in flight for one tenant across workers, want 1", got)
	}
	release()
	statuses := e.await(t, done, n)
	ok := 0
	for _, st := range statuses {
		if st == 200 {
			ok++
		}
	}
	if ok != 6 || lookups() != 1 {
		t.Fatalf("%d of %d admitted after %d lookups; want initech's quota 6 after 1", ok, n, lookups())
	}
	if got := e.metric("sluice.external.waits"); got != n-1 {
		t.Fatalf("waits %d, want %d", got, n-1)
	}
}

// TestExternalOutageEndToEnd takes the service down: the stale answer,
// then the fallback once it is too old, no lookups while the breaker is
// open, one probe, and recovery.
func TestExternalOutageEndToEnd(t *testing.T) {
	svc := hourPlans()
	svc.SetTenant("acme", "ten")
	lf := startLimits(t, svc)
	e := startExternal(t, 1, externalJSON(""), map[string]string{"limits": lf.addr})
	clients := twoWorkers(t, e)
	if got := e.admitted(t, clients, "acme", 1); got != 1 {
		t.Fatal("the first request was refused")
	}
	base := lf.arrived.Load()
	e.advance(61 * time.Second) // past cache_ttl, within stale_ttl
	lf.down.Store(true)
	if got := e.admitted(t, clients, "acme", 5); got != 5 {
		t.Fatalf("under the stale answer admitted %d of 5", got)
	}
	if got := lf.arrived.Load() - base; got != 5 {
		t.Fatalf("%d lookups during the first 5 failures, want 5", got)
	}
	if e.metric("sluice.external.stale_used") != 5 || e.metric("sluice.external.breaker.opens") != 1 {
		t.Fatalf("stale_used %d, breaker opens %d", e.metric("sluice.external.stale_used"), e.metric("sluice.external.breaker.opens"))
	}
	e.advance(10 * time.Second) // the answer is too old now; the breaker is still open
	before := lf.arrived.Load()
	if got := e.admitted(t, clients, "acme", 6); got != 4 {
		t.Fatalf("under the fallback admitted %d of 6, want 4", got)
	}
	if lf.arrived.Load() != before {
		t.Fatalf("%d lookups while the breaker was open", lf.arrived.Load()-before)
	}
	e.advance(20 * time.Second) // 30s after opening: one probe, still down
	e.admitted(t, clients, "acme", 3)
	if got := lf.arrived.Load() - before; got != 1 {
		t.Fatalf("%d lookups half-open, want the one probe", got)
	}
	lf.down.Store(false)
	e.advance(30 * time.Second)
	// The probe succeeds; acme's own bucket has 10 - 1 - 5 = 4 left.
	if got := e.admitted(t, clients, "acme", 6); got != 4 {
		t.Fatalf("after recovery admitted %d of 6, want the 4 left in acme's bucket", got)
	}
	if got := lf.arrived.Load() - before; got != 2 {
		t.Fatalf("%d lookups after the second probe, want 2: the rest are cache hits", got)
	}
	if e.metric("sluice.external.breaker.closes") != 1 {
		t.Fatal("the breaker did not close")
	}
}

// TestExternalGlobalEndToEnd enforces the service's answers in Redis
// across two Envoys.
func TestExternalGlobalEndToEnd(t *testing.T) {
	be := startDistBackend(t, viaWebdis)
	lf := startLimits(t, hourPlans())
	tenant := uniqueKey("acme") // Redis may outlive this run
	lf.svc.SetTenant(tenant, "small")
	cfg := strings.Replace(externalJSON(`,"mode":"global"`), `{"external"`, "{"+be.backendBlock(`"timeout":"2s"`)+`,"external"`, 1)
	e := startExternal(t, 2, cfg, map[string]string{"limits": lf.addr, "redis": be.addr})
	clients := []*http.Client{oneConn(), oneConn()}
	if got := e.admitted(t, clients, tenant, 6); got != 3 {
		t.Fatalf("admitted %d of 6 across two Envoys, want the tenant's quota 3", got)
	}
	// Each Envoy caches in its own shared data.
	if got := lf.svc.Count(tenant); got != 2 {
		t.Fatalf("%d lookups, want one per Envoy", got)
	}
	if calls := be.evalCalls(t); calls < 6 {
		t.Fatalf("%d Redis decisions for 6 global requests", calls)
	}
}

// staticLimits answers every lookup with one plan, in-process: the
// benchmark measures cache hits, which make no call.
type staticLimits struct{ answer []byte }

func (staticLimits) HasCluster(name string) bool { return name == "limits" }

func (s staticLimits) Call(context.Context, string, [][2]string, []byte, [][2]string, time.Duration) (*host.Response, error) {
	return &host.Response{Status: 200, Headers: [][2]string{{"content-type", "application/json"}}, Body: s.answer}, nil
}

// BenchmarkExternalLifecycle compares a request decided from a cached
// answer of the limits service with one local limit of the same key.
func BenchmarkExternalLifecycle(b *testing.B) {
	env := &lifecycleEnv{codes: map[string][]byte{"sluice": wasmModule(b, "sluice")}}
	static := staticLimits{answer: []byte(`{"requests_per_second":1000000000,"tenant_key":"t1"}`)}
	cases := []lifecycleCase{
		{name: "one local limit by tenant", module: "sluice",
			config: `{"limits":[{"name":"tenant","key":["header:x-tenant"],"requests_per_second":1000000000}]}`},
		{name: "external limit, cache hit", module: "sluice", caller: static,
			config: `{"external":{"cluster":"limits","forward_headers":["x-tenant"],"fallback":{"requests_per_second":2}}}`},
		// The answer's backend_url is written into route_header on every
		// request: one header read, one header write, one foreign call.
		{name: "external limit, cache hit, routed", module: "sluice",
			caller: staticLimits{answer: []byte(`{"requests_per_second":1000000000,"tenant_key":"t1","backend_url":"b1"}`)},
			config: `{"external":{"cluster":"limits","forward_headers":["x-tenant"],"route_header":"x-backend","allowed_routes":["b1"],` +
				`"fallback":{"requests_per_second":2}}}`},
	}
	for _, c := range cases {
		b.Run(strings.ReplaceAll(c.name, " ", "_"), func(b *testing.B) { benchLifecycle(b, c, env) })
	}
}
