package filtertest

import (
	"maps"
	"testing"
)

// Access-log attribution: what the filter leaves in filter state for
// Envoy's access log when it refuses, delays or shadows a request.
func init() { Cases = append(Cases, accessLogCases...) }

// wantAttribution checks the filter state a response's stream was left
// with: outcome, limit and rule, "" for a name not set; all three "" for
// none at all.
func wantAttribution(t *testing.T, what string, resp Response, outcome, limit, rule string) {
	t.Helper()
	want := map[string]string{}
	for name, v := range map[string]string{"wasm.sluice_outcome": outcome, "wasm.sluice_limit": limit, "wasm.sluice_rule": rule} {
		if v != "" {
			want[name] = v
		}
	}
	if len(want) == 0 {
		want = nil
	}
	if !maps.Equal(resp.FilterState, want) {
		t.Fatalf("%s: filter state %v, want %v", what, resp.FilterState, want)
	}
}

var accessLogCases = []Case{
	{
		Name: "a refusal names its limit, outcome and rule for the access log, never the key; an admission names nothing",
		Config: `{"limits":[
			{"name":"per-tenant","match":{"path_prefix":"/api"},"key":["header:x-tenant"],"requests_per_second":1,"burst":1},
			{"name":"gold","match":{"path_prefix":"/gold"},"key":["header:x-tenant"],"limit":3,"window":"1m","algorithm":"fixed_window"}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			for i := range 2 {
				resp := h.Do(t, get("/api").with("x-tenant", "acme").on(i))
				if resp.Status != 200 {
					t.Fatalf("request %d: %d", i, resp.Status)
				}
				wantAttribution(t, "admitted", resp, "", "", "")
			}
			resp := h.Do(t, get("/api").with("x-tenant", "acme"))
			wantLimited(t, "third", resp, "1")
			wantAttribution(t, "third", resp, "rate_limited", "per-tenant", "token_bucket 1/1s burst 1")
			for range 3 {
				h.Do(t, get("/gold").with("x-tenant", "initech"))
			}
			resp = h.Do(t, get("/gold").with("x-tenant", "initech"))
			if resp.Status != 429 {
				t.Fatalf("fourth gold request: %d", resp.Status)
			}
			wantAttribution(t, "gold", resp, "rate_limited", "gold", "fixed_window 3/1m0s")
		},
	},
	{
		Name: "a shadow denial is named on the admitted request, and a refusal after it replaces it",
		Config: `{"limits":[
			{"name":"watch","key":[],"limit":1,"window":"1m","shadow":true},
			{"name":"hard","match":{"path_prefix":"/hard"},"key":[],"limit":1,"window":"1m"}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			wantAttribution(t, "first", h.Do(t, get("/")), "", "", "")
			resp := h.Do(t, get("/"))
			if resp.Status != 200 {
				t.Fatalf("a shadow limit refused: %d", resp.Status)
			}
			wantAttribution(t, "over the shadow limit", resp, "shadow_limited", "watch", "token_bucket 1/1m0s")
			h.Do(t, get("/hard"))
			resp = h.Do(t, get("/hard"))
			if resp.Status != 429 {
				t.Fatalf("over the hard limit: %d", resp.Status)
			}
			wantAttribution(t, "over both", resp, "rate_limited", "hard", "token_bucket 1/1m0s")
		},
	},
	{
		Name: "a delayed request is named delayed once admitted; one whose wait would pass max_delay is rate_limited",
		Config: `{"limits":[
			{"name":"shaped","match":{"path_prefix":"/shaped"},"key":[],"requests_per_second":5,"on_limit":{"action":"delay","max_delay":"300ms"}},
			{"name":"slow","match":{"path_prefix":"/slow"},"key":[],"requests_per_second":2,"on_limit":{"action":"delay","max_delay":"300ms"}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			for range 5 {
				h.Do(t, get("/shaped"))
			}
			resp := h.Do(t, get("/shaped"))
			if resp.Status != 200 || resp.Waited == 0 {
				t.Fatalf("sixth: %d after %v, want admitted after a wait", resp.Status, resp.Waited)
			}
			wantAttribution(t, "delayed, then admitted", resp, "delayed", "shaped", "token_bucket 5/1s")
			for range 2 {
				h.Do(t, get("/slow"))
			}
			// A token every 500ms: the wait would pass max_delay.
			resp = h.Do(t, get("/slow"))
			if resp.Status != 429 || resp.Waited != 0 {
				t.Fatalf("third slow: %d after %v, want an immediate 429", resp.Status, resp.Waited)
			}
			wantAttribution(t, "past max_delay", resp, "rate_limited", "slow", "token_bucket 2/1s")
		},
	},
	{
		Name: "a bulkhead and a breaker name themselves; a breaker has no rule",
		Config: `{"concurrency":[{"name":"search","match":{"path_prefix":"/search"},"key":[],"max_in_flight":1}],
			"breakers":[{"name":"cut","match":{"path_prefix":"/api"},"mode":"forced_open","failure_threshold":1,"open_timeout":"10s"}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			f := open(t, h, get("/search"))
			_, resp := h.Start(t, get("/search"))
			if resp.Status != 503 {
				t.Fatalf("second search: %d", resp.Status)
			}
			wantAttribution(t, "bulkhead", resp, "concurrency_limited", "search", "max_in_flight 1")
			wantAttribution(t, "admitted search", f.Finish(t), "", "", "")
			resp = h.Do(t, get("/api"))
			if resp.Status != 503 {
				t.Fatalf("forced open: %d", resp.Status)
			}
			wantAttribution(t, "breaker", resp, "circuit_open", "cut", "")
		},
	},
	{
		Name: "the rule of an override is the override's rate, and a blocked value's is block",
		Config: `{"limits":[{"name":"per-key","match":{"path_prefix":"/k"},"key":["header:x-api-key"],"requests_per_second":1,
			"overrides":{"gold":{"limit":1,"window":"1m"},"banned":{"block":true}}},
			{"name":"quota","match":{"path_prefix":"/q"},"key":["header:x-api-key"],"algorithm":"fixed_window","limit":5,"window":"1m",
			"overrides":{"monthly":{"limit":1,"window":"month","window_offset":"+09:00"}}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			h.Do(t, get("/k").with("x-api-key", "gold"))
			resp := h.Do(t, get("/k").with("x-api-key", "gold"))
			if resp.Status != 429 {
				t.Fatalf("second gold request: %d", resp.Status)
			}
			wantAttribution(t, "gold", resp, "rate_limited", "per-key", "token_bucket 1/1m0s")
			resp = h.Do(t, get("/k").with("x-api-key", "banned"))
			if resp.Status != 429 {
				t.Fatalf("banned: %d", resp.Status)
			}
			wantAttribution(t, "banned", resp, "rate_limited", "per-key", "block")
			h.Do(t, get("/k").with("x-api-key", "plain"))
			resp = h.Do(t, get("/k").with("x-api-key", "plain"))
			wantAttribution(t, "plain", resp, "rate_limited", "per-key", "token_bucket 1/1s")
			h.Do(t, get("/q").with("x-api-key", "monthly"))
			resp = h.Do(t, get("/q").with("x-api-key", "monthly"))
			if resp.Status != 429 {
				t.Fatalf("second monthly request: %d", resp.Status)
			}
			wantAttribution(t, "monthly", resp, "rate_limited", "quota", "fixed_window 1/month +09:00")
		},
	},
}
