package filtertest

import (
	"encoding/json"
	"testing"
	"time"
)

// Breaker cases beyond the consecutive-failure trip of cases.go: the
// failure rate over a count and a time window, slow calls with and
// without a rate, and the modes other than enforce. Slowness is the
// harness clock moving while the upstream holds the request, so every
// duration is exact.

func init() { Cases = append(Cases, breakerCases...) }

// upstreamAnswers runs req and checks that the upstream's own answer came
// back: the breaker let it through.
func upstreamAnswers(t *testing.T, h Harness, what string, req Request) {
	t.Helper()
	want := req.UpstreamStatus
	if want == 0 {
		want = 200
	}
	if resp := h.Do(t, req); resp.Status != want || resp.Local {
		t.Fatalf("%s: status %d local %v body %s, want the upstream's %d", what, resp.Status, resp.Local, resp.Body, want)
	}
}

// slowAnswer runs req with the upstream holding it for d of harness time.
func slowAnswer(t *testing.T, h Harness, what string, req Request, d time.Duration) {
	t.Helper()
	f := open(t, h, req)
	h.Advance(t, d)
	if resp := f.Finish(t); resp.Status != 200 || resp.Local {
		t.Fatalf("%s: status %d local %v, want the upstream's 200", what, resp.Status, resp.Local)
	}
}

// circuitOpen runs req and checks the breaker's rejection: a local 503
// with Retry-After and the circuit_open body naming the upstream cluster.
func circuitOpen(t *testing.T, h Harness, what string, req Request, retryAfter string) {
	t.Helper()
	f, resp := h.Start(t, req)
	if f != nil {
		f.Finish(t)
		t.Fatalf("%s: reached the upstream, want the breaker's 503", what)
	}
	if resp.Status != 503 || !resp.Local {
		t.Fatalf("%s: status %d local %v, want a local 503", what, resp.Status, resp.Local)
	}
	if got := resp.Headers.Get("retry-after"); got != retryAfter {
		t.Fatalf("%s: retry-after %q, want %q", what, got, retryAfter)
	}
	var body map[string]any
	if err := json.Unmarshal(resp.Body, &body); err != nil || body["error"] != "circuit_open" || body["upstream"] != "backend" {
		t.Fatalf("%s: body %s (%v), want circuit_open for backend", what, resp.Body, err)
	}
}

// alternateFailures runs n calls on alternate workers, each even one
// failing with a 503, so no two failures are consecutive; the upstream
// answers every one.
func alternateFailures(t *testing.T, h Harness, what string, n int) {
	t.Helper()
	for i := range n {
		req := get("/").on(i % 2)
		if i%2 == 0 {
			req = req.status(503)
		}
		upstreamAnswers(t, h, what, req)
	}
}

// wantBreakerState checks a breaker's state gauge: 0 closed, 1 open,
// 2 half-open. name is the breaker's for its shared state, or
// breaker.cluster for its instance on one upstream cluster.
func wantBreakerState(t *testing.T, h Harness, name string, want int64) {
	t.Helper()
	if got := h.Gauge(t, "sluice.breaker."+name+".state"); got != want {
		t.Fatalf("breaker %s state gauge %d, want %d", name, got, want)
	}
}

var breakerCases = []Case{
	{
		Name: "failure_rate opens on the share of failures in a count window, probes one at a time and closes",
		// failure_threshold 0: only the rate trips. No two failures are
		// consecutive below, so a streak could not have tripped it either.
		Config: `{"breakers":[{"name":"rate","failure_threshold":0,
			"failure_rate":{"threshold_percent":50,"window":6,"minimum_calls":6},
			"success_threshold":2,"open_timeout":"4s","half_open_max_requests":1}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			// 3 failures of 5 calls is 60%, but under minimum_calls.
			alternateFailures(t, h, "call under minimum_calls", 5)
			wantBreakerState(t, h, "rate", 0)
			// The sixth call, a success, makes 3 of 6: 50% trips.
			upstreamAnswers(t, h, "sixth call", get("/").on(1))
			wantBreakerState(t, h, "rate", 1)
			wantCounter(t, h, "sluice.breaker.rate.opens", 1)
			circuitOpen(t, h, "open", get("/").on(0), "4")
			h.Advance(t, 3*time.Second)
			circuitOpen(t, h, "open, 1s left", get("/").on(1), "1")
			h.Advance(t, time.Second)

			probe := open(t, h, get("/").on(0))
			wantBreakerState(t, h, "rate", 2)
			// The one probe slot is taken: no deadline is known, so
			// Retry-After is its minimum.
			circuitOpen(t, h, "second probe", get("/").on(1), "1")
			finish(t, probe)
			wantBreakerState(t, h, "rate", 2) // one of success_threshold 2
			upstreamAnswers(t, h, "second probe after the first", get("/").on(1))
			wantBreakerState(t, h, "rate", 0)
			wantCounter(t, h, "sluice.breaker.rate.closes", 1)

			// Closing emptied the window: the old failures are gone.
			alternateFailures(t, h, "call after closing", 5)
			wantBreakerState(t, h, "rate", 0)
			wantCounters(t, h, "sluice.breaker.rate.", map[string]uint64{"rejected": 3, "failures": 6, "opens": 1})
		},
	},
	{
		Name: "failure_rate over a time window forgets calls older than window_duration, and a failed probe re-opens",
		Config: `{"breakers":[{"name":"timed","failure_threshold":0,
			"failure_rate":{"window_type":"time","window_duration":"10s","threshold_percent":75,"minimum_calls":4},
			"success_threshold":1,"open_timeout":"2s"}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			for i := range 3 {
				upstreamAnswers(t, h, "early failure", get("/").status(503).on(i%2))
			}
			h.Advance(t, 11*time.Second)
			// Were the early failures still counted, the first of these
			// would make 4 of 4 and trip.
			upstreamAnswers(t, h, "late failure 1", get("/").status(503).on(0))
			upstreamAnswers(t, h, "late success", get("/").on(1))
			upstreamAnswers(t, h, "late failure 2", get("/").status(503).on(0))
			wantBreakerState(t, h, "timed", 0)
			// 3 failures of 4 calls within the window: 75% trips.
			upstreamAnswers(t, h, "late failure 3", get("/").status(503).on(1))
			wantBreakerState(t, h, "timed", 1)
			circuitOpen(t, h, "open", get("/").on(0), "2")

			h.Advance(t, 2*time.Second)
			upstreamAnswers(t, h, "failing probe", get("/").status(503).on(1))
			wantBreakerState(t, h, "timed", 1)
			wantCounter(t, h, "sluice.breaker.timed.opens", 2)
			circuitOpen(t, h, "re-opened", get("/").on(0), "2")

			h.Advance(t, 2*time.Second)
			upstreamAnswers(t, h, "good probe", get("/").on(1))
			wantBreakerState(t, h, "timed", 0)
			upstreamAnswers(t, h, "after recovery", get("/").on(0))
			wantCounter(t, h, "sluice.breaker.timed.closes", 1)
			wantCounter(t, h, "sluice.breaker.timed.rejected", 2)
		},
	},
	{
		Name: "without failure_rate each slow call is a failure toward failure_threshold, and a slow probe re-opens",
		Config: `{"breakers":[{"name":"slow","failure_threshold":2,"slow_call":{"duration":"100ms"},
			"success_threshold":1,"open_timeout":"1s"}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			// Slow is strictly slower than duration.
			slowAnswer(t, h, "exactly the duration", get("/"), 100*time.Millisecond)
			wantCounter(t, h, "sluice.breaker.slow.slow_calls", 0)
			slowAnswer(t, h, "slow call 1", get("/"), 101*time.Millisecond)
			wantCounter(t, h, "sluice.breaker.slow.slow_calls", 1)
			wantCounter(t, h, "sluice.breaker.slow.failures", 1)
			// A fast success ends the streak.
			upstreamAnswers(t, h, "fast call", get("/"))
			slowAnswer(t, h, "slow call 2", get("/"), 150*time.Millisecond)
			wantBreakerState(t, h, "slow", 0)
			slowAnswer(t, h, "slow call 3", get("/"), 150*time.Millisecond)
			wantBreakerState(t, h, "slow", 1)
			circuitOpen(t, h, "open", get("/"), "1")

			h.Advance(t, time.Second)
			slowAnswer(t, h, "slow probe", get("/"), 150*time.Millisecond)
			wantBreakerState(t, h, "slow", 1)
			circuitOpen(t, h, "re-opened", get("/"), "1")
			h.Advance(t, time.Second)
			upstreamAnswers(t, h, "fast probe", get("/"))
			wantBreakerState(t, h, "slow", 0)
			wantCounters(t, h, "sluice.breaker.slow.", map[string]uint64{"opens": 2, "closes": 1, "slow_calls": 4})
		},
	},
	{
		Name: "with failure_rate slow calls open the breaker on their own share while every call succeeds",
		Config: `{"breakers":[{"name":"latency","failure_threshold":0,
			"failure_rate":{"threshold_percent":100,"window":4,"minimum_calls":4},
			"slow_call":{"duration":"200ms","threshold_percent":50},"success_threshold":1,"open_timeout":"1s"}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			upstreamAnswers(t, h, "fast 1", get("/").on(0))
			slowAnswer(t, h, "slow 1", get("/").on(1), 250*time.Millisecond)
			upstreamAnswers(t, h, "fast 2", get("/").on(0))
			wantBreakerState(t, h, "latency", 0)
			// 2 slow of 4 calls: 50%.
			slowAnswer(t, h, "slow 2", get("/").on(1), 250*time.Millisecond)
			wantBreakerState(t, h, "latency", 1)
			// With a rate, a slow call is weighed as slow, not as a failure.
			wantCounter(t, h, "sluice.breaker.latency.failures", 0)
			wantCounter(t, h, "sluice.breaker.latency.slow_calls", 2)
			circuitOpen(t, h, "open", get("/").on(0), "1")

			h.Advance(t, time.Second)
			slowAnswer(t, h, "slow probe", get("/").on(1), 250*time.Millisecond)
			wantBreakerState(t, h, "latency", 1)
			h.Advance(t, time.Second)
			upstreamAnswers(t, h, "fast probe", get("/").on(0))
			wantBreakerState(t, h, "latency", 0)
			wantCounter(t, h, "sluice.breaker.latency.opens", 2)
			wantCounter(t, h, "sluice.breaker.latency.closes", 1)
		},
	},
	{
		Name: "metrics_only tracks a breaker's state through open and half-open but never rejects",
		Config: `{"breakers":[{"name":"watch","mode":"metrics_only","failure_threshold":2,
			"success_threshold":1,"open_timeout":"5s"}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			upstreamAnswers(t, h, "failure 1", get("/").status(503).on(0))
			upstreamAnswers(t, h, "failure 2", get("/").status(503).on(1))
			wantBreakerState(t, h, "watch", 1)
			wantCounter(t, h, "sluice.breaker.watch.opens", 1)
			// Enforce would reject these; metrics_only lets them through.
			upstreamAnswers(t, h, "while open", get("/").on(0))
			upstreamAnswers(t, h, "failing while open", get("/").status(503).on(1))
			wantBreakerState(t, h, "watch", 1)

			h.Advance(t, 5*time.Second)
			probe := open(t, h, get("/").on(0))
			wantBreakerState(t, h, "watch", 2)
			// The probe slot is taken; the request passes anyway.
			upstreamAnswers(t, h, "beside the probe", get("/").on(1))
			finish(t, probe)
			wantBreakerState(t, h, "watch", 0)
			wantCounter(t, h, "sluice.breaker.watch.closes", 1)
			wantCounter(t, h, "sluice.breaker.watch.rejected", 0)
		},
	},
	{
		Name: "forced_open rejects every matching request without reaching the upstream",
		Config: `{"breakers":[{"name":"cut","match":{"path_prefix":"/api"},"mode":"forced_open",
			"failure_threshold":1,"open_timeout":"10s"}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			for i := range 3 {
				// No open timeout runs: there is no time to wait for, so
				// Retry-After is its minimum, however long the clock runs.
				circuitOpen(t, h, "forced open", get("/api/x").on(i%2), "1")
				h.Advance(t, 20*time.Second)
			}
			upstreamAnswers(t, h, "not matched", get("/health").status(503))
			upstreamAnswers(t, h, "not matched", get("/health"))
			wantCounters(t, h, "sluice.breaker.cut.", map[string]uint64{"rejected": 3, "failures": 0, "opens": 0})
			// Its state gauges say open, as an operator forcing it expects
			// and the SluiceBreakerOpen alert reads, though it never opened.
			wantBreakerState(t, h, "cut", 1)
			wantBreakerState(t, h, "cut.backend", 1)
		},
	},
	{
		Name:    "mode disabled lets every request through and records no outcome",
		Config:  `{"breakers":[{"name":"idle","mode":"disabled","failure_threshold":1,"slow_call":{"duration":"10ms"}}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			for i := range 4 {
				upstreamAnswers(t, h, "failure", get("/").status(503).on(i%2))
			}
			slowAnswer(t, h, "slow", get("/"), time.Second)
			wantBreakerState(t, h, "idle", 0)
			for _, c := range []string{"opens", "rejected", "failures", "successes", "slow_calls"} {
				wantCounter(t, h, "sluice.breaker.idle."+c, 0)
			}
		},
	},
}
