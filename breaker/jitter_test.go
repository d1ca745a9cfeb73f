package breaker

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestJitterBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, d := range []time.Duration{1, 99, 100, time.Millisecond, 15 * time.Second, math.MaxInt64} {
		for _, p := range []uint8{0, 1, 20, 100, 255} {
			span := float64(d) * float64(min(p, MaxJitterPercent)) / 100
			for _, u := range []uint64{0, math.MaxUint64, r.Uint64(), r.Uint64()} {
				got := Jitter(d, p, u)
				if got > d || got < 0 || float64(d-got) > span+1 {
					t.Fatalf("Jitter(%d, %d, %#x) = %d, want within (%d−%.0f, %d]", d, p, u, got, d, span, d)
				}
				if (p == 0 || u == 0) && got != d {
					t.Fatalf("Jitter(%d, %d, %#x) = %d, want %d unchanged", d, p, u, got, d)
				}
			}
		}
	}
	if got := Jitter(10*time.Second, 20, math.MaxUint64); got <= 8*time.Second || got > 8*time.Second+time.Nanosecond {
		t.Fatalf("the largest cut of 20%% of 10s leaves %v, want just over 8s", got)
	}
}

// TestOpenTimeoutGrowthWithJitter replays TestOpenTimeoutGrowth's
// failing probes with 20% jitter from a seeded source: each open lasts
// exactly the grown timeout shortened by the draw, never longer.
func TestOpenTimeoutGrowthWithJitter(t *testing.T) {
	src := rand.New(rand.NewPCG(1, 2))
	s := Settings{FailureThreshold: 1, OpenTimeout: 10 * sec, OpenTimeoutMultiplier: 2, MaxOpenTimeout: 30 * sec,
		JitterPercent: 20, Random: src.Uint64}
	draws := rand.New(rand.NewPCG(1, 2))
	m := mustMachine(t, Settings{FailureThreshold: 1, OpenTimeout: 10 * sec, OpenTimeoutMultiplier: 2, MaxOpenTimeout: 30 * sec})
	steps := []step{chk(0, "a", true, Closed), rep(0, "a", fail, Open).withTr(Opened)}
	at := time.Duration(0)
	shortened := 0
	for n := 1; n <= 4; n++ {
		open := Jitter(m.OpenTimeout(n), 20, draws.Uint64())
		if open > m.OpenTimeout(n) || open*5 < m.OpenTimeout(n)*4 {
			t.Fatalf("open %d lasts %v, outside [80%%, 100%%] of %v", n, open, m.OpenTimeout(n))
		}
		if open < m.OpenTimeout(n) {
			shortened++
		}
		tr := Reopened
		steps = append(steps,
			chk(at, "x", false, Open).withRetry(open),
			chk(at+open-1, "x", false, Open).withRetry(1),
			chk(at+open, "p", true, HalfOpen).asProbe().withTr(HalfOpened),
			rep(at+open, "p", fail, Open).withTr(tr))
		at += open
	}
	if shortened == 0 {
		t.Fatal("no open timeout was jittered")
	}
	runSteps(t, s, steps)
}

func TestJitterPercentIsValidated(t *testing.T) {
	if _, err := NewMachine(Settings{FailureThreshold: 1, JitterPercent: 101}); err == nil {
		t.Fatal("jitter_percent 101 accepted")
	}
}
