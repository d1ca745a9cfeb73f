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

// TestExactnessAcrossWorkers is issue 15's exactness check: one global key
// at 2,000/s with burst 0, kept saturated for 4 s of guest time, through
// 1, 2, 4 and 8 workers of our host. The guest's clock is stepped by the
// test (1 ms per step, 4,001 steps from 0 to 4 s), so the ideal is exact:
// the full bucket (2,000) plus 2,000/s × 4 s = 10,000. Within a step every
// worker serves its requests at once from its own goroutine, so the
// workers' compare-and-swaps on the one bucket really race.
//
// Admitted must never exceed the ideal. One worker has no race and must
// reach it exactly. With more, a request denied because its CAS retries
// ran out leaves its token in the bucket, and the next step, which offers
// twice the refill, takes it; only the last step's tokens can be left
// over, so admitted is at least the ideal less one step's requests.
func TestExactnessAcrossWorkers(t *testing.T) {
	code := wasmModule(t, "sluice")
	const (
		rate  = 2000
		steps = 4001 // t = 0, 1ms, …, 4s
		step  = time.Millisecond
		ideal = rate + rate*4 // capacity (limit + burst 0) + refill over 4 s
	)
	for _, workers := range []int{1, 2, 4, 8} {
		t.Run(strconv.Itoa(workers)+" workers", func(t *testing.T) {
			var now atomic.Int64
			now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			rt := host.NewRuntime(host.RuntimeOptions{
				Clock:       func() time.Time { return time.Unix(0, now.Load()) },
				ManualTicks: true,
				Logger:      func(host.LogLevel, string, string) {},
			})
			defer rt.Close(context.Background())
			p, err := rt.NewPlugin(context.Background(), host.PluginConfig{
				Name: "sluice", RootID: "sluice", VMID: "exact", Code: code, Concurrency: workers,
				Configuration: []byte(`{"limits":[{"name":"global","key":[],"requests_per_second":2000,"burst":0}]}`),
			})
			if err != nil {
				t.Fatal(err)
			}
			// Twice the refill per step, so the bucket stays empty after
			// the first second, and at least one request per worker.
			perWorker := max(1, 2*rate/1000/workers)
			perStep := perWorker * workers
			var admitted, limited atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for s := range steps {
				if s > 0 {
					now.Add(int64(step))
				}
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range perWorker {
							r, err := p.Serve(context.Background(), &host.Request{
								Worker:        w,
								Headers:       [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "example.com"}, {":scheme", "http"}},
								SourceAddress: "10.0.0." + strconv.Itoa(w+1) + ":4000", RouteName: "default", ClusterName: "backend",
							}, benchUpstream)
							switch {
							case err != nil:
								errs <- err
								return
							case r.Status == 200:
								admitted.Add(1)
							case r.Status == 429:
								limited.Add(1)
							default:
								errs <- fmt.Errorf("status %d", r.Status)
								return
							}
						}
					}()
				}
				wg.Wait()
				select {
				case err := <-errs:
					t.Fatalf("step %d: %v", s, err)
				default:
				}
			}
			got := admitted.Load()
			t.Logf("%d workers: admitted %d of %d (ideal %d), limited %d", workers, got, steps*perStep, ideal, limited.Load())
			if p.Traps() != 0 {
				t.Fatalf("%d traps", p.Traps())
			}
			if got+limited.Load() != int64(steps*perStep) {
				t.Fatalf("%d admitted + %d limited, want %d requests", got, limited.Load(), steps*perStep)
			}
			if got > ideal {
				t.Fatalf("admitted %d, over the ideal %d", got, ideal)
			}
			low := int64(ideal - perStep)
			if workers == 1 {
				low = ideal
			}
			if got < low {
				t.Fatalf("admitted %d, under %d (ideal %d)", got, low, ideal)
			}
		})
	}
}
