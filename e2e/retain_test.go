package e2e_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
	"github.com/sluice-proxy/sluice/filter/filtertest"
)

// TestPausedRequestKeepsWhatItRead proves that a request the filter holds
// keeps its own copy of what it read of the request. The bridge places
// every value the host returns in an arena it starts over at each
// callback, so a held request's cached header values would otherwise view
// whatever a later callback read into the same place. Here request A is
// held (on_limit delay) after reading its key header, request B, with a
// header map of the same layout and another key, is served while A
// waits, and A is then evaluated again from the tick. Without the copy,
// A's key reads "tenant-B" on its second evaluation: A takes a token of B's,
// B's next request sees one token fewer, and A's own bucket still has the
// token A waited for.
func TestPausedRequestKeepsWhatItRead(t *testing.T) {
	code := wasmModule(t, "sluice")
	h := &wasmHarness{steppedClock: steppedClock{now: filtertest.Epoch}}
	h.rt = host.NewRuntime(host.RuntimeOptions{Clock: h.clock, ManualTicks: true, Logger: func(host.LogLevel, string, string) {}})
	defer h.rt.Close(context.Background())
	p, err := h.rt.NewPlugin(context.Background(), host.PluginConfig{
		Name: "sluice", RootID: "sluice", VMID: "sluice-retain-" + strconv.Itoa(int(time.Now().UnixNano())),
		Code: code, Concurrency: 1,
		Configuration: []byte(`{"limits":[{"name":"shaped","key":["header:x-tenant"],"requests_per_second":5,
			"on_limit":{"action":"delay","max_delay":"1s"}}]}`),
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	h.plugin = p
	tenant := func(name string) filtertest.Request {
		return filtertest.Request{Method: "GET", Path: "/", Host: "example.com", Headers: [][2]string{{"x-tenant", name}}}
	}
	for i := 0; i < 5; i++ {
		if resp := h.Do(t, tenant("tenant-A")); resp.Status != 200 {
			t.Fatalf("burst request %d of tenant-A: status %d", i, resp.Status)
		}
	}

	// A: held for tenant-A's next token, with no tick yet.
	parked := make(chan struct{}, 1)
	done := make(chan served, 1)
	go func() {
		resp, err := p.Serve(context.Background(), &host.Request{
			Headers: [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "example.com"},
				{":scheme", "http"}, {"x-tenant", "tenant-A"}},
			SourceAddress: "10.0.0.1:40000", DestinationAddress: "127.0.0.1:10000",
			RouteName: "default", ClusterName: "backend",
			OnPark: func() {
				select {
				case parked <- struct{}{}:
				default:
				}
			},
		}, func(context.Context, *host.Request) (*host.Response, error) {
			return &host.Response{Status: 200, Body: []byte("ok")}, nil
		})
		done <- served{resp, err}
	}()
	select {
	case <-parked:
	case out := <-done:
		t.Fatalf("tenant-A's sixth request was not held: %+v %v", out.resp, out.err)
	}

	// B, while A waits: its callbacks reuse the memory A's values were in.
	if got := h.Do(t, tenant("tenant-B")).Headers.Get("x-ratelimit-remaining"); got != "4" {
		t.Fatalf("tenant-B's first request: remaining %q, want 4", got)
	}

	// A goes on from the tick once its token is there.
	for p.ParkedStreams(0) > 0 {
		if h.clock().Sub(filtertest.Epoch) > time.Second {
			t.Fatal("tenant-A's request held for more than a second")
		}
		h.Advance(t, tickStep)
		p.Tick(0)
	}
	out := <-done
	if out.err != nil || out.resp.Status != 200 || out.resp.Local {
		t.Fatalf("held request of tenant-A: %+v %v", out.resp, out.err)
	}

	// tenant-B's bucket refilled the token B took while A waited (5 per
	// second, A waited 200ms), so its second request leaves 4, or 3 if A
	// took one from it.
	if got := h.Do(t, tenant("tenant-B")).Headers.Get("x-ratelimit-remaining"); got != "4" {
		t.Errorf("tenant-B's second request: remaining %q, want 4 (3: tenant-A's held request took from tenant-B)", got)
	}
	// A's bucket gave its token to the held request, so the next waits.
	if resp := h.Do(t, tenant("tenant-A")); resp.Status != 200 || resp.Waited == 0 {
		t.Errorf("tenant-A's next request: status %d after %v, want 200 after a wait", resp.Status, resp.Waited)
	}
	if p.Traps() != 0 {
		t.Fatalf("%d traps", p.Traps())
	}
}
