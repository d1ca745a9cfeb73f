package e2e_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// TestFloodKeepsActiveClients is issue #13's flood with issue #23's rule,
// on build/sluice.wasm with two workers and a stepped clock: a per-IP
// limit of 5 per minute in a 256-slot table (forget_max_used by default
// any key), one client that has used 1 of its 5 and three that have used
// all 5, then a flood of 6,000 distinct addresses (one request each) over
// 10s on both workers at once, with the three repeating a request every
// step. New addresses forget the keys that used the least, so at most 10%
// of their first requests may be refused (each refusal an overflow_denied
// decision); the existing client gets its 4 remaining, or 5 if it was
// forgotten (never less, and at most the 1 unit it had used more); the
// three at their limit, the most used of any candidates here, are not
// forgotten and get nothing.
func TestFloodKeepsActiveClients(t *testing.T) {
	code := wasmModule(t, "sluice")
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	step := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
	rt := host.NewRuntime(host.RuntimeOptions{Clock: clock, ManualTicks: true, LogLevel: host.LogWarn,
		Logger: func(host.LogLevel, string, string) {}})
	defer rt.Close(ctx)
	const (
		slots, overflowSlots = 256, 16 // overflow_slots defaults to slots/16
		capacity             = 5
		steps, perStep       = 20, 300
	)
	p := startPlugin(t, rt, "flood", code,
		fmt.Sprintf(`{"limits":[{"name":"per-ip","key":["client_ip"],"limit":%d,"window":"1m","slots":%d}]}`, capacity, slots), 2)
	up := okUpstream(new(atomic.Int64))
	serve := func(ip string, worker int) int {
		resp, err := p.Serve(ctx, &host.Request{Worker: worker,
			Headers:       [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "example.com"}},
			SourceAddress: ip + ":5000", RouteName: "default", ClusterName: "backend"}, up)
		if err != nil {
			t.Fatalf("%s: %v", ip, err)
		}
		return resp.Status
	}

	const existing = "198.51.100.7"
	if got := serve(existing, 0); got != 200 {
		t.Fatalf("the existing client's first request: %d", got)
	}
	repeaters := []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"}
	for _, ip := range repeaters {
		for i := 0; i < capacity; i++ {
			if got := serve(ip, i%2); got != 200 {
				t.Fatalf("%s's request %d before the flood: %d", ip, i, got)
			}
		}
	}
	var repeaterOK [3]int
	floodOK, floodDenied := 0, 0
	for s := 0; s < steps; s++ {
		step(500 * time.Millisecond)
		// One step's new addresses, served concurrently on both workers.
		var wg sync.WaitGroup
		var counts [2][2]int // [worker][admitted, denied]
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; i < perStep; i += 2 {
					n := s*perStep + i
					ip := fmt.Sprintf("10.%d.%d.%d", n>>16, byte(n>>8), byte(n))
					switch st := serve(ip, w); st {
					case 200:
						counts[w][0]++
					case 429:
						counts[w][1]++
					default:
						t.Errorf("%s: status %d", ip, st)
					}
				}
			}(w)
		}
		for i, ip := range repeaters {
			if serve(ip, (s+i)%2) == 200 {
				repeaterOK[i]++
			}
		}
		wg.Wait()
		floodOK += counts[0][0] + counts[1][0]
		floodDenied += counts[0][1] + counts[1][1]
	}
	// 10s after its first request: 4 left (one unit refills in 12s), or
	// a fresh 5 if it was forgotten with its 1 unit used.
	got := 0
	for i := 0; i < 10; i++ {
		if serve(existing, i%2) == 200 {
			got++
		}
	}
	if got != capacity-1 && got != capacity {
		t.Errorf("the existing client got %d requests after the flood, want its %d remaining or, forgotten, %d", got, capacity-1, capacity)
	}
	for i, n := range repeaterOK {
		if n != 0 {
			t.Errorf("%s, at its limit, was admitted %d times during the flood: forgotten", repeaters[i], n)
		}
	}
	if floodDenied*10 > floodOK+floodDenied {
		t.Errorf("the flood's first requests: %d admitted, %d refused, more than 10%%", floodOK, floodDenied)
	}
	overflow, _ := rt.Stats().Lookup("sluice.limit.per-ip.overflow")
	denied, _ := rt.Stats().Lookup("sluice.limit.per-ip.overflow_denied")
	evictions, _ := rt.Stats().Lookup("sluice.limit.per-ip.evictions")
	forgotten, _ := rt.Stats().Lookup("sluice.limit.per-ip.forgotten")
	if denied < uint64(floodDenied) || overflow < denied || evictions != 0 || forgotten == 0 {
		t.Errorf("flood refused %d; metrics overflow=%d overflow_denied=%d evictions=%d forgotten=%d: every refusal of a new address "+
			"must be an overflow decision, no unreadable slot taken, and keys forgotten", floodDenied, overflow, denied, evictions, forgotten)
	}
	if keys := rt.SharedDataKeys("flood"); keys > slots+overflowSlots {
		t.Errorf("%d shared-data keys, more than %d slots and %d overflow buckets", keys, slots, overflowSlots)
	}
	if p.Traps() != 0 {
		t.Fatalf("%d traps", p.Traps())
	}
	t.Logf("flood: %d admitted, %d refused; existing client %d/10; repeaters %v; forgotten=%d overflow=%d overflow_denied=%d",
		floodOK, floodDenied, got, repeaterOK, forgotten, overflow, denied)
}

// TestFloodWorkersClocksApart is issue #23's flood between two workers,
// made deterministic: the requests are served one at a time, alternating
// workers, and worker 1's clock reads 1ms ahead of worker 0's (the host's
// monotonic clock runs on its own). A key worker 1 placed with one unit
// then weighs two units to worker 0. With a cap of one unit (the old
// default) a newcomer on worker 0 whose candidates both held such keys
// found none to forget and was decided on a shared overflow bucket, which
// the flood soon drained. By default it forgets the least-used: no first
// request of the 3,000 keys is refused, no decision falls to an overflow
// bucket, and the client that used 1 of its 5 gets 4 more, or 5 if it was
// forgotten.
func TestFloodWorkersClocksApart(t *testing.T) {
	code := wasmModule(t, "sluice")
	ctx := context.Background()
	base := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var worker int // the worker about to serve; requests run one at a time
	var mono atomic.Int64
	rt := host.NewRuntime(host.RuntimeOptions{
		Clock:       func() time.Time { return base.Add(time.Duration(worker) * time.Millisecond) },
		Monotonic:   func() int64 { return mono.Add(1000) },
		ManualTicks: true, LogLevel: host.LogWarn, Logger: func(host.LogLevel, string, string) {}})
	defer rt.Close(ctx)
	p := startPlugin(t, rt, "apart", code, `{"limits":[{"name":"f","key":["header:x-id"],"limit":5,"window":"1m","slots":64}]}`, 2)
	up := okUpstream(new(atomic.Int64))
	serve := func(id string, w int) int {
		worker = w
		resp, err := p.Serve(ctx, &host.Request{Worker: w,
			Headers:       [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "example.com"}, {"x-id", id}},
			SourceAddress: "10.0.0.1:5000", RouteName: "default", ClusterName: "backend"}, up)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return resp.Status
	}
	if got := serve("client", 1); got != 200 {
		t.Fatalf("the client's first request: %d", got)
	}
	refused := 0
	const keys = 3000
	for i := 0; i < keys; i++ {
		if serve("flood-"+strconv.Itoa(i), i%2) != 200 {
			refused++
		}
	}
	got := 0
	for i := 0; i < 6; i++ {
		if serve("client", i%2) == 200 {
			got++
		}
	}
	overflow, _ := rt.Stats().Lookup("sluice.limit.f.overflow")
	forgotten, _ := rt.Stats().Lookup("sluice.limit.f.forgotten")
	t.Logf("%d of %d first requests refused; the client got %d; overflow=%d forgotten=%d", refused, keys, got, overflow, forgotten)
	if refused != 0 || overflow != 0 || forgotten == 0 {
		t.Errorf("%d first requests refused, overflow=%d forgotten=%d: want none refused and none on an overflow bucket", refused, overflow, forgotten)
	}
	if got != 4 && got != 5 {
		t.Errorf("the client got %d after the flood, want its own 4 (5 if forgotten)", got)
	}
	if p.Traps() != 0 {
		t.Fatalf("%d traps", p.Traps())
	}
}
