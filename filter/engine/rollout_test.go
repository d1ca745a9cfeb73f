package engine

import (
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/host/hosttest"
)

// rolloutPlugin is newNativePlugin with the draws taken from draws, in a
// cycle, and the count of draws made.
func rolloutPlugin(t *testing.T, cfgJSON string, draws ...uint64) (*Plugin, *hosttest.Fakes, *int) {
	t.Helper()
	hc, fakes := hosttest.New(time.Unix(1_700_000_000, 0))
	n := new(int)
	hc.Rand = func() uint64 {
		v := draws[*n%len(draws)]
		*n++
		return v
	}
	return configuredPlugin(t, hc, cfgJSON), fakes, n
}

// runRequest runs one request's request phase and ends the stream; the
// verdict, and whether the filter answered it with status.
func runRequest(p *Plugin, f *hosttest.Fakes, id uint32, path string) (Verdict, int) {
	f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", path}, {":authority", "a"}}
	replies := len(f.Stream.Replies)
	h := &Stream{}
	p.Begin(h, id)
	v := h.RequestHeaders()
	h.Done()
	if len(f.Stream.Replies) > replies {
		return v, f.Stream.Replies[replies].Status
	}
	return v, 0
}

// millionths spreads n draws evenly over a million.
func millionths(n int) []uint64 {
	d := make([]uint64, n)
	for i := range d {
		d[i] = uint64(i * perMillionAll / n)
	}
	return d
}

func TestRolloutEnabledPercentSkipsTheLimit(t *testing.T) {
	p, f, draws := rolloutPlugin(t, `{"limits":[{"name":"l","key":[],"requests_per_second":1,"burst":1000,
		"rollout":{"enabled_percent":25}}]}`, millionths(100)...)
	for i := range 100 {
		if v, status := runRequest(p, f, uint32(i+1), "/"); v != Continue || status != 0 {
			t.Fatalf("request %d: %v %d", i, v, status)
		}
	}
	// Exactly the draws below 250000: a skipped request is not counted.
	if got := f.Metrics.Values["sluice.limit.l.allowed"]; got != 25 {
		t.Errorf("allowed = %d, want 25 of 100 evaluated", got)
	}
	// enforced_percent is 100: only the enabled draw is made.
	if *draws != 100 {
		t.Errorf("%d draws for 100 requests, want 100", *draws)
	}
}

func TestRolloutFullDrawsNothing(t *testing.T) {
	p, f, draws := rolloutPlugin(t, `{"limits":[{"name":"l","key":[],"requests_per_second":1,"burst":1000}]}`, 0)
	runRequest(p, f, 1, "/")
	if *draws != 0 || f.Metrics.Values["sluice.limit.l.allowed"] != 1 {
		t.Errorf("draws %d, allowed %d; want 0 and 1", *draws, f.Metrics.Values["sluice.limit.l.allowed"])
	}
}

func TestRolloutEnforcedPercentPassesTheRest(t *testing.T) {
	// Draws alternate enforced (0) and not enforced (600000 >= 50%).
	p, f, _ := rolloutPlugin(t, `{"limits":[{"name":"l","key":[],"requests_per_second":1,
		"rollout":{"enforced_percent":50},"upstream_headers_when_limited":{"x-would-limit":"l"}}]}`, 0, 600_000)
	if v, status := runRequest(p, f, 1, "/"); v != Continue || status != 0 {
		t.Fatalf("first request: %v %d", v, status)
	}
	if _, ok := lookupHeader(f.Stream.Headers, "x-would-limit"); ok {
		t.Fatal("an admitted request was marked as would-be-limited")
	}
	var rejected, passed int
	for i := 2; i <= 11; i++ {
		v, status := runRequest(p, f, uint32(i), "/")
		_, marked := lookupHeader(f.Stream.Headers, "x-would-limit")
		switch {
		case status == 429 && i%2 == 1:
			rejected++
		case v == Continue && status == 0 && i%2 == 0 && marked:
			passed++
		default:
			t.Errorf("request %d: verdict %v status %d marked %v", i, v, status, marked)
		}
	}
	if rejected != 5 || passed != 5 {
		t.Errorf("rejected %d passed %d, want 5 and 5", rejected, passed)
	}
	m := f.Metrics.Values
	if m["sluice.limit.l.limited"] != 5 || m["sluice.limit.l.shadow_limited"] != 5 || m["sluice.limit.l.allowed"] != 1 {
		t.Errorf("limited %d shadow_limited %d allowed %d; want 5, 5, 1",
			m["sluice.limit.l.limited"], m["sluice.limit.l.shadow_limited"], m["sluice.limit.l.allowed"])
	}
	// The passed requests consumed nothing: one second refills the one
	// token, and an enforced request takes it.
	f.Clock.Advance(time.Second)
	if v, status := runRequest(p, f, 20, "/"); v != Continue || status != 0 {
		t.Errorf("after the refill: %v %d, want admitted", v, status)
	}
}

// A limit not enabled for a request replaces nothing for it: rolling out
// a specific limit leaves the general one in force for the rest.
func TestRolloutSkippedLimitReplacesNothing(t *testing.T) {
	p, f, _ := rolloutPlugin(t, `{"limits":[{"name":"general","key":[],"requests_per_second":1},
		{"name":"specific","key":[],"requests_per_second":100,"replaces":["general"],"rollout":{"enabled_percent":0}}]}`, 0)
	runRequest(p, f, 1, "/")
	if _, status := runRequest(p, f, 2, "/"); status != 429 {
		t.Errorf("second request status %d, want general's 429", status)
	}
	if got := f.Metrics.Values["sluice.limit.specific.allowed"]; got != 0 {
		t.Errorf("specific counted %d requests, want none", got)
	}
}

// The draws are made once per request: a request held by a delay keeps
// them when it is evaluated again.
func TestRolloutDrawnOncePerRequest(t *testing.T) {
	p, f, draws := rolloutPlugin(t, `{"limits":[{"name":"l","key":[],"limit":1,"window":"100ms",
		"on_limit":{"action":"delay","max_delay":"1s"},"rollout":{"enabled_percent":50}}]}`, 0)
	f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}
	h1, h2 := &Stream{}, &Stream{}
	p.Begin(h1, 1)
	h1.RequestHeaders()
	p.Begin(h2, 2)
	if v := h2.RequestHeaders(); v != Pause {
		t.Fatalf("second request not held: %v", v)
	}
	before := *draws
	for range 20 {
		f.Clock.Advance(10 * time.Millisecond)
		p.Tick()
	}
	if len(f.Stream.Resumed) != 1 {
		t.Fatalf("held request resumed %d times, want once", len(f.Stream.Resumed))
	}
	if *draws != before {
		t.Errorf("%d draws while the request was held, want none", *draws-before)
	}
}

func lookupHeader(hs [][2]string, name string) (string, bool) {
	for _, kv := range hs {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}
