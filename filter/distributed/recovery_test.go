package distributed

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/backend"
)

// Recovery with backoff and jitter, on the stepped clock with the rigs'
// seeded jitter source: every wait is predicted exactly from the same
// draws, and must fall within the configured share below the nominal one.

func TestRetryBackoffIsJittered(t *testing.T) {
	r := newRigFrom(t, `{"limits":[{"name":"api","key":[],"requests_per_second":10,"mode":"global"}],
		"backend":{"cluster":"redis","timeout":"50ms","retries":2,"breaker":{"failure_threshold":100,"jitter_percent":50}}}`)
	draws := jitterDraws()
	d := r.decide(t, "k")
	shortened := false
	for attempt := range 2 {
		r.pending(t).Answer(503, nil, nil)
		nominal := Backoff(attempt)
		wait := breaker.Jitter(nominal, 50, draws.Uint64())
		if wait > nominal || wait*2 < nominal {
			t.Fatalf("retry %d waits %v, outside [50%%, 100%%] of %v", attempt+1, wait, nominal)
		}
		shortened = shortened || wait < nominal
		r.tick(wait - 1)
		if n := len(r.f.Caller.Pending()); n != 0 {
			t.Fatalf("retry %d sent before its jittered backoff %v", attempt+1, wait)
		}
		r.tick(1)
		r.pending(t) // sent exactly at its jittered time
	}
	if !shortened {
		t.Fatal("no retry was jittered")
	}
	r.pending(t).Answer(200, []byte(`{"EVALSHA":[1,9,0,100,0,17]}`), nil)
	if d.n != 1 || d.err != nil || !d.res.Allowed {
		t.Fatalf("decision %+v", *d)
	}
}

func TestNoJitterKeepsTheNominalBackoff(t *testing.T) {
	r := newRigFrom(t, `{"limits":[{"name":"api","key":[],"requests_per_second":10,"mode":"global"}],
		"backend":{"cluster":"redis","timeout":"50ms","retries":1,"breaker":{"jitter_percent":0}}}`)
	r.decide(t, "k")
	r.pending(t).Answer(503, nil, nil)
	r.tick(Backoff(0) - 1)
	if len(r.f.Caller.Pending()) != 0 {
		t.Fatal("retried before the nominal backoff with jitter_percent 0")
	}
	r.tick(1)
	r.pending(t)
}

// TestBackendBreakerOpenTimeoutGrowsWithJitter fails every probe: each
// open lasts open_timeout × multiplier^(n−1), capped at open_timeout_max,
// shortened by its draw; no call is made before a probe is due.
func TestBackendBreakerOpenTimeoutGrowsWithJitter(t *testing.T) {
	r := newRigFrom(t, `{"limits":[{"name":"api","key":[],"requests_per_second":10,"mode":"global"}],
		"backend":{"cluster":"redis","timeout":"50ms","retries":0,
		"breaker":{"failure_threshold":1,"open_timeout":"1s","open_timeout_multiplier":2,"open_timeout_max":"3s","half_open_max_requests":1}}}`)
	draws := jitterDraws()
	r.decide(t, "k")
	r.pending(t).Answer(0, nil, backend.Timeout())
	for n, nominal := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		open := breaker.Jitter(nominal, 20, draws.Uint64())
		if open > nominal || open*5 < nominal*4 {
			t.Fatalf("open %d lasts %v, outside [80%%, 100%%] of %v", n+1, open, nominal)
		}
		r.f.Clock.Advance(open - 1)
		calls := len(r.f.Caller.Calls)
		if d := r.decide(t, "k"); !errors.Is(d.err, ErrBreakerOpen) || len(r.f.Caller.Calls) != calls {
			t.Fatalf("open %d: 1ns before %v: decision %+v, %d calls", n+1, open, *d, len(r.f.Caller.Calls)-calls)
		}
		r.f.Clock.Advance(1)
		r.decide(t, "k")
		r.pending(t).Answer(0, nil, backend.Timeout()) // the probe fails: open again
	}
	if got := r.f.Metrics.Values["sluice.backend.breaker.opens"]; got != 5 {
		t.Fatalf("opens = %d, want 5", got)
	}
}
