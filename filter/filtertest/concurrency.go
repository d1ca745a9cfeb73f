package filtertest

import (
	"encoding/json"
	"testing"
	"time"
)

// Concurrency-limit (bulkhead) cases. They hold requests in flight with
// Harness.Start and end them with Flight.Finish, on two workers where the
// harness has them.

func init() { Cases = append(Cases, concurrencyCases...) }

// open starts a request that must reach the upstream and stay in flight.
func open(t *testing.T, h Harness, req Request) Flight {
	t.Helper()
	f, resp := h.Start(t, req)
	if f == nil {
		t.Fatalf("%s %s was answered %d %s, want it in flight", req.Method, req.Path, resp.Status, resp.Body)
	}
	return f
}

// refused starts a request that the filter must answer with status, and
// returns the decoded JSON body (nil for an empty body).
func refused(t *testing.T, h Harness, req Request, status int) map[string]any {
	t.Helper()
	f, resp := h.Start(t, req)
	if f != nil {
		f.Finish(t)
		t.Fatalf("%s %s reached the upstream, want a local %d", req.Method, req.Path, status)
	}
	if resp.Status != status || !resp.Local {
		t.Fatalf("status %d local %v body %s, want a local %d", resp.Status, resp.Local, resp.Body, status)
	}
	if len(resp.Body) == 0 {
		return nil
	}
	var body map[string]any
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatalf("body %q: %v", resp.Body, err)
	}
	return body
}

func finish(t *testing.T, flights ...Flight) {
	t.Helper()
	for _, f := range flights {
		if resp := f.Finish(t); resp.Status != 200 || resp.Local {
			t.Fatalf("in-flight request ended %d (local %v)", resp.Status, resp.Local)
		}
	}
}

// wantGauge moves past one heartbeat, fires the ticks and checks a gauge.
func wantGauge(t *testing.T, h Harness, name string, want int64) {
	t.Helper()
	h.Advance(t, time.Second)
	h.Tick(t)
	if got := h.Gauge(t, name); got != want {
		t.Fatalf("%s = %d, want %d", name, got, want)
	}
}

var concurrencyCases = []Case{
	{
		Name:    "a bulkhead admits exactly max_in_flight at once across workers and frees a slot at stream end",
		Config:  `{"concurrency":[{"name":"search","key":["route"],"max_in_flight":3}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			var flights []Flight
			for i := range 3 {
				flights = append(flights, open(t, h, get("/search").on(i%2)))
			}
			wantGauge(t, h, "sluice.concurrency.search.in_flight", 3)
			for i := range 2 {
				f, resp := h.Start(t, get("/search").on(i%2))
				if f != nil {
					t.Fatalf("request %d past max_in_flight reached the upstream", i)
				}
				if resp.Status != 503 || !resp.Local || resp.Headers.Get("content-type") != "application/json" {
					t.Fatalf("over the limit: %d local %v headers %v", resp.Status, resp.Local, resp.Headers)
				}
				if resp.Headers.Get("retry-after") != "" || resp.Headers.Get("x-ratelimit-limit") != "" {
					t.Fatalf("a bulkhead rejection carries rate-limit headers: %v", resp.Headers)
				}
				var body map[string]any
				if err := json.Unmarshal(resp.Body, &body); err != nil {
					t.Fatalf("body %q: %v", resp.Body, err)
				}
				want := map[string]any{"error": "concurrency_limited", "message": "Too many concurrent requests", "limit": "search"}
				if len(body) != len(want) {
					t.Fatalf("body %v, want exactly %v", body, want)
				}
				for k, v := range want {
					if body[k] != v {
						t.Fatalf("body %v, want %v", body, want)
					}
				}
			}
			// Another route is another key with its own count.
			finish(t, open(t, h, Request{Method: "GET", Path: "/other", Host: "example.com", Route: "other"}))
			// One stream ending frees exactly one slot, on either worker.
			finish(t, flights[0])
			flights[0] = open(t, h, get("/search").on(1))
			refused(t, h, get("/search").on(0), 503)
			finish(t, flights...)
			flights = flights[:0]
			for i := range 3 {
				flights = append(flights, open(t, h, get("/search").on(i%2)))
			}
			finish(t, flights...)
			wantCounter(t, h, "sluice.concurrency.search.admitted", 3+1+1+3)
			wantCounter(t, h, "sluice.concurrency.search.rejected", 3)
			wantGauge(t, h, "sluice.concurrency.search.in_flight", 0)
		},
	},
	{
		Name:    "concurrency keys separate tenants, and a request without the key is not counted",
		Config:  `{"concurrency":[{"name":"tenant","key":["header:x-tenant"],"max_in_flight":1}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			a := open(t, h, get("/").with("x-tenant", "a"))
			refused(t, h, get("/").with("x-tenant", "a").on(1), 503)
			b := open(t, h, get("/").with("x-tenant", "b").on(1))
			anon1 := open(t, h, get("/"))
			anon2 := open(t, h, get("/").on(1))
			finish(t, a, b, anon1, anon2)
			finish(t, open(t, h, get("/").with("x-tenant", "a").on(1)))
			wantCounter(t, h, "sluice.concurrency.tenant.missing_key", 2)
			wantCounter(t, h, "sluice.concurrency.tenant.admitted", 3)
		},
	},
	{
		Name:    "a bulkhead rejection uses the configured status and problem+json",
		Config:  `{"concurrency":[{"name":"db","max_in_flight":1,"status":429}],"response":{"body":"problem+json"}}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			f := open(t, h, get("/"))
			_, resp := h.Start(t, get("/"))
			if resp.Status != 429 || resp.Headers.Get("content-type") != "application/problem+json" {
				t.Fatalf("status %d content-type %q", resp.Status, resp.Headers.Get("content-type"))
			}
			var body map[string]any
			if err := json.Unmarshal(resp.Body, &body); err != nil {
				t.Fatal(err)
			}
			policies, _ := body["violated-policies"].([]any)
			if body["type"] != "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity" ||
				body["status"] != 429.0 || body["detail"] != "Too many concurrent requests" ||
				len(policies) != 1 || policies[0] != "db" {
				t.Fatalf("problem body = %v", body)
			}
			if _, ok := body["retry_after"]; ok {
				t.Fatalf("problem body has retry_after: %v", body)
			}
			finish(t, f)
		},
	},
	{
		Name: "a request a rate limit rejects takes no slot, and one the bulkhead rejects keeps its tokens",
		Config: `{"limits":[{"name":"rate","key":[],"requests_per_second":1,"burst":2}],
			"concurrency":[{"name":"one","max_in_flight":1}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			f := open(t, h, get("/"))
			if body := refused(t, h, get("/").on(1), 503); body["error"] != "concurrency_limited" {
				t.Fatalf("body %v", body)
			}
			refused(t, h, get("/"), 503)
			// The bucket (3 tokens) is empty now: limits run first, so the
			// two bulkhead rejections spent tokens, as they would in front
			// of Envoy's own max_requests breaker.
			if body := refused(t, h, get("/").on(1), 429); body["error"] != "rate_limited" {
				t.Fatalf("body %v", body)
			}
			finish(t, f)
			refused(t, h, get("/"), 429)
			h.Advance(t, time.Second)
			finish(t, open(t, h, get("/").on(1)))
			wantCounter(t, h, "sluice.concurrency.one.admitted", 2)
			wantCounter(t, h, "sluice.concurrency.one.rejected", 2)
			wantCounter(t, h, "sluice.limit.rate.limited", 2)
		},
	},
	{
		Name: "slots taken from an earlier concurrency limit are given back when a later one rejects",
		Config: `{"concurrency":[{"name":"all","max_in_flight":2},
			{"name":"tenant","key":["header:x-tenant"],"max_in_flight":1}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			a := open(t, h, get("/").with("x-tenant", "a"))
			if body := refused(t, h, get("/").with("x-tenant", "a").on(1), 503); body["limit"] != "tenant" {
				t.Fatalf("body %v, want the tenant limit", body)
			}
			// "all" would be full had the rejected request kept its slot.
			b := open(t, h, get("/").with("x-tenant", "b").on(1))
			if body := refused(t, h, get("/").with("x-tenant", "c"), 503); body["limit"] != "all" {
				t.Fatalf("body %v, want the all limit", body)
			}
			finish(t, a, b)
			finish(t, open(t, h, get("/").with("x-tenant", "a")), open(t, h, get("/").with("x-tenant", "b").on(1)))
			wantCounter(t, h, "sluice.concurrency.all.admitted", 4)
			wantCounter(t, h, "sluice.concurrency.all.rejected", 1)
			wantCounter(t, h, "sluice.concurrency.tenant.admitted", 4)
			wantCounter(t, h, "sluice.concurrency.tenant.rejected", 1)
		},
	},
	{
		Name:    "a shadow bulkhead counts but never rejects",
		Config:  `{"concurrency":[{"name":"watch","max_in_flight":1,"shadow":true}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			flights := []Flight{open(t, h, get("/")), open(t, h, get("/").on(1)), open(t, h, get("/"))}
			wantGauge(t, h, "sluice.concurrency.watch.in_flight", 3)
			finish(t, flights...)
			wantCounters(t, h, "sluice.concurrency.watch.", map[string]uint64{"admitted": 1, "shadow_rejected": 2, "rejected": 0})
			wantGauge(t, h, "sluice.concurrency.watch.in_flight", 0)
		},
	},
}
