package filtertest

import "testing"

// Cases of "enabled": false on a limit, a breaker and a concurrency limit:
// the entry stays configured, is neither evaluated nor counted, and its
// metrics exist at zero.

func init() { Cases = append(Cases, enabledCases...) }

// MetricDefiner is implemented by harnesses that can tell a metric the
// plugin defined from one it never did (both read as zero).
type MetricDefiner interface {
	Defined(t testing.TB, name string) bool
}

// wantDefinedZero checks that each metric exists and reads zero.
func wantDefinedZero(t *testing.T, h Harness, names ...string) {
	t.Helper()
	d, ok := h.(MetricDefiner)
	if !ok {
		t.Fatalf("harness %T cannot tell defined metrics", h)
	}
	for _, name := range names {
		if !d.Defined(t, name) {
			t.Errorf("%s is not defined, want it defined at zero", name)
			continue
		}
		if got := h.Counter(t, name) + uint64(h.Gauge(t, name)); got != 0 {
			t.Errorf("%s = %d, want 0", name, got)
		}
	}
}

var enabledCases = []Case{
	{
		Name: "a switched-off limit is not evaluated, not counted, replaces nothing, and its metrics stay at zero",
		// off would admit one request and would replace general; switched
		// off it does neither, so general's limit of 2 decides.
		Config: `{"limits":[
			{"name":"general","key":[],"limit":2,"window":"1m","algorithm":"fixed_window"},
			{"name":"off","key":[],"limit":1,"window":"1m","algorithm":"fixed_window","replaces":["general"],"enabled":false,
			 "cost":{"header":"x-cost","max":1}}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			if n := admitted(t, h, 4, func(i int) Request { return get("/").on(i%2).with("x-cost", "junk") }); n != 2 {
				t.Fatalf("admitted %d of 4, want 2 (general's limit alone)", n)
			}
			wantCounter(t, h, "sluice.limit.general.allowed", 2)
			wantCounter(t, h, "sluice.limit.general.limited", 2)
			wantDefinedZero(t, h, "sluice.limit.off.allowed", "sluice.limit.off.limited", "sluice.limit.off.missing_key",
				"sluice.limit.off.invalid_cost")
		},
	},
	{
		Name: "a switched-off breaker never opens nor counts, and its state gauge stays closed",
		Config: `{"breakers":[{"name":"off","failure_threshold":1,"enabled":false},
			{"name":"on","failure_threshold":100}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			for i := range 4 {
				if resp := h.Do(t, get("/").status(503).on(i%2)); resp.Status != 503 || resp.Local {
					t.Fatalf("request %d: status %d local %v, want the upstream's 503", i, resp.Status, resp.Local)
				}
			}
			wantCounter(t, h, "sluice.breaker.on.failures", 4)
			wantDefinedZero(t, h, "sluice.breaker.off.opens", "sluice.breaker.off.failures", "sluice.breaker.off.rejected",
				"sluice.breaker.off.state")
		},
	},
	{
		Name: "a switched-off concurrency limit takes no slot nor counts",
		Config: `{"concurrency":[{"name":"off","key":[],"max_in_flight":1,"enabled":false},
			{"name":"on","key":[],"max_in_flight":2}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			a := open(t, h, get("/").on(0))
			b := open(t, h, get("/").on(1))
			finish(t, a, b)
			wantDefinedZero(t, h, "sluice.concurrency.off.admitted", "sluice.concurrency.off.rejected",
				"sluice.concurrency.off.in_flight")
			wantCounter(t, h, "sluice.concurrency.on.admitted", 2)
		},
	},
}
