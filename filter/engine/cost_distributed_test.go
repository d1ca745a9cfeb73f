package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
	"github.com/sluice-proxy/sluice/limiter"
)

// chargeConfig is distConfig's limit (10/s per x-key, 2 instances) with its
// cost taken from the response.
func chargeConfig(mode, policy string) string {
	return strings.Replace(distConfig(mode, policy, "webdis", ""), `"instances":2}`,
		`"instances":2,"cost_from_response":{"header":"x-tokens-used"}}`, 1)
}

// firstCharge starts a harness on chargeConfig(mode, "deny") whose first
// request, alice's, reports used as its response cost, and checks that
// the tick charged Redis once for it.
func firstCharge(t *testing.T, mode, used string) (*fakeRedis, *distHarness) {
	t.Helper()
	fake := newFakeRedis(tenPerSecond, backend.Webdis)
	d := newDistHarness(t, chargeConfig(mode, "deny"), fake)
	d.respHeaders = [][2]string{{"x-tokens-used", used}}
	if o := d.do("alice"); o.status != 200 {
		t.Fatalf("first: %d", o.status)
	}
	d.settle()
	if got := fake.calls["token_bucket_charge"]; got != 1 {
		t.Fatalf("%d charge calls, want 1", got)
	}
	return fake, d
}

func TestGlobalChargesTheResponseCost(t *testing.T) {
	fake, d := firstCharge(t, "global", "8")
	// One unit at admission and 7 charged: 2 of 10 left.
	if _, res := fake.lim.Decide(fake.state[backend.Key("api", limiter.TokenBucket, "alice")], d.now.UnixNano(), 0); res.Remaining != 2 {
		t.Fatalf("Redis holds %d units, want 2", res.Remaining)
	}
	// Admitted on one of the 2, then 15 charged: 14 past the 1 left, capped
	// at one bucket (10) past empty, so the next unit is 1.1s away.
	d.respHeaders = [][2]string{{"x-tokens-used", "15"}}
	if o := d.do("alice"); o.status != 200 {
		t.Fatalf("second: %d", o.status)
	}
	d.settle()
	// The charge put the key in the negative cache: refused without a call.
	if o := d.do("alice"); o.status != 429 || o.calls != 0 {
		t.Fatalf("in debt: status %d after %d calls, want a local 429 without a call", o.status, o.calls)
	}
	if got := d.counter("sluice.backend.negative_cache_hits"); got != 1 {
		t.Fatalf("negative cache hits %d, want 1", got)
	}
	if o := d.do("bob"); o.status != 200 {
		t.Fatalf("another key: %d", o.status)
	}
	d.now = d.now.Add(1100 * time.Millisecond)
	d.respHeaders = nil
	if o := d.do("alice"); o.status != 200 || o.calls != 1 {
		t.Fatalf("once a unit is back: status %d with %d calls", o.status, o.calls)
	}
	d.settle()
	if got := fake.calls["token_bucket_charge"]; got != 3 {
		// alice twice and bob once (15); the last answer reported nothing.
		t.Fatalf("%d charge calls, want 3", got)
	}
	if got := d.counter("sluice.limit.api.response_cost"); got != 8+15+15+1 {
		t.Fatalf("response_cost %d", got)
	}
}

func TestHybridChargesRedisAndStopsLeasing(t *testing.T) {
	fake, d := firstCharge(t, "hybrid", "30")
	// Redis is a bucket in debt. What is left of the lease this Envoy
	// already holds is still served (at most one lease, less than a
	// bucket); after that requests are refused locally, without asking
	// Redis, until the debt is repaid.
	leases := fake.calls["token_bucket_lease"]
	served := 0
	for {
		o := d.do("alice")
		if o.status == 429 {
			break
		}
		if o.status != 200 || o.calls != 0 {
			t.Fatalf("serving the held lease: status %d after %d calls", o.status, o.calls)
		}
		if served++; served >= 10 {
			t.Fatalf("served %d in debt: more than one lease can hold", served)
		}
	}
	for i := range 20 {
		if o := d.do("alice"); o.status != 429 || o.calls != 0 {
			t.Fatalf("request %d in debt: status %d after %d calls", i, o.status, o.calls)
		}
	}
	if fake.calls["token_bucket_lease"] != leases {
		t.Fatalf("%d lease calls while in debt", fake.calls["token_bucket_lease"]-leases)
	}
	d.respHeaders = nil
	d.now = d.now.Add(2 * time.Second)
	if o := d.do("alice"); o.status != 200 {
		t.Fatalf("after the debt is repaid: %d", o.status)
	}
}

// Under failure_policy local a charge Redis cannot take goes to the local
// fallback table, which admitted the request in the first place.
func TestChargeFallsBackLocally(t *testing.T) {
	d := newDistHarness(t, chargeConfig("global", "local"), nil)
	d.reply = func(*hosttest.Call) (int, []byte, bool) { return 503, nil, true }
	d.respHeaders = [][2]string{{"x-tokens-used", "5"}}
	// The fallback bucket is 10/s over 2 instances: 5, all of it charged.
	if o := d.do("alice"); o.status != 200 {
		t.Fatalf("first: %d", o.status)
	}
	for range 10 {
		d.settle() // the charge, its retry after the backoff
	}
	if o := d.do("alice"); o.status != 429 {
		t.Fatalf("after a charge of the whole fallback bucket: %d", o.status)
	}
}
