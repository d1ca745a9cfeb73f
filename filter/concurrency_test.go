package filter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/filter"
	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/filtertest"
)

func startNative(t *testing.T, cfg string, now *time.Time) proxytest.HostEmulator {
	t.Helper()
	opt := proxytest.NewEmulatorOption().
		WithVMContext(filter.NewVMContextWithClock(func() time.Time { return *now })).
		WithPluginConfiguration([]byte(cfg))
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	if st := host.StartPlugin(); st != types.OnPluginStartStatusOK {
		t.Fatalf("OnPluginStart failed: %v", host.GetCriticalLogs())
	}
	return host
}

func ccTenantHeaders(tenant string) [][2]string {
	return [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "example.com"}, {"x-tenant", tenant}}
}

// TestConcurrencyGivesSlotsBackBeforeTheRejectedStreamEnds: a request that
// took a slot of one limit and was rejected by the next gives the slot back
// at once, not when its stream ends, which may be much later (a client slow
// to read the reply).
func TestConcurrencyGivesSlotsBackBeforeTheRejectedStreamEnds(t *testing.T) {
	now := filtertest.Epoch
	host := startNative(t, `{"concurrency":[{"name":"all","max_in_flight":2},
		{"name":"tenant","key":["header:x-tenant"],"max_in_flight":1}]}`, &now)
	a := host.InitializeHttpContext()
	if act := host.CallOnRequestHeaders(a, ccTenantHeaders("a"), true); act != types.ActionContinue {
		t.Fatalf("first request: %v", act)
	}
	rejected := host.InitializeHttpContext()
	host.CallOnRequestHeaders(rejected, ccTenantHeaders("a"), true)
	if local := host.GetSentLocalResponse(rejected); local == nil || local.StatusCode != 503 {
		t.Fatalf("second request of tenant a: %+v", local)
	}
	// The rejected stream is still open here.
	b := host.InitializeHttpContext()
	if act := host.CallOnRequestHeaders(b, ccTenantHeaders("b"), true); act != types.ActionContinue || host.GetSentLocalResponse(b) != nil {
		t.Fatalf("tenant b was refused while the rejected stream was open: the all slot was not given back")
	}
	for _, id := range []uint32{a, rejected, b} {
		host.CompleteHttpContext(id)
	}
	c := host.InitializeHttpContext()
	if act := host.CallOnRequestHeaders(c, ccTenantHeaders("c"), true); act != types.ActionContinue {
		t.Fatal("slots did not come back at stream end")
	}
	host.CompleteHttpContext(c)
}

// TestConcurrencyHeartbeatTick: with concurrency limits the tick never
// stops, because it is the heartbeat that keeps this VM's slots counted;
// the fast tick of a delayed request falls back to it, not to none.
func TestConcurrencyHeartbeatTick(t *testing.T) {
	for _, c := range []struct {
		name, cfg string
		idle      uint32
	}{
		{"with concurrency", `{"limits":[{"name":"shaped","key":[],"requests_per_second":5,"burst":0,"on_limit":{"action":"delay"}}],
			"concurrency":[{"name":"c","max_in_flight":10}]}`, 1000},
		{"without", `{"limits":[{"name":"shaped","key":[],"requests_per_second":5,"burst":0,"on_limit":{"action":"delay"}}]}`, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &nativeHarness{now: filtertest.Epoch}
			h.host = startNative(t, c.cfg, &h.now)
			if got := h.host.GetTickPeriod(); got != c.idle {
				t.Fatalf("tick period after start %d, want %d", got, c.idle)
			}
			// The bucket holds 5; the sixth request waits for a token.
			for i := range 6 {
				resp := h.Do(t, filtertest.Request{Method: "GET", Path: "/", Host: "h"})
				if resp.Status != 200 || (resp.Waited > 0) != (i == 5) {
					t.Fatalf("request %d: %+v", i, resp)
				}
			}
			h.now = h.now.Add(10 * time.Millisecond)
			h.host.Tick()
			if got := h.host.GetTickPeriod(); got != c.idle {
				t.Fatalf("tick period after the delay %d, want %d", got, c.idle)
			}
		})
	}
}

// TestConcurrencyAfterAGlobalLimit: a request decided in Redis takes its
// concurrency slot when the reply resumes it, and is rejected then if the
// bulkhead is full.
func TestConcurrencyAfterAGlobalLimit(t *testing.T) {
	fake := newFakeRedis(tenPerSecond, backend.Webdis)
	cfg := distConfig("global", "deny", "webdis", "")
	cfg = `{"concurrency":[{"name":"one","max_in_flight":1}],` + strings.TrimPrefix(cfg, "{")
	d := newDistHarness(t, cfg, fake)
	held := d.host.InitializeHttpContext()
	d.ctxs = append(d.ctxs, held)
	hs := [][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "example.com"}, {"x-key", "alice"}}
	if act := d.host.CallOnRequestHeaders(held, hs, true); act != types.ActionPause {
		t.Fatalf("a global limit must pause the request, got %v", act)
	}
	if d.pump() == 0 || d.host.GetCurrentHttpStreamAction(held) != types.ActionContinue {
		t.Fatal("the global decision did not resume the request")
	}
	o := d.do("bob")
	if o.status != 503 || !o.local || o.calls != 1 {
		t.Fatalf("bulkhead full after a global admission: %+v", o)
	}
	if got := d.counter("sluice.concurrency.one.rejected"); got != 1 {
		t.Fatalf("rejected %d", got)
	}
	d.host.CallOnResponseHeaders(held, [][2]string{{":status", "200"}}, true)
	d.host.CompleteHttpContext(held)
	if o := d.do("carol"); o.status != 200 {
		t.Fatalf("after the held request ended: %+v", o)
	}
	if got := d.counter("sluice.concurrency.one.admitted"); got != 2 {
		t.Fatalf("admitted %d, want 2", got)
	}
}
