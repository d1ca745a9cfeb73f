package filtertest

import (
	"testing"
)

// Rollout cases: enabled_percent and enforced_percent draw from the
// proxy's own random source here (the wasm's is seeded by the host's
// random_get), so fractions strictly between 0 and 100 are checked
// statistically, with bounds that fail for 0% and 100%; the stepped,
// exact checks are filter/engine's rollout tests.
func init() { Cases = append(Cases, rolloutCases...) }

// rolloutDraws is how many requests a statistical case sends: at 50% the
// count's standard deviation is 10, and the bounds below are 6 of them
// away, so a correct filter fails about once in 10^9 runs.
const rolloutDraws = 400

func within(t *testing.T, what string, got, lo, hi uint64) {
	t.Helper()
	if got < lo || got > hi {
		t.Fatalf("%s = %d of %d, want %d..%d", what, got, rolloutDraws, lo, hi)
	}
}

var rolloutCases = []Case{
	{
		Name: "a limit enabled for 0% of requests neither counts nor rejects; enforced for 0% it passes them as shadow_limited and tells the upstream",
		Config: `{"limits":[
			{"name":"off","key":[],"requests_per_second":1,"rollout":{"enabled_percent":0}},
			{"name":"dry","key":[],"requests_per_second":1,"rollout":{"enforced_percent":0},
			 "upstream_headers_when_limited":{"x-ratelimit-would-limit":"true","x-would-limit-by":"dry"}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			first := h.Do(t, get("/"))
			if first.Status != 200 || first.Local {
				t.Fatalf("first request: %d", first.Status)
			}
			if v := first.UpstreamHeaders.Get("x-ratelimit-would-limit"); v != "" {
				t.Fatalf("an admitted request reached the upstream marked %q", v)
			}
			for i := range 4 {
				resp := h.Do(t, get("/").with("x-would-limit-by", "client-forged"))
				if resp.Status != 200 || resp.Local {
					t.Fatalf("request %d: %d, want passed", i, resp.Status)
				}
				u := resp.UpstreamHeaders
				if u.Get("x-ratelimit-would-limit") != "true" || len(u.Values("x-would-limit-by")) != 1 || u.Get("x-would-limit-by") != "dry" {
					t.Fatalf("upstream saw %v, want x-ratelimit-would-limit: true and x-would-limit-by: dry once", u)
				}
			}
			wantCounter(t, h, "sluice.limit.off.allowed", 0)
			wantCounter(t, h, "sluice.limit.off.limited", 0)
			wantCounter(t, h, "sluice.limit.dry.allowed", 1)
			wantCounter(t, h, "sluice.limit.dry.shadow_limited", 4)
			wantCounter(t, h, "sluice.limit.dry.limited", 0)
		},
	},
	{
		Name:    "a shadow limit tells the upstream what it would have rejected",
		Config:  `{"limits":[{"name":"watch","key":[],"requests_per_second":1,"shadow":true,"upstream_headers_when_limited":{"x-ratelimit-would-limit":"true"}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			marks := []string{}
			for range 3 {
				resp := h.Do(t, get("/"))
				if resp.Status != 200 || resp.Local {
					t.Fatalf("a shadow limit rejected: %d", resp.Status)
				}
				marks = append(marks, resp.UpstreamHeaders.Get("x-ratelimit-would-limit"))
			}
			if marks[0] != "" || marks[1] != "true" || marks[2] != "true" {
				t.Fatalf("upstream marks %q, want none on the admitted request then true", marks)
			}
		},
	},
	{
		Name:    "enabled_percent 50 evaluates about half of the requests",
		Config:  `{"limits":[{"name":"half","key":[],"limit":1000000,"window":"1s","rollout":{"enabled_percent":50}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			for range rolloutDraws {
				if resp := h.Do(t, get("/")); resp.Status != 200 {
					t.Fatalf("status %d", resp.Status)
				}
			}
			within(t, "evaluated", h.Counter(t, "sluice.limit.half.allowed"), 140, 260)
		},
	},
	{
		Name:    "enforced_percent 50 rejects about half of what the limit would reject",
		Config:  `{"limits":[{"name":"half","key":[],"limit":1,"window":"1h","rollout":{"enforced_percent":50}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			h.Do(t, get("/"))
			passed := uint64(admitted(t, h, rolloutDraws, func(int) Request { return get("/") }))
			limited, shadow := h.Counter(t, "sluice.limit.half.limited"), h.Counter(t, "sluice.limit.half.shadow_limited")
			within(t, "rejected", limited, 140, 260)
			if shadow != passed || limited+shadow != rolloutDraws {
				t.Fatalf("passed %d, shadow_limited %d, limited %d; want passed = shadow_limited and a sum of %d", passed, shadow, limited, rolloutDraws)
			}
		},
	},
}
