package e2e_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// realLifecycle is one lifecycle case on its own real-host driver, one
// worker, warmed up.
type realLifecycle struct {
	c      lifecycleCase
	h      *realHost
	n      int    // requests per measurement
	memory uint64 // linear memory after warm-up, bytes
	// calls counts, per request, the crossings cpp-host traces: "host
	// NAME" for a hostcall, "guest NAME" for a call into the guest (its
	// allocator included).
	calls map[string]float64
}

// benchRequestCmd is benchRequest in the driver's protocol.
func benchRequestCmd() []string {
	cmd := escPairs(benchRequest.Headers)
	return append(cmd, esc(benchRequest.SourceAddress), esc(benchRequest.ClusterName), esc(benchRequest.RouteName))
}

// serve sends the driver's command (bench or profile) for n requests of
// c's lifecycle and returns its reply; a request the plugin did not pass
// to the upstream fails the test.
func (r *realLifecycle) serve(t testing.TB, command string, n int) []string {
	t.Helper()
	cmd := append([]string{command, "0", strconv.Itoa(n), strconv.FormatInt(int64(r.c.clockStep), 10)}, benchRequestCmd()...)
	reply := r.h.call(t, cmd...)
	if bad := reply[map[string]int{"bench": 2, "profile": 1}[command]]; bad != "0" {
		t.Fatalf("%s: %s of %d requests were not passed to the upstream", r.c.name, bad, n)
	}
	return reply
}

// run serves n requests through c's lifecycle and returns the driver's
// thread CPU time per request: on a machine shared with other work it
// leaves out the time the core ran something else, which wall time (also
// returned) does not.
func (r *realLifecycle) run(t testing.TB, n int) (cpu, wall float64) {
	t.Helper()
	reply := r.serve(t, "bench", n)
	w, _ := strconv.ParseFloat(reply[1], 64)
	c, _ := strconv.ParseFloat(reply[3], 64)
	return c / float64(n), w / float64(n)
}

// profile counts the crossings of n requests (see calls).
func (r *realLifecycle) profile(t testing.TB, n int) {
	t.Helper()
	reply := r.serve(t, "profile", n)
	r.calls = map[string]float64{}
	for i := 3; i+1 < len(reply); i += 2 {
		v, _ := strconv.ParseFloat(reply[i+1], 64)
		r.calls[unesc(t, reply[i])] = v / float64(n)
	}
}

// crossings sums calls whose key starts with prefix ("host ", "guest ").
func (r *realLifecycle) crossings(prefix string) float64 {
	n := 0.0
	for k, v := range r.calls {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

func (r *realLifecycle) metric(t testing.TB, name string) uint64 {
	v, _ := strconv.ParseUint(r.h.call(t, "metric", esc(name))[2], 10, 64)
	return v
}

// startRealLifecycle starts c on the real host and warms it up as
// startLifecycle does in ours: 1,000 requests, the floor modules' counter
// checked, then the linear memory read and the measurement size chosen so
// that one measurement takes about per.
func startRealLifecycle(t testing.TB, c lifecycleCase, code []byte, per time.Duration) *realLifecycle {
	t.Helper()
	r := &realLifecycle{c: c}
	r.h = startRealHost(t, realHostOptions{code: code, config: c.config, workers: 1,
		vmID: "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36), clock: time.Now()})
	counted := r.metric(t, floorCounter)
	const warmUp = 1000
	ns, _ := r.run(t, warmUp)
	if c.floorCounts != 0 {
		if after := r.metric(t, floorCounter); after-counted != uint64(c.floorCounts*warmUp) {
			t.Fatalf("%s: %s went up by %d over %d requests, want %d each: its hostcalls did not all run", c.name, floorCounter, after-counted, warmUp, c.floorCounts)
		}
	}
	r.memory, _ = strconv.ParseUint(r.h.call(t, "memory", "0")[1], 10, 64)
	r.profile(t, 200)
	r.n = max(1000, int(float64(per)/ns))
	return r
}

// realLifecycleCases are the lifecycle cases the real host runs: all but
// those whose plugin calls out (the hybrid lease case), because the
// driver serves no clusters.
func realLifecycleCases() (run []lifecycleCase, left []string) {
	for _, c := range lifecycleCases {
		if c.lease || c.caller != nil {
			left = append(left, c.name)
			continue
		}
		run = append(run, c)
	}
	return run, left
}

// TestRealHostLifecycleReport measures the lifecycle cases in the real
// host (tools/realhost: proxy-wasm-cpp-host on Wasmtime), interleaved in
// rounds as TestLifecycleReport does in ours, each on its own driver with
// one worker, timed inside the driver. It runs under SLUICE_BENCH=1 with
// CPPHOST set (make bench-realhost) and asserts no timings.
func TestRealHostLifecycleReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 (make bench-realhost) to measure")
	}
	realHostBinary(t)
	rounds, per := 11, 300*time.Millisecond
	if os.Getenv("BENCH_QUICK") != "" {
		rounds, per = 1, 20*time.Millisecond
	}
	if s := os.Getenv("SLUICE_BENCH_REALHOST_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	cases, left := realLifecycleCases()
	runs := make([]*realLifecycle, len(cases))
	for i, c := range cases {
		runs[i] = startRealLifecycle(t, c, lifecycleModule(t, c.module), per)
	}
	ns, wall := make([][]float64, len(cases)), make([][]float64, len(cases))
	for range rounds {
		for i, r := range runs {
			c, w := r.run(t, r.n)
			ns[i], wall[i] = append(ns[i], c), append(wall[i], w)
		}
	}
	index := func(name string) int {
		for i, c := range cases {
			if c.name == name {
				return i
			}
		}
		t.Fatalf("no real-host case %q", name)
		return -1
	}
	base, floor := median(ns[index("noop SDK filter")]), median(ns[index("WAT floor of one limit + one breaker")])
	var out strings.Builder
	fmt.Fprintf(&out, "| case | CPU ns/request (median of %d) | spread | ÷ Go no-op | ÷ WAT floor | wall ns/request (median) | hostcalls/request | calls into the guest/request (allocator) | linear memory after warm-up |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", rounds)
	for i, c := range cases {
		m, r := median(ns[i]), runs[i]
		fmt.Fprintf(&out, "| %s | %.0f | %.0f–%.0f | %.2f× | %.2f× | %.0f | %.1f | %.1f (%.1f) | %.1f MiB |\n", c.name, m, slices.Min(ns[i]), slices.Max(ns[i]), m/base, m/floor,
			median(wall[i]), r.crossings("host "), r.crossings("guest "), r.calls["guest malloc"]+r.calls["guest proxy_on_memory_allocate"], float64(r.memory)/(1<<20))
	}
	floorRun, sluiceRun := runs[index("WAT floor of one limit + one breaker")], runs[index("one limit + one breaker")]
	fmt.Fprintf(&out, "\nCrossings per request, counted from cpp-host's trace (profile, 200 requests after warm-up): one limit + one breaker against the WAT floor of the same work.\n\n| crossing | one limit + one breaker | WAT floor |\n|---|---:|---:|\n")
	keys := map[string]bool{}
	for k := range floorRun.calls {
		keys[k] = true
	}
	for k := range sluiceRun.calls {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		fmt.Fprintf(&out, "| %s | %.1f | %.1f |\n", k, sluiceRun.calls[k], floorRun.calls[k])
	}
	fmt.Fprint(&out, realHostGap(t, runs, ns, index))
	if len(left) > 0 {
		fmt.Fprintf(&out, "\nNot run in the real host (the benchmark's driver serves no cluster for callouts): %s.\n", strings.Join(left, "; "))
	}
	t.Log("\n" + out.String())
	if path := os.Getenv("SLUICE_BENCH_OUT_REALHOST"); path != "" {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// realHostGap writes down, from this run's medians, what stands between
// one limit + one breaker and 1.5× the WAT floor: the floor itself, what
// the Go SDK and runtime add to the same hostcalls (the Go floor), what
// Sluice's own work adds on top, the hostcalls Sluice makes beyond the
// floor's, and what cpp-host's allocator path costs per call.
func realHostGap(t testing.TB, runs []*realLifecycle, ns [][]float64, index func(string) int) string {
	floorI, goFloorI, sluiceI := index("WAT floor of one limit + one breaker"), index("hostcall floor of one limit + one breaker"), index("one limit + one breaker")
	floor, goFloor, sluice := median(ns[floorI]), median(ns[goFloorI]), median(ns[sluiceI])
	reply := runs[sluiceI].h.call(t, "alloccost", "0", "20000")
	full, _ := strconv.ParseFloat(reply[1], 64)
	bare, _ := strconv.ParseFloat(reply[2], 64)
	allocs, floorAllocs := runs[sluiceI].calls["guest proxy_on_memory_allocate"], runs[floorI].calls["guest proxy_on_memory_allocate"]
	var extra []string
	for k, v := range runs[sluiceI].calls {
		if d := v - runs[floorI].calls[k]; strings.HasPrefix(k, "host ") && d != 0 {
			extra = append(extra, fmt.Sprintf("%+.1f %s", d, strings.TrimPrefix(k, "host ")))
		}
	}
	slices.Sort(extra)
	var b strings.Builder
	fmt.Fprintf(&b, "\nWhere one limit + one breaker's %.0f ns go, against 1.5× the WAT floor (%.0f ns; the gap is %.0f ns):\n\n", sluice, 1.5*floor, sluice-1.5*floor)
	fmt.Fprintf(&b, "- the WAT floor, the same hostcalls with a bump allocator: %.0f ns;\n", floor)
	fmt.Fprintf(&b, "- the Go SDK and runtime making the same hostcalls (the Go floor, e2e/noop with floor): +%.0f ns (%.2f× the WAT floor before Sluice decides anything);\n", goFloor-floor, goFloor/floor)
	fmt.Fprintf(&b, "- Sluice's own work beyond the Go floor: +%.0f ns, of which its hostcalls beyond the floor's: %s;\n", sluice-goFloor, strings.Join(extra, ", "))
	fmt.Fprintf(&b, "- cpp-host's allocator path, which every hostcall returning data takes (%.1f a request here, %.1f in the floor): %.0f ns a call, %.0f of them the guest's allocator and %.0f the two restricted-callback settings around it, which build and drop a set of seven names: %.0f ns a request here, %.0f in the floor.\n", allocs, floorAllocs, full, bare, full-bare, allocs*(full-bare), floorAllocs*(full-bare))
	return b.String()
}
