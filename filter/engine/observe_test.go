package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// Each breaker transition is one JSON line, WARN on open and INFO
// otherwise; requests rejected while open log no transition.
func TestBreakerTransitionsLogOneLineEach(t *testing.T) {
	p, f := newNativePlugin(t, `{"breakers":[{"name":"b","failure_threshold":2,"success_threshold":1,"open_timeout":"1s"}]}`)
	f.Stream.Properties = map[string]string{"xds.cluster_name": "flaky"}
	do := func(id uint32, status string) {
		f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}
		h := &Stream{}
		p.Begin(h, id)
		if h.RequestHeaders() == Continue {
			f.Stream.ResponseHeaderMap = [][2]string{{":status", status}}
			h.ResponseHeaders()
		}
		h.Done()
	}
	do(1, "503")
	do(2, "503")
	do(3, "200") // rejected: open
	do(4, "200")
	f.Clock.Advance(time.Second)
	do(5, "200") // the probe: half-open, then closed
	var got []string
	for _, l := range f.Log.Lines {
		if strings.Contains(l, "breaker_transition") {
			got = append(got, l)
		}
	}
	want := []string{
		`warn {"sluice":"breaker_transition","breaker":"b","instance":"flaky","from":"closed","to":"open","reason":"consecutive_failures","failures":2,"calls":2}`,
		`info {"sluice":"breaker_transition","breaker":"b","instance":"flaky","from":"open","to":"half_open","reason":"open_timeout","failures":0,"calls":0}`,
		`info {"sluice":"breaker_transition","breaker":"b","instance":"flaky","from":"half_open","to":"closed","reason":"probes_succeeded","failures":0,"calls":1}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("transition lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := f.Metrics.Values["sluice.breaker.b.flaky.state"]; s != 0 {
		t.Errorf("instance gauge %d after recovery, want 0", s)
	}
}

// Falling back to failure_policy logs one WARN when it starts, not one per
// request, and one INFO when the backend answers again.
func TestBackendFallbackLogsOncePerTransition(t *testing.T) {
	p, f := newNativePlugin(t, `{"backend":{"cluster":"webdis","retries":0,"failure_policy":"allow"},
		"limits":[{"name":"g","key":[],"requests_per_second":100,"mode":"global"}]}`)
	f.Caller.Fail = errors.New("no such cluster")
	run := func(id uint32) Verdict {
		f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}
		h := &Stream{}
		p.Begin(h, id)
		return h.RequestHeaders()
	}
	for id := uint32(1); id <= 3; id++ {
		if v := run(id); v != Continue {
			t.Fatalf("request %d not allowed by failure_policy allow: %v", id, v)
		}
	}
	fallbackLines := func(kind string) int {
		n := 0
		for _, l := range f.Log.Lines {
			if strings.Contains(l, `"sluice":"`+kind+`"`) {
				n++
			}
		}
		return n
	}
	if n := fallbackLines("backend_fallback"); n != 1 {
		t.Fatalf("%d backend_fallback lines for 3 fallen-back requests, want 1:\n%s", n, strings.Join(f.Log.Lines, "\n"))
	}
	want := `warn {"sluice":"backend_fallback","limit":"g","failure_policy":"allow","cause":"backend_error"}`
	if !slices.Contains(f.Log.Lines, want) {
		t.Fatalf("no line %s in:\n%s", want, strings.Join(f.Log.Lines, "\n"))
	}
	f.Caller.Fail = nil
	run(4)
	calls := f.Caller.Pending()
	if len(calls) != 1 {
		t.Fatalf("%d calls pending, want 1", len(calls))
	}
	calls[0].Answer(200, []byte(`{"EVALSHA":[1,5,0,1000,0,17]}`), nil)
	if n := fallbackLines("backend_fallback_ended"); n != 1 {
		t.Fatalf("%d backend_fallback_ended lines, want 1:\n%s", n, strings.Join(f.Log.Lines, "\n"))
	}
	run(5)
	f.Caller.Pending()[0].Answer(200, []byte(`{"EVALSHA":[1,4,0,1000,0,17]}`), nil)
	if n := fallbackLines("backend_fallback_ended"); n != 1 {
		t.Fatalf("a healthy answer logged the end again")
	}
}
