package external

import (
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
)

// twoWorkerRig is two caches over one shared store, as two workers of an
// Envoy, with max_concurrent_requests 2.
func twoWorkerRig(t *testing.T) (a, b *Cache, f *hosttest.Fakes) {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"external":{"cluster":"limits","timeout":"100ms","cache_ttl":"60s","stale_ttl":"10s",
		"max_concurrent_requests":2,"fallback":{"limit":4,"window":"1h","key":["header:x-tenant-id"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	hc, f := hosttest.New(time.Unix(1_700_000_000, 0))
	a, err = New(&hc, cfg.External, tick, func() {}, func(time.Time) {})
	if err != nil {
		t.Fatal(err)
	}
	b, err = New(&hc, cfg.External, tick, func() {}, func(time.Time) {})
	if err != nil {
		t.Fatal(err)
	}
	return a, b, f
}

func resolveOn(x *Cache, f *hosttest.Fakes, r *Request, key string) bool {
	return x.Resolve(r, []byte(key), func() []byte { return []byte(key) }, f.Clock.Now)
}

// TestMaxConcurrentLookupsAcrossWorkers: two lookups in flight on one
// worker leave none for the other, whose request is decided by the
// fallback at once and counted; an answer frees a permit.
func TestMaxConcurrentLookupsAcrossWorkers(t *testing.T) {
	a, b, f := twoWorkerRig(t)
	var r1, r2, r3, r4 Request
	if resolveOn(a, f, &r1, "t1") || resolveOn(a, f, &r2, "t2") {
		t.Fatal("resolved without an answer")
	}
	if !resolveOn(b, f, &r3, "t3") || !r3.Fallback {
		t.Fatalf("third concurrent lookup: %+v, want the fallback at once", r3)
	}
	if got := f.Metrics.Values["sluice.external.lookups_limited"]; got != 1 {
		t.Fatalf("lookups_limited = %d, want 1", got)
	}
	a.Tick(f.Clock.Now)
	calls := f.Caller.Pending()
	if len(calls) != 2 {
		t.Fatalf("%d lookups out, want 2", len(calls))
	}
	calls[0].Answer(200, []byte(`{"limit":3,"window":"1h"}`), nil)
	if resolveOn(b, f, &r4, "t4") {
		t.Fatal("a freed permit was not used: t4 resolved without a lookup")
	}
}

// TestStalePermitIsTakenOver: a permit whose lookup never finished (its
// worker is gone) is free again after the claim time.
func TestStalePermitIsTakenOver(t *testing.T) {
	a, b, f := twoWorkerRig(t)
	var r1, r2, r3 Request
	resolveOn(a, f, &r1, "t1")
	resolveOn(a, f, &r2, "t2") // worker a is then never ticked again
	if !resolveOn(b, f, &r3, "t3") || !r3.Fallback {
		t.Fatal("want the fallback while both permits are held")
	}
	f.Clock.Advance(b.claimTTL)
	var r4 Request
	if resolveOn(b, f, &r4, "t4") {
		t.Fatal("a permit past its claim time was not taken over")
	}
}
