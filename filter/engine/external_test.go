package engine

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
	"github.com/sluice-proxy/sluice/filter/limitsvc"
	"github.com/sluice-proxy/sluice/limiter"
)

// fakeLimits plays the limits service for distHarness: it reads
// each lookup as the service would and answers from quotas by tenant.
type fakeLimits struct {
	t      *testing.T
	quotas map[string]string // x-tenant-id → answer body
	down   bool              // answer 503
	calls  map[string]int
	last   lookupRequest
	// lastHeaders are the callout's headers (pseudo-headers included).
	lastHeaders [][2]string
}

type lookupRequest struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
}

func newFakeLimits(t *testing.T, quotas map[string]string) *fakeLimits {
	return &fakeLimits{t: t, quotas: quotas, calls: map[string]int{}}
}

func (f *fakeLimits) answer(c *hosttest.Call) (int, []byte, bool) {
	f.t.Helper()
	var req lookupRequest
	if err := json.Unmarshal(c.Body, &req); err != nil {
		f.t.Fatalf("lookup body %q is not the JSON request: %v", c.Body, err)
	}
	f.last, f.lastHeaders = req, c.Headers
	tenant := req.Headers["x-tenant-id"]
	f.calls[tenant]++
	if f.down {
		return 503, []byte("upstream connect error"), true
	}
	body, ok := f.quotas[tenant]
	if !ok {
		return 404, nil, true
	}
	return 200, []byte(body), true
}

func (f *fakeLimits) total() int {
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
}

// extConfig is an external block with a fallback of 4 per hour per tenant
// and extra fields (with a leading comma) appended.
func extConfig(extra string) string {
	return `{"external":{"cluster":"limits","timeout":"100ms","forward_headers":["x-tenant-id"],"cache_ttl":"60s",` +
		`"stale_ttl":"10s","fallback":{"limit":4,"window":"1h","key":["header:x-tenant-id"]}` + extra + `}}`
}

// Hour-long windows keep refills out of the way: what a tenant gets is its
// quota exactly.
var tenantQuotas = map[string]string{
	"acme":    `{"limit":3,"window":"1h","tenant_key":"acme"}`,
	"initech": `{"average":5,"period":"1h","burst":0,"tenant_key":"initech"}`,
}

func newExtHarness(t *testing.T, cfg string, quotas map[string]string) (*distHarness, *fakeLimits) {
	d := newDistHarness(t, cfg, nil)
	f := newFakeLimits(t, quotas)
	d.limits = f.answer
	return d, f
}

func tenantHeaders(tenant string, extra ...[2]string) [][2]string {
	hs := [][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "example.com"}}
	if tenant != "" {
		hs = append(hs, [2]string{"x-tenant-id", tenant})
	}
	return append(hs, extra...)
}

// wantAdmitted checks that want of n requests for tenant are admitted;
// why says where want comes from.
func wantAdmitted(t *testing.T, d *distHarness, tenant string, n, want int, why string) {
	t.Helper()
	if got := admitted(t, d, tenant, n); got != want {
		t.Fatalf("%s admitted %d of %d, want %d (%s)", tenant, got, n, want, why)
	}
}

// admitted sends n requests for tenant and counts the 200s; every other
// answer must be a 429.
func admitted(t *testing.T, d *distHarness, tenant string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		switch o := d.doHeaders(tenantHeaders(tenant)); o.status {
		case 200:
			ok++
		case 429:
		default:
			t.Fatalf("%s: status %d", tenant, o.status)
		}
	}
	return ok
}

func TestExternalTenantsGetTheirQuotas(t *testing.T) {
	d, f := newExtHarness(t, extConfig(""), tenantQuotas)
	wantAdmitted(t, d, "acme", 6, 3, "its quota")
	wantAdmitted(t, d, "initech", 8, 5, "its quota")
	if f.calls["acme"] != 1 || f.calls["initech"] != 1 {
		t.Fatalf("lookups %v, want one per tenant: the rest are cache hits", f.calls)
	}
	if hits, misses := d.counter("sluice.external.cache_hits"), d.counter("sluice.external.cache_misses"); hits != 12 || misses != 2 {
		t.Fatalf("cache hits %d, misses %d; want 12 and 2", hits, misses)
	}
	if got := d.counter("sluice.limit.external.limited"); got != 6 {
		t.Fatalf("limited %d, want 6", got)
	}
}

func TestExternalCacheLifetimes(t *testing.T) {
	quotas := map[string]string{
		"acme":    `{"limit":100,"window":"1h","tenant_key":"acme"}`,
		"short":   `{"limit":100,"window":"1h","tenant_key":"short","cache_max_age_seconds":5}`,
		"nostore": `{"limit":100,"window":"1h","tenant_key":"nostore","cache_no_store":true}`,
	}
	d, f := newExtHarness(t, extConfig(""), quotas)
	for _, tenant := range []string{"acme", "short", "nostore"} {
		admitted(t, d, tenant, 3)
	}
	if f.calls["acme"] != 1 || f.calls["short"] != 1 || f.calls["nostore"] != 3 {
		t.Fatalf("lookups %v: want 1, 1 and one per request for cache_no_store", f.calls)
	}
	d.now = d.now.Add(6 * time.Second) // past cache_max_age_seconds, within cache_ttl
	admitted(t, d, "acme", 1)
	admitted(t, d, "short", 1)
	if f.calls["acme"] != 1 || f.calls["short"] != 2 {
		t.Fatalf("after 6s lookups %v: the answer's max age overrides cache_ttl", f.calls)
	}
	d.now = d.now.Add(time.Minute) // past cache_ttl
	admitted(t, d, "acme", 1)
	if f.calls["acme"] != 2 {
		t.Fatalf("after cache_ttl: %d lookups of acme, want 2", f.calls["acme"])
	}
}

func TestExternalLookupRequest(t *testing.T) {
	hs := [][2]string{{":method", "POST"}, {":path", "/api/v1/orders?token=s3cret"}, {":authority", "shop.example.com"},
		{"x-tenant-id", "acme"}, {"x-plan", "gold"}, {"x-plan", "extra"}, {"authorization", "Bearer abc"},
		{"cookie", "session=1"}, {"x-api-key", "k"}, {"proxy-authorization", "Basic x"}, {"user-agent", "curl/8"}}
	t.Run("wildcard", func(t *testing.T) {
		cfg := strings.Replace(extConfig(`,"cache_key":["header:x-tenant-id"],"path":"/v1/limits"`),
			`"forward_headers":["x-tenant-id"]`, `"forward_headers":["x-tenant-id","host","*"]`, 1)
		d, f := newExtHarness(t, cfg, tenantQuotas)
		if o := d.doHeaders(hs); o.status != 200 {
			t.Fatalf("status %d", o.status)
		}
		want := lookupRequest{Method: "POST", Path: "/api/v1/orders", Headers: map[string]string{
			"x-tenant-id": "acme", "host": "shop.example.com", "x-plan": "gold,extra", "user-agent": "curl/8"}}
		if !equalLookup(f.last, want) {
			t.Fatalf("lookup %+v, want %+v (no query, no credentials)", f.last, want)
		}
		for name, v := range map[string]string{":method": "POST", ":path": "/v1/limits", ":authority": "limits", "content-type": "application/json"} {
			if got := header(f.lastHeaders, name); got != v {
				t.Errorf("callout %s = %q, want %q", name, got, v)
			}
		}
	})
	t.Run("re-spelled path in normal form", func(t *testing.T) {
		d, f := newExtHarness(t, extConfig(""), tenantQuotas)
		respelled := append([][2]string{{":method", "GET"}, {":path", "/api/x/../v1//%6Frders;jsessionid=1?token=s3cret"}}, hs[2:]...)
		d.doHeaders(respelled)
		if f.last.Path != "/api/v1/orders" {
			t.Fatalf("lookup path %q, want the normal form /api/v1/orders", f.last.Path)
		}
	})
	t.Run("named sensitive header", func(t *testing.T) {
		cfg := strings.Replace(extConfig(""), `"forward_headers":["x-tenant-id"]`, `"forward_headers":["x-tenant-id","Authorization"]`, 1)
		d, f := newExtHarness(t, cfg, tenantQuotas)
		d.doHeaders(hs)
		want := lookupRequest{Method: "POST", Path: "/api/v1/orders", Headers: map[string]string{"x-tenant-id": "acme", "authorization": "Bearer abc"}}
		if !equalLookup(f.last, want) {
			t.Fatalf("lookup %+v, want %+v", f.last, want)
		}
	})
}

func equalLookup(a, b lookupRequest) bool {
	if a.Method != b.Method || a.Path != b.Path || len(a.Headers) != len(b.Headers) {
		return false
	}
	for k, v := range b.Headers {
		if a.Headers[k] != v {
			return false
		}
	}
	return true
}

// TestExternalOneLookupInFlight pauses five first requests of a tenant
// while the service has not answered: one lookup goes out, and its answer
// decides all five.
func TestExternalOneLookupInFlight(t *testing.T) {
	d, f := newExtHarness(t, extConfig(""), tenantQuotas)
	d.silent = true
	ids := d.startWaiting(5, tenantHeaders("acme"), "lookup")
	d.settleN(3)
	if d.callouts != 1 {
		t.Fatalf("%d lookups for one key, want exactly 1 in flight", d.callouts)
	}
	if got := d.counter("sluice.external.waits"); got != 4 {
		t.Fatalf("waits %d, want the 4 requests that joined the lookup", got)
	}
	c := d.callsFrom(0)[0]
	st, body, _ := f.answer(c)
	d.deliver(c, st, body, true)
	passed, limited := 0, 0
	for _, id := range ids {
		switch {
		case d.local(id) != nil && d.local(id).Status == 429:
			limited++
		case d.action(id) == Continue:
			passed++
		default:
			t.Fatalf("stream %d not resumed when the answer arrived", id)
		}
	}
	if passed != 3 || limited != 2 {
		t.Fatalf("%d passed and %d limited, want acme's quota 3 and 2", passed, limited)
	}
	if f.calls["acme"] != 1 {
		t.Fatalf("%d lookups", f.calls["acme"])
	}
}

// TestExternalServiceDown walks an outage: the stale answer, the breaker
// opening, the fallback once the answer is too old, a failed probe, and
// recovery.
func TestExternalServiceDown(t *testing.T) {
	quotas := map[string]string{"acme": `{"limit":3,"window":"1h","tenant_key":"acme"}`}
	d, f := newExtHarness(t, extConfig(""), quotas)
	wantAdmitted(t, d, "acme", 1, 1, "the first request")
	d.now = d.now.Add(61 * time.Second) // stale: cache_ttl 60s, stale_ttl 10s
	f.down = true
	// Failures 1 to 5: each request looks up, fails, and is decided by the
	// stale answer in acme's own bucket (2 left of 3).
	statuses := []int{}
	for range 5 {
		o := d.doHeaders(tenantHeaders("acme"))
		if o.calls != 1 {
			t.Fatalf("a request made %d lookups while the breaker was closed", o.calls)
		}
		statuses = append(statuses, o.status)
	}
	if want := []int{200, 200, 429, 429, 429}; !equalInts(statuses, want) {
		t.Fatalf("statuses %v under the stale answer, want %v", statuses, want)
	}
	if d.counter("sluice.external.stale_used") != 5 || d.counter("sluice.external.errors.unavailable") != 5 {
		t.Fatalf("stale_used %d, errors.unavailable %d", d.counter("sluice.external.stale_used"), d.counter("sluice.external.errors.unavailable"))
	}
	if d.counter("sluice.external.breaker.opens") != 1 {
		t.Fatal("5 consecutive failures did not open the breaker")
	}
	// Open: no lookup at all, and still the stale answer.
	if o := d.doHeaders(tenantHeaders("acme")); o.calls != 0 || o.waited != 0 || o.status != 429 {
		t.Fatalf("while open: %d lookups, waited %v, status %d", o.calls, o.waited, o.status)
	}
	// Past the stale time, still open: the fallback, 4 per hour per tenant
	// in a bucket of its own.
	d.now = d.now.Add(10 * time.Second)
	before := f.total()
	wantAdmitted(t, d, "acme", 6, 4, "the fallback")
	if f.total() != before || d.counter("sluice.external.fallback_used") != 6 {
		t.Fatalf("lookups while open %d, fallback_used %d", f.total()-before, d.counter("sluice.external.fallback_used"))
	}
	// 30s after opening: one probe, which fails and re-opens it.
	d.now = d.now.Add(20 * time.Second)
	if o := d.doHeaders(tenantHeaders("acme")); o.calls != 1 {
		t.Fatalf("half-open: %d lookups, want the one probe", o.calls)
	}
	if o := d.doHeaders(tenantHeaders("acme")); o.calls != 0 {
		t.Fatalf("after a failed probe: %d lookups, want none", o.calls)
	}
	if d.counter("sluice.external.breaker.opens") != 2 {
		t.Fatalf("opens %d, want 2 (the failed probe re-opens)", d.counter("sluice.external.breaker.opens"))
	}
	// The service is back (with a new plan): the next probe closes the
	// breaker and its answer applies.
	f.down = false
	quotas["acme"] = `{"limit":10,"window":"1h","tenant_key":"acme-gold"}`
	d.now = d.now.Add(30 * time.Second)
	wantAdmitted(t, d, "acme", 12, 10, "after recovery, the new plan's")
	if d.counter("sluice.external.breaker.closes") != 1 {
		t.Fatal("the breaker did not close")
	}
	if f.calls["acme"] != 1+5+1+1 {
		t.Fatalf("%d lookups in all, want 1 + 5 failures + 2 probes", f.calls["acme"])
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestExternalBadAnswersFallBack sends what a broken service might: each
// is a failed lookup, the request is decided by the fallback, nothing
// panics.
func TestExternalBadAnswersFallBack(t *testing.T) {
	cases := []badReply{
		{"timeout", 0, "", false, "timeout"},
		{"5xx", 502, "bad gateway", true, "unavailable"},
		{"404", 404, "", true, "http_status"},
		{"html", 200, "<html>oops</html>", true, "malformed"},
		{"negative rate", 200, `{"limit":-3,"window":"1h"}`, true, "malformed"},
		{"zero period", 200, `{"limit":3,"window":"0s"}`, true, "malformed"},
		{"absurd rate", 200, `{"requests_per_second":1e12}`, true, "malformed"},
		{"no rate", 200, `{"tenant_key":"acme"}`, true, "malformed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, _ := newExtHarness(t, extConfig(""), nil)
			d.limits = func(*hosttest.Call) (int, []byte, bool) { return c.status, []byte(c.body), c.ok }
			wantAdmitted(t, d, "acme", 5, 4, "the fallback's")
			if got := d.counter("sluice.external.errors." + c.kind); got != 5 {
				t.Fatalf("errors.%s = %d, want 5", c.kind, got)
			}
			if got := d.counter("sluice.external.fallback_used"); got != 5 {
				t.Fatalf("fallback_used %d", got)
			}
		})
	}
}

func TestExternalSilentServiceIsBounded(t *testing.T) {
	d, _ := newExtHarness(t, extConfig(""), tenantQuotas)
	d.silent = true
	o := d.doHeaders(tenantHeaders("acme"))
	if o.status != 200 {
		t.Fatalf("status %d, want the fallback's 200", o.status)
	}
	// One tick to send, the timeout, the watchdog's slack, a tick of
	// granularity.
	if budget := 5*time.Millisecond + 100*time.Millisecond + 10*time.Millisecond + 5*time.Millisecond; o.waited > budget {
		t.Fatalf("held %v, budget %v", o.waited, budget)
	}
	if got := d.counter("sluice.external.errors.timeout"); got != 1 {
		t.Fatalf("errors.timeout %d", got)
	}
	// A reply after the watchdog gave up is ignored.
	c := d.callsFrom(0)[0]
	d.deliver(c, 200, []byte(`{"limit":1,"window":"1h"}`), true)
	if got := d.counter("sluice.external.errors.timeout"); got != 1 {
		t.Fatalf("errors.timeout %d after a late reply", got)
	}
}

func TestExternalUnlimitedAndNoTenantKey(t *testing.T) {
	quotas := map[string]string{
		"vip":  `{"average":0,"period":"1s"}`,
		"anon": `{"limit":2,"window":"1h"}`,
	}
	d, f := newExtHarness(t, extConfig(""), quotas)
	wantAdmitted(t, d, "vip", 20, 20, "unlimited")
	// Without tenant_key the lookup key is the bucket.
	wantAdmitted(t, d, "anon", 4, 2, "without tenant_key, the bucket")
	if f.calls["vip"] != 1 || f.calls["anon"] != 1 {
		t.Fatalf("lookups %v", f.calls)
	}
}

func TestExternalMissingFallbackKey(t *testing.T) {
	d, _ := newExtHarness(t, extConfig(`,"on_missing_key":"deny"`), tenantQuotas)
	d.limits = func(*hosttest.Call) (int, []byte, bool) { return 503, nil, true }
	o := d.doHeaders(tenantHeaders(""))
	if o.status != 429 || !o.local {
		t.Fatalf("status %d: a request without the fallback's key must be denied under on_missing_key deny", o.status)
	}
	if got := d.counter("sluice.limit.external.missing_key"); got != 1 {
		t.Fatalf("missing_key %d", got)
	}
}

// TestExternalAmbiguousCacheKeyRefused checks that a cache_key header
// sent twice with different values makes no lookup and is refused, under
// on_missing_key skip: read as an empty value, it would share one cached
// answer among every client sending two tenants, looked up for the first
// of them (here a service that reads acme out of "acme,junk"), and charge
// them all to that tenant's bucket.
func TestExternalAmbiguousCacheKeyRefused(t *testing.T) {
	quotas := map[string]string{
		"acme":      tenantQuotas["acme"],
		"acme,junk": tenantQuotas["acme"],
	}
	d, f := newExtHarness(t, extConfig(""), quotas)
	for _, junk := range []string{"junk", "junk2"} {
		o := d.doHeaders(tenantHeaders("acme", [2]string{"x-tenant-id", junk}))
		if o.status != 429 || !o.local {
			t.Fatalf("acme then %s: status %d, want refused", junk, o.status)
		}
	}
	if f.total() != 0 {
		t.Fatalf("lookups %v for ambiguous tenants, want none", f.calls)
	}
	if got := d.counter("sluice.limit.external.missing_key"); got != 2 {
		t.Fatalf("missing_key %d, want 2", got)
	}
	// acme's bucket is untouched, and acme twice is acme, in its bucket.
	wantAdmitted(t, d, "acme", 1, 1, "the first request")
	if o := d.doHeaders(tenantHeaders("acme", [2]string{"x-tenant-id", "acme"})); o.status != 200 {
		t.Fatalf("acme twice: status %d", o.status)
	}
	wantAdmitted(t, d, "acme", 2, 1, "the 1 left of its quota of 3")
	if f.calls["acme"] != 1 {
		t.Fatalf("lookups %v, want one, for acme", f.calls)
	}
}

// TestExternalGlobalMode enforces answers in Redis: the bucket key carries
// the tenant, and an answer's failure_policy overrides the configured one
// when Redis is down.
func TestExternalGlobalMode(t *testing.T) {
	cfg := strings.Replace(extConfig(`,"mode":"global","instances":2`), `{"external"`,
		`{"backend":{"cluster":"redis","timeout":"50ms","retries":0,"failure_status":503},"external"`, 1)
	quotas := map[string]string{
		"acme":    `{"limit":4,"window":"1h","tenant_key":"acme","failure_policy":"deny"}`,
		"initech": `{"limit":4,"window":"1h","tenant_key":"initech","failure_policy":"inmemoryfallback"}`,
		"hooli":   `{"limit":4,"window":"1h","tenant_key":"hooli"}`,
	}
	d, _ := newExtHarness(t, cfg, quotas)
	var keys []string
	d.reply = func(c *hosttest.Call) (int, []byte, bool) {
		path, _ := url.PathUnescape(header(c.Headers, ":path"))
		keys = append(keys, path)
		return 503, nil, true // Redis is down
	}
	if o := d.doHeaders(tenantHeaders("acme")); o.status != 503 {
		t.Fatalf("acme: %d, want the answer's deny policy (503)", o.status)
	}
	if len(keys) != 1 || !strings.Contains(keys[0], "/1/"+backend.Key("external", limiter.TokenBucket, "tacme")+"/") {
		t.Fatalf("Redis calls %q, want one for the tenant's key", keys)
	}
	// local: the answer's 4 per hour divided by instances 2.
	wantAdmitted(t, d, "initech", 4, 2, "the local fallback")
	if o := d.doHeaders(tenantHeaders("hooli")); o.status != 200 {
		t.Fatalf("hooli: %d, want the configured allow policy", o.status)
	}
}

// FuzzExternalAnswer feeds arbitrary answers to a waiting request: the
// filter never panics, always answers, and anything Parse refuses is
// decided by the fallback.
func FuzzExternalAnswer(f *testing.F) {
	for _, s := range []string{`{"limit":3,"window":"1h","tenant_key":"acme"}`, `{"average":0,"period":"1s"}`,
		`{"limit":-1}`, `<html>`, ``, `{"requests_per_second":5,"cache_no_store":true}`} {
		f.Add(200, []byte(s))
	}
	f.Add(503, []byte(nil))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		d, _ := newExtHarness(t, extConfig(""), nil)
		d.limits = func(*hosttest.Call) (int, []byte, bool) { return status, body, true }
		o := d.doHeaders(tenantHeaders("acme"))
		if o.status != 200 && o.status != 429 {
			t.Fatalf("status %d", o.status)
		}
		if _, err := limitsvc.Parse(status, body); err != nil && d.counter("sluice.external.fallback_used") != 1 {
			t.Fatalf("a refused answer (%v) was not decided by the fallback", err)
		}
	})
}
