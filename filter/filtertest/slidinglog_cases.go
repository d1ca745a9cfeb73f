package filtertest

import (
	"strconv"
	"testing"
	"time"
)

// Cases of algorithm "sliding_log": at most limit requests in any window,
// exactly, across workers, with weighted costs and the response headers a
// log reports.

func init() { Cases = append(Cases, slidingLogCases...) }

// wantHeaders checks the named headers of a response.
func wantHeaders(t *testing.T, resp Response, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := resp.Headers.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

var slidingLogCases = []Case{
	{
		Name:    "sliding_log admits at most limit in any window, exactly, across workers",
		Config:  `{"limits":[{"name":"log","key":[],"limit":3,"window":"10s","algorithm":"sliding_log"}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			one := func(i int) Request { return get("/").on(i % 2) }
			if got := admitted(t, h, 1, one); got != 1 {
				t.Fatalf("at 0s admitted %d, want 1", got)
			}
			h.Advance(t, 5*time.Second)
			if got := admitted(t, h, 4, one); got != 2 {
				t.Fatalf("at 5s admitted %d of 4, want 2", got)
			}
			// A sliding window counter would weigh the previous window
			// here; the log knows exactly which request leaves when.
			h.Advance(t, 5*time.Second-time.Millisecond)
			if got := admitted(t, h, 2, one); got != 0 {
				t.Fatalf("1ms before the first request leaves, admitted %d", got)
			}
			h.Advance(t, time.Millisecond)
			if got := admitted(t, h, 3, one); got != 1 {
				t.Fatalf("at 10s admitted %d of 3, want 1 (only the request of 0s left)", got)
			}
			h.Advance(t, 5*time.Second)
			if got := admitted(t, h, 3, one); got != 2 {
				t.Fatalf("at 15s admitted %d of 3, want 2", got)
			}
			wantCounter(t, h, "sluice.limit.log.allowed", 6)
			wantCounter(t, h, "sluice.limit.log.limited", 7)
		},
	},
	{
		Name: "sliding_log takes a weighted cost as that many entries and reports remaining, reset and retry",
		Config: `{"limits":[{"name":"log","key":["header:x-user"],"limit":5,"window":"1m","algorithm":"sliding_log",
			"cost":{"header":"x-cost","max":5}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			req := func(cost int) Request { return get("/").with("x-user", "a").with("x-cost", strconv.Itoa(cost)) }
			first := h.Do(t, req(3))
			if first.Status != 200 || first.Local {
				t.Fatalf("cost 3 on a fresh log: %d", first.Status)
			}
			wantHeaders(t, first, map[string]string{
				"x-ratelimit-limit": "5", "x-ratelimit-remaining": "2",
				"ratelimit-policy": `"log";q=5;w=60`, "ratelimit": `"log";r=2;t=60`,
			})
			h.Advance(t, 20*time.Second)
			if resp := h.Do(t, req(2)); resp.Status != 200 {
				t.Fatalf("cost 2 with 2 left: %d", resp.Status)
			}
			denied := h.Do(t, req(1))
			if denied.Status != 429 || !denied.Local {
				t.Fatalf("cost 1 on a full log: %d", denied.Status)
			}
			// The entries of 0s leave at 60s, 40s from now; the log is
			// empty again when those of 20s leave, at 80s.
			wantHeaders(t, denied, map[string]string{
				"retry-after": "40", "x-ratelimit-remaining": "0",
				"x-ratelimit-reset": strconv.FormatInt(Epoch.Unix()+80, 10), "ratelimit": `"log";r=0;t=60`,
			})
			// Another user has a log of its own.
			if resp := h.Do(t, get("/").with("x-user", "b").with("x-cost", "5")); resp.Status != 200 {
				t.Fatalf("another user: %d", resp.Status)
			}
			h.Advance(t, 40*time.Second)
			if resp := h.Do(t, req(4)); resp.Status != 429 {
				t.Fatalf("cost 4 with 3 left: %d", resp.Status)
			}
			if resp := h.Do(t, req(3)); resp.Status != 200 {
				t.Fatalf("cost 3 with 3 left: %d", resp.Status)
			}
		},
	},
}
