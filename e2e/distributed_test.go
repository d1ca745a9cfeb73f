package e2e_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
)

// These tests run build/sluice.wasm in 3 instances of our Envoy stand-in
// (2 workers each, each instance with its own shared data) against one
// real redis-server, reached through real webdis or through our
// Upstash-protocol server.

func forBothProtocols(t *testing.T, f func(t *testing.T, p distProtocol)) {
	for _, p := range []distProtocol{viaWebdis, viaUpstash} {
		t.Run(string(p), func(t *testing.T) { f(t, p) })
	}
}

func TestDistributedStrictAccuracy(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		be := startDistBackend(t, p)
		// burst: 50 per hour, so nothing refills during the test;
		// sustained: 20/s with no burst.
		cfg := `{"limits":[
		  {"name":"burst","match":{"path":"/burst"},"key":["header:x-key"],"limit":50,"window":"1h","mode":"global","failure_policy":"deny"},
		  {"name":"sustained","match":{"path":"/sustained"},"key":["header:x-key"],"requests_per_second":20,"mode":"global","failure_policy":"deny"}
		],` + be.backendBlock(`"timeout":"500ms","retries":1`) + `}`
		insts := startDistInstances(t, 3, cfg, be.addr)

		ta := burst(t, insts, "/burst", uniqueKey("k1"), 200)
		if ok := ta.get(200); ok != 50 {
			t.Fatalf("a concurrent burst of 200 over 3 instances admitted %d, want exactly 50 (statuses %v)", ok, ta.counts)
		}
		if ta.get(429) != 150 {
			t.Fatalf("statuses %v, want 150 × 429", ta.counts)
		}

		st, elapsed := paced(t, insts, "/sustained", uniqueKey("k2"), 60, 4*time.Second)
		ok := st.get(200)
		ideal := 20 + 20*elapsed.Seconds()
		t.Logf("sustained: admitted %d in %v at 60/s offered; one bucket admits at most %.1f", ok, elapsed, ideal)
		if float64(ok) > ideal+0.5 {
			t.Fatalf("admitted %d, more than one bucket's %.1f", ok, ideal)
		}
		// The bucket is empty from the first second on, so it admits one
		// request per refill; the first and last 50ms carry the rounding.
		if float64(ok) < ideal-2 {
			t.Fatalf("admitted %d, fewer than one bucket's %.1f", ok, ideal)
		}
		if n := sumMetric(insts, "sluice.backend.fallback.deny"); n != 0 {
			t.Fatalf("%d requests fell back on a healthy backend", n)
		}
	})
}

func TestDistributedHybridBounds(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		be := startDistBackend(t, p)
		const limit = 200
		cfg := `{"limits":[{"name":"api","key":["header:x-key"],"requests_per_second":200,"mode":"hybrid","failure_policy":"deny"}],` +
			be.backendBlock(`"timeout":"500ms","retries":1`) + `}`
		insts := startDistInstances(t, 3, cfg, be.addr)
		before := be.evalCalls(t)
		ta, elapsed := paced(t, insts, "/", uniqueKey("hot"), 2*limit, 15*time.Second)
		calls := be.evalCalls(t) - before
		ok := ta.get(200)
		decisions := ok + ta.get(429)
		bound := limit + limit*elapsed.Seconds()
		perK := 1000 * float64(calls) / float64(decisions)
		t.Logf("hybrid %s: %d decisions in %v, admitted %d, bound %.0f (%.3f of it), %d Redis script calls = %.1f per 1000 decisions; leases %d, leased tokens expired unused %d; client-side skips %d",
			p, decisions, elapsed.Round(time.Millisecond), ok, bound, float64(ok)/bound, calls, perK,
			sumMetric(insts, "sluice.backend.lease_calls"), sumMetric(insts, "sluice.backend.lease_expired_tokens"), ta.get(-1))
		if float64(ok) > bound {
			t.Fatalf("admitted %d > capacity + limit × elapsed = %.0f", ok, bound)
		}
		// The bound was tested: the client offered more than it, and
		// some requests were refused for it.
		if float64(decisions) <= bound || ta.get(429) == 0 {
			t.Fatalf("%d decisions, %d refused: the client did not offer more than the bound", decisions, ta.get(429))
		}
		// How close to the bound hybrid mode admits, and how few Redis
		// calls it makes (issue #5's targets: 95 %, 10 per 1000), are
		// wall-clock figures: a loaded machine lowers the first and can
		// raise the second. They are measured by make bench (BENCHMARKS.md
		// section 3), never asserted here.
	})
}

// faultConfig has one global limit per failure policy, chosen by path.
func faultConfig(be *distBackend, backendExtra string) string {
	lim := func(name, policy string) string {
		return `{"name":"` + name + `","match":{"path":"/` + name + `"},"key":["header:x-key"],"limit":100,"window":"1h","mode":"global","failure_policy":"` + policy + `","instances":4}`
	}
	hybrid := `{"name":"hybrid","match":{"path":"/hybrid"},"key":["header:x-key"],"limit":100,"window":"1h","mode":"hybrid","failure_policy":"deny"}`
	return `{"limits":[` + lim("allow", "allow") + "," + lim("deny", "deny") + "," + lim("local", "local") + "," + hybrid + `],` +
		be.backendBlock(`"failure_status":503,"breaker":{"failure_threshold":3,"window":"10s","open_timeout":"1s","half_open_max_requests":1}`+backendExtra) + `}`
}

// faultBudget is the filter's hold bound for the defaults used here
// ((50ms + 15ms) × 2 attempts + 10ms backoff = 140ms) plus the round trip
// through the host on a loaded 2-core machine. Without the bound a frozen
// backend would hold requests until the client's 10s timeout.
const faultBudget = 2*(50+15)*time.Millisecond + 10*time.Millisecond + 850*time.Millisecond

func checkPolicies(t *testing.T, insts []*distInstance, key string) {
	t.Helper()
	for _, c := range []struct {
		path string
		want int
	}{{"/allow", 200}, {"/deny", 503}} {
		for i := range 6 {
			st, d := hit(t, insts[i%len(insts)].base+c.path, key)
			if st != c.want {
				t.Fatalf("%s with Redis unreachable: status %d, want %d", c.path, st, c.want)
			}
			if d > faultBudget {
				t.Fatalf("%s held %v, beyond the budget %v", c.path, d, faultBudget)
			}
		}
	}
	// local: 100 per hour / instances 4 = 25 per instance.
	ok := 0
	for range 30 {
		st, d := hit(t, insts[0].base+"/local", key)
		if st == 200 {
			ok++
		}
		if d > faultBudget {
			t.Fatalf("/local held %v", d)
		}
	}
	if ok != 25 {
		t.Fatalf("failure_policy local admitted %d of 30 on one instance, want 100/4 = 25", ok)
	}
}

func TestDistributedRedisKilled(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		be := startDistBackend(t, p)
		insts := startDistInstances(t, 1, faultConfig(be, ""), be.addr)
		warm := uniqueKey("warm")
		for _, path := range []string{"/allow", "/deny", "/local", "/hybrid"} {
			if st, _ := hit(t, insts[0].base+path, warm); st != 200 {
				t.Fatalf("%s before the fault: %d", path, st)
			}
		}
		// Kill Redis in the middle of a steady stream of requests: none
		// may fail or be held beyond its budget.
		load := make(chan *tally, 1)
		go func() {
			ta, _ := paced(t, insts, "/allow", uniqueKey("mid"), 50, 1500*time.Millisecond)
			load <- ta
		}()
		<-time.After(500 * time.Millisecond) // when the fault strikes, not a synchronisation
		be.redis.Kill()
		mid := <-load
		if mid.get(200) < 70 || len(mid.counts) != 1 {
			t.Fatalf("requests across the kill: %v, want only 200s (allow policy)", mid.counts)
		}
		if mid.max > faultBudget {
			t.Fatalf("a request across the kill was held %v, beyond the budget %v", mid.max, faultBudget)
		}
		// hybrid: what is left of the lease (capacity/20 = 5 tokens, one
		// used) is served, then the lease call fails and deny applies.
		served := 0
		for i := range 10 {
			st, d := hit(t, insts[0].base+"/hybrid", warm)
			if d > faultBudget {
				t.Fatalf("/hybrid request %d held %v", i, d)
			}
			switch st {
			case 200:
				served++
			case 503:
			default:
				t.Fatalf("/hybrid with Redis down: %d", st)
			}
		}
		if served > 4 {
			t.Fatalf("/hybrid admitted %d with Redis down, more than its lease held", served)
		}
		checkPolicies(t, insts, "down")
		if n := sumMetric(insts, "sluice.backend.breaker.opens"); n == 0 {
			t.Fatal("the backend breaker never opened")
		}
		calls := sumMetric(insts, "sluice.backend.calls")
		for range 5 {
			if st, d := hit(t, insts[0].base+"/deny", "open"); st != 503 || d > faultBudget {
				t.Fatalf("while open: %d in %v", st, d)
			}
		}
		if more := sumMetric(insts, "sluice.backend.calls") - calls; more > 1 {
			t.Fatalf("%d backend calls while the breaker is open, want at most one probe", more)
		}

		be.redis.Restart()
		// Recovery: after open_timeout a probe closes the breaker.
		deadline := time.Now().Add(15 * time.Second)
		pace := time.NewTicker(50 * time.Millisecond) // probes are paced; the loop waits on the metric
		defer pace.Stop()
		for sumMetric(insts, "sluice.backend.breaker.closes") == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the backend breaker did not close within 15s of the restart (errors: timeout %d unavailable %d)",
					sumMetric(insts, "sluice.backend.errors.timeout"), sumMetric(insts, "sluice.backend.errors.unavailable"))
			}
			hit(t, insts[0].base+"/deny", uniqueKey("probe"))
			<-pace.C
		}
		// Strict accuracy resumes (the restarted Redis has no scripts: this
		// also recovers from NOSCRIPT).
		timeouts := sumMetric(insts, "sluice.backend.errors.timeout")
		ta := burst(t, insts, "/deny", uniqueKey("after"), 130)
		timeouts = sumMetric(insts, "sluice.backend.errors.timeout") - timeouts
		checkStrictBurst(t, ta, 100, 130, timeouts)
	})
}

func TestDistributedBackendFrozen(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		be := startDistBackend(t, p)
		insts := startDistInstances(t, 1, faultConfig(be, ""), be.addr)
		if st, _ := hit(t, insts[0].base+"/deny", uniqueKey("warm")); st != 200 {
			t.Fatalf("before the fault: %d", st)
		}
		be.freeze()
		defer be.thaw()
		checkPolicies(t, insts, "frozen")
		if n := sumMetric(insts, "sluice.backend.errors.timeout"); n == 0 {
			t.Fatal("a frozen backend produced no timeouts")
		}
		be.thaw()
		deadline := time.Now().Add(15 * time.Second)
		pace := time.NewTicker(50 * time.Millisecond)
		defer pace.Stop()
		for {
			st, _ := hit(t, insts[0].base+"/deny", uniqueKey("thawed"))
			if st == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("still %d 15s after the backend resumed", st)
			}
			<-pace.C
		}
	})
}

func TestDistributedGarbageBackend(t *testing.T) {
	garbage := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) { w.Write([]byte("<html><body>502 Bad Gateway</body></html>")) },
		func(w http.ResponseWriter) { w.Write([]byte(`{"EVALSHA":[1,2]}`)) },
		func(w http.ResponseWriter) { w.Write([]byte(`{"result":[9,9,9,9,9,9]}`)) },
		func(w http.ResponseWriter) { w.WriteHeader(500) },
	}
	var n atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		garbage[int(n.Add(1))%len(garbage)](w)
	}))
	defer ts.Close()
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		be := &distBackend{addr: ts.Listener.Addr().String(), protocol: p}
		garbageRun(t, be)
	})
}

func garbageRun(t *testing.T, be *distBackend) {
	insts := startDistInstances(t, 1, faultConfig(be, ""), be.addr)
	for i := range 12 {
		if st, _ := hit(t, insts[0].base+"/deny", fmt.Sprint("g", i)); st != 503 {
			t.Fatalf("garbage reply %d: status %d, want the deny policy's 503", i, st)
		}
		if st, _ := hit(t, insts[0].base+"/allow", fmt.Sprint("g", i)); st != 200 {
			t.Fatalf("garbage reply %d: status %d, want the allow policy's 200", i, st)
		}
	}
	if m := sumMetric(insts, "sluice.backend.errors.malformed"); m == 0 {
		t.Fatal("garbage was not counted as malformed")
	}
	for _, pl := range insts[0].srv.Plugins() {
		if pl.Traps() != 0 {
			t.Fatalf("the plugin trapped %d times on garbage", pl.Traps())
		}
	}
}

// TestDistributedShippedConfig runs envoy/envoy-distributed.yaml itself
// against a real webdis and Redis.
func TestDistributedShippedConfig(t *testing.T) {
	wasm := builtWasm(t)
	be := startDistBackend(t, viaWebdis)
	cfg, err := envoy.LoadFile(filepath.Join("..", "envoy", "envoy-distributed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	onFreePorts(cfg, echoBackend(t))
	found := false
	for _, c := range cfg.Clusters {
		if c.Name == "webdis" {
			c.Endpoints = []string{be.addr}
			found = true
		}
	}
	if !found {
		t.Fatal("envoy-distributed.yaml has no webdis cluster")
	}
	for _, l := range cfg.Listeners {
		for _, f := range l.HTTPFilters {
			if f.Wasm != nil {
				f.Wasm.CodeFile = wasm
			}
		}
	}
	srv, err := startConfig(t, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	inst := []*distInstance{{srv: srv, base: "http://" + srv.ListenerAddr("ingress")}}
	var ta tally
	key := uniqueKey("k1")
	for range 15 {
		ta.add(hitWith(t, inst[0].base+"/api/checkout", "x-api-key", key))
	}
	if ok := ta.get(200); ok < 10 || ok > 11 {
		t.Fatalf("checkout (global, 10/s) admitted %d of 15 sequential requests, want 10 (11 if a refill landed)", ok)
	}
	if n := sumMetric(inst, "sluice.backend.calls"); n == 0 {
		t.Fatal("no backend calls were made")
	}
}

// TestDistributedUpstashWrongToken: a rejected token is a backend error
// (HTTP 401), not a decision, so the failure policy applies.
func TestDistributedUpstashWrongToken(t *testing.T) {
	be := startDistBackend(t, viaUpstash)
	cfg := strings.Replace(faultConfig(be, ""), upstashToken, "not-the-token", 1)
	insts := startDistInstances(t, 1, cfg, be.addr)
	for i := range 3 {
		if st, _ := hit(t, insts[0].base+"/deny", uniqueKey("tok")); st != 503 {
			t.Fatalf("request %d with a wrong token: %d, want the deny policy's 503", i, st)
		}
	}
	if n := sumMetric(insts, "sluice.backend.errors.http_status"); n == 0 {
		t.Fatal("a 401 was not counted as an http_status error")
	}
	if n := be.evalCalls(t); n != 0 {
		t.Fatalf("%d scripts ran with a wrong token", n)
	}
}

// checkStrictBurst checks a strict (global) burst of n requests against a
// bucket of capacity: it never admits more, and it admits exactly that
// much unless calls timed out. A call that times out may still have run in
// Redis and taken a unit no one was admitted for (the retry, or the deny
// policy, decides instead), so each timeout can cost at most one
// admission; a loaded machine makes the 50ms timeout of these tests
// fire. A 429 means the bucket ran dry, so admissions plus units taken by
// timed-out calls reached the capacity.
func checkStrictBurst(t *testing.T, ta *tally, capacity, n int, timeouts uint64) {
	t.Helper()
	ok := ta.get(200)
	if ok > capacity {
		t.Fatalf("a strict burst admitted %d, more than the capacity %d (statuses %v)", ok, capacity, ta.counts)
	}
	if ta.get(429) > 0 && ok+int(timeouts) < capacity {
		t.Fatalf("a strict burst admitted %d with %d timed-out calls, want at least %d (statuses %v)", ok, timeouts, capacity-int(timeouts), ta.counts)
	}
	if ta.get(200)+ta.get(429)+ta.get(503) != n {
		t.Fatalf("a strict burst answered with unexpected statuses: %v", ta.counts)
	}
	if timeouts == 0 && ok != capacity {
		t.Fatalf("a strict burst without timeouts admitted %d, want exactly %d (statuses %v)", ok, capacity, ta.counts)
	}
}
