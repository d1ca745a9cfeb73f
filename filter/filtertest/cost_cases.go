package filtertest

import (
	"encoding/json"
	"testing"
	"time"
)

// Weighted cost: from a request header, and from a response header into
// debt. Kept apart from the other cases so each feature's cases read
// together; they run in Cases like every other.
func init() { Cases = append(Cases, costCases...) }

// wantRemaining checks the X-RateLimit-Remaining an allowed response carried.
func wantRemaining(t *testing.T, what string, resp Response, want string) {
	t.Helper()
	if resp.Status != 200 || resp.Local {
		t.Fatalf("%s: status %d (local %v) body %s, want the upstream's 200", what, resp.Status, resp.Local, resp.Body)
	}
	if got := resp.Headers.Get("x-ratelimit-remaining"); got != want {
		t.Fatalf("%s: x-ratelimit-remaining %q, want %q", what, got, want)
	}
}

func wantLimited(t *testing.T, what string, resp Response, retryAfter string) {
	t.Helper()
	if resp.Status != 429 || !resp.Local || resp.Headers.Get("retry-after") != retryAfter {
		t.Fatalf("%s: status %d (local %v) retry-after %q, want a local 429 with retry-after %s",
			what, resp.Status, resp.Local, resp.Headers.Get("retry-after"), retryAfter)
	}
}

var costCases = []Case{
	{
		Name:    "a cost header takes that many units, and a missing one the default",
		Config:  `{"limits":[{"name":"weighted","key":[],"requests_per_second":10,"cost":{"header":"x-cost","max":10}}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			wantRemaining(t, "cost 4", h.Do(t, get("/").with("x-cost", "4")), "6")
			wantRemaining(t, "cost 5 with spaces, on the other worker", h.Do(t, get("/").with("X-Cost", " 5 ").on(1)), "1")
			wantRemaining(t, "no header costs the default 1", h.Do(t, get("/")), "0")
			wantLimited(t, "empty bucket", h.Do(t, get("/").with("x-cost", "1")), "1")
			h.Advance(t, 300*time.Millisecond) // three units refill
			wantLimited(t, "cost 4 with 3 left", h.Do(t, get("/").with("x-cost", "4")), "1")
			wantRemaining(t, "cost 2 sent twice", h.Do(t, get("/").with("x-cost", "2").with("x-cost", "2")), "1")
			wantCounters(t, h, "sluice.limit.weighted.", map[string]uint64{"allowed": 4, "limited": 2, "invalid_cost": 0})
		},
	},
	{
		Name: "a bad cost header is a 400 that consumes nothing; a shadow limit only counts it",
		Config: `{"limits":[
			{"name":"weighted","key":[],"requests_per_second":10,"cost":{"header":"x-cost","max":10}},
			{"name":"observe","key":[],"requests_per_second":100,"shadow":true,"cost":{"header":"x-observe-cost","max":5}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			bad := []Request{
				get("/").with("x-cost", "abc"),
				get("/").with("x-cost", "0"),
				get("/").with("x-cost", "-3"),
				get("/").with("x-cost", "11"),
				get("/").with("x-cost", "99999999999999999999"),
				get("/").with("x-cost", "1.5"),
				get("/").with("x-cost", "+3"),
				get("/").with("x-cost", "2,,2"),
				get("/").with("x-cost", "2").with("x-cost", "3"),
			}
			for i, req := range bad {
				resp := h.Do(t, req)
				if resp.Status != 400 || !resp.Local || resp.UpstreamHeaders != nil || resp.Headers.Get("content-type") != "application/json" {
					t.Fatalf("bad cost %d (%q): status %d local %v content-type %q", i, req.Headers, resp.Status, resp.Local, resp.Headers.Get("content-type"))
				}
				var body map[string]any
				if err := json.Unmarshal(resp.Body, &body); err != nil {
					t.Fatalf("bad cost %d: body %q: %v", i, resp.Body, err)
				}
				want := map[string]any{"error": "invalid_cost", "message": "x-cost must be a whole number from 1 to 10, sent once", "limit": "weighted"}
				if len(body) != len(want) || body["error"] != want["error"] || body["message"] != want["message"] || body["limit"] != want["limit"] {
					t.Fatalf("bad cost %d: body %v, want %v", i, body, want)
				}
			}
			wantCounter(t, h, "sluice.limit.weighted.invalid_cost", uint64(len(bad)))
			wantCounter(t, h, "sluice.limit.weighted.allowed", 0)
			// Nothing was consumed: the whole capacity is still there.
			wantRemaining(t, "cost 10 after the refusals", h.Do(t, get("/").with("x-cost", "10")), "0")
			h.Advance(t, time.Second)
			resp := h.Do(t, get("/").with("x-cost", "1").with("x-observe-cost", "many"))
			if resp.Status != 200 || resp.Local {
				t.Fatalf("a shadow limit's bad cost rejected the request: %d %s", resp.Status, resp.Body)
			}
			wantCounter(t, h, "sluice.limit.observe.invalid_cost", 1)
			wantCounter(t, h, "sluice.limit.observe.allowed", 1) // the request with x-cost 10; the bad one was skipped
			wantCounter(t, h, "sluice.limit.weighted.invalid_cost", uint64(len(bad)))
		},
	},
	{
		Name: "a shaped request waits for its whole cost",
		Config: `{"limits":[{"name":"shaped","key":[],"requests_per_second":10,
			"cost":{"header":"x-cost","max":10},"on_limit":{"action":"delay","max_delay":"1s"}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			wantRemaining(t, "the whole bucket", h.Do(t, get("/").with("x-cost", "10")), "0")
			resp := h.Do(t, get("/").with("x-cost", "5"))
			if resp.Status != 200 || resp.Local || resp.Waited < 500*time.Millisecond || resp.Waited > 560*time.Millisecond {
				t.Fatalf("cost 5 on an empty bucket: status %d after %v, want 200 after about 500ms", resp.Status, resp.Waited)
			}
			wantCounter(t, h, "sluice.limit.shaped.delayed", 1)
		},
	},
	{
		Name: "cost from the response drives the bucket into debt, so later requests wait",
		Config: `{"limits":[{"name":"tokens","key":["header:x-api-key"],"limit":100,"window":"10s",
			"cost_from_response":{"header":"x-tokens-used"}}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			k1 := func() Request { return get("/v1/chat").with("x-api-key", "k1") }
			// The response's rate-limit headers already count its own cost.
			wantRemaining(t, "first answer uses 60", h.Do(t, k1().answering("x-tokens-used", "60")), "40")
			// 40 left: admitted on one unit, then 60 is charged: 20 units
			// (2s of refill) past empty.
			wantRemaining(t, "second answer uses 60", h.Do(t, k1().answering("x-tokens-used", "60").on(1)), "0")
			// A unit is back once the 20 owed and one more refilled: 2.1s.
			wantLimited(t, "in debt", h.Do(t, k1()), "3")
			wantRemaining(t, "another key has its own bucket", h.Do(t, get("/").with("x-api-key", "k2").answering("x-tokens-used", "10")), "90")
			h.Advance(t, 2*time.Second)
			wantLimited(t, "debt repaid but no unit yet", h.Do(t, k1().on(1)), "1")
			h.Advance(t, 100*time.Millisecond)
			wantRemaining(t, "a unit is back", h.Do(t, k1()), "0")
			wantCounter(t, h, "sluice.limit.tokens.allowed", 4)
			wantCounter(t, h, "sluice.limit.tokens.limited", 2)
			// 60 + 60 + 10, and the last answer reported nothing: the default 1.
			wantCounter(t, h, "sluice.limit.tokens.response_cost", 131)
			wantCounter(t, h, "sluice.limit.tokens.invalid_response_cost", 0)
		},
	},
	{
		Name: "a response without a usable cost is charged the default",
		Config: `{"limits":[{"name":"tokens","key":[],"limit":100,"window":"10s",
			"cost_from_response":{"header":"x-tokens-used","default":30}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			wantRemaining(t, "no header", h.Do(t, get("/")), "70")
			wantRemaining(t, "not a number", h.Do(t, get("/").answering("x-tokens-used", "lots")), "40")
			wantRemaining(t, "repeated with different values",
				h.Do(t, get("/").answering("x-tokens-used", "5").answering("x-tokens-used", "7")), "10")
			wantRemaining(t, "zero keeps only the unit taken at admission", h.Do(t, get("/").answering("x-tokens-used", "0")), "9")
			// An upstream error without usage is an answer too: default.
			if resp := h.Do(t, get("/").status(503)); resp.Status != 503 || resp.Local || resp.Headers.Get("x-ratelimit-remaining") != "0" {
				t.Fatalf("upstream 503: status %d local %v remaining %q", resp.Status, resp.Local, resp.Headers.Get("x-ratelimit-remaining"))
			}
			wantLimited(t, "in debt after the 503", h.Do(t, get("/")), "3")
			wantCounter(t, h, "sluice.limit.tokens.invalid_response_cost", 2)
			wantCounter(t, h, "sluice.limit.tokens.response_cost", 120)
		},
	},
	{
		Name: "a shadow limit is charged from responses but never rejects",
		Config: `{"limits":[{"name":"watch","key":[],"requests_per_second":1,"burst":2,"shadow":true,
			"cost_from_response":{"header":"x-tokens-used"}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			// 5 of 3 units: empty until 2s, a unit at 3s.
			if got := admitted(t, h, 1, func(int) Request { return get("/").answering("x-tokens-used", "5") }); got != 1 {
				t.Fatal("first request refused")
			}
			// Would have been refused, so its response is not charged; had
			// it been, the unit at 3s would not be there.
			if got := admitted(t, h, 1, func(int) Request { return get("/").answering("x-tokens-used", "5") }); got != 1 {
				t.Fatal("a shadow limit refused a request")
			}
			h.Advance(t, 2*time.Second)
			admitted(t, h, 1, func(int) Request { return get("/") })
			h.Advance(t, time.Second)
			admitted(t, h, 1, func(int) Request { return get("/") })
			wantCounters(t, h, "sluice.limit.watch.", map[string]uint64{"shadow_limited": 2, "allowed": 2, "response_cost": 6})
		},
	},
}
