package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/sluice-proxy/sluice/e2e/host"
	"github.com/sluice-proxy/sluice/internal/fixtures/redistest"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
	"github.com/sluice-proxy/sluice/internal/fixtures/wabt"
)

// lifecycleCase is one filter configuration whose per-request cost is
// measured in our host: a whole stream (context create, request headers,
// the upstream, response headers, log, done, delete) on one worker.
type lifecycleCase struct {
	name   string
	module string
	config string
	// lease marks the hybrid case: its plugin reaches a real Redis through
	// webdis, and the guest's clock is stopped once the first lease is
	// granted, so the lease neither expires nor asks for renewal and every
	// measured request is served from it. What renewals cost at steady
	// state is in the distributed section (Redis calls per decision).
	lease bool
	// caller, when set, serves the plugin's proxy_http_calls in-process.
	caller host.Caller
	// clockStep, when set, stops the guest's clock and moves it by this
	// much before each request, so that a window's state is the same in
	// every run whatever the machine's speed.
	clockStep time.Duration
	// floorCounts, for the floor modules, is how much each request adds
	// to their noop.floor counter: warm-up checks it, so a module whose
	// hostcalls fail cannot pass for a fast one.
	floorCounts int
}

var lifecycleCases = []lifecycleCase{
	{name: "noop SDK filter", module: "noop", config: `{}`},
	// Hand-written WAT (e2e/testdata/wat), nothing between the host and
	// the hostcalls: the physical limits of this host. The no-op is what
	// a stream's callbacks cost alone; the floor makes exactly the
	// hostcalls of the Go floor below with a bump allocator.
	{name: "WAT no-op", module: "wat:noop", config: `{}`},
	{name: "WAT floor of one limit + one breaker", module: "wat:floor", config: `{}`, floorCounts: 3},
	{name: "sluice, empty config (issue 2's minimal filter)", module: "sluice", config: `{}`},
	{name: "sluice, no matching limit", module: "sluice", config: `{"limits":[{"name":"other","match":{"path_prefix":"/nothing-here"},"key":[],"requests_per_second":10}]}`},
	{name: "one local limit", module: "sluice", config: `{"limits":[{"name":"per-ip","key":["client_ip"],"requests_per_second":1000000000}]}`},
	{name: "one limit + one breaker", module: "sluice", config: `{"limits":[{"name":"per-ip","key":["client_ip"],"requests_per_second":1000000000}],"breakers":[{"name":"backend"}]}`},
	// The floor under the case above: a no-op making only the hostcalls
	// that case cannot avoid (see e2e/noop).
	{name: "hostcall floor of one limit + one breaker", module: "noop", config: `{"floor":true}`, floorCounts: 3},
	// Below any design: the client address, the response status, the
	// default response's five headers and one counter.
	{name: "hostcall floor of the default response alone", module: "noop", config: `{"floor":"minimal"}`, floorCounts: 1},
	{name: "one concurrency limit", module: "sluice", config: `{"concurrency":[{"name":"per-route","key":["route"],"max_in_flight":1000000000}]}`},
	{name: "three scoped limits", module: "sluice", config: `{"limits":[
		{"name":"global","key":[],"requests_per_second":1000000000},
		{"name":"tenant","key":["header:x-tenant"],"requests_per_second":1000000000},
		{"name":"per-ip","match":{"path_prefix":"/api"},"key":["client_ip"],"requests_per_second":1000000000}]}`},
	{name: "hybrid global limit, served from its lease", module: "sluice", lease: true, config: `{
		"limits":[{"name":"global","key":[],"requests_per_second":1000000000,"mode":"hybrid","failure_policy":"deny"}],
		"backend":{"cluster":"redis","protocol":"webdis","timeout":"2s"}}`},
	// Issue 16: each is "one local limit" plus one new key or match, and
	// must stay within 15% of it. The client (10.1.2.3) is outside the
	// exemption list, so the limit still runs after the lookup.
	{name: "one local limit exempting 1,000 CIDRs", module: "sluice", config: `{"limits":[{"name":"per-ip","key":["client_ip"],"requests_per_second":1000000000,
		"match":{"not":{"client_cidrs":[` + benchCIDRs(1000) + `]}}}]}`},
	{name: "one local limit with a regex header match", module: "sluice", config: `{"limits":[{"name":"per-ip","key":["client_ip"],"requests_per_second":1000000000,
		"match":{"headers":[{"name":"x-tenant","regex":"t[0-9]+"}]}}]}`},
	{name: "one local limit keyed by query:user", module: "sluice", config: `{"limits":[{"name":"per-user","key":["query:user"],"requests_per_second":1000000000}]}`},
	// Issue 18: the sliding log costs at most 1.5× the sliding window at
	// limit 100. One request per 10.5ms of a 1s window keeps 95 requests
	// in the log, every one admitted: the log's steady state near its
	// limit, and the same traffic for the counter.
	{name: "one local sliding window at limit 100", module: "sluice", clockStep: 10500 * time.Microsecond,
		config: `{"limits":[{"name":"per-ip","key":["client_ip"],"limit":100,"window":"1s","algorithm":"sliding_window"}]}`},
	{name: "one local sliding log at limit 100", module: "sluice", clockStep: 10500 * time.Microsecond,
		config: `{"limits":[{"name":"per-ip","key":["client_ip"],"limit":100,"window":"1s","algorithm":"sliding_log"}]}`},
}

// benchCIDRs lists n /24 prefixes of 172.16.0.0/12 as JSON strings.
func benchCIDRs(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"172.%d.%d.0/24"`, 16+i/256, i%256)
	}
	return b.String()
}

// lifecycleEnv is what the cases share in one run: the modules and, for
// the lease case, a webdis in front of a redis-server.
type lifecycleEnv struct {
	codes  map[string][]byte
	webdis string // host:port; "" until a lease case needs it
}

func newLifecycleEnv(t testing.TB) *lifecycleEnv {
	env := &lifecycleEnv{codes: map[string][]byte{}}
	for _, c := range lifecycleCases {
		env.codes[c.module] = lifecycleModule(t, c.module)
		if c.lease && env.webdis == "" {
			r := redistest.StartRedis(t)
			env.webdis = redistest.StartWebdis(t, r.Addr()).Addr()
		}
	}
	return env
}

// lifecycleModule is build/<name>.wasm, or for "wat:<name>" the module
// assembled from e2e/testdata/wat/<name>.wat.
func lifecycleModule(t testing.TB, module string) []byte {
	if name, ok := strings.CutPrefix(module, "wat:"); ok {
		return wabt.Bytes(t, watSource(t, name))
	}
	return wasmModule(t, module)
}

// watSource is the text of e2e/testdata/wat/<name>.wat.
func watSource(t testing.TB, name string) string {
	src, err := os.ReadFile(filepath.Join("testdata", "wat", name+".wat"))
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// The floor modules' counter, as e2e/noop and floor.wat name it.
const floorCounter = "noop.floor"

var benchRequest = &host.Request{
	Headers:       [][2]string{{":method", "GET"}, {":path", "/api/items?page=2&user=u1"}, {":authority", "example.com"}, {":scheme", "http"}, {"x-tenant", "t1"}},
	SourceAddress: "10.1.2.3:5000", RouteName: "default", ClusterName: "backend",
}

var benchResponse = &host.Response{Status: 200, Headers: [][2]string{{"content-type", "text/plain"}}}

func benchUpstream(context.Context, *host.Request) (*host.Response, error) { return benchResponse, nil }

// startLifecycle starts c's plugin on one worker and warms it up: the
// first requests create slots and grow the heap (and, for the lease case,
// take the lease). ctx reaches compilation, which is where a function
// listener is attached; hostcall, if not nil, sees every host crossing
// (host.RuntimeOptions.Hostcall). step, called before each request,
// moves the case's stepped clock.
func startLifecycle(tb testing.TB, ctx context.Context, c lifecycleCase, env *lifecycleEnv, hostcall func(string)) (*host.Runtime, *host.Plugin, func()) {
	tb.Helper()
	opts := host.RuntimeOptions{Logger: func(host.LogLevel, string, string) {}, Hostcall: hostcall}
	var stopped atomic.Bool
	frozenAt := time.Now()
	var stepped atomic.Int64
	// step is called before each request: it moves a stepped clock.
	step := func() {}
	if c.clockStep > 0 {
		stepped.Store(frozenAt.UnixNano())
		opts.Clock = func() time.Time { return time.Unix(0, stepped.Load()) }
		step = func() { stepped.Add(int64(c.clockStep)) }
	}
	if c.lease {
		opts.Clock = func() time.Time {
			if stopped.Load() {
				return frozenAt
			}
			return time.Now()
		}
	}
	rt := host.NewRuntime(opts)
	tb.Cleanup(func() { rt.Close(context.Background()) })
	cfg := host.PluginConfig{Name: "bench", RootID: "bench", VMID: "bench", Code: env.codes[c.module],
		Configuration: []byte(c.config), Concurrency: 1}
	if c.lease {
		cfg.Caller = &webdisCaller{addr: env.webdis}
	} else if c.caller != nil {
		cfg.Caller = c.caller
	}
	p, err := rt.NewPlugin(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if c.lease {
		// The first request waits for the lease (script load and lease
		// call, sent from the tick on the real clock); then the clock
		// stops for good, with the lease fresh.
		r, err := p.Serve(ctx, benchRequest, benchUpstream)
		if err != nil || r.Status != 200 {
			tb.Fatalf("taking the lease: response %+v, err %v", r, err)
		}
		frozenAt = time.Now()
		stopped.Store(true)
	}
	counted, _ := rt.Stats().Lookup(floorCounter)
	const warmUp = 1000
	for range warmUp {
		step()
		if r, err := p.Serve(ctx, benchRequest, benchUpstream); err != nil || r.Status != 200 {
			tb.Fatalf("warm-up: response %+v, err %v", r, err)
		}
	}
	if c.floorCounts != 0 {
		if after, _ := rt.Stats().Lookup(floorCounter); after-counted != uint64(c.floorCounts*warmUp) {
			tb.Fatalf("%s: %s went up by %d over %d requests, want %d each: its hostcalls did not all run", c.name, floorCounter, after-counted, warmUp, c.floorCounts)
		}
	}
	return rt, p, step
}

func benchLifecycle(b *testing.B, c lifecycleCase, env *lifecycleEnv) {
	ctx := context.Background()
	rt, p, step := startLifecycle(b, ctx, c, env, nil)
	calls, _ := rt.Stats().Lookup("sluice.backend.calls")
	var failed error
	b.ReportAllocs()
	b.ResetTimer()
	// The streams run on the worker's own loop, as an Envoy worker thread
	// runs a stream's callbacks: no goroutine handoff between them (what
	// real traffic pays for those is in the traffic section).
	err := rt.OnWorker(ctx, benchRequest.Worker, func(ctx context.Context) {
		for range b.N {
			step()
			r, err := p.Serve(ctx, benchRequest, benchUpstream)
			if err != nil || r.Status != 200 {
				// Not b.Fatalf: it would end the loop's goroutine.
				failed = fmt.Errorf("status %v err %v", r, err)
				return
			}
		}
	})
	b.StopTimer()
	if err = errors.Join(err, failed); err != nil {
		b.Fatal(err)
	}
	if p.Traps() != 0 {
		b.Fatalf("%d traps", p.Traps())
	}
	if after, _ := rt.Stats().Lookup("sluice.backend.calls"); after != calls {
		b.Fatalf("%d backend calls during the measured requests: they were not all served from the lease", after-calls)
	}
}

// webdisCaller is the "redis" cluster for the lease case: the plugin's
// proxy_http_call goes to a real webdis over HTTP.
type webdisCaller struct{ addr string }

func (w *webdisCaller) HasCluster(name string) bool { return name == "redis" }

func (w *webdisCaller) Call(ctx context.Context, _ string, headers [][2]string, body []byte, _ [][2]string, _ time.Duration) (*host.Response, error) {
	method, path := "GET", "/"
	for _, h := range headers {
		switch h[0] {
		case ":method":
			method = h[1]
		case ":path":
			path = h[1]
		}
	}
	status, hs, rb, err := testkit.RoundTrip(ctx, method, "http://"+w.addr+path, headers, body)
	if err != nil {
		return nil, err
	}
	return &host.Response{Status: status, Headers: hs, Body: rb}, nil
}

// mallocCounter counts calls to runtime.mallocgc, the Go runtime's one
// entry point for heap allocation (newobject, makeslice, growslice,
// string concatenation and conversions all go through it), so a count per
// request is the guest's allocations per request, which the host cannot
// otherwise see. A goroutine switch inside mallocgc unwinds and re-enters
// it on wasm and would count twice; after warm-up that is rare enough not
// to move the one-decimal figure.
type mallocCounter struct{ n atomic.Uint64 }

// guestMallocs is the one counter every instrumented compilation gets:
// wazero's compilation cache, shared by all our runtimes, keeps the
// listener of a module's first instrumented compilation, so a counter per
// measurement would stop counting after the first. Measurements run one
// at a time and take deltas.
var guestMallocs = &mallocCounter{}

func (m *mallocCounter) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	if def.Name() == "runtime.mallocgc" {
		return m
	}
	return nil
}

func (m *mallocCounter) Before(context.Context, api.Module, api.FunctionDefinition, []uint64, experimental.StackIterator) {
	m.n.Add(1)
}

func (m *mallocCounter) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}

func (m *mallocCounter) Abort(context.Context, api.Module, api.FunctionDefinition, error) {}

// guestAllocs is c's allocations per request inside the guest, over n
// requests after warm-up. It compiles the module with the listener, so it
// runs apart from the timed benchmarks.
func guestAllocs(t testing.TB, c lifecycleCase, env *lifecycleEnv, n int) float64 {
	counter := guestMallocs
	ctx := experimental.WithFunctionListenerFactory(context.Background(), counter)
	before := counter.n.Load()
	_, p, step := startLifecycle(t, ctx, c, env, nil)
	start := counter.n.Load()
	if start == before {
		// Start-up allocates, so nothing counted means nothing listened:
		// a module without its name section, or a renamed runtime.mallocgc.
		t.Fatalf("%s: no runtime.mallocgc calls during start-up and warm-up: the listener is not attached", c.name)
	}
	for range n {
		step()
		if r, err := p.Serve(ctx, benchRequest, benchUpstream); err != nil || r.Status != 200 {
			t.Fatalf("%s: response %+v, err %v", c.name, r, err)
		}
	}
	return float64(counter.n.Load()-start) / float64(n)
}

// BenchmarkLifecycle gives ns per request for each case; `make bench`
// turns them into ratios to the no-op filter with TestLifecycleReport.
func BenchmarkLifecycle(b *testing.B) {
	env := newLifecycleEnv(b)
	for _, c := range lifecycleCases {
		b.Run(strings.ReplaceAll(c.name, " ", "_"), func(b *testing.B) { benchLifecycle(b, c, env) })
	}
}

// TestLifecycleReport prints each case's per-request cost as a ratio to
// the no-op filter, measured interleaved in one run so machine noise
// affects all cases alike; the median of the rounds is reported, with
// the guest's allocations per request. It runs only under `make bench`
// (SLUICE_BENCH=1) and asserts no timings.
func TestLifecycleReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 (make bench) to measure")
	}
	rounds, allocRequests := 5, 5000
	if os.Getenv("BENCH_QUICK") != "" {
		rounds, allocRequests = 1, 500
	}
	env := newLifecycleEnv(t)
	// The WAT modules have no Go runtime to count in: "—".
	allocs := make([]string, len(lifecycleCases))
	for i, c := range lifecycleCases {
		allocs[i] = "—"
		if !strings.HasPrefix(c.module, "wat:") {
			allocs[i] = fmt.Sprintf("%.1f", guestAllocs(t, c, env, allocRequests))
		}
	}
	ns := make([][]float64, len(lifecycleCases))
	for range rounds {
		for i, c := range lifecycleCases {
			var failure string
			r := testing.Benchmark(func(b *testing.B) {
				// A failed benchmark only logs; keep its message for ours.
				defer func() {
					if b.Failed() {
						failure = "failed"
					}
				}()
				benchLifecycle(b, c, env)
			})
			if failure != "" || r.N == 0 {
				t.Fatalf("%s: the benchmark failed (run it with go test -bench Lifecycle to see why)", c.name)
			}
			ns[i] = append(ns[i], float64(r.T.Nanoseconds())/float64(r.N))
		}
	}
	base, floor := median(ns[0]), median(ns[lifecycleIndex(t, "wat:floor")])
	var out strings.Builder
	fmt.Fprintf(&out, "| case | ns/request (median of %d) | spread | ÷ no-op | ÷ WAT floor | guest allocs/request |\n|---|---:|---:|---:|---:|---:|\n", rounds)
	for i, c := range lifecycleCases {
		m := median(ns[i])
		fmt.Fprintf(&out, "| %s | %.0f | %.0f–%.0f | %.2f× | %.2f× | %s |\n", c.name, m, slices.Min(ns[i]), slices.Max(ns[i]), m/base, m/floor, allocs[i])
	}
	t.Log("\n" + out.String())
	if path := os.Getenv("SLUICE_BENCH_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// lifecycleIndex is the index of the first case running module.
func lifecycleIndex(t testing.TB, module string) int {
	for i, c := range lifecycleCases {
		if c.module == module {
			return i
		}
	}
	t.Fatalf("no lifecycle case runs %s", module)
	return -1
}

// benchSize is how long a `make bench` harness measures: rounds of dur
// after warm of warm-up.
type benchSize struct {
	rounds    int
	dur, warm time.Duration
}

// benchHarness skips a `make bench` harness test unless SLUICE_BENCH=1 and
// returns its quick size under BENCH_QUICK=1, its full size otherwise.
func benchHarness(t *testing.T, full, quick benchSize) benchSize {
	t.Helper()
	if os.Getenv("SLUICE_BENCH") != "1" {
		t.Skip("benchmark harness: set SLUICE_BENCH=1 (make bench)")
	}
	if os.Getenv("BENCH_QUICK") == "1" {
		return quick
	}
	return full
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
