package e2e_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// lifecycleCase is one filter configuration whose per-request cost is
// measured in our host: a whole stream (context create, request headers,
// the upstream, response headers, log, done, delete) on one worker.
type lifecycleCase struct {
	name   string
	module string
	config string
}

var lifecycleCases = []lifecycleCase{
	{"noop SDK filter", "noop", `{}`},
	{"sluice, empty config (issue 2's minimal filter)", "sluice", `{}`},
	{"sluice, no matching limit", "sluice", `{"limits":[{"name":"other","match":{"path_prefix":"/nothing-here"},"key":[],"requests_per_second":10}]}`},
	{"one local limit", "sluice", `{"limits":[{"name":"per-ip","key":["client_ip"],"requests_per_second":1000000000}]}`},
	{"one limit + one breaker", "sluice", `{"limits":[{"name":"per-ip","key":["client_ip"],"requests_per_second":1000000000}],"breakers":[{"name":"backend"}]}`},
	// The floor under the case above: a no-op making only the hostcalls
	// that case cannot avoid (see e2e/noop).
	{"hostcall floor of one limit + one breaker", "noop", `{"floor":true}`},
	// Below any design: the client address, the response status, the
	// default response's five headers and one counter.
	{"hostcall floor of the default response alone", "noop", `{"floor":"minimal"}`},
	{"one concurrency limit", "sluice", `{"concurrency":[{"name":"per-route","key":["route"],"max_in_flight":1000000000}]}`},
	{"three scoped limits", "sluice", `{"limits":[
		{"name":"global","key":[],"requests_per_second":1000000000},
		{"name":"tenant","key":["header:x-tenant"],"requests_per_second":1000000000},
		{"name":"per-ip","match":{"path_prefix":"/api"},"key":["client_ip"],"requests_per_second":1000000000}]}`},
}

func benchLifecycle(b *testing.B, c lifecycleCase, code []byte) {
	benchLifecycleCalling(b, c, code, nil)
}

// benchLifecycleCalling is benchLifecycle with caller serving the
// plugin's proxy_http_calls.
func benchLifecycleCalling(b *testing.B, c lifecycleCase, code []byte, caller host.Caller) {
	ctx := context.Background()
	rt := host.NewRuntime(host.RuntimeOptions{Logger: func(host.LogLevel, string, string) {}})
	defer rt.Close(ctx)
	p, err := rt.NewPlugin(ctx, host.PluginConfig{Name: "bench", RootID: "bench", VMID: "bench", Code: code,
		Configuration: []byte(c.config), Concurrency: 1, Caller: caller})
	if err != nil {
		b.Fatal(err)
	}
	resp := &host.Response{Status: 200, Headers: [][2]string{{"content-type", "text/plain"}}}
	upstream := func(context.Context, *host.Request) (*host.Response, error) { return resp, nil }
	req := &host.Request{
		Headers:       [][2]string{{":method", "GET"}, {":path", "/api/items"}, {":authority", "example.com"}, {":scheme", "http"}, {"x-tenant", "t1"}},
		SourceAddress: "10.1.2.3:5000", RouteName: "default", ClusterName: "backend",
	}
	// Warm up: the first requests create slots and grow the heap.
	for range 1000 {
		if _, err := p.Serve(ctx, req, upstream); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r, err := p.Serve(ctx, req, upstream)
		if err != nil || r.Status != 200 {
			b.Fatalf("status %v err %v", r, err)
		}
	}
	b.StopTimer()
	if p.Traps() != 0 {
		b.Fatalf("%d traps", p.Traps())
	}
}

// BenchmarkLifecycle gives ns per request for each case; `make bench`
// turns them into ratios to the no-op filter with TestLifecycleReport.
func BenchmarkLifecycle(b *testing.B) {
	for _, c := range lifecycleCases {
		code := wasmModule(b, c.module)
		b.Run(strings.ReplaceAll(c.name, " ", "_"), func(b *testing.B) { benchLifecycle(b, c, code) })
	}
}

// TestLifecycleReport prints each case's per-request cost as a ratio to
// the no-op filter, measured interleaved in one run so machine noise
// affects all cases alike; the median of the rounds is reported. It runs
// only under `make bench` (SLUICE_BENCH=1) and asserts no timings.
func TestLifecycleReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 (make bench) to measure")
	}
	rounds := 5
	if os.Getenv("BENCH_QUICK") != "" {
		rounds = 1
	}
	codes := map[string][]byte{}
	for _, c := range lifecycleCases {
		codes[c.module] = wasmModule(t, c.module)
	}
	ns := make([][]float64, len(lifecycleCases))
	for range rounds {
		for i, c := range lifecycleCases {
			r := testing.Benchmark(func(b *testing.B) { benchLifecycle(b, c, codes[c.module]) })
			ns[i] = append(ns[i], float64(r.T.Nanoseconds())/float64(r.N))
		}
	}
	base := median(ns[0])
	var out strings.Builder
	fmt.Fprintf(&out, "| case | ns/request (median of %d) | spread | ratio to no-op |\n|---|---|---|---|\n", rounds)
	for i, c := range lifecycleCases {
		m := median(ns[i])
		fmt.Fprintf(&out, "| %s | %.0f | %.0f–%.0f | %.2f× |\n", c.name, m, minOf(ns[i]), maxOf(ns[i]), m/base)
	}
	t.Log("\n" + out.String())
	if path := os.Getenv("SLUICE_BENCH_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func minOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
