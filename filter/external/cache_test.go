package external

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
)

// These tests drive the cache natively over the host fakes: the test plays
// Envoy (it answers each callout and runs the tick) and the limits
// service.

const tick = 5 * time.Millisecond

type rig struct {
	x       *Cache
	f       *hosttest.Fakes
	wakes   int
	settled int
}

func newRig(t *testing.T) *rig {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"external":{"cluster":"limits","timeout":"100ms","cache_ttl":"60s",
		"stale_ttl":"10s","max_cached":64,"fallback":{"limit":4,"window":"1h","key":["header:x-tenant-id"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	hc, f := hosttest.New(time.Unix(1_700_000_000, 0))
	r := &rig{f: f}
	r.x, err = New(&hc, cfg.External, tick, func() { r.wakes++ }, func(time.Time) { r.settled++ })
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) resolve(req *Request, key string) bool {
	return r.x.Resolve(req, []byte(key), func() []byte { return []byte(`{"lookup":"` + key + `"}`) }, r.f.Clock.Now)
}

func (r *rig) tick(d time.Duration) {
	r.f.Clock.Advance(d)
	r.x.Tick(r.f.Clock.Now)
}

func (r *rig) metric(name string) uint64 { return r.f.Metrics.Values["sluice.external."+name] }

func TestLookupOnceThenAnswerFromTheCache(t *testing.T) {
	r := newRig(t)
	var a, b Request
	if r.resolve(&a, "acme") || r.resolve(&b, "acme") {
		t.Fatal("resolved without an answer")
	}
	if r.wakes == 0 || a.State != Waiting || b.State != Waiting {
		t.Fatalf("waiting requests: wakes %d, states %v %v", r.wakes, a.State, b.State)
	}
	r.tick(0)
	calls := r.f.Caller.Pending()
	if len(calls) != 1 {
		t.Fatalf("%d lookups for one key, want 1", len(calls))
	}
	if calls[0].Cluster != "limits" || string(calls[0].Body) != `{"lookup":"acme"}` || !strings.Contains(calls[0].Headers[1][1], "/") {
		t.Fatalf("lookup %q %s %v", calls[0].Cluster, calls[0].Body, calls[0].Headers)
	}
	if r.x.Settle(&a, r.f.Clock.Now) {
		t.Fatal("settled before the answer")
	}
	calls[0].Answer(200, []byte(`{"limit":3,"window":"1h","tenant_key":"acme"}`), nil)
	if r.settled != 1 {
		t.Fatalf("settled callback ran %d times", r.settled)
	}
	for _, req := range []*Request{&a, &b} {
		if !r.x.Settle(req, r.f.Clock.Now) || req.State != Resolved || req.Fallback || req.Limit.Rate != 3 ||
			req.Limit.Period != time.Hour || req.Tag != BucketTenant || req.Bucket != "acme" {
			t.Fatalf("settled request %+v", *req)
		}
	}
	var c Request
	if !r.resolve(&c, "acme") || c.Bucket != "acme" || len(r.f.Caller.Calls) != 1 {
		t.Fatalf("cached answer: %+v after %d calls", c, len(r.f.Caller.Calls))
	}
	if r.metric("lookups") != 1 || r.metric("cache_hits") != 1 || r.metric("cache_misses") != 2 || r.metric("waits") != 1 {
		t.Fatalf("metrics %v", r.f.Metrics.Values)
	}
}

// An answer without tenant_key buckets by the lookup key, which the cache
// keeps while the request waits: the caller's key buffer is reused.
func TestBucketOfAnAnswerWithoutTenantKeyIsTheLookupKey(t *testing.T) {
	r := newRig(t)
	var a Request
	key := []byte("k1")
	r.x.Resolve(&a, key, func() []byte { return nil }, r.f.Clock.Now)
	copy(key, "zz")
	r.tick(0)
	r.f.Caller.Pending()[0].Answer(200, []byte(`{"requests_per_second":7}`), nil)
	if !r.x.Settle(&a, r.f.Clock.Now) || a.Tag != BucketLookup || a.Bucket != "k1" || a.Limit.Rate != 7 {
		t.Fatalf("request %+v", a)
	}
}

func TestFailedLookupUsesTheStaleAnswerThenTheFallback(t *testing.T) {
	r := newRig(t)
	var a Request
	r.resolve(&a, "acme")
	r.tick(0)
	r.f.Caller.Pending()[0].Answer(200, []byte(`{"limit":3,"window":"1h","tenant_key":"acme","cache_max_age_seconds":1}`), nil)
	r.x.Settle(&a, r.f.Clock.Now)

	// Stale: a new lookup fails, the old answer stands for stale_ttl.
	r.f.Clock.Advance(2 * time.Second)
	var b Request
	if r.resolve(&b, "acme") {
		t.Fatal("a stale entry answered without a lookup")
	}
	r.tick(0)
	r.f.Caller.Pending()[0].Answer(503, nil, nil)
	if !r.x.Settle(&b, r.f.Clock.Now) || b.Fallback || b.Bucket != "acme" || r.metric("stale_used") != 1 {
		t.Fatalf("stale answer: %+v, stale_used %d", b, r.metric("stale_used"))
	}

	// Past the stale time: the fallback.
	r.f.Clock.Advance(20 * time.Second)
	var c Request
	r.resolve(&c, "acme")
	r.tick(0)
	r.f.Caller.Pending()[0].Answer(200, []byte(`not json`), nil)
	if !r.x.Settle(&c, r.f.Clock.Now) || !c.Fallback || r.metric("fallback_used") != 1 || r.metric("errors.malformed") != 1 {
		t.Fatalf("fallback: %+v, metrics %v", c, r.f.Metrics.Values)
	}
}

func TestWatchdogEndsALostLookup(t *testing.T) {
	r := newRig(t)
	var a Request
	r.resolve(&a, "acme")
	r.tick(0)
	lost := r.f.Caller.Pending()[0]
	r.tick(100*time.Millisecond + host.WatchdogSlack - time.Millisecond)
	if r.x.Settle(&a, r.f.Clock.Now) {
		t.Fatal("gave up before timeout + slack")
	}
	r.tick(time.Millisecond)
	if !r.x.Settle(&a, r.f.Clock.Now) || !a.Fallback || r.metric("errors.timeout") != 1 {
		t.Fatalf("after the watchdog: %+v, metrics %v", a, r.f.Metrics.Values)
	}
	lost.Answer(200, []byte(`{"limit":3,"window":"1h"}`), nil)
	var b Request
	if r.resolve(&b, "acme") {
		t.Fatal("a reply after the watchdog was cached")
	}
}

// Five failed lookups open the key's breaker: its requests then take the
// fallback at once, without a call, and other keys still look up.
func TestLookupBreakerIsPerKey(t *testing.T) {
	r := newRig(t)
	for i := range lookupBreakerThreshold {
		var a Request
		if r.resolve(&a, "acme") {
			t.Fatalf("failure %d: resolved without a lookup", i)
		}
		r.tick(0)
		r.f.Caller.Pending()[0].Answer(500, nil, nil)
		r.x.Settle(&a, r.f.Clock.Now)
	}
	calls := len(r.f.Caller.Calls)
	var a Request
	if !r.resolve(&a, "acme") || !a.Fallback || len(r.f.Caller.Calls) != calls {
		t.Fatalf("open breaker: %+v, %d new calls", a, len(r.f.Caller.Calls)-calls)
	}
	if r.metric("breaker.opens") != 1 || r.metric("breaker.rejected") != 1 {
		t.Fatalf("metrics %v", r.f.Metrics.Values)
	}
	var b Request
	if r.resolve(&b, "initech") {
		t.Fatal("another key's lookup was refused")
	}
}
