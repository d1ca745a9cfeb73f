package e2e_test

// What a request costs in host crossings: each hostcall and each
// allocator callback is a trip through the host's import path, which the
// WAT floor (e2e/testdata/wat/floor.wat) measures at its cheapest. A
// crossing the floor does not make is work no change to Sluice's own
// logic can remove, so this test keeps the count from growing unnoticed.

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"testing"
)

// lifecycleHostcalls serves n requests of c after warm-up and returns how
// many times each host crossing happened per request: the imports the
// guest called and the allocator callbacks the host made into it.
func lifecycleHostcalls(t *testing.T, c lifecycleCase, n int) map[string]float64 {
	t.Helper()
	env := &lifecycleEnv{codes: map[string][]byte{c.module: lifecycleModule(t, c.module)}}
	counting := false
	counts := map[string]int{}
	ctx := context.Background()
	_, p, step := startLifecycle(t, ctx, c, env, func(name string) {
		if counting {
			counts[name]++
		}
	})
	// One worker: the hook runs on its loop, and Serve returns only
	// after that loop has run every callback of the stream.
	counting = true
	for range n {
		step()
		if r, err := p.Serve(ctx, benchRequest, benchUpstream); err != nil || r.Status != 200 {
			t.Fatalf("%s: response %+v, err %v", c.name, r, err)
		}
	}
	counting = false
	perRequest := map[string]float64{}
	for name, k := range counts {
		perRequest[name] = float64(k) / float64(n)
	}
	return perRequest
}

func totalOf(m map[string]float64) float64 {
	sum := 0.0
	for _, v := range m {
		sum += v
	}
	return sum
}

func formatHostcalls(m map[string]float64) string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "\n  %-45s %.2f", name, m[name])
	}
	return b.String()
}

// TestLifecycleHostcalls: one local limit plus one breaker crosses into
// the host exactly as often as the WAT floor of that case, plus two
// crossings exactness and time need: the limiter reads the key's second
// candidate slot, because a key found in two slots after a race must be
// merged, or a key split across both would be admitted twice; and the
// guest reads the clock once per request. And one fewer: a healthy
// breaker's record is never written, so its read returns no data and the
// host calls no allocator for it, where the floor reads a record.
func TestLifecycleHostcalls(t *testing.T) {
	floor := lifecycleHostcalls(t, lifecycleCases[lifecycleIndex(t, "wat:floor")], 50)
	sluice := lifecycleHostcalls(t, lifecycleCaseNamed(t, "one limit + one breaker"), 50)
	want := maps.Clone(floor)
	want["env.proxy_get_shared_data"]++
	want["proxy_on_memory_allocate"]--
	// The filter reads the clock once per request; the Go runtime reads
	// it too now and then (its scheduler and GC pacing), so the clock is
	// checked apart: at least once a request, and not twice.
	const clock = "wasi_snapshot_preview1.clock_time_get"
	clockReads := sluice[clock]
	crossings := maps.Clone(sluice)
	delete(crossings, clock)
	if !maps.Equal(crossings, want) || clockReads < 1 || clockReads >= 2 {
		t.Errorf("one limit + one breaker: %.2f crossings per request, want %.2f (the WAT floor's %.2f plus the second candidate slot, less the breaker record's allocation) and one clock read\ngot:%s\nwant, besides the clock:%s",
			totalOf(sluice), totalOf(want)+1, totalOf(floor), formatHostcalls(sluice), formatHostcalls(want))
	}
}

func lifecycleCaseNamed(t *testing.T, name string) lifecycleCase {
	for _, c := range lifecycleCases {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no lifecycle case named %q", name)
	return lifecycleCase{}
}

// TestLifecycleAllocations: one local limit plus one breaker allocates
// nothing in the guest per request after warm-up. Every allocation is
// garbage the guest's collector must later trace and free, on the request
// path of whichever request triggers it.
func TestLifecycleAllocations(t *testing.T) {
	c := lifecycleCaseNamed(t, "one limit + one breaker")
	env := &lifecycleEnv{codes: map[string][]byte{c.module: lifecycleModule(t, c.module)}}
	// guestAllocs may count a rare goroutine switch inside mallocgc
	// twice, never a per-request allocation as less than one a request.
	if n := guestAllocs(t, c, env, 2000); n >= 0.01 {
		t.Errorf("%s: %.3f guest allocations per request, want 0", c.name, n)
	}
}
