package engine

import (
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
