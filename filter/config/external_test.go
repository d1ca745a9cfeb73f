package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter"
)

func init() {
	addCases(externalGoodConfigs, externalBadCases)
}

var externalGoodConfigs = []string{
	`{"external": {"cluster": "limits", "fallback": {"requests_per_second": 1}}}`,
	`{"external": {"cluster": "limits", "path": "/v1/limits", "timeout": "250ms",
	  "forward_headers": ["x-tenant-id", "x-plan"], "cache_ttl": "60s", "max_cached": 10000,
	  "fallback": {"requests_per_second": 100, "burst": 50, "key": ["header:x-tenant-id"]}}}`,
	`{"external": {"cluster": "limits", "forward_headers": ["*", "authorization"], "cache_key": ["header:x-tenant-id", "path"],
	  "stale_ttl": "0s", "fallback": {"limit": 10, "window": "1m", "key": []}}}`,
	`{"external": {"name": "tenant", "cluster": "limits", "mode": "hybrid", "failure_policy": "local", "instances": 3,
	  "on_limit": {"status": 503}, "on_missing_key": "deny", "match": {"path_prefix": "/api"},
	  "fallback": {"requests_per_second": 5}},
	  "backend": {"cluster": "webdis"}}`,
}

func ext(fields string) string {
	return `{"external": {"cluster": "limits", "fallback": {"requests_per_second": 5}` + fields + `}}`
}

var externalBadCases = []badCase{
	{name: "external not object", in: `{"external": []}`, want: []string{"external: must be an object"}},
	{name: "external unknown field", in: ext(`, "url": "http://x"`), want: []string{"external.url: unknown field"}},
	{name: "external without cluster", in: `{"external": {"fallback": {"requests_per_second": 5}}}`, want: []string{"external.cluster: required"}},
	{name: "external without fallback", in: `{"external": {"cluster": "limits"}}`,
		want: []string{"external.fallback: required: the limit applied when the service cannot answer"}},
	{name: "external empty cluster", in: `{"external": {"cluster": "", "fallback": {"requests_per_second": 5}}}`,
		want: []string{"external.cluster: must not be empty"}},
	{name: "external relative path", in: ext(`, "path": "limits"`), want: []string{`external.path: must start with "/"`}},
	{name: "external zero timeout", in: ext(`, "timeout": "0s"`), want: []string{"external.timeout: must be >= 1ms"}, schemaAccepts: true},
	{name: "external name too long", in: ext(`, "name": "` + strings.Repeat("n", 65) + `"`),
		want: []string{`external.name: must be 1-64 characters of A-Z a-z 0-9 _ -, got "` + strings.Repeat("n", 65) + `"`}},
	{name: "external bad header", in: ext(`, "forward_headers": ["x tenant"]`), want: []string{`external.forward_headers[0]: must be a header name or "*"`}},
	{name: "external header case duplicate", in: ext(`, "forward_headers": ["X-Plan", "x-plan"]`),
		want: []string{`external.forward_headers[1]: duplicate header "x-plan"`}, schemaAccepts: true},
	{name: "external wildcard without cache key", in: ext(`, "forward_headers": ["*"]`),
		want: []string{`external.cache_key: required when forward_headers has "*": the cache cannot be keyed by every header`}},
	{name: "external bad cache key", in: ext(`, "cache_key": ["tenant"]`),
		want: []string{`external.cache_key[0]: unknown key part "tenant"; want client_ip, client_ip/<v4 bits>/<v6 bits>, header:<name>, query:<name>, cookie:<name>, path, path_segment:<n>, route, cluster, method or host`}},
	{name: "external short cache ttl", in: ext(`, "cache_ttl": "500ms"`), want: []string{"external.cache_ttl: must be >= 1s"}, schemaAccepts: true},
	{name: "external max cached", in: ext(`, "max_cached": 0`), want: []string{"external.max_cached: must be >= 1"}},
	{name: "external slots", in: ext(`, "slots": 2097152, "overflow_slots": 0`),
		want: []string{"external.slots: must be <= 1048576", "external.overflow_slots: must be >= 1"}},
	{name: "external global without backend", in: ext(`, "mode": "global"`),
		want: []string{`external.mode: "global" needs a "backend" block naming the Redis cluster`}},
	{name: "external policy when local", in: ext(`, "failure_policy": "deny"`),
		want: []string{`external.failure_policy: only valid with mode "global" or "hybrid"`}},
	{name: "external fallback without rate", in: `{"external": {"cluster": "limits", "fallback": {"key": ["client_ip"]}}}`,
		want: []string{"external.fallback: one of requests_per_second or limit with window is required"}},
	{name: "external fallback unknown field", in: `{"external": {"cluster": "limits", "fallback": {"requests_per_second": 1, "cost": 2}}}`,
		want: []string{"external.fallback.cost: unknown field"}},
	{name: "external fallback beyond the Redis scripts", in: `{"backend": {"cluster": "r"}, "external": {"cluster": "limits", "mode": "global",
		"fallback": {"limit": 1, "window": "1000001ns"}}}`,
		want: []string{`external.fallback.window: must be a whole number of microseconds with mode "global": the Redis scripts count time in microseconds`}, schemaAccepts: true},
	{name: "external name clash", in: `{"limits": [{"name": "external", "requests_per_second": 1}], "external": {"cluster": "limits", "fallback": {"requests_per_second": 1}}}`,
		want: []string{`external.name: "external" is also the name of limits[0]; metrics need distinct names`}, schemaAccepts: true},
}

func TestParseExternalDefaults(t *testing.T) {
	c := mustParse(t, `{"external": {"cluster": "limits", "forward_headers": ["X-Tenant-Id", "x-plan"],
		"fallback": {"requests_per_second": 100, "burst": 50}}}`)
	tenant, plan := KeyPart{Kind: KeyHeader, Header: "x-tenant-id"}, KeyPart{Kind: KeyHeader, Header: "x-plan"}
	want := &External{
		Limit: Limit{
			Name: "external", Key: []KeyPart{tenant, plan}, Rate: Rate{Limit: 100, Window: time.Second, Burst: 50},
			Cost: 1, OverrideBy: -1, Instances: 1, OnLimit: OnLimit{Action: ActionReject, Status: 429}, Slots: 16384, ForgetMaxUsed: limiter.DefaultForgetMaxUsed,
			Rollout: FullRollout,
		},
		Cluster: "limits", Authority: "limits", Path: "/limits", Timeout: 100 * time.Millisecond,
		ForwardHeaders: []string{"x-tenant-id", "x-plan"}, CacheKey: []KeyPart{tenant, plan},
		CacheTTL: time.Minute, StaleTTL: 5 * time.Minute, MaxCached: 10000, MaxConcurrentRequests: 50,
	}
	if !reflect.DeepEqual(c.External, want) {
		t.Errorf("got  %+v\nwant %+v", c.External, want)
	}
}

func TestParseExternalEverything(t *testing.T) {
	c := mustParse(t, `{"backend": {"cluster": "webdis", "failure_policy": "deny", "instances": 2},
	  "external": {"name": "tenant", "match": {"path_prefix": "/api"}, "cluster": "limits", "authority": "limits.internal",
	    "path": "/v2/limits", "timeout": "2s", "forward_headers": ["x-tenant-id", "*", "Cookie"],
	    "cache_key": ["header:x-tenant-id", "method"], "cache_ttl": "10s", "stale_ttl": "1h", "max_cached": 50,
	    "mode": "global", "instances": 4, "on_missing_key": "deny", "on_limit": {"action": "delay", "max_delay": "1s"},
	    "slots": 65536, "overflow_slots": 65536, "forget_max_used": 7,
	    "fallback": {"limit": 60, "window": "1m", "burst": 5, "key": ["client_ip"]}}}`)
	e := c.External
	want := &External{
		Limit: Limit{
			Name: "tenant", Match: Match{PathPrefix: "/api"}, Key: []KeyPart{{Kind: KeyClientIP}},
			Rate: Rate{Limit: 60, Window: time.Minute, Burst: 5}, Cost: 1, OverrideBy: -1, Mode: ModeGlobal,
			FailurePolicy: FailDeny, Instances: 4, OnMissingKey: MissingKeyDeny,
			OnLimit: OnLimit{Action: ActionDelay, MaxDelay: time.Second, Status: 429},
			Slots:   65536, OverflowSlots: 65536, ForgetMaxUsed: 7, Rollout: FullRollout,
		},
		Cluster: "limits", Authority: "limits.internal", Path: "/v2/limits", Timeout: 2 * time.Second,
		ForwardHeaders: []string{"x-tenant-id", "cookie"}, ForwardAll: true,
		CacheKey: []KeyPart{{Kind: KeyHeader, Header: "x-tenant-id"}, {Kind: KeyMethod}},
		CacheTTL: 10 * time.Second, StaleTTL: time.Hour, MaxCached: 50, MaxConcurrentRequests: 50,
	}
	if !reflect.DeepEqual(e, want) {
		t.Errorf("got  %+v\nwant %+v", e, want)
	}
	roundTrip(t, c)
}

func TestParseExternalFallbackKeyDefaultsToCacheKey(t *testing.T) {
	c := mustParse(t, ext(`, "cache_key": ["host", "header:x-tenant-id"]`))
	want := []KeyPart{{Kind: KeyHost}, {Kind: KeyHeader, Header: "x-tenant-id"}}
	if !reflect.DeepEqual(c.External.Limit.Key, want) {
		t.Errorf("fallback key %v, want %v", c.External.Limit.Key, want)
	}
	c = mustParse(t, ext(``))
	if len(c.External.CacheKey) != 0 || c.External.CacheKey == nil || len(c.External.Limit.Key) != 0 {
		t.Errorf("without forward_headers: cache key %#v, fallback key %#v; want both empty (one entry, one bucket)",
			c.External.CacheKey, c.External.Limit.Key)
	}
}

func TestSensitiveHeaders(t *testing.T) {
	for _, h := range []string{"authorization", "cookie", "x-api-key", "proxy-authorization", "set-cookie"} {
		if !IsSensitiveHeader(h) {
			t.Errorf("%s is not sensitive", h)
		}
	}
	if IsSensitiveHeader("x-tenant-id") {
		t.Error("x-tenant-id is sensitive")
	}
}

func init() {
	goodConfigs = append(goodConfigs,
		`{"external": {"cluster": "limits", "forward_headers": ["x-tenant-id", "*"], "cache_key": ["header:x-tenant-id"],
		  "deny_headers": ["X-Internal-Token", "x-forwarded-client-cert"], "fallback": {"requests_per_second": 1}}}`)
	badCases = append(badCases,
		badCase{name: "deny_headers without wildcard", in: ext(`, "deny_headers": ["x-internal"]`),
			want: []string{`external.deny_headers: has no effect without "*" in forward_headers: only the wildcard sends unnamed headers`}},
		badCase{name: "deny_headers wildcard", in: denyExt(`"*"`), want: []string{"external.deny_headers[0]: must be a header name"}},
		badCase{name: "deny_headers not a name", in: denyExt(`"a b", 5`),
			want: []string{"external.deny_headers[0]: must be a header name", "external.deny_headers[1]: must be a header name"}},
		badCase{name: "deny_headers duplicate", in: denyExt(`"x-a", "X-A"`),
			want: []string{`external.deny_headers[1]: duplicate header "x-a"`}, schemaAccepts: true},
		badCase{name: "deny_headers also forwarded", in: denyExt(`"X-Tenant-Id"`),
			want: []string{`external.deny_headers[0]: "x-tenant-id" is also named in forward_headers, which sends it`}, schemaAccepts: true},
	)
}

func denyExt(items string) string {
	return `{"external": {"cluster": "limits", "forward_headers": ["x-tenant-id", "*"], "cache_key": ["header:x-tenant-id"],
	  "deny_headers": [` + items + `], "fallback": {"requests_per_second": 1}}}`
}

func TestParseDenyHeaders(t *testing.T) {
	c := mustParse(t, denyExt(`"X-Internal-Token"`))
	if !reflect.DeepEqual(c.External.DenyHeaders, []string{"x-internal-token"}) {
		t.Fatalf("DenyHeaders = %q", c.External.DenyHeaders)
	}
	for name, want := range map[string]bool{"x-internal-token": true, "authorization": true, "cookie": true, "x-plan": false} {
		if got := c.External.Denied(name); got != want {
			t.Errorf("Denied(%q) = %v, want %v", name, got, want)
		}
	}
	if d := mustParse(t, ext("")).External; d.DenyHeaders != nil || !d.Denied("x-api-key") {
		t.Errorf("default: DenyHeaders %q, x-api-key denied %v; want none and the sensitive defaults", d.DenyHeaders, d.Denied("x-api-key"))
	}
}

func init() {
	goodConfigs = append(goodConfigs, ext(`, "max_concurrent_requests": 1`), ext(`, "max_concurrent_requests": 1000`))
	badCases = append(badCases,
		badCase{name: "max_concurrent_requests zero", in: ext(`, "max_concurrent_requests": 0`),
			want: []string{"external.max_concurrent_requests: must be >= 1"}},
		badCase{name: "max_concurrent_requests too many", in: ext(`, "max_concurrent_requests": 1001`),
			want: []string{"external.max_concurrent_requests: must be <= 1000"}},
	)
}

func TestSchemaMaxConcurrentDefault(t *testing.T) {
	got := schemaDefault(t, "external", "max_concurrent_requests")
	if want := mustParse(t, ext("")).External.MaxConcurrentRequests; got != float64(want) {
		t.Errorf("schema external.max_concurrent_requests default %v, parser default %d", got, want)
	}
}
