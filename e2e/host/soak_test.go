package host

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

func soakRequests(t testing.TB, def int) int {
	if s := os.Getenv("SLUICE_SOAK_REQUESTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("SLUICE_SOAK_REQUESTS=%q", s)
		}
		return n
	}
	return def
}

// TestSoakTwoWorkers sends 100,000 requests (SLUICE_SOAK_REQUESTS
// overrides) through two workers of the real filter and reports how linear
// memory changed. A trap anywhere fails the test.
func TestSoakTwoWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test skipped in -short mode")
	}
	for _, prof := range []Profile{ProfileEnvoy139, ProfileEnvoy133} {
		t.Run(string(prof), func(t *testing.T) {
			n := soakRequests(t, 100_000)
			if prof == ProfileEnvoy133 && os.Getenv("SLUICE_SOAK_REQUESTS") == "" {
				n = 20_000
			}
			r, sink := newRT(t, prof)
			p, err := r.NewPlugin(context.Background(), PluginConfig{Name: "sluice", RootID: "sluice", VMID: "sluice",
				Code: guest(t, "sluice.wasm"), Configuration: []byte("{}"), Concurrency: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(context.Background())
			before := [2]uint32{p.MemoryPages(0), p.MemoryPages(1)}
			var upstreamCalls atomic.Int64
			up := func(ctx context.Context, req *Request) (*Response, error) {
				upstreamCalls.Add(1)
				return &Response{Status: 200, Body: []byte("ok")}, nil
			}
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for i := g; i < n; i += 4 {
						resp, err := p.Serve(context.Background(), getReq(i%2, "/"), up)
						if err != nil {
							errs <- err
							return
						}
						if resp.Status != 200 {
							errs <- fmt.Errorf("request %d: %+v", i, resp)
							return
						}
					}
				}(g)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if p.Traps() != 0 {
				t.Fatalf("%d traps; logs: %q", p.Traps(), sink.messages())
			}
			if got := upstreamCalls.Load(); got != int64(n) {
				t.Errorf("upstream saw %d requests, want %d", got, n)
			}
			if v, ok := r.Stats().Lookup("sluice.requests_total"); ok && v != uint64(n) {
				t.Errorf("requests_total = %d, want %d", v, n)
			}
			after := [2]uint32{p.MemoryPages(0), p.MemoryPages(1)}
			t.Logf("%s: %d requests, 2 workers, no trap; linear memory pages (64 KiB) worker0 %d→%d, worker1 %d→%d",
				prof, n, before[0], after[0], before[1], after[1])
		})
	}
}

// benchServe measures a GET through code on one worker. onWorker drives
// the streams from the worker's loop (Runtime.OnWorker), as an Envoy
// worker thread runs a stream's callbacks; without it each stream is
// served from the benchmark's goroutine, which hands every turn to the
// loop and waits for it, as a connection of e2e/envoy does.
func benchServe(b *testing.B, name string, code []byte, onWorker bool) {
	r, _ := newRT(b, "")
	p, err := r.NewPlugin(context.Background(), PluginConfig{Name: name, RootID: name, VMID: name, Code: code, Configuration: []byte("{}"), Concurrency: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	// One answer for every request, as e2e's lifecycle benchmark has: what
	// the upstream allocates is not the host's cost.
	answer := &Response{Status: 200, Body: []byte("ok")}
	up := func(context.Context, *Request) (*Response, error) { return answer, nil }
	req := getReq(0, "/")
	serve := func(ctx context.Context) error {
		for i := 0; i < b.N; i++ {
			if resp, err := p.Serve(ctx, req, up); err != nil || resp.Status != 200 {
				return fmt.Errorf("request %d: %+v %v", i, resp, err)
			}
		}
		return nil
	}
	b.ReportAllocs()
	b.ResetTimer()
	err = nil
	if onWorker {
		// b.Fatal must not run on the loop: it would end the loop's
		// goroutine.
		if werr := r.OnWorker(context.Background(), 0, func(ctx context.Context) { err = serve(ctx) }); werr != nil {
			err = werr
		}
	} else {
		err = serve(context.Background())
	}
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if p.Traps() != 0 {
		b.Fatalf("traps: %d", p.Traps())
	}
}

// benchGuests are the modules BenchmarkServe compares: the real filter,
// the no-op SDK filter built the same way, and a hand-written WAT no-op,
// what a stream's callbacks cost the host with nothing in them.
func benchGuests(b *testing.B) []struct {
	name string
	code []byte
} {
	return []struct {
		name string
		code []byte
	}{{"noop", guest(b, "noop.wasm")}, {"sluice", guest(b, "sluice.wasm")}, {"wat-noop", watModule{}.build(b)}}
}

// BenchmarkServe measures the per-request lifecycle cost of the real filter
// and of the no-op filters, with the streams driven on the worker's loop
// as Envoy's worker thread drives them; the ratio of the real filter to
// the no-ops is the filter's own cost with host and machine noise
// cancelled out.
func BenchmarkServe(b *testing.B) {
	for _, g := range benchGuests(b) {
		b.Run(g.name, func(b *testing.B) { benchServe(b, g.name, g.code, true) })
	}
}

// BenchmarkServeHandoff is BenchmarkServe from another goroutine, as real
// traffic reaches a worker: each stream's turns cross to the loop and
// back, which is what a request through e2e/envoy pays besides the
// callbacks.
func BenchmarkServeHandoff(b *testing.B) {
	for _, g := range benchGuests(b) {
		b.Run(g.name, func(b *testing.B) { benchServe(b, g.name, g.code, false) })
	}
}
