package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter"
)

func mustParse(t *testing.T, in string) *Config {
	t.Helper()
	c, err := Parse([]byte(in))
	if err != nil {
		t.Fatalf("Parse(%s): %v", in, err)
	}
	return c
}

func TestParseEmptyIsDefaults(t *testing.T) {
	want := &Config{
		ClientIP: ClientIP{Source: ClientIPPeer, TrustedHops: 1},
		Response: Response{Headers: AllHeaderFamilies, HeadersOnAllowed: true, Body: BodyJSON, NearLimitRatio: 0.8},
	}
	for _, in := range []string{"", "  \n\t", "{}", ` { } `, `{"limits": [], "breakers": []}`} {
		got := mustParse(t, in)
		got.Limits, got.Breakers = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q) = %+v, want %+v", in, got, want)
		}
	}
}

func TestParseLimitDefaults(t *testing.T) {
	c := mustParse(t, `{"limits": [{"name": "a", "requests_per_second": 10}]}`)
	want := Limit{
		Name:       "a",
		Key:        []KeyPart{{Kind: KeyClientIP}},
		Algorithm:  TokenBucket,
		Rate:       Rate{Limit: 10, Window: time.Second},
		Cost:       1,
		OverrideBy: -1,
		Mode:       ModeLocal,
		Instances:  1,
		OnLimit:    OnLimit{Action: ActionReject, Status: 429},
		Slots:      16384,

		ForgetMaxUsed: limiter.DefaultForgetMaxUsed,
		Rollout:       FullRollout,
	}
	if !reflect.DeepEqual(c.Limits, []Limit{want}) {
		t.Errorf("got %+v\nwant %+v", c.Limits, []Limit{want})
	}
}

func TestParseBreakerDefaults(t *testing.T) {
	c := mustParse(t, `{"breakers": [{"name": "b"}]}`)
	want := Breaker{
		Name:                "b",
		Per:                 PerCluster,
		FailureStatuses:     []int{500, 502, 503, 504},
		FailureOnTimeout:    true,
		FailureThreshold:    5,
		SuccessThreshold:    2,
		OpenTimeout:         30 * time.Second,
		HalfOpenMaxRequests: 1,
		Mode:                BreakerEnforce,
		Status:              503,
	}
	if !reflect.DeepEqual(c.Breakers, []Breaker{want}) {
		t.Errorf("got %+v\nwant %+v", c.Breakers, []Breaker{want})
	}
	// The default list must be a copy: a filter that sorts or edits one
	// breaker's statuses must not change the next config's defaults.
	c.Breakers[0].FailureStatuses[0] = 418
	if DefaultFailureStatuses[0] != 500 {
		t.Fatal("default failure statuses are shared with parsed configs")
	}
}

func TestParseBackendDefaults(t *testing.T) {
	c := mustParse(t, `{"backend": {"cluster": "webdis"},
		"limits": [{"name": "g", "mode": "global", "requests_per_second": 1}]}`)
	want := &Backend{
		Cluster: "webdis", Authority: "webdis", Protocol: ProtocolWebdis, PathPrefix: "/",
		Timeout: 50 * time.Millisecond, Retries: 1, FailurePolicy: FailAllow, FailureStatus: 429, Instances: 1,
		Breaker: BackendBreaker{FailureThreshold: 5, Window: 30 * time.Second, OpenTimeout: 15 * time.Second, HalfOpenMaxRequests: 2, JitterPercent: 20},
	}
	if !reflect.DeepEqual(c.Backend, want) {
		t.Errorf("got %+v\nwant %+v", c.Backend, want)
	}
	if l := c.Limits[0]; l.Mode != ModeGlobal || l.FailurePolicy != FailAllow || l.Instances != 1 {
		t.Errorf("limit = %+v", l)
	}
}

// TestParseEverything sets every field to a non-default value and checks
// each one arrives, normalised, in the typed config.
func TestParseEverything(t *testing.T) {
	c := mustParse(t, `{
	  "client_ip": {"source": "xff", "trusted_hops": 2},
	  "backend": {"cluster": "redis", "authority": "redis.internal", "protocol": "upstash", "path_prefix": "/r",
	              "token": "t0k", "timeout": "20ms", "retries": 2, "failure_policy": "local", "failure_status": 503,
	              "instances": 3,
	              "breaker": {"failure_threshold": 7, "window": "10s", "open_timeout": "5s", "half_open_max_requests": 3}},
	  "limits": [
	    {"name": "base", "key": [], "limit": 6000, "window": "1m", "burst": 100, "slots": 1000, "overflow_slots": 10,
	     "forget_max_used": 0},
	    {"name": "api-per-ip",
	     "match": {"path_prefix": "/api", "methods": ["get", "Post"], "hosts": ["API.example.com", "*.Example.org"],
	               "headers": [{"name": "X-Tier", "value": "free"}, {"name": "x-debug", "present": true},
	                           {"name": "x-internal", "present": false}],
	               "routes": ["r1"]},
	     "key": ["client_ip", "header:X-API-Key", "path", "route", "method", "host"],
	     "override_by": "header:x-api-key",
	     "algorithm": "sliding_window", "limit": 10, "window": "500ms", "cost": 2,
	     "overrides": {"premium": {"requests_per_second": 100}, "a.b c": {"limit": 5, "window": "2s"}},
	     "mode": "global", "failure_policy": "deny", "instances": 4,
	     "on_missing_key": "deny",
	     "on_limit": {"action": "delay", "max_delay": "250ms", "status": 503},
	     "replaces": ["base"]},
	    {"name": "exact", "match": {"path": "/login"}, "algorithm": "fixed_window", "requests_per_second": 1,
	     "mode": "global", "shadow": true, "on_limit": {"status": 420}}
	  ],
	  "breakers": [
	    {"name": "b1", "match": {"routes": ["r1"]}, "per": "route", "failure_statuses": [502, 429],
	     "failure_on_timeout": false, "failure_threshold": 0,
	     "failure_rate": {"threshold_percent": 25, "window_type": "time", "window_duration": "30s", "minimum_calls": 10},
	     "slow_call": {"duration": "2s", "threshold_percent": 80},
	     "success_threshold": 3, "open_timeout": "1m", "half_open_max_requests": 4, "mode": "metrics_only", "status": 502},
	    {"name": "b2", "failure_statuses": [], "failure_rate": {"window": 50, "minimum_calls": 50},
	     "slow_call": {"duration": "1500ms"}, "mode": "forced_open"},
	    {"name": "b3", "slow_call": {"duration": "1s"}, "mode": "disabled"}
	  ],
	  "response": {"headers": ["ratelimit"], "headers_on_allowed": false, "body": "problem+json"}
	}`)

	if want := (ClientIP{Source: ClientIPXFF, TrustedHops: 2}); !reflect.DeepEqual(c.ClientIP, want) {
		t.Errorf("client_ip = %+v, want %+v", c.ClientIP, want)
	}
	wantBackend := &Backend{
		Cluster: "redis", Authority: "redis.internal", Protocol: ProtocolUpstash, PathPrefix: "/r/", Token: "t0k",
		Timeout: 20 * time.Millisecond, Retries: 2, FailurePolicy: FailLocal, FailureStatus: 503, Instances: 3,
		Breaker: BackendBreaker{FailureThreshold: 7, Window: 10 * time.Second, OpenTimeout: 5 * time.Second, HalfOpenMaxRequests: 3, JitterPercent: 20},
	}
	if !reflect.DeepEqual(c.Backend, wantBackend) {
		t.Errorf("backend = %+v\nwant %+v", c.Backend, wantBackend)
	}

	wantLimits := []Limit{
		{Name: "base", Key: []KeyPart{}, Rate: Rate{Limit: 6000, Window: time.Minute, Burst: 100}, Cost: 1,
			OverrideBy: -1, Instances: 1, OnLimit: OnLimit{Status: 429}, Slots: 1000, OverflowSlots: 10, ForgetMaxUsed: 0},
		{Name: "api-per-ip",
			Match: Match{PathPrefix: "/api", Methods: []string{"GET", "POST"},
				Hosts: []string{"api.example.com", "*.example.org"},
				Headers: []HeaderMatch{{Name: "x-tier", ValueCondition: ValueCondition{Value: "free", HasValue: true}},
					{Name: "x-debug", ValueCondition: ValueCondition{Present: true}},
					{Name: "x-internal"}},
				Routes: []string{"r1"}},
			Key: []KeyPart{{Kind: KeyClientIP}, {Kind: KeyHeader, Header: "x-api-key"}, {Kind: KeyPath},
				{Kind: KeyRoute}, {Kind: KeyMethod}, {Kind: KeyHost}},
			Algorithm: SlidingWindow, Rate: Rate{Limit: 10, Window: 500 * time.Millisecond}, Cost: 2,
			Overrides:  map[string]Rate{"premium": {Limit: 100, Window: time.Second}, "a.b c": {Limit: 5, Window: 2 * time.Second}},
			OverrideBy: 1, Mode: ModeGlobal, FailurePolicy: FailDeny, Instances: 4, OnMissingKey: MissingKeyDeny,
			OnLimit:  OnLimit{Action: ActionDelay, MaxDelay: 250 * time.Millisecond, Status: 503},
			Replaces: []int{0}, Slots: 16384, ForgetMaxUsed: limiter.DefaultForgetMaxUsed},
		{Name: "exact", Match: Match{Path: "/login"}, Key: []KeyPart{{Kind: KeyClientIP}}, Algorithm: FixedWindow,
			Rate: Rate{Limit: 1, Window: time.Second}, Cost: 1, OverrideBy: -1, Mode: ModeGlobal,
			FailurePolicy: FailLocal, Instances: 3, Shadow: true, OnLimit: OnLimit{Status: 420}, Slots: 16384, ForgetMaxUsed: limiter.DefaultForgetMaxUsed},
	}
	for i := range wantLimits {
		wantLimits[i].Rollout = FullRollout
	}
	if len(c.Limits) != len(wantLimits) {
		t.Fatalf("got %d limits", len(c.Limits))
	}
	for i := range wantLimits {
		if !reflect.DeepEqual(c.Limits[i], wantLimits[i]) {
			t.Errorf("limits[%d] = %+v\nwant        %+v", i, c.Limits[i], wantLimits[i])
		}
	}

	wantBreakers := []Breaker{
		{Name: "b1", Match: Match{Routes: []string{"r1"}}, Per: PerRoute, FailureStatuses: []int{502, 429},
			FailureRate:      &FailureRate{ThresholdPercent: 25, WindowType: TimeWindow, WindowDuration: 30 * time.Second, MinimumCalls: 10},
			SlowCall:         &SlowCall{Duration: 2 * time.Second, ThresholdPercent: 80},
			SuccessThreshold: 3, OpenTimeout: time.Minute, HalfOpenMaxRequests: 4, Mode: BreakerMetricsOnly, Status: 502},
		{Name: "b2", FailureStatuses: []int{}, FailureOnTimeout: true, FailureThreshold: 5,
			FailureRate:      &FailureRate{ThresholdPercent: 50, WindowType: CountWindow, Window: 50, MinimumCalls: 50},
			SlowCall:         &SlowCall{Duration: 1500 * time.Millisecond, ThresholdPercent: 100},
			SuccessThreshold: 2, OpenTimeout: 30 * time.Second, HalfOpenMaxRequests: 1, Mode: BreakerForcedOpen, Status: 503},
		{Name: "b3", FailureStatuses: []int{500, 502, 503, 504}, FailureOnTimeout: true, FailureThreshold: 5,
			SlowCall:         &SlowCall{Duration: time.Second},
			SuccessThreshold: 2, OpenTimeout: 30 * time.Second, HalfOpenMaxRequests: 1, Mode: BreakerDisabled, Status: 503},
	}
	for i := range wantBreakers {
		if !reflect.DeepEqual(c.Breakers[i], wantBreakers[i]) {
			t.Errorf("breakers[%d] = %+v\nwant          %+v", i, c.Breakers[i], wantBreakers[i])
		}
	}
	if want := (Response{Headers: HeadersRateLimit, Body: BodyProblemJSON, NearLimitRatio: 0.8}); !reflect.DeepEqual(c.Response, want) {
		t.Errorf("response = %+v, want %+v", c.Response, want)
	}
}

func TestParseConcurrency(t *testing.T) {
	c := mustParse(t, `{"concurrency": [
	  {"name": "search", "max_in_flight": 50},
	  {"name": "per-tenant", "match": {"path_prefix": "/api", "routes": ["r"]}, "key": ["route", "cluster", "header:X-Tenant"],
	   "max_in_flight": 2, "status": 429, "shadow": true}]}`)
	want := []ConcurrencyLimit{
		{Name: "search", Key: []KeyPart{}, MaxInFlight: 50, Status: 503},
		{Name: "per-tenant", Match: Match{PathPrefix: "/api", Routes: []string{"r"}},
			Key:         []KeyPart{{Kind: KeyRoute}, {Kind: KeyCluster}, {Kind: KeyHeader, Header: "x-tenant"}},
			MaxInFlight: 2, Status: 429, Shadow: true},
	}
	if !reflect.DeepEqual(c.Concurrency, want) {
		t.Errorf("got  %+v\nwant %+v", c.Concurrency, want)
	}
	if len(c.Limits) != 0 || len(c.Breakers) != 0 {
		t.Errorf("concurrency leaked into limits or breakers: %+v", c)
	}
	// The cluster key part is for rate limits too.
	l := mustParse(t, `{"limits": [{"name": "a", "key": ["cluster"], "requests_per_second": 1}]}`).Limits[0]
	if len(l.Key) != 1 || l.Key[0].Kind != KeyCluster || l.Key[0].String() != "cluster" {
		t.Errorf("cluster key part = %+v", l.Key)
	}
}

func TestParseCosts(t *testing.T) {
	c := mustParse(t, `{"limits": [
	  {"name": "fixed", "requests_per_second": 10, "cost": 3},
	  {"name": "header", "requests_per_second": 10, "burst": 5, "cost": {"header": "X-Cost", "default": 2, "max": 12}},
	  {"name": "header-default-max", "key": ["header:x-tier"], "requests_per_second": 10, "burst": 5,
	   "cost": {"header": "x-cost"}, "overrides": {"gold": {"requests_per_second": 100}, "tin": {"requests_per_second": 8}}},
	  {"name": "response", "limit": 10000, "window": "1m", "cost_from_response": {"header": "X-Tokens-Used", "default": 50}},
	  {"name": "body", "limit": 10000, "window": "1m", "cost_from_response": {"json": "usage.total_tokens"}},
	  {"name": "small-body", "limit": 10000, "window": "1m", "cost_from_response": {"json": "n", "default": 7, "max_body_bytes": 4096}}]}`)
	checks := []struct {
		got, want Limit
	}{
		{Limit{Cost: c.Limits[0].Cost, CostHeader: c.Limits[0].CostHeader}, Limit{Cost: 3}},
		{Limit{Cost: c.Limits[1].Cost, CostHeader: c.Limits[1].CostHeader},
			Limit{Cost: 2, CostHeader: &CostHeader{Header: "x-cost", Default: 2, Max: 12}}},
		// max defaults to the smallest capacity among the rate and its overrides.
		{Limit{Cost: c.Limits[2].Cost, CostHeader: c.Limits[2].CostHeader},
			Limit{Cost: 1, CostHeader: &CostHeader{Header: "x-cost", Default: 1, Max: 8}}},
		{Limit{Cost: c.Limits[3].Cost, CostFromResponse: c.Limits[3].CostFromResponse},
			Limit{Cost: 1, CostFromResponse: &ResponseCost{Header: "x-tokens-used", Default: 50}}},
		{Limit{Cost: c.Limits[4].Cost, CostFromResponse: c.Limits[4].CostFromResponse},
			Limit{Cost: 1, CostFromResponse: &ResponseCost{JSON: []string{"usage", "total_tokens"}, Default: 1, MaxBodyBytes: 1 << 20}}},
		{Limit{Cost: c.Limits[5].Cost, CostFromResponse: c.Limits[5].CostFromResponse},
			Limit{Cost: 1, CostFromResponse: &ResponseCost{JSON: []string{"n"}, Default: 7, MaxBodyBytes: 4096}}},
	}
	for i, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("limits[%d]: got %+v %+v, want %+v %+v", i, ch.got, ch.got.CostHeader, ch.want, ch.want.CostHeader)
		}
	}
	roundTrip(t, c)
}

func TestParseIntegralNumbers(t *testing.T) {
	// JSON Schema counts 5.0 and 5e0 as integers; the parser must agree.
	for _, n := range []string{"5", "5.0", "5e0", "0.5e1", "500e-2"} {
		c := mustParse(t, `{"limits": [{"name": "a", "requests_per_second": `+n+`}]}`)
		if got := c.Limits[0].Rate.Limit; got != 5 {
			t.Errorf("requests_per_second %s = %d, want 5", n, got)
		}
	}
}

func TestParseDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"500ms": 500 * time.Millisecond, "60s": time.Minute, "1m": time.Minute, "1m30s": 90 * time.Second,
		"1.5s": 1500 * time.Millisecond, "2h": 2 * time.Hour, "250000us": 250 * time.Millisecond,
		"250000µs": 250 * time.Millisecond, "7000000000ns": 7 * time.Second,
	} {
		c := mustParse(t, `{"limits": [{"name": "a", "limit": 1, "window": "`+in+`"}]}`)
		if got := c.Limits[0].Rate.Window; got != want {
			t.Errorf("window %q = %v, want %v", in, got, want)
		}
	}
}

// badCase is a rejected config and its exact error lines.
type badCase struct {
	name string
	in   string
	want []string
	// schemaAccepts marks rules JSON Schema cannot state; the agreement
	// test then expects the schema to accept the document.
	schemaAccepts bool
}

// addCases joins a file's documents to the shared tables, so the parser and
// schema agreement, rejection, round-trip and fuzz tests cover them.
func addCases(good []string, bad []badCase) {
	goodConfigs = append(goodConfigs, good...)
	badCases = append(badCases, bad...)
}

func lim(fields string) string {
	return `{"limits": [{"name": "a", "requests_per_second": 5` + fields + `}]}`
}

var badCases = []badCase{
	// Document level.
	{name: "invalid json", in: `{"limits": [}`, want: []string{"invalid JSON at byte 13: invalid character '}' looking for beginning of value"}},
	{name: "truncated", in: `{"limits": [`, want: []string{"invalid JSON at byte 12: unexpected end of JSON input"}},
	{name: "not object", in: `[]`, want: []string{"configuration must be a JSON object"}},
	{name: "null", in: `null`, want: []string{"configuration must be a JSON object"}},
	{name: "invalid utf8", in: lim(`, "match": {"headers": [{"name": "x", "value": "` + "\xff" + `"}]}`), want: []string{"invalid JSON at byte 98: not valid UTF-8"}, schemaAccepts: true},
	{name: "header host as a key", in: lim(`, "key": ["header:Host"]`), want: []string{`limits[0].key[0]: Envoy moves the Host header into :authority, so a request header named host is never present: use the key part "host"`}, schemaAccepts: true},
	{name: "header host in a match", in: lim(`, "match": {"headers": [{"name": "host", "present": true}]}`), want: []string{`limits[0].match.headers[0].name: Envoy moves the Host header into :authority, so a request header named host is never present: use hosts`}, schemaAccepts: true},
	{name: "header host as a cost", in: lim(`, "cost": {"header": "Host"}`), want: []string{`limits[0].cost.header: Envoy moves the Host header into :authority, so a request header named host is never present`}, schemaAccepts: true},
	{name: "backend authority with a line break", in: `{"limits":[{"name":"g","requests_per_second":1,"mode":"global"}],"backend":{"cluster":"webdis","authority":"a\r\nx-injected: 1"}}`, want: []string{`backend.authority: must be a host, optionally with :port: visible ASCII without /, ?, #, @ or \, as an HTTP/2 :authority carries it`}, schemaAccepts: true},
	{name: "byte order mark", in: "\xef\xbb\xbf{}", want: []string{"invalid JSON at byte 0: the document starts with a UTF-8 byte order mark, which JSON does not allow (RFC 8259 section 8.1): save it without one"}},
	{name: "unknown top field", in: `{"limit": []}`, want: []string{"limit: unknown field"}},
	// Numbers beyond float64 are valid JSON: the field check names them.
	{name: "number overflow", in: `{"limits": [{"name": "a", "requests_per_second": 1e400, "burst": -1e400}]}`,
		want: []string{"limits[0].requests_per_second: must be <= 1000000000", "limits[0].burst: must be >= 0"}},
	{name: "number overflow in a breaker", in: `{"breakers": [{"name": "b", "failure_threshold": 1e999}]}`,
		want: []string{"breakers[0].failure_threshold: must be <= 1048576"}},
	// The breaker core's own bounds: beyond them the plugin would refuse
	// to start, one error at a time and without these paths.
	{name: "breaker counters beyond the core", in: `{"breakers": [{"name": "b", "failure_threshold": 2000000, "success_threshold": 2000000,
		"half_open_max_requests": 2000000, "failure_rate": {"window": 2000, "minimum_calls": 10}}]}`,
		want: []string{"breakers[0].failure_threshold: must be <= 1048576", "breakers[0].success_threshold: must be <= 1048576",
			"breakers[0].half_open_max_requests: must be <= 1048576", "breakers[0].failure_rate.window: must be <= 1024"}},
	{name: "time window minimum calls beyond the core", in: `{"breakers": [{"name": "b", "failure_rate": {"window_type": "time", "minimum_calls": 2000000}}]}`,
		want: []string{"breakers[0].failure_rate.minimum_calls: must be <= 1048576"}},
	// Rates within the field bounds that what enforces them cannot take.
	{name: "refill longer than int64 nanoseconds", in: `{"limits": [{"name": "a", "limit": 1, "window": "168h", "burst": 1000000000}]}`,
		want: []string{"limits[0]: capacity×period/rate (time to refill an empty bucket) exceeds 146 years"}, schemaAccepts: true},
	{name: "hybrid window algorithm", in: `{"backend": {"cluster": "r"}, "limits": [{"name": "a", "algorithm": "sliding_window", "requests_per_second": 5, "mode": "hybrid"}]}`,
		want: []string{`limits[0].mode: "hybrid" leases tokens and needs algorithm "token_bucket" (or "fixed_window" with a calendar window), not "sliding_window"`}},
	{name: "global rates beyond the Redis scripts", in: `{"backend": {"cluster": "r"}, "limits": [
		{"name": "a", "algorithm": "sliding_window", "limit": 1000000000, "window": "168h", "mode": "global",
		 "overrides": {"gold": {"limit": 1, "window": "1000001ns"}, "a.b": {"limit": 1000000000, "window": "100h"}}},
		{"name": "b", "limit": 1, "window": "1000001ns", "mode": "hybrid"}]}`,
		want: []string{
			`limits[0]: capacity × window is too large for mode "global": the Redis scripts compute exactly only below 2^53 microsecond units; use a shorter window, a smaller limit or mode "local"`,
			`limits[0].overrides.gold.window: must be a whole number of microseconds with mode "global": the Redis scripts count time in microseconds`,
			`limits[0].overrides["a.b"]: capacity × window is too large for mode "global": the Redis scripts compute exactly only below 2^53 microsecond units; use a shorter window, a smaller limit or mode "local"`,
			`limits[1].window: must be a whole number of microseconds with mode "hybrid": the Redis scripts count time in microseconds`,
		}, schemaAccepts: true},
	{name: "duplicate top field", in: `{"limits": [], "limits": []}`, want: []string{"limits: duplicate field"}, schemaAccepts: true},
	{name: "limits not array", in: `{"limits": {}}`, want: []string{"limits: must be an array"}},
	{name: "too many limits", in: `{"limits": [` + strings.Repeat(`{"name": "a", "requests_per_second": 1}, `, 1000) + `{"name": "a", "requests_per_second": 1}]}`,
		want: []string{"limits: must have at most 1000 entries"}},
	{name: "too many breakers", in: `{"breakers": [` + strings.Repeat(`{"name": "b"}, `, 1000) + `{"name": "b"}]}`,
		want: []string{"breakers: must have at most 1000 entries"}},
	{name: "limit not object", in: `{"limits": [3]}`, want: []string{"limits[0]: must be an object"}},

	// Limit fields.
	{name: "unknown limit field", in: lim(`, "burts": 1`), want: []string{"limits[0].burts: unknown field"}},
	{name: "name missing", in: `{"limits": [{"requests_per_second": 1}]}`, want: []string{"limits[0].name: required"}},
	{name: "name bad chars", in: `{"limits": [{"name": "a.b", "requests_per_second": 1}]}`,
		want: []string{`limits[0].name: must be 1-64 characters of A-Z a-z 0-9 _ -, got "a.b"`}},
	// Names are part of every Redis key (backend.Key), so their bound
	// keeps a backend call's URL bounded.
	{name: "name too long", in: `{"limits": [{"name": "` + strings.Repeat("n", 65) + `", "requests_per_second": 1}]}`,
		want: []string{`limits[0].name: must be 1-64 characters of A-Z a-z 0-9 _ -, got "` + strings.Repeat("n", 65) + `"`}},
	{name: "name wrong type", in: `{"limits": [{"name": 7, "requests_per_second": 1}]}`, want: []string{"limits[0].name: must be a string"}},
	{name: "duplicate names", in: `{"limits": [{"name": "a", "requests_per_second": 1}, {"name": "b", "requests_per_second": 1}, {"name": "a", "requests_per_second": 2}]}`,
		want: []string{`limits[2].name: duplicate name "a" (also limits[0])`}, schemaAccepts: true},
	{name: "no rate", in: `{"limits": [{"name": "a"}]}`, want: []string{"limits[0]: one of requests_per_second or limit with window is required"}},
	{name: "rps with limit", in: lim(`, "limit": 6000, "window": "60s"`),
		want: []string{"limits[0].limit: cannot be combined with requests_per_second", "limits[0].window: cannot be combined with requests_per_second"}},
	{name: "limit without window", in: `{"limits": [{"name": "a", "limit": 10}]}`, want: []string{"limits[0].window: required with limit"}},
	{name: "window without limit", in: `{"limits": [{"name": "a", "window": "1s"}]}`, want: []string{"limits[0].limit: required with window"}},
	{name: "rps zero", in: `{"limits": [{"name": "a", "requests_per_second": 0}]}`, want: []string{"limits[0].requests_per_second: must be >= 1"}},
	{name: "status huge", in: lim(`, "on_limit": {"status": 1e300}`), want: []string{"limits[0].on_limit.status: must be <= 599"}},
	{name: "status negative huge", in: lim(`, "on_limit": {"status": -1e300}`), want: []string{"limits[0].on_limit.status: must be >= 400"}},
	{name: "almost integer", in: `{"limits": [{"name": "a", "requests_per_second": 5.0000000000000001}]}`,
		want: []string{"limits[0].requests_per_second: must be an integer"}},
	{name: "rps fractional", in: `{"limits": [{"name": "a", "requests_per_second": 0.5}]}`, want: []string{"limits[0].requests_per_second: must be an integer"}},
	{name: "rps string", in: `{"limits": [{"name": "a", "requests_per_second": "5"}]}`, want: []string{"limits[0].requests_per_second: must be an integer"}},
	{name: "rps huge", in: `{"limits": [{"name": "a", "requests_per_second": 1e300}]}`, want: []string{"limits[0].requests_per_second: must be <= 1000000000"}},
	{name: "burst negative", in: lim(`, "burst": -1`), want: []string{"limits[0].burst: must be >= 0"}},
	{name: "slots zero", in: lim(`, "slots": 0`), want: []string{"limits[0].slots: must be >= 1"}},
	{name: "slots above the ceiling", in: lim(`, "slots": 1048577`), want: []string{"limits[0].slots: must be <= 1048576"}},
	{name: "slots not integer", in: lim(`, "slots": 1.5`), want: []string{"limits[0].slots: must be an integer"}},
	{name: "overflow slots zero and slots huge", in: lim(`, "overflow_slots": 0, "slots": 4194304`),
		want: []string{"limits[0].overflow_slots: must be >= 1", "limits[0].slots: must be <= 1048576"}},
	{name: "forget max used negative, too large, fractional", in: `{"limits": [{"name": "a", "requests_per_second": 1, "forget_max_used": -1},
	  {"name": "b", "requests_per_second": 1, "forget_max_used": 4294967296}, {"name": "c", "requests_per_second": 1, "forget_max_used": 0.5}]}`,
		want: []string{"limits[0].forget_max_used: must be >= 0", "limits[1].forget_max_used: must be <= 4294967295",
			"limits[2].forget_max_used: must be an integer"}},
	{name: "overflow slots above slots", in: lim(`, "slots": 64, "overflow_slots": 65`),
		want: []string{"limits[0].overflow_slots: 65 is more than slots (64)"}, schemaAccepts: true},
	{name: "burst with fixed window", in: lim(`, "algorithm": "fixed_window", "burst": 1`), want: []string{`limits[0].burst: only valid with algorithm "token_bucket"`}},
	{name: "burst with sliding window", in: lim(`, "algorithm": "sliding_window", "burst": 0`), want: []string{`limits[0].burst: only valid with algorithm "token_bucket"`}},
	{name: "unknown algorithm", in: lim(`, "algorithm": "leaky_bucket"`),
		want: []string{`limits[0].algorithm: unknown value "leaky_bucket"; want one of token_bucket, fixed_window, sliding_window, sliding_log`}},
	{name: "window zero", in: `{"limits": [{"name": "a", "limit": 1, "window": "0s"}]}`, want: []string{"limits[0].window: must be >= 1ms"}, schemaAccepts: true},
	{name: "window negative", in: `{"limits": [{"name": "a", "limit": 1, "window": "-1s"}]}`,
		want: []string{`limits[0].window: must be a duration string such as "500ms", "60s" or "1m", or a calendar period "day", "week" or "month"`}},
	{name: "window no unit", in: `{"limits": [{"name": "a", "limit": 1, "window": "60"}]}`,
		want: []string{`limits[0].window: must be a duration string such as "500ms", "60s" or "1m", or a calendar period "day", "week" or "month"`}},
	{name: "window number", in: `{"limits": [{"name": "a", "limit": 1, "window": 60}]}`,
		want: []string{`limits[0].window: must be a duration string such as "500ms", "60s" or "1m", or a calendar period "day", "week" or "month"`}},
	{name: "window too long", in: `{"limits": [{"name": "a", "limit": 1, "window": "200h"}]}`, want: []string{"limits[0].window: must be <= 168h0m0s"}, schemaAccepts: true},
	{name: "window overflow", in: `{"limits": [{"name": "a", "limit": 1, "window": "9999999999h"}]}`, want: []string{"limits[0].window: must be <= 168h0m0s"}, schemaAccepts: true},
	{name: "cost zero", in: lim(`, "cost": 0`), want: []string{"limits[0].cost: must be >= 1"}},
	{name: "cost over capacity", in: lim(`, "burst": 2, "cost": 8`), want: []string{"limits[0].cost: 8 is more than the capacity 7, so no request could pass"}, schemaAccepts: true},
	{name: "cost over window capacity", in: `{"limits": [{"name": "a", "algorithm": "fixed_window", "limit": 3, "window": "1s", "cost": 4}]}`,
		want: []string{"limits[0].cost: 4 is more than the capacity 3, so no request could pass"}, schemaAccepts: true},
	{name: "cost string", in: lim(`, "cost": "2"`), want: []string{"limits[0].cost: must be an integer or an object with header, default and max"}},
	{name: "cost header missing", in: lim(`, "cost": {"max": 5}`), want: []string{"limits[0].cost.header: required"}},
	{name: "cost header invalid", in: lim(`, "cost": {"header": "x cost"}`), want: []string{`limits[0].cost.header: invalid header name "x cost"`}},
	{name: "cost header wrong type", in: lim(`, "cost": {"header": 5}`), want: []string{"limits[0].cost.header: must be a string"}},
	{name: "cost unknown field", in: lim(`, "cost": {"header": "x", "maximum": 5}`), want: []string{"limits[0].cost.maximum: unknown field"}},
	{name: "cost default zero", in: lim(`, "cost": {"header": "x", "default": 0}`), want: []string{"limits[0].cost.default: must be >= 1"}},
	{name: "cost max fractional", in: lim(`, "cost": {"header": "x", "max": 2.5}`), want: []string{"limits[0].cost.max: must be an integer"}},
	{name: "cost max below default", in: lim(`, "cost": {"header": "x", "default": 4, "max": 3}`),
		want: []string{"limits[0].cost.max: must be >= default (4)"}, schemaAccepts: true},
	{name: "cost max over capacity", in: lim(`, "burst": 2, "cost": {"header": "x", "max": 8}`),
		want: []string{"limits[0].cost.max: 8 is more than the capacity 7, so no request could pass"}, schemaAccepts: true},
	{name: "cost default over capacity", in: lim(`, "cost": {"header": "x", "default": 6}`),
		want: []string{"limits[0].cost.default: 6 is more than the capacity 5, so no request could pass"}, schemaAccepts: true},
	{name: "override below cost max", in: lim(`, "cost": {"header": "x", "max": 3}, "overrides": {"g": {"requests_per_second": 2}}`),
		want: []string{"limits[0].overrides.g: capacity 2 is less than cost.max 3, so no request could pass"}, schemaAccepts: true},
	{name: "cost from response with cost", in: lim(`, "cost": 2, "cost_from_response": {"header": "x-tokens"}`),
		want: []string{"limits[0].cost_from_response: cannot be combined with cost: the request takes one unit when admitted and the response's cost is charged after"}},
	{name: "cost from response with a window", in: `{"limits": [{"name": "a", "algorithm": "sliding_window", "limit": 5, "window": "1m", "cost_from_response": {"header": "x-tokens"}}]}`,
		want: []string{`limits[0].cost_from_response: only valid with algorithm "token_bucket": a window cannot carry the debt a response's cost can leave`}},
	{name: "cost from response not object", in: lim(`, "cost_from_response": "x-tokens"`), want: []string{"limits[0].cost_from_response: must be an object"}},
	{name: "cost from response header missing", in: lim(`, "cost_from_response": {}`), want: []string{"limits[0].cost_from_response.header: required, or json"}},
	{name: "cost from response header invalid", in: lim(`, "cost_from_response": {"header": "x:y"}`),
		want: []string{`limits[0].cost_from_response.header: invalid header name "x:y"`}},
	{name: "cost from response default zero", in: lim(`, "cost_from_response": {"header": "x", "default": 0}`),
		want: []string{"limits[0].cost_from_response.default: must be >= 1"}},
	{name: "cost from response json and header", in: lim(`, "cost_from_response": {"header": "x", "json": "usage.total_tokens"}`),
		want: []string{"limits[0].cost_from_response.json: cannot be combined with header: the cost is read from one place"}},
	{name: "cost from response json path and body bound invalid", in: lim(`, "cost_from_response": {"json": "usage..total", "max_body_bytes": 0}`),
		want: []string{`limits[0].cost_from_response.json: invalid path "usage..total": member names joined with dots, none empty`,
			"limits[0].cost_from_response.max_body_bytes: must be >= 1"}},
	{name: "cost from response body bound without json", in: lim(`, "cost_from_response": {"header": "x", "max_body_bytes": 100}`),
		want: []string{"limits[0].cost_from_response.max_body_bytes: only valid with json"}},
	{name: "cost from response unknown field", in: lim(`, "cost_from_response": {"header": "x", "max": 5}`),
		want: []string{"limits[0].cost_from_response.max: unknown field"}},

	// Keys and overrides.
	{name: "key not array", in: lim(`, "key": "client_ip"`), want: []string{"limits[0].key: must be an array"}},
	{name: "unknown key part", in: lim(`, "key": ["client_ip", "cookie"]`),
		want: []string{`limits[0].key[1]: unknown key part "cookie"; want client_ip, client_ip/<v4 bits>/<v6 bits>, header:<name>, query:<name>, cookie:<name>, path, path_segment:<n>, route, cluster, method or host`}},
	{name: "empty header key", in: lim(`, "key": ["header:"]`), want: []string{`limits[0].key[0]: invalid header name ""`}},
	{name: "bad header key", in: lim(`, "key": ["header:x y"]`), want: []string{`limits[0].key[0]: invalid header name "x y"`}},
	{name: "duplicate key part", in: lim(`, "key": ["path", "path"]`), want: []string{`limits[0].key[1]: duplicate key part "path"`}},
	// A request header sent with '_' for '-' is read as the same header,
	// so the two configured spellings name one key part.
	{name: "duplicate header spelled with an underscore", in: lim(`, "key": ["header:x_key", "header:X-Key"]`), want: []string{`limits[0].key[1]: duplicate key part "header:x-key"`}, schemaAccepts: true},
	{name: "duplicate header part differing in case", in: lim(`, "key": ["header:X-A", "header:x-a"]`),
		want: []string{`limits[0].key[1]: duplicate key part "header:x-a"`}, schemaAccepts: true},
	{name: "key part wrong type", in: lim(`, "key": [1]`), want: []string{"limits[0].key[0]: must be a string"}},
	{name: "overrides with global key", in: lim(`, "key": [], "overrides": {"x": {"requests_per_second": 1}}`),
		want: []string{"limits[0].overrides: needs a key with at least one part; with key [] there is no value to match"}},
	{name: "overrides with composite key", in: lim(`, "key": ["client_ip", "path"], "overrides": {"x": {"requests_per_second": 1}}`),
		want: []string{"limits[0].overrides: key has 2 parts; set override_by to the part whose value selects the override"}},
	{name: "override_by not in key", in: lim(`, "key": ["client_ip", "path"], "override_by": "host", "overrides": {"x": {"requests_per_second": 1}}`),
		want: []string{`limits[0].override_by: "host" is not a part of key`}, schemaAccepts: true},
	{name: "override_by without overrides", in: lim(`, "override_by": "client_ip"`), want: []string{"limits[0].override_by: only valid with overrides"}},
	{name: "override unknown field", in: lim(`, "overrides": {"gold": {"requests_per_second": 10, "brust": 1}}`),
		want: []string{"limits[0].overrides.gold.brust: unknown field"}},
	{name: "override bad burst", in: lim(`, "overrides": {"gold": {"requests_per_second": 10, "burst": -3}}`),
		want: []string{"limits[0].overrides.gold.burst: must be >= 0"}},
	{name: "override odd name path", in: lim(`, "overrides": {"a.b": {"requests_per_second": 10, "limit": 1}}`),
		want: []string{`limits[0].overrides["a.b"].limit: cannot be combined with requests_per_second`}},
	{name: "override no rate", in: lim(`, "overrides": {"gold": {"burst": 3}}`),
		want: []string{"limits[0].overrides.gold: one of requests_per_second or limit with window is required"}},
	{name: "override burst with window algorithm", in: `{"limits": [{"name": "a", "algorithm": "fixed_window", "requests_per_second": 5, "overrides": {"g": {"requests_per_second": 9, "burst": 1}}}]}`,
		want: []string{`limits[0].overrides.g.burst: only valid with algorithm "token_bucket"`}},
	{name: "override below cost", in: lim(`, "cost": 3, "overrides": {"g": {"requests_per_second": 2}}`),
		want: []string{"limits[0].overrides.g: capacity 2 is less than cost 3, so no request could pass"}, schemaAccepts: true},
	{name: "overrides empty", in: lim(`, "overrides": {}`), want: []string{"limits[0].overrides: must not be empty"}},
	{name: "override empty value", in: lim(`, "overrides": {"": {"requests_per_second": 1}}`), want: []string{`limits[0].overrides[""]: must not be empty`}},
	{name: "override duplicate", in: lim(`, "overrides": {"g": {"requests_per_second": 1}, "g": {"requests_per_second": 2}}`),
		want: []string{"limits[0].overrides.g: duplicate field"}, schemaAccepts: true},

	// Modes and the backend.
	{name: "global without backend", in: lim(`, "mode": "global"`), want: []string{`limits[0].mode: "global" needs a "backend" block naming the Redis cluster`}},
	{name: "failure_policy on local", in: lim(`, "failure_policy": "deny"`), want: []string{`limits[0].failure_policy: only valid with mode "global" or "hybrid"`}},
	{name: "instances on local", in: lim(`, "mode": "local", "instances": 2`), want: []string{`limits[0].instances: only valid with mode "global" or "hybrid"`}},
	{name: "unknown mode", in: lim(`, "mode": "distributed", "failure_policy": "deny"`),
		want: []string{`limits[0].mode: unknown value "distributed"; want one of local, global, hybrid`}},
	{name: "backend without cluster", in: `{"backend": {}}`, want: []string{"backend.cluster: required"}},
	{name: "backend empty cluster", in: `{"backend": {"cluster": ""}}`, want: []string{"backend.cluster: must not be empty"}},
	{name: "backend bad protocol", in: `{"backend": {"cluster": "c", "protocol": "resp"}}`,
		want: []string{`backend.protocol: unknown value "resp"; want one of webdis, upstash`}},
	{name: "bad protocol hides credentials", in: `{"backend": {"cluster": "c", "protocol": "redis", "token": "t", "basic_auth": "u:p"}}`,
		want: []string{`backend.protocol: unknown value "redis"; want one of webdis, upstash`}},
	{name: "upstash without token", in: `{"backend": {"cluster": "c", "protocol": "upstash"}}`, want: []string{`backend.token: required with protocol "upstash"`}},
	{name: "token with webdis", in: `{"backend": {"cluster": "c", "token": "t"}}`, want: []string{`backend.token: only valid with protocol "upstash"`}},
	{name: "basic auth with upstash", in: `{"backend": {"cluster": "c", "protocol": "upstash", "token": "t", "basic_auth": "u:p"}}`,
		want: []string{`backend.basic_auth: only valid with protocol "webdis"`}},
	{name: "basic auth without colon", in: `{"backend": {"cluster": "c", "basic_auth": "user"}}`, want: []string{`backend.basic_auth: must be "user:password"`}},
	{name: "path prefix relative", in: `{"backend": {"cluster": "c", "path_prefix": "redis"}}`, want: []string{`backend.path_prefix: must start with "/"`}},
	{name: "backend timeout zero", in: `{"backend": {"cluster": "c", "timeout": "0ms"}}`, want: []string{"backend.timeout: must be > 0"}, schemaAccepts: true},
	{name: "backend retries", in: `{"backend": {"cluster": "c", "retries": 6}}`, want: []string{"backend.retries: must be <= 5"}},
	{name: "backend failure status", in: `{"backend": {"cluster": "c", "failure_status": 200}}`, want: []string{"backend.failure_status: must be >= 400"}},
	{name: "backend breaker unknown", in: `{"backend": {"cluster": "c", "breaker": {"threshold": 1}}}`, want: []string{"backend.breaker.threshold: unknown field"}},
	{name: "backend breaker zero threshold", in: `{"backend": {"cluster": "c", "breaker": {"failure_threshold": 0}}}`,
		want: []string{"backend.breaker.failure_threshold: must be >= 1"}},

	// What happens at a limit.
	{name: "max_delay without delay", in: lim(`, "on_limit": {"max_delay": "500ms"}`), want: []string{`limits[0].on_limit.max_delay: only valid with action "delay"`}},
	{name: "max_delay with reject", in: lim(`, "on_limit": {"action": "reject", "max_delay": "500ms"}`), want: []string{`limits[0].on_limit.max_delay: only valid with action "delay"`}},
	{name: "max_delay zero", in: lim(`, "on_limit": {"action": "delay", "max_delay": "0s"}`), want: []string{"limits[0].on_limit.max_delay: must be >= 1ms"}, schemaAccepts: true},
	{name: "max_delay too long", in: lim(`, "on_limit": {"action": "delay", "max_delay": "2m"}`), want: []string{"limits[0].on_limit.max_delay: must be <= 1m0s"}, schemaAccepts: true},
	{name: "unknown action", in: lim(`, "on_limit": {"action": "drop"}`), want: []string{`limits[0].on_limit.action: unknown value "drop"; want one of reject, delay`}},
	{name: "bad action hides max_delay", in: lim(`, "on_limit": {"action": "wait", "max_delay": "1s"}`),
		want: []string{`limits[0].on_limit.action: unknown value "wait"; want one of reject, delay`}},
	{name: "status out of range", in: lim(`, "on_limit": {"status": 200}`), want: []string{"limits[0].on_limit.status: must be >= 400"}},
	{name: "shadow with delay", in: lim(`, "on_limit": {"action": "delay"}, "shadow": true`),
		want: []string{`limits[0].shadow: cannot be combined with on_limit.action "delay": a shadow limit never holds requests`}},
	{name: "shadow wrong type", in: lim(`, "shadow": "yes"`), want: []string{"limits[0].shadow: must be a boolean"}},
	{name: "on_missing_key bad", in: lim(`, "on_missing_key": "allow"`), want: []string{`limits[0].on_missing_key: unknown value "allow"; want one of skip, deny`}},

	// replaces.
	{name: "replaces unknown", in: lim(`, "replaces": ["nope"]`), want: []string{`limits[0].replaces[0]: unknown limit "nope"`}, schemaAccepts: true},
	{name: "replaces itself", in: lim(`, "replaces": ["a"]`), want: []string{"limits[0].replaces[0]: a limit cannot replace itself"}, schemaAccepts: true},
	{name: "replaces empty", in: lim(`, "replaces": []`), want: []string{"limits[0].replaces: must not be empty; omit it to replace nothing"}},
	{name: "replaces cycle", in: `{"limits": [
		{"name": "a", "requests_per_second": 1, "replaces": ["b"]},
		{"name": "b", "requests_per_second": 1, "replaces": ["c"]},
		{"name": "c", "requests_per_second": 1, "replaces": ["a"]},
		{"name": "d", "requests_per_second": 1, "replaces": ["a"]}]}`,
		want: []string{`limits[0].replaces: cycle between limits "a", "b", "c"`}, schemaAccepts: true},
	{name: "replaces later limit is fine but unknown is not", in: `{"limits": [
		{"name": "a", "requests_per_second": 1, "replaces": ["b", "x"]},
		{"name": "b", "requests_per_second": 1}]}`,
		want: []string{`limits[0].replaces[1]: unknown limit "x"`}, schemaAccepts: true},

	// Match.
	{name: "path and path_prefix", in: lim(`, "match": {"path": "/a", "path_prefix": "/b"}`), want: []string{"limits[0].match.path_prefix: cannot be combined with path"}},
	{name: "path relative", in: lim(`, "match": {"path_prefix": "api"}`), want: []string{`limits[0].match.path_prefix: must start with "/"`}},
	{name: "path with query", in: lim(`, "match": {"path": "/a?b=1"}`),
		want: []string{"limits[0].match.path: must not contain a query or fragment; paths are matched without them"}},
	{name: "path not in normal form", in: lim(`, "match": {"path": "/t/./%61lice"}`),
		want: []string{`limits[0].match.path: must be in normal form, as request paths are compared: "/t/alice"`}, schemaAccepts: true},
	{name: "path prefix not in normal form", in: lim(`, "match": {"path_prefix": "/api//v1;x/"}`),
		want: []string{`limits[0].match.path_prefix: must be in normal form, as request paths are compared: "/api/v1/"`}, schemaAccepts: true},
	{name: "unknown method", in: lim(`, "match": {"methods": ["GET", "post", "GETT"]}`), want: []string{`limits[0].match.methods[2]: unknown method "GETT"`}},
	{name: "duplicate method", in: lim(`, "match": {"methods": ["GET", "get"]}`), want: []string{`limits[0].match.methods[1]: duplicate method "GET"`}, schemaAccepts: true},
	{name: "methods empty", in: lim(`, "match": {"methods": []}`), want: []string{"limits[0].match.methods: must not be empty; omit it to match any"}},
	{name: "host with port", in: lim(`, "match": {"hosts": ["a.com:80"]}`),
		want: []string{`limits[0].match.hosts[0]: must be a host name such as "api.example.com" or "*.example.com", without port`}},
	{name: "header match neither", in: lim(`, "match": {"headers": [{"name": "x"}]}`), want: []string{"limits[0].match.headers[0]: one of value, prefix, suffix, contains, regex or present is required"}},
	{name: "header match both", in: lim(`, "match": {"headers": [{"name": "x", "value": "1", "present": true}]}`),
		want: []string{"limits[0].match.headers[0].present: cannot be combined with value"}},
	{name: "header match no name", in: lim(`, "match": {"headers": [{"value": "1"}]}`), want: []string{"limits[0].match.headers[0].name: required"}},
	{name: "header match bad name", in: lim(`, "match": {"headers": [{"name": "a b", "value": "1"}]}`),
		want: []string{`limits[0].match.headers[0].name: invalid header name "a b"`}},
	{name: "route empty", in: lim(`, "match": {"routes": [""]}`), want: []string{"limits[0].match.routes[0]: must be a non-empty route name"}},
	{name: "match unknown", in: lim(`, "match": {"prefix": "/"}`), want: []string{"limits[0].match.prefix: unknown field"}},

	// client_ip.
	{name: "client ip bad source", in: `{"client_ip": {"source": "forwarded"}}`,
		want: []string{`client_ip.source: unknown value "forwarded"; want one of peer, xff, header`}},
	{name: "bad source hides its dependants", in: `{"client_ip": {"source": "bogus", "trusted_hops": 2, "header": "x"}}`,
		want: []string{`client_ip.source: unknown value "bogus"; want one of peer, xff, header`}},
	{name: "trusted hops without xff", in: `{"client_ip": {"trusted_hops": 2}}`, want: []string{`client_ip.trusted_hops: only valid with source "xff" or sources with "xff"`}},
	{name: "trusted hops zero", in: `{"client_ip": {"source": "xff", "trusted_hops": 0}}`, want: []string{"client_ip.trusted_hops: must be >= 1"}},
	{name: "header source without header", in: `{"client_ip": {"source": "header"}}`, want: []string{`client_ip.header: required with source "header"`}},
	{name: "header without header source", in: `{"client_ip": {"header": "x-real-ip"}}`, want: []string{`client_ip.header: only valid with source "header"`}},

	// Breakers.
	{name: "breaker name missing", in: `{"breakers": [{}]}`, want: []string{"breakers[0].name: required"}},
	{name: "breaker duplicate names", in: `{"breakers": [{"name": "b"}, {"name": "b"}]}`, want: []string{`breakers[1].name: duplicate name "b" (also breakers[0])`}, schemaAccepts: true},
	{name: "breaker bad per", in: `{"breakers": [{"name": "b", "per": "host"}]}`, want: []string{`breakers[0].per: unknown value "host"; want one of cluster, route`}},
	{name: "breaker bad status", in: `{"breakers": [{"name": "b", "failure_statuses": [500, 99, "502"]}]}`,
		want: []string{"breakers[0].failure_statuses[1]: must be >= 100", "breakers[0].failure_statuses[2]: must be an integer"}},
	{name: "breaker duplicate status", in: `{"breakers": [{"name": "b", "failure_statuses": [500, 500]}]}`, want: []string{"breakers[0].failure_statuses[1]: duplicate status 500"}},
	{name: "breaker threshold zero", in: `{"breakers": [{"name": "b", "failure_threshold": 0}]}`,
		want: []string{"breakers[0].failure_threshold: must be >= 1 unless failure_rate is set, or the breaker never opens"}},
	{name: "breaker success zero", in: `{"breakers": [{"name": "b", "success_threshold": 0}]}`, want: []string{"breakers[0].success_threshold: must be >= 1"}},
	{name: "breaker open timeout zero", in: `{"breakers": [{"name": "b", "open_timeout": "0s"}]}`, want: []string{"breakers[0].open_timeout: must be >= 1ms"}, schemaAccepts: true},
	{name: "breaker half open zero", in: `{"breakers": [{"name": "b", "half_open_max_requests": 0}]}`, want: []string{"breakers[0].half_open_max_requests: must be >= 1"}},
	{name: "breaker bad mode", in: `{"breakers": [{"name": "b", "mode": "off"}]}`,
		want: []string{`breakers[0].mode: unknown value "off"; want one of enforce, metrics_only, forced_open, disabled`}},
	{name: "breaker status", in: `{"breakers": [{"name": "b", "status": 600}]}`, want: []string{"breakers[0].status: must be <= 599"}},
	{name: "failure rate percent", in: `{"breakers": [{"name": "b", "failure_rate": {"threshold_percent": 101}}]}`,
		want: []string{"breakers[0].failure_rate.threshold_percent: must be <= 100"}},
	{name: "failure rate window with time", in: `{"breakers": [{"name": "b", "failure_rate": {"window_type": "time", "window": 10}}]}`,
		want: []string{`breakers[0].failure_rate.window: only valid with window_type "count"`}},
	{name: "failure rate duration with count", in: `{"breakers": [{"name": "b", "failure_rate": {"window_duration": "10s"}}]}`,
		want: []string{`breakers[0].failure_rate.window_duration: only valid with window_type "time"`}},
	{name: "failure rate minimum above window", in: `{"breakers": [{"name": "b", "failure_rate": {"window": 10, "minimum_calls": 20}}]}`,
		want: []string{"breakers[0].failure_rate.minimum_calls: must be <= window (10), or the rate is never judged"}, schemaAccepts: true},
	{name: "slow call without duration", in: `{"breakers": [{"name": "b", "slow_call": {}}]}`, want: []string{"breakers[0].slow_call.duration: required"}},
	{name: "slow call percent without rate", in: `{"breakers": [{"name": "b", "slow_call": {"duration": "1s", "threshold_percent": 50}}]}`,
		want: []string{"breakers[0].slow_call.threshold_percent: only valid with failure_rate (without it each slow call counts as a failure)"}},

	// Concurrency limits.
	{name: "concurrency not array", in: `{"concurrency": {}}`, want: []string{"concurrency: must be an array"}},
	{name: "concurrency entry not object", in: `{"concurrency": [1]}`, want: []string{"concurrency[0]: must be an object"}},
	{name: "concurrency too many", in: `{"concurrency": [` + strings.Repeat(`{"name": "c", "max_in_flight": 1}, `, 1000) + `{"name": "c", "max_in_flight": 1}]}`,
		want: []string{"concurrency: must have at most 1000 entries"}},
	{name: "concurrency name and max missing", in: `{"concurrency": [{}]}`,
		want: []string{"concurrency[0].name: required", "concurrency[0].max_in_flight: required"}},
	{name: "concurrency unknown field", in: `{"concurrency": [{"name": "c", "max_in_flight": 1, "max_inflight": 2}]}`,
		want: []string{"concurrency[0].max_inflight: unknown field"}},
	{name: "concurrency max zero", in: `{"concurrency": [{"name": "c", "max_in_flight": 0}]}`, want: []string{"concurrency[0].max_in_flight: must be >= 1"}},
	{name: "concurrency max fractional", in: `{"concurrency": [{"name": "c", "max_in_flight": 1.5}]}`, want: []string{"concurrency[0].max_in_flight: must be an integer"}},
	{name: "concurrency max huge", in: `{"concurrency": [{"name": "c", "max_in_flight": 1e10}]}`, want: []string{"concurrency[0].max_in_flight: must be <= 1000000000"}},
	{name: "concurrency status", in: `{"concurrency": [{"name": "c", "max_in_flight": 1, "status": 200}]}`, want: []string{"concurrency[0].status: must be >= 400"}},
	{name: "concurrency shadow type", in: `{"concurrency": [{"name": "c", "max_in_flight": 1, "shadow": "yes"}]}`, want: []string{"concurrency[0].shadow: must be a boolean"}},
	{name: "concurrency bad key", in: `{"concurrency": [{"name": "c", "max_in_flight": 1, "key": ["route", "tenant"]}]}`,
		want: []string{`concurrency[0].key[1]: unknown key part "tenant"; want client_ip, client_ip/<v4 bits>/<v6 bits>, header:<name>, query:<name>, cookie:<name>, path, path_segment:<n>, route, cluster, method or host`}},
	{name: "concurrency bad match", in: `{"concurrency": [{"name": "c", "max_in_flight": 1, "match": {"path": "x"}}]}`,
		want: []string{`concurrency[0].match.path: must start with "/"`}},
	{name: "concurrency duplicate names", in: `{"concurrency": [{"name": "c", "max_in_flight": 1}, {"name": "c", "max_in_flight": 2}]}`,
		want: []string{`concurrency[1].name: duplicate name "c" (also concurrency[0])`}, schemaAccepts: true},

	// Response.
	{name: "unknown header family", in: `{"response": {"headers": ["x-ratelimit", "draft-7"]}}`,
		want: []string{`response.headers[1]: unknown header family "draft-7"; want one of x-ratelimit, ratelimit, retry-after`}},
	{name: "duplicate header family", in: `{"response": {"headers": ["ratelimit", "ratelimit"]}}`, want: []string{`response.headers[1]: duplicate header family "ratelimit"`}},
	{name: "unknown body", in: `{"response": {"body": "xml"}}`, want: []string{`response.body: unknown value "xml"; want one of json, problem+json, none, template`}},
	{name: "headers_on_allowed type", in: `{"response": {"headers_on_allowed": 1}}`, want: []string{"response.headers_on_allowed: must be a boolean"}},

	// Several problems at once come back together, in document order.
	{name: "many errors in document order", in: `{
		"breakers": [{"name": "b", "status": 99}],
		"limits": [
			{"name": "x", "burts": 1, "requests_per_second": 5, "replaces": ["ghost"]},
			{"name": "y", "requests_per_second": 5, "limit": 3, "window": "1s", "burst": -1,
			 "match": {"methods": ["GETT"]}}],
		"client_ip": {"source": "bogus"}}`,
		want: []string{
			"breakers[0].status: must be >= 400",
			"limits[0].burts: unknown field",
			`limits[0].replaces[0]: unknown limit "ghost"`,
			"limits[1].limit: cannot be combined with requests_per_second",
			"limits[1].window: cannot be combined with requests_per_second",
			"limits[1].burst: must be >= 0",
			`limits[1].match.methods[0]: unknown method "GETT"`,
			`client_ip.source: unknown value "bogus"; want one of peer, xff, header`,
		}},
}

func TestParseRejects(t *testing.T) {
	for _, tc := range badCases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if c != nil {
				t.Errorf("returned a config with an error")
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %T is not Errors", err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if err.Error() != strings.Join(tc.want, "\n") {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}
}

func TestFieldErrorParts(t *testing.T) {
	_, err := Parse([]byte(`{"limits": [{"name": "a", "requests_per_second": 1}, {"name": "b", "requests_per_second": 1, "burst": -2}]}`))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 {
		t.Fatalf("err = %v", err)
	}
	if errs[0].Path != "limits[1].burst" || errs[0].Message != "must be >= 0" {
		t.Errorf("got Path=%q Message=%q", errs[0].Path, errs[0].Message)
	}
}

func TestRateFor(t *testing.T) {
	c := mustParse(t, `{"limits": [{"name": "a", "key": ["header:x-tier"], "requests_per_second": 2, "burst": 1,
		"overrides": {"premium": {"requests_per_second": 20, "burst": 10}}}]}`)
	l := &c.Limits[0]
	if r := l.RateFor("premium"); r != (Rate{Limit: 20, Window: time.Second, Burst: 10}) {
		t.Errorf("premium = %+v", r)
	}
	if r := l.RateFor("basic"); r != (Rate{Limit: 2, Window: time.Second, Burst: 1}) {
		t.Errorf("basic = %+v", r)
	}
	if l.OverrideBy != 0 {
		t.Errorf("OverrideBy = %d", l.OverrideBy)
	}
}

func TestLimitIndex(t *testing.T) {
	c := mustParse(t, `{"limits": [{"name": "a", "requests_per_second": 1}, {"name": "b", "requests_per_second": 1}]}`)
	if c.LimitIndex("b") != 1 || c.LimitIndex("z") != -1 {
		t.Error("LimitIndex wrong")
	}
}

func TestExactInteger(t *testing.T) {
	tests := []struct {
		raw         string
		n           int64
		isInt, huge bool
	}{
		{"0", 0, true, false}, {"-0", 0, true, false}, {"5", 5, true, false}, {"-7", -7, true, false},
		{"5.0", 5, true, false}, {"5e0", 5, true, false}, {"0.5e1", 5, true, false}, {"500e-2", 5, true, false},
		{"1E3", 1000, true, false}, {"1e+3", 1000, true, false}, {"0.0", 0, true, false}, {"0e999999999999", 0, true, false},
		{"5.5", 0, false, false}, {"5.0000000000000001", 0, false, false}, {"1e-1", 0, false, false},
		{"5e-999999999999", 0, false, false},
		{"999999999999999999", 999999999999999999, true, false},
		{"1000000000000000000", 1, true, true}, {"1e300", 1, true, true}, {"-1e300", -1, true, true},
		{"1e99999999999999999999", 1, true, true}, {"9223372036854775807", 1, true, true},
	}
	for _, tt := range tests {
		n, isInt, huge := exactInteger(tt.raw)
		if n != tt.n || isInt != tt.isInt || huge != tt.huge {
			t.Errorf("exactInteger(%q) = %d, %v, %v; want %d, %v, %v", tt.raw, n, isInt, huge, tt.n, tt.isInt, tt.huge)
		}
	}
}

func BenchmarkParseExample(b *testing.B) {
	data := []byte(`{"client_ip": {"source": "xff"}, "limits": [
		{"name": "global", "key": [], "requests_per_second": 100, "burst": 20},
		{"name": "tenant", "key": ["header:x-tenant-id"], "algorithm": "fixed_window", "limit": 10, "window": "1s"},
		{"name": "policy", "match": {"path_prefix": "/v1", "methods": ["POST"]}, "key": ["header:x-tenant-id", "path"],
		 "requests_per_second": 3, "burst": 1, "replaces": ["tenant"]}],
		"breakers": [{"name": "b", "failure_threshold": 3}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// A document with more errors than MaxErrors lists the first ones found,
// in document order, and counts the rest, so a hostile configuration of
// millions of errors costs neither the memory nor the log lines.
func TestParseListsAtMostMaxErrors(t *testing.T) {
	n := 3 * MaxErrors
	doc := "{" + strings.Repeat(`"x": 1, `, n) + `"limits": [{"name": "a", "requests_per_second": 1, "burst": -1}]}`
	_, err := Parse([]byte(doc))
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v", err)
	}
	if len(errs) != MaxErrors+1 {
		t.Fatalf("%d errors listed, want %d and a count", len(errs), MaxErrors)
	}
	if errs[0].Error() != "x: unknown field" || errs[MaxErrors-1].Error() != "x: unknown field" {
		t.Errorf("first %q, last listed %q", errs[0].Error(), errs[MaxErrors-1].Error())
	}
	if want := fmt.Sprintf("and %d more errors, not listed", n+1-MaxErrors); errs[MaxErrors].Error() != want {
		t.Errorf("last entry %q, want %q", errs[MaxErrors].Error(), want)
	}
}
