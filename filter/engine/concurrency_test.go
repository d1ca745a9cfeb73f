package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
)

func ccTenantHeaders(tenant string) [][2]string {
	return [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "example.com"}, {"x-tenant", tenant}}
}

// TestConcurrencyGivesSlotsBackBeforeTheRejectedStreamEnds: a request that
// took a slot of one limit and was rejected by the next gives the slot back
// at once, not when its stream ends, which may be much later (a client slow
// to read the reply).
func TestConcurrencyGivesSlotsBackBeforeTheRejectedStreamEnds(t *testing.T) {
	d := newDistHarness(t, `{"concurrency":[{"name":"all","max_in_flight":2},
		{"name":"tenant","key":["header:x-tenant"],"max_in_flight":1}]}`, nil)
	a, act := d.start(ccTenantHeaders("a"))
	if act != Continue {
		t.Fatalf("first request: %v", act)
	}
	rejected, _ := d.start(ccTenantHeaders("a"))
	if local := d.local(rejected); local == nil || local.Status != 503 {
		t.Fatalf("second request of tenant a: %+v", local)
	}
	// The rejected stream is still open here.
	b, act := d.start(ccTenantHeaders("b"))
	if act != Continue || d.local(b) != nil {
		t.Fatalf("tenant b was refused while the rejected stream was open: the all slot was not given back")
	}
	for _, id := range []uint32{a, rejected, b} {
		d.complete(id)
	}
	c, act := d.start(ccTenantHeaders("c"))
	if act != Continue {
		t.Fatal("slots did not come back at stream end")
	}
	d.complete(c)
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
			d := newDistHarness(t, c.cfg, nil)
			idle := time.Duration(c.idle) * time.Millisecond
			if got := d.f.Ticker.Period; got != idle {
				t.Fatalf("tick period after start %v, want %v", got, idle)
			}
			// The bucket holds 5; the sixth request waits for a token.
			for i := range 6 {
				resp := d.doHeaders([][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "h"}, {":scheme", "http"}})
				if resp.status != 200 || (resp.waited > 0) != (i == 5) {
					t.Fatalf("request %d: %+v", i, resp)
				}
			}
			d.now = d.now.Add(10 * time.Millisecond)
			d.tick()
			if got := d.f.Ticker.Period; got != idle {
				t.Fatalf("tick period after the delay %v, want %v", got, idle)
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
	held, act := d.start(keyHeaders("alice"))
	if act != Pause {
		t.Fatalf("a global limit must pause the request, got %v", act)
	}
	if d.pump() == 0 || d.action(held) != Continue {
		t.Fatal("the global decision did not resume the request")
	}
	o := d.do("bob")
	if o.status != 503 || !o.local || o.calls != 1 {
		t.Fatalf("bulkhead full after a global admission: %+v", o)
	}
	if got := d.counter("sluice.concurrency.one.rejected"); got != 1 {
		t.Fatalf("rejected %d", got)
	}
	d.respond(held, [][2]string{{":status", "200"}})
	d.complete(held)
	if o := d.do("carol"); o.status != 200 {
		t.Fatalf("after the held request ended: %+v", o)
	}
	if got := d.counter("sluice.concurrency.one.admitted"); got != 2 {
		t.Fatalf("admitted %d, want 2", got)
	}
}
