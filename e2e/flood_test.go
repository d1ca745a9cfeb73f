package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// TestFloodKeepsActiveClients is defect 3 of issue #13 on build/sluice.wasm
// with two workers and a stepped clock: a per-IP limit of 5 per minute in
// a 256-slot table, one client that has used 1 of its 5, then a flood of
// 6,000 distinct addresses (one request each) over 10s on both workers at
// once, with three clients repeating a request every step. The existing
// client must still get exactly its 4 remaining; no client may get more
// than 5; the flood is decided by the documented rule: keys that find no
// slot share the 16 overflow buckets, so the flood gets at most a fresh
// bucket per free slot plus one per overflow bucket, and its refusals are
// the overflow_denied metric.
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
	// 10s after its first request: 4 left (one unit refills in 12s).
	got := 0
	for i := 0; i < 10; i++ {
		if serve(existing, i%2) == 200 {
			got++
		}
	}
	if got != capacity-1 {
		t.Errorf("the existing client got %d of its %d remaining requests after the flood", got, capacity-1)
	}
	for i, n := range repeaterOK {
		if n > capacity {
			t.Errorf("%s admitted %d times in 10s, over its limit of %d", repeaters[i], n, capacity)
		}
	}
	if max := slots + overflowSlots*capacity; floodOK > max {
		t.Errorf("the flood got %d admissions, more than a fresh bucket per slot and per overflow bucket (%d)", floodOK, max)
	}
	overflow, _ := rt.Stats().Lookup("sluice.limit.per-ip.overflow")
	denied, _ := rt.Stats().Lookup("sluice.limit.per-ip.overflow_denied")
	evictions, _ := rt.Stats().Lookup("sluice.limit.per-ip.evictions")
	if floodDenied == 0 || denied < uint64(floodDenied) || overflow < denied || evictions != 0 {
		t.Errorf("flood refused %d; metrics overflow=%d overflow_denied=%d evictions=%d: every refusal of a new address "+
			"must be an overflow decision, and no live slot taken", floodDenied, overflow, denied, evictions)
	}
	if keys := rt.SharedDataKeys("flood"); keys > slots+overflowSlots {
		t.Errorf("%d shared-data keys, more than %d slots and %d overflow buckets", keys, slots, overflowSlots)
	}
	if p.Traps() != 0 {
		t.Fatalf("%d traps", p.Traps())
	}
	t.Logf("flood: %d admitted, %d refused; existing client %d/10; repeaters %v; overflow=%d overflow_denied=%d",
		floodOK, floodDenied, got, repeaterOK, overflow, denied)
}
