package ops

import (
	"bytes"
	"strings"
	"testing"
)

// TestCalendarGlobalAndHybrid: check accepts calendar periods in global
// and hybrid mode and refuses a hybrid fixed window of a duration, naming
// its path; explain shows each remote calendar limit's period and offset.
func TestCalendarGlobalAndHybrid(t *testing.T) {
	cfg := `{"backend": {"cluster": "redis"}, "limits": [
	{"name": "monthly", "key": ["header:x-api-key"], "algorithm": "fixed_window", "limit": 10000, "window": "month", "window_offset": "+09:00", "mode": "global"},
	{"name": "daily", "key": ["header:x-api-key"], "algorithm": "fixed_window", "limit": 500, "window": "day", "window_offset": "-05:30", "mode": "hybrid"}]}`
	bad := strings.Replace(cfg, `"window": "day", "window_offset": "-05:30"`, `"window": "24h"`, 1)
	files := writeFiles(t, t.TempDir(), map[string]string{"good.json": cfg, "bad.json": bad})
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"check", files["good.json"]}, &stdout, &stderr); code != 0 {
		t.Fatalf("check of global and hybrid calendar limits: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	code := Main([]string{"check", files["bad.json"]}, &stdout, &stderr)
	if out := stdout.String() + stderr.String(); code == 0 || !strings.Contains(out, `limits[1].window: "hybrid" with algorithm "fixed_window" needs a calendar window`) {
		t.Fatalf("check of a hybrid duration fixed window: exit %d\n%s", code, out)
	}
	ex := explainArgs(t, cfg, "-H", "x-api-key: k1", "http://example.com/")
	if len(ex.Limits) != 2 {
		t.Fatalf("limits %+v", ex.Limits)
	}
	for i, want := range []struct{ mode, window string }{{"global", "month +09:00"}, {"hybrid", "day -05:30"}} {
		l := ex.Limits[i]
		if l.Mode != want.mode || l.Rate == nil || l.Rate.Window != want.window || l.RedisKey == "" {
			t.Errorf("%s: mode %q rate %+v redis key %q, want %s %q", l.Name, l.Mode, l.Rate, l.RedisKey, want.mode, want.window)
		}
	}
}
