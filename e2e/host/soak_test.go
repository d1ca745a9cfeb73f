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

func benchServe(b *testing.B, name string, code []byte) {
	r, _ := newRT(b, "")
	p, err := r.NewPlugin(context.Background(), PluginConfig{Name: name, RootID: name, VMID: name, Code: code, Configuration: []byte("{}"), Concurrency: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	up := okUpstream(200, "ok")
	req := getReq(0, "/")
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.Serve(ctx, req, up); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if p.Traps() != 0 {
		b.Fatalf("traps: %d", p.Traps())
	}
}

// BenchmarkServe measures the per-request lifecycle cost of the real filter
// and of the no-op SDK filter built the same way; their ratio is the
// filter's own cost with host and machine noise cancelled out.
func BenchmarkServe(b *testing.B) {
	b.Run("noop", func(b *testing.B) { benchServe(b, "noop", guest(b, "noop.wasm")) })
	b.Run("sluice", func(b *testing.B) { benchServe(b, "sluice", guest(b, "sluice.wasm")) })
}
