package config

import (
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter"
)

func init() {
	fw := func(fields string) string {
		return `{"limits": [{"name": "a", "algorithm": "fixed_window", "limit": 3` + fields + `}]}`
	}
	addCases([]string{
		fw(`, "window": "month"`),
		fw(`, "window": "week", "window_offset": "-05:30"`),
		fw(`, "window": "day", "window_offset": "+18:00", "key": ["header:x"],
		   "overrides": {"gold": {"limit": 9, "window": "month", "window_offset": "-09:30"}, "trial": {"limit": 1, "window": "1h"}}`),
		`{"backend": {"cluster": "r"}, "limits": [{"name": "a", "algorithm": "fixed_window", "limit": 1000000, "window": "month", "window_offset": "+09:00", "mode": "global"}]}`,
		`{"backend": {"cluster": "r"}, "limits": [{"name": "a", "algorithm": "fixed_window", "limit": 3, "window": "week", "mode": "hybrid", "key": ["header:x"],
		   "overrides": {"g": {"limit": 9, "window": "day", "window_offset": "-05:30"}}}]}`,
	}, []badCase{
		{name: "calendar with token bucket", in: `{"limits": [{"name": "a", "limit": 3, "window": "month"}]}`,
			want: []string{`limits[0].window: "month" is a calendar period, only valid with algorithm "fixed_window", not "token_bucket": token_bucket refills continuously and sliding_window and sliding_log look back one constant length, which calendar periods do not have`}, schemaAccepts: true},
		{name: "calendar with sliding window override", in: `{"limits": [{"name": "a", "algorithm": "sliding_window", "limit": 3, "window": "1h", "key": ["header:x"], "overrides": {"g": {"limit": 3, "window": "day"}}}]}`,
			want: []string{`limits[0].overrides.g.window: "day" is a calendar period, only valid with algorithm "fixed_window", not "sliding_window": token_bucket refills continuously and sliding_window and sliding_log look back one constant length, which calendar periods do not have`}, schemaAccepts: true},
		{name: "hybrid fixed window of a duration", in: `{"backend": {"cluster": "r"}, "limits": [{"name": "a", "algorithm": "fixed_window", "limit": 3, "window": "1h", "mode": "hybrid"}]}`,
			want: []string{`limits[0].window: "hybrid" with algorithm "fixed_window" needs a calendar window ("day", "week" or "month"): leases of a duration window would mostly expire unspent at its end`}},
		{name: "hybrid calendar with a duration override", in: `{"backend": {"cluster": "r"}, "limits": [{"name": "a", "algorithm": "fixed_window", "limit": 3, "window": "week", "mode": "hybrid", "key": ["header:x"], "overrides": {"g": {"limit": 9, "window": "1h"}}}]}`,
			want: []string{`limits[0].overrides.g.window: "hybrid" with algorithm "fixed_window" needs a calendar window ("day", "week" or "month"): leases of a duration window would mostly expire unspent at its end`}, schemaAccepts: true},
		{name: "unknown calendar name", in: fw(`, "window": "Month"`),
			want: []string{`limits[0].window: must be a duration string such as "500ms", "60s" or "1m", or a calendar period "day", "week" or "month"`}},
		{name: "offset without calendar", in: fw(`, "window": "1h", "window_offset": "+01:00"`),
			want: []string{`limits[0].window_offset: only valid with a calendar window ("day", "week" or "month")`}, schemaAccepts: true},
		{name: "offset out of range", in: fw(`, "window": "day", "window_offset": "+18:01"`),
			want: []string{`limits[0].window_offset: must be within -18:00 and +18:00, got "+18:01"`}},
		{name: "offset minutes", in: fw(`, "window": "day", "window_offset": "+05:60"`),
			want: []string{`limits[0].window_offset: minutes must be 00-59, got "+05:60"`}},
		{name: "offset syntax", in: fw(`, "window": "day", "window_offset": "+0530"`),
			want: []string{`limits[0].window_offset: must be a UTC offset "+HH:MM" or "-HH:MM", got "+0530"`}},
		{name: "offset type", in: fw(`, "window": "day", "window_offset": 9`),
			want: []string{`limits[0].window_offset: must be a string`}},
	})
}

func TestCalendarWindowParses(t *testing.T) {
	c, err := Parse([]byte(`{"limits": [{"name": "a", "algorithm": "fixed_window", "limit": 100, "window": "month", "window_offset": "-05:30",
	  "key": ["header:x"], "overrides": {"g": {"limit": 7, "window": "week"}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	l := c.Limits[0]
	want := limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 100, Period: 31 * 24 * time.Hour, Calendar: limiter.CalendarMonth, Offset: -(5*3600 + 30*60)}
	if got := l.Rate.Limiter(l.Algorithm); got != want {
		t.Fatalf("limiter %+v, want %+v", got, want)
	}
	if err := want.Validate(); err != nil {
		t.Fatal(err)
	}
	// An override's offset is its own: absent means UTC.
	want = limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 7, Period: 7 * 24 * time.Hour, Calendar: limiter.CalendarWeek}
	if got := l.Overrides["g"].Limiter(l.Algorithm); got != want {
		t.Fatalf("override %+v, want %+v", got, want)
	}
}

func TestParseUTCOffset(t *testing.T) {
	for in, want := range map[string]int32{"+00:00": 0, "-00:00": 0, "+09:00": 32400, "-05:30": -19800, "+05:45": 20700, "+18:00": 64800, "-18:00": -64800} {
		got, err := ParseUTCOffset(in)
		if err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
		if in != "-00:00" && formatUTCOffset(got) != in {
			t.Errorf("%q formats as %q", in, formatUTCOffset(got))
		}
	}
	for _, in := range []string{"", "Z", "+9:00", "+09:0", "09:00", "+09-00", "+1a:00", "+18:30", "+99:99", "+09:00 ", "\u00b109:00"} {
		if _, err := ParseUTCOffset(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// FuzzParseUTCOffset: never panics, stays within ±18:00, and whatever it
// accepts formats back to itself (but for "-00:00").
func FuzzParseUTCOffset(f *testing.F) {
	for _, s := range []string{"+09:00", "-05:30", "+18:00", "-18:01", "+0:000", "Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		off, err := ParseUTCOffset(s)
		if err != nil {
			return
		}
		if off < -18*3600 || off > 18*3600 || off%60 != 0 {
			t.Fatalf("%q: %d", s, off)
		}
		if got := formatUTCOffset(off); got != s && s != "-00:00" {
			t.Fatalf("%q formats as %q", s, got)
		}
	})
}

func TestRateWindowString(t *testing.T) {
	for want, r := range map[string]Rate{
		"1m0s":         {Limit: 1, Window: time.Minute},
		"month +09:00": {Limit: 1, Window: 31 * 24 * time.Hour, Calendar: limiter.CalendarMonth, Offset: 9 * 3600},
		"day -05:30":   {Limit: 1, Window: 24 * time.Hour, Calendar: limiter.CalendarDay, Offset: -(5*3600 + 30*60)},
		"week +00:00":  {Limit: 1, Window: 7 * 24 * time.Hour, Calendar: limiter.CalendarWeek},
	} {
		if got := r.WindowString(); got != want {
			t.Errorf("%+v: %q, want %q", r, got, want)
		}
	}
}
