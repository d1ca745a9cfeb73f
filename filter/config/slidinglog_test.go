package config

import (
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter"
)

func init() {
	goodConfigs = append(goodConfigs,
		`{"limits": [{"name": "a", "algorithm": "sliding_log", "limit": 1000, "window": "24h", "cost": 3,
		   "key": ["header:x"], "overrides": {"gold": {"requests_per_second": 1000}}}]}`,
		`{"backend": {"cluster": "r"}, "limits": [{"name": "a", "algorithm": "sliding_log", "requests_per_second": 10, "mode": "global"}]}`,
	)
	slog := func(fields string) string {
		return `{"backend": {"cluster": "r"}, "limits": [{"name": "a", "algorithm": "sliding_log"` + fields + `}]}`
	}
	badCases = append(badCases,
		badCase{name: "sliding log over its cap", in: slog(`, "limit": 1001, "window": "1m"`),
			want: []string{`limits[0].limit: must be at most 1000 with algorithm "sliding_log": the log keeps one entry per request admitted within the window, in one shared-data value`}},
		badCase{name: "sliding log override over its cap", in: slog(`, "requests_per_second": 5, "key": ["header:x"], "overrides": {"gold": {"requests_per_second": 5000}}`),
			want: []string{`limits[0].overrides.gold.requests_per_second: must be at most 1000 with algorithm "sliding_log": the log keeps one entry per request admitted within the window, in one shared-data value`}},
		badCase{name: "sliding log in hybrid mode", in: slog(`, "requests_per_second": 5, "mode": "hybrid"`),
			want: []string{`limits[0].mode: "hybrid" leases tokens and needs algorithm "token_bucket" (or "fixed_window" with a calendar window), not "sliding_log"`}},
		badCase{name: "sliding log with burst", in: slog(`, "requests_per_second": 5, "burst": 1`),
			want: []string{`limits[0].burst: only valid with algorithm "token_bucket"`}},
		badCase{name: "sliding log with a response cost", in: slog(`, "requests_per_second": 5, "cost_from_response": {"header": "x-tokens"}`),
			want: []string{`limits[0].cost_from_response: only valid with algorithm "token_bucket": a window cannot carry the debt a response's cost can leave`}},
		badCase{name: "sliding log window below a microsecond's multiple", in: slog(`, "limit": 5, "window": "1000001ns"`),
			want: []string{`limits[0].window: must be a whole number of microseconds with algorithm "sliding_log"`}, schemaAccepts: true},
	)
}

func TestSlidingLogParses(t *testing.T) {
	c, err := Parse([]byte(`{"limits": [{"name": "a", "algorithm": "sliding_log", "limit": 100, "window": "10s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	l := c.Limits[0]
	want := limiter.Limit{Algorithm: limiter.SlidingLog, Rate: 100, Period: 10 * time.Second}
	if got := l.Rate.Limiter(l.Algorithm); got != want {
		t.Fatalf("limiter %+v, want %+v", got, want)
	}
}
