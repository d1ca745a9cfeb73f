package e2e_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
	"github.com/sluice-proxy/sluice/filter/filtertest"
)

// hungBackend accepts every call and never answers until released, like
// a backend whose connection hangs where the host never reports the
// timeout: only the filter's own clock can end the wait.
type hungBackend struct {
	release chan struct{}
	mu      sync.Mutex
	calls   int
}

func (b *hungBackend) HasCluster(name string) bool { return name == "redis" }

func (b *hungBackend) Call(context.Context, string, [][2]string, []byte, [][2]string, time.Duration) (*host.Response, error) {
	b.mu.Lock()
	b.calls++
	b.mu.Unlock()
	<-b.release
	return nil, context.Canceled
}

// TestHybridWaiterReleasedWithinItsBudget: a request on worker 1 finds
// the lease call of worker 0 in flight and waits for it; that call hangs
// and worker 0 is never scheduled, so nothing but the waiter's own budget
// can release it. It must be answered (failure_policy deny) within
// timeout × (retries+1) + backoff plus the filter's per-attempt slack and
// tick, like a request waiting for its own call.
func TestHybridWaiterReleasedWithinItsBudget(t *testing.T) {
	code := wasmModule(t, "sluice")
	h := &wasmHarness{steppedClock: steppedClock{now: filtertest.Epoch}}
	h.rt = host.NewRuntime(host.RuntimeOptions{Clock: h.clock, ManualTicks: true, Logger: func(host.LogLevel, string, string) {}})
	hung := &hungBackend{release: make(chan struct{})}
	// Let the hung calls return before the runtime waits for them.
	t.Cleanup(func() { h.rt.Close(context.Background()) })
	t.Cleanup(func() { close(hung.release) })
	cfg := `{"limits":[{"name":"api","key":["header:x-key"],"requests_per_second":100,"mode":"hybrid","failure_policy":"deny"}],` +
		`"backend":{"cluster":"redis","timeout":"50ms","retries":1,"failure_status":503}}`
	p, err := h.rt.NewPlugin(context.Background(), host.PluginConfig{
		Name: "sluice", RootID: "sluice", VMID: "sluice-" + strconv.FormatInt(time.Now().UnixNano(), 10),
		Code: code, Configuration: []byte(cfg), Concurrency: 2, Caller: hung,
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	h.plugin = p
	// (timeout 50ms + watchdog slack 10ms + tick 5ms) × 2 attempts + 10ms backoff.
	const budget = 2*(50+10+5)*time.Millisecond + 10*time.Millisecond

	type result struct {
		resp *host.Response
		err  error
	}
	start := func(worker int) (<-chan result, <-chan struct{}) {
		parked := make(chan struct{}, 1)
		done := make(chan result, 1)
		req := &host.Request{
			Worker: worker, SourceAddress: "10.0.0.1:40000", DestinationAddress: "127.0.0.1:10000",
			RouteName: "default", ClusterName: "backend",
			Headers: [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "example.com"}, {":scheme", "http"}, {"x-key", "alice"}},
			OnPark: func() {
				select {
				case parked <- struct{}{}:
				default:
				}
			},
		}
		go func() {
			resp, err := p.Serve(context.Background(), req, func(context.Context, *host.Request) (*host.Response, error) {
				return &host.Response{Status: 200}, nil
			})
			done <- result{resp, err}
		}()
		return done, parked
	}
	// drive moves the clock a tick at a time on worker until the parked
	// request is answered, and returns how long it was held.
	drive := func(worker int, done <-chan result) (result, time.Duration) {
		t.Helper()
		began := h.clock()
		for {
			select {
			case r := <-done:
				return r, h.clock().Sub(began)
			default:
			}
			if p.ParkedStreams(worker) == 0 {
				r := <-done // answered, the result is on its way
				return r, h.clock().Sub(began)
			}
			if h.clock().Sub(began) > filtertest.MaxHold {
				t.Fatalf("worker %d: request held for more than %v", worker, filtertest.MaxHold)
			}
			h.Advance(t, tickStep)
			if !p.Tick(worker) {
				t.Fatalf("worker %d: request paused with no tick running to resume it", worker)
			}
		}
	}
	parks := func(what string, done <-chan result, parked <-chan struct{}) {
		t.Helper()
		select {
		case <-parked:
		case r := <-done:
			t.Fatalf("%s was answered at once (%+v, %v), want it waiting for the lease", what, r.resp, r.err)
		}
	}

	// Worker 0 claims the key's lease call and parks; it is not ticked,
	// so the call it queued is never even sent.
	ownerDone, ownerParked := start(0)
	parks("the first request", ownerDone, ownerParked)
	waiterDone, waiterParked := start(1)
	parks("the second request", waiterDone, waiterParked)
	r, held := drive(1, waiterDone)
	if r.err != nil {
		t.Fatalf("serve: %v", r.err)
	}
	if r.resp.Status != 503 || !r.resp.Local {
		t.Fatalf("waiter: status %d (local %v), want the deny policy's 503", r.resp.Status, r.resp.Local)
	}
	if held > budget {
		t.Fatalf("a request waiting for another worker's lease call was held %v, beyond its budget %v", held, budget)
	}
	// The owner is bounded the same way once its worker runs again: it is
	// long past its budget, so its next tick answers it.
	r, _ = drive(0, ownerDone)
	if r.err != nil || r.resp.Status != 503 {
		t.Fatalf("owner: %+v %v, want 503", r.resp, r.err)
	}
	if p.Traps() != 0 {
		t.Fatalf("%d traps", p.Traps())
	}
}
