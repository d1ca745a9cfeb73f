package limiter

import (
	"math/rand"
	"sort"
	"testing"
	"time"
)

func TestLeaseSteps(t *testing.T) {
	// R=100/s, B=20: capacity 120, one unit per 10ms.
	l := Limit{Rate: 100, Period: time.Second, Burst: 20}
	type leaseStep struct {
		at    time.Duration
		want  int64
		ahead time.Duration
		res   LeaseResult
	}
	steps := []leaseStep{
		{0, 50, 100 * ms, LeaseResult{Granted: 50, Remaining: 70, ResetAfter: 500 * ms}},
		// 70 left now plus 10 reserved ahead: the last is usable in 100ms.
		{0, 100, 100 * ms, LeaseResult{Granted: 80, ReadyAfter: 100 * ms, ResetAfter: 1300 * ms}},
		{0, 1, 100 * ms, LeaseResult{RetryAfter: 10 * ms, ResetAfter: 1300 * ms, Reason: ReasonLimited}},
		// Without reserving ahead nothing is left for 110ms.
		{0, 1, 0, LeaseResult{RetryAfter: 110 * ms, ResetAfter: 1300 * ms, Reason: ReasonLimited}},
		{25 * ms, 5, 100 * ms, LeaseResult{Granted: 2, ReadyAfter: 95 * ms, ResetAfter: 1295 * ms}},
		{25 * ms, 0, 100 * ms, LeaseResult{ResetAfter: 1295 * ms, Reason: ReasonInvalidCost}},
		// Asking further ahead than MaxLeaseAhead reserves only that far.
		{25 * ms, 10000, time.Hour, LeaseResult{Granted: 990, ReadyAfter: MaxLeaseAhead - 5*ms, ResetAfter: 1195*ms + MaxLeaseAhead}},
	}
	var st State
	for i, s := range steps {
		next, got := l.Lease(st, t0+int64(s.at), s.want, s.ahead)
		if got != s.res {
			t.Fatalf("step %d: got %+v, want %+v", i, got, s.res)
		}
		if got.Granted == 0 && next != st {
			t.Fatalf("step %d: an empty grant changed the state", i)
		}
		st = next
	}
	if _, r := (Limit{Algorithm: FixedWindow, Rate: 5, Period: time.Second}).Lease(State{}, t0, 1, 0); r.Reason != ReasonInvalidLimit || r.Granted != 0 {
		t.Fatalf("leasing a window: %+v", r)
	}
}

// TestLeaseWithoutAheadIsLargestDecide: with nothing reserved ahead a
// lease is the largest cost one Decide would admit, with its state.
func TestLeaseWithoutAheadIsLargestDecide(t *testing.T) {
	for _, l := range []Limit{
		{Rate: 100, Period: time.Second, Burst: 20},
		{Rate: 3, Period: time.Second, Burst: 2},
		{Rate: 7, Period: 100 * ms},
		{Rate: 1000, Period: time.Minute, Burst: 1},
	} {
		rng := rand.New(rand.NewSource(3))
		var st State
		now := t0
		for i := 0; i < 2000; i++ {
			now += rng.Int63n(int64(l.Period) / 4)
			want := 1 + rng.Int63n(l.Capacity())
			if rng.Intn(10) == 0 {
				// Spend some without leasing, as a global decision would.
				st, _ = l.Decide(st, now, 1+rng.Int63n(3))
			}
			next, got := l.Lease(st, now, want, 0)
			ref, k := st, int64(0)
			var refRes Result
			for c := min(want, l.Capacity()); c >= 1; c-- {
				if n, r := l.Decide(st, now, c); r.Allowed {
					ref, k, refRes = n, c, r
					break
				}
			}
			if got.Granted != k || next != ref || got.ReadyAfter != 0 {
				t.Fatalf("%+v step %d want %d: lease %+v state %+v, largest Decide %d state %+v", l, i, want, got, next, k, ref)
			}
			if k > 0 && (got.Remaining != refRes.Remaining || got.ResetAfter != refRes.ResetAfter) {
				t.Fatalf("%+v step %d: lease %+v, decide %+v", l, i, got, refRes)
			}
			if k == 0 {
				_, one := l.Decide(st, now, 1)
				if got.RetryAfter != one.RetryAfter || got.Reason != ReasonLimited {
					t.Fatalf("%+v step %d: empty lease %+v, one-unit decide %+v", l, i, got, one)
				}
			}
			st = next
		}
	}
}

// TestLeasesSpentWhenReadyNeverOverAdmit: several holders lease with
// random reservations and spend each unit at the earliest instant the
// documented schedule allows (as the filter does, rounding towards later);
// replayed in time order, a textbook bucket admits every one of them.
func TestLeasesSpentWhenReadyNeverOverAdmit(t *testing.T) {
	for _, l := range []Limit{
		{Rate: 200, Period: time.Second},
		{Rate: 3, Period: time.Second, Burst: 2},
		{Rate: 7, Period: 100 * ms},
	} {
		for seed := int64(1); seed <= 3; seed++ {
			rng := rand.New(rand.NewSource(seed))
			var st State
			now := t0
			var spends []int64
			reserved := false
			for i := 0; i < 600; i++ {
				now += rng.Int63n(int64(l.Period) / 5)
				want := 1 + rng.Int63n(l.Capacity())
				ahead := time.Duration(rng.Int63n(int64(l.Period)))
				var r LeaseResult
				st, r = l.Lease(st, now, want, ahead)
				if r.ReadyAfter > 0 {
					reserved = true
				}
				last := now + int64(r.ReadyAfter)
				for j := int64(1); j <= r.Granted; j++ {
					// Unit j is ready (k−j)·τ before the last, τ = P/R,
					// rounded down so the instant is never early.
					at := max(now, last-(r.Granted-j)*int64(l.Period)/l.Rate)
					spends = append(spends, at)
				}
			}
			if !reserved {
				t.Fatalf("%+v: no lease reserved ahead; the test proves nothing", l)
			}
			sort.Slice(spends, func(i, j int) bool { return spends[i] < spends[j] })
			m := newBucketModel(l)
			for i, at := range spends {
				if !m.canAdmit(at, 1) {
					t.Fatalf("%+v seed %d: unit %d spent at t0%+d, which one bucket would not admit", l, seed, i, at-t0)
				}
				m.commit(at, 1)
			}
		}
	}
}

func TestLeaseExtremes(t *testing.T) {
	l := Limit{Rate: MaxRate, Period: MinPeriod, Burst: MaxRate}
	for _, now := range []int64{-1 << 62, -1, 0, 1, 1 << 62, 1<<63 - 1} {
		for _, st := range []State{{}, {At: 1<<63 - 1, N: 1}, {At: -1 << 63}} {
			for _, want := range []int64{-1, 0, 1, 1 << 62} {
				l.Lease(st, now, want, time.Duration(1<<63-1))
				l.Lease(st, now, want, -time.Second)
			}
		}
	}
	if _, r := (Limit{}).Lease(State{}, t0, 1, 0); r.Reason != ReasonInvalidLimit {
		t.Fatalf("invalid limit: %+v", r)
	}
}

// TestLeaseHonoursChargedDebt: a bucket charged past empty (Charge) is in
// debt up to a second full bucket, and Lease must see that debt as Decide
// does, also when the bucket spans more than the clock-step tolerance.
func TestLeaseHonoursChargedDebt(t *testing.T) {
	l := Limit{Rate: 3600, Period: time.Hour} // one bucket is an hour of refill
	st, res := l.Charge(State{}, t0, 2*l.Capacity())
	if !res.Allowed {
		t.Fatalf("charge: %+v", res)
	}
	_, d := l.Decide(st, t0, 1)
	if d.Allowed {
		t.Fatalf("Decide admits a bucket charged a bucket past empty: %+v", d)
	}
	if _, lr := l.Lease(st, t0, 10, 10*time.Second); lr.Granted != 0 {
		t.Fatalf("Lease granted %d from a bucket Decide refuses for %v", lr.Granted, d.RetryAfter)
	}
}
