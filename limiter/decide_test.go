package limiter

import (
	"math"
	"testing"
	"time"
)

// t0 is an arbitrary, realistic Unix time (2026-11-21) on a second boundary.
const t0 = int64(1795305600) * int64(time.Second)

type step struct {
	at        time.Duration // offset from t0
	n         int64
	allowed   bool
	reason    Reason
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

// runSteps feeds the steps to Decide in order, threading the state, in the
// style of golang.org/x/time/rate's step tables.
func runSteps(t *testing.T, l Limit, st State, steps []step) State {
	t.Helper()
	if err := l.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v", l, err)
	}
	for i, s := range steps {
		next, r := l.Decide(st, t0+int64(s.at), s.n)
		if r.Allowed != s.allowed || r.Reason != s.reason || r.Remaining != s.remaining ||
			r.RetryAfter != s.retry || r.ResetAfter != s.reset || r.Limit != l.Rate {
			t.Fatalf("step %d (at %v, n %d): got %+v, want allowed=%v reason=%v remaining=%d retry=%v reset=%v",
				i, s.at, s.n, r, s.allowed, s.reason, s.remaining, s.retry, s.reset)
		}
		if !r.Allowed && next != st {
			t.Fatalf("step %d: denied decision changed state %+v -> %+v", i, st, next)
		}
		st = next
	}
	return st
}

const ms = time.Millisecond

func TestTokenBucketSteps(t *testing.T) {
	// R=100/s, B=20: capacity 120, one unit per 10ms.
	l := Limit{Rate: 100, Period: time.Second, Burst: 20}
	runSteps(t, l, State{}, []step{
		{0, 1, true, ReasonAllowed, 119, 0, 10 * ms},
		{0, 118, true, ReasonAllowed, 1, 0, 1190 * ms},
		{0, 2, false, ReasonLimited, 1, 10 * ms, 1190 * ms},
		{0, 1, true, ReasonAllowed, 0, 0, 1200 * ms},
		{0, 1, false, ReasonLimited, 0, 10 * ms, 1200 * ms},
		{9 * ms, 1, false, ReasonLimited, 0, 1 * ms, 1191 * ms},
		{10 * ms, 1, true, ReasonAllowed, 0, 0, 1200 * ms},
		// Cost above capacity: distinct reason, no retry, nothing consumed.
		{10 * ms, 121, false, ReasonCostExceedsCapacity, 0, 0, 1200 * ms},
		{10 * ms, 0, false, ReasonInvalidCost, 0, 0, 1200 * ms},
		{10 * ms, -5, false, ReasonInvalidCost, 0, 0, 1200 * ms},
		// Clock goes back 5ms: no refill, the bucket just looks emptier.
		{5 * ms, 1, false, ReasonLimited, 0, 15 * ms, 1205 * ms},
		// Half a second refills 50.
		{510 * ms, 50, true, ReasonAllowed, 0, 0, 1200 * ms},
		// Long idle: back to exactly full, never more.
		{time.Hour, 120, true, ReasonAllowed, 0, 0, 1200 * ms},
		{time.Hour + time.Second, 101, false, ReasonLimited, 100, 10 * ms, 200 * ms},
		{time.Hour + time.Second, 100, true, ReasonAllowed, 0, 0, 1200 * ms},
	})
}

func TestTokenBucketFractionalRate(t *testing.T) {
	// 3/s does not divide a second into whole nanoseconds; the TAT keeps
	// the remainder so nothing drifts.
	l := Limit{Rate: 3, Period: time.Second}
	st := runSteps(t, l, State{}, []step{
		{0, 3, true, ReasonAllowed, 0, 0, time.Second},
		{0, 1, false, ReasonLimited, 0, 333333334, time.Second},
		{333333333, 1, false, ReasonLimited, 0, 1, 666666667},
		{333333334, 1, true, ReasonAllowed, 0, 0, time.Second},
	})
	// Draining one unit at each exact earliest instant for 3 hours admits
	// exactly 3 per second: a rounded emission interval would drift by
	// thousands of units here.
	now := t0 + 333333334
	admitted := 0
	for {
		var r Result
		st, r = l.Decide(st, now, 1)
		if r.Allowed {
			admitted++
			continue
		}
		if now+int64(r.RetryAfter) > t0+int64(3*time.Hour) {
			break
		}
		now += int64(r.RetryAfter)
	}
	if want := 3 * 3 * 3600; admitted != want-1 {
		// -1: the unit that became available at t0+333333334 was consumed
		// by the last table step.
		t.Fatalf("admitted %d in 3h, want %d", admitted, want-1)
	}
}

func TestTokenBucket120Then100PerSecond(t *testing.T) {
	l := Limit{Rate: 100, Period: time.Second, Burst: 20}
	var st State
	count := func(now int64) int {
		n := 0
		for {
			var r Result
			st, r = l.Decide(st, now, 1)
			if !r.Allowed {
				return n
			}
			n++
		}
	}
	if got := count(t0); got != 120 {
		t.Fatalf("fresh key admitted %d at once, want 120", got)
	}
	for s := int64(1); s <= 10; s++ {
		if got := count(t0 + s*int64(time.Second)); got != 100 {
			t.Fatalf("second %d admitted %d, want 100", s, got)
		}
	}
}

func TestFixedWindowSteps(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Rate: 5, Period: time.Second}
	runSteps(t, l, State{}, []step{
		{500 * ms, 1, true, ReasonAllowed, 4, 0, 500 * ms},
		{600 * ms, 4, true, ReasonAllowed, 0, 0, 400 * ms},
		{999 * ms, 1, false, ReasonLimited, 0, 1 * ms, 1 * ms},
		// Window edge: the count resets exactly at the epoch-aligned boundary.
		{1000 * ms, 1, true, ReasonAllowed, 4, 0, time.Second},
		{1000 * ms, 6, false, ReasonCostExceedsCapacity, 4, 0, time.Second},
		{1000 * ms, 5, false, ReasonLimited, 4, time.Second, time.Second},
		// Clock back into the previous window: counts still go to the
		// stored (later) window, and nothing is released.
		{900 * ms, 3, true, ReasonAllowed, 1, 0, 1100 * ms},
		{900 * ms, 2, false, ReasonLimited, 1, 1100 * ms, 1100 * ms},
		{1999 * ms, 1, true, ReasonAllowed, 0, 0, 1 * ms},
		// Skipping windows forgets everything.
		{5 * time.Second, 5, true, ReasonAllowed, 0, 0, time.Second},
	})
}

func TestSlidingWindowSteps(t *testing.T) {
	l := Limit{Algorithm: SlidingWindow, Rate: 10, Period: time.Second}
	runSteps(t, l, State{}, []step{
		{0, 10, true, ReasonAllowed, 0, 0, 2 * time.Second},
		// Needs prev×(1−f) < 10 with prev = 10: one nanosecond into the
		// next window.
		{0, 1, false, ReasonLimited, 0, time.Second + 1, 2 * time.Second},
		{1000 * ms, 1, false, ReasonLimited, 0, 1, time.Second},
		// Half way: weighted = 5, so units 6..10 fit only while 5+cur < 10.
		{1500 * ms, 5, true, ReasonAllowed, 0, 0, 1500 * ms},
		{1500 * ms, 1, false, ReasonLimited, 0, 1, 1500 * ms},
		{1500*ms + 1, 1, true, ReasonAllowed, 0, 0, 1500*ms - 1},
		{1500*ms + 1, 11, false, ReasonCostExceedsCapacity, 0, 0, 1500*ms - 1},
		// Clock back into the previous window: evaluated at the start of
		// the stored window, where the previous window weighs fully.
		{900 * ms, 1, false, ReasonLimited, 0, 700*ms + 1, 2100 * ms},
		// Next window: the previous count is 6, weighted fully at its start.
		{2000 * ms, 4, true, ReasonAllowed, 0, 0, 2 * time.Second},
		{3000 * ms, 6, true, ReasonAllowed, 0, 0, 2 * time.Second},
		{3000 * ms, 1, false, ReasonLimited, 0, 1, 2 * time.Second},
		// 4×0.75 + 6 = 9: one more fits (9 < 10), two do not (10 is not < 10).
		{3250 * ms, 2, false, ReasonLimited, 1, 1, 1750 * ms},
		{3250 * ms, 1, true, ReasonAllowed, 0, 0, 1750 * ms},
		{10 * time.Second, 10, true, ReasonAllowed, 0, 0, 2 * time.Second},
	})
}

func TestValidate(t *testing.T) {
	good := []Limit{
		{Rate: 100, Period: time.Second, Burst: 20},
		{Rate: 1, Period: MinPeriod},
		{Rate: MaxRate, Period: MaxPeriod},
		{Algorithm: FixedWindow, Rate: 10, Period: time.Minute},
		{Algorithm: SlidingWindow, Rate: 10, Period: time.Hour},
	}
	for _, l := range good {
		if err := l.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", l, err)
		}
	}
	bad := []Limit{
		{},
		{Rate: 0, Period: time.Second},
		{Rate: -1, Period: time.Second},
		{Rate: MaxRate + 1, Period: time.Second},
		{Rate: 1, Period: 0},
		{Rate: 1, Period: -time.Second},
		{Rate: 1, Period: MaxPeriod + 1},
		{Rate: 1, Period: time.Second, Burst: -1},
		{Rate: 1, Period: time.Second, Burst: MaxRate + 1},
		{Algorithm: FixedWindow, Rate: 10, Period: time.Second, Burst: 1},
		{Algorithm: SlidingWindow, Rate: 10, Period: time.Second, Burst: 1},
		{Algorithm: 7, Rate: 10, Period: time.Second},
		// Refilling an empty bucket would take far longer than 146 years.
		{Rate: 1, Period: MaxPeriod, Burst: MaxRate},
	}
	for _, l := range bad {
		if err := l.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want error", l)
		}
		if _, r := l.Decide(State{}, t0, 1); r.Allowed || r.Reason != ReasonInvalidLimit {
			t.Errorf("Decide with invalid %+v = %+v, want denied invalid_limit", l, r)
		}
	}
}

// Hostile states and times must not panic, and must never grant more than
// the capacity.
func TestDecideExtremes(t *testing.T) {
	limits := []Limit{
		{Rate: 100, Period: time.Second, Burst: 20},
		{Rate: MaxRate, Period: MinPeriod, Burst: MaxRate},
		{Rate: 1, Period: MaxPeriod},
		{Algorithm: FixedWindow, Rate: MaxRate, Period: MinPeriod},
		{Algorithm: SlidingWindow, Rate: MaxRate, Period: MaxPeriod},
		{Algorithm: SlidingWindow, Rate: 1, Period: MinPeriod},
	}
	vals := []int64{math.MinInt64, -1, 0, 1, t0, math.MaxInt64 - 1, math.MaxInt64}
	u32 := []uint32{0, 1, math.MaxUint32}
	for _, l := range limits {
		for _, at := range vals {
			for _, now := range vals {
				for _, nn := range u32 {
					for _, pp := range u32 {
						st := State{At: at, N: nn, Prev: pp}
						for _, n := range []int64{math.MinInt64, 0, 1, l.Capacity(), math.MaxInt64} {
							_, r := l.Decide(st, now, n)
							if r.Allowed && (n > l.Capacity() || n < 1) {
								t.Fatalf("%+v: granted cost %d", l, n)
							}
							if r.Remaining < 0 || r.Remaining > l.Capacity() || r.RetryAfter < 0 || r.ResetAfter < 0 {
								t.Fatalf("%+v st=%+v now=%d n=%d: out of range %+v", l, st, now, n, r)
							}
						}
					}
				}
			}
		}
	}
}

// A backwards clock never admits more than the same state would at the
// later time.
func TestBackwardsClockNeverReleases(t *testing.T) {
	for _, l := range []Limit{
		{Rate: 7, Period: 100 * ms, Burst: 3},
		{Algorithm: FixedWindow, Rate: 7, Period: 100 * ms},
		{Algorithm: SlidingWindow, Rate: 7, Period: 100 * ms},
	} {
		var st State
		now := t0
		for i := 0; i < 2000; i++ {
			now += int64(i%13) * int64(ms)
			st, _ = l.Decide(st, now, 1)
			for back := int64(1); back <= int64(time.Second); back *= 3 {
				_, later := l.Decide(st, now, 1)
				_, earlier := l.Decide(st, now-back, 1)
				if earlier.Remaining > later.Remaining || (earlier.Allowed && !later.Allowed) {
					t.Fatalf("%v: %v back gives %+v, at now %+v", l.Algorithm, time.Duration(back), earlier, later)
				}
			}
		}
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow} {
		if got, err := ParseAlgorithm(a.String()); got != a || err != nil {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if got, err := ParseAlgorithm(""); got != TokenBucket || err != nil {
		t.Errorf("default: %v, %v", got, err)
	}
	for _, bad := range []string{"leaky_bucket", "Token_Bucket", " token_bucket"} {
		if _, err := ParseAlgorithm(bad); err == nil {
			t.Errorf("ParseAlgorithm(%q) accepted", bad)
		}
	}
}

// op is one step of a sequence mixing decisions and charges.
type op struct {
	at        time.Duration
	charge    bool
	n         int64
	allowed   bool
	reason    Reason
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

func runOps(t *testing.T, l Limit, ops []op) {
	t.Helper()
	var st State
	for i, o := range ops {
		f := l.Decide
		if o.charge {
			f = l.Charge
		}
		next, r := f(st, t0+int64(o.at), o.n)
		if r.Allowed != o.allowed || r.Reason != o.reason || r.Remaining != o.remaining ||
			r.RetryAfter != o.retry || r.ResetAfter != o.reset || r.Limit != l.Rate || r.Period != l.Period {
			t.Fatalf("step %d (at %v, charge %v, n %d): got %+v, want allowed=%v reason=%v remaining=%d retry=%v reset=%v",
				i, o.at, o.charge, o.n, r, o.allowed, o.reason, o.remaining, o.retry, o.reset)
		}
		if !r.Allowed && next != st {
			t.Fatalf("step %d: a refused operation changed the state %+v -> %+v", i, st, next)
		}
		if err := l.CheckState(l.Algorithm, next, t0+int64(o.at)); err != nil {
			t.Fatalf("step %d: the state left behind is not one the codec accepts: %v", i, err)
		}
		st = next
	}
}

func TestTokenBucketChargeSteps(t *testing.T) {
	// 10/s, no burst: capacity 10, one unit per 100ms, an empty bucket is
	// 1s of debt and a charge may leave at most 2s.
	runOps(t, Limit{Rate: 10, Period: time.Second}, []op{
		{0, false, 1, true, ReasonAllowed, 9, 0, 100 * ms},
		{0, true, 4, true, ReasonAllowed, 5, 0, 500 * ms},
		// Beyond what is left: the bucket goes 700ms into debt, so the next
		// unit is 800ms away.
		{0, true, 12, true, ReasonAllowed, 0, 800 * ms, 1700 * ms},
		{0, false, 1, false, ReasonLimited, 0, 800 * ms, 1700 * ms},
		// The debt stops at one full bucket past empty.
		{0, true, 100, true, ReasonAllowed, 0, 1100 * ms, 2000 * ms},
		{1000 * ms, false, 1, false, ReasonLimited, 0, 100 * ms, 1000 * ms},
		{1100 * ms, false, 1, true, ReasonAllowed, 0, 0, 1000 * ms},
		{1100 * ms, true, 0, false, ReasonInvalidCost, 0, 0, 1000 * ms},
		{1100 * ms, true, -3, false, ReasonInvalidCost, 0, 0, 1000 * ms},
		// The clock steps back 2.6s: the debt looks larger than a charge can
		// leave, and a charge keeps it rather than lowering it to the cap.
		{-1500 * ms, true, 1, true, ReasonAllowed, 0, 2700 * ms, 3600 * ms},
		// Repaid: a full bucket again, never more.
		{3100 * ms, false, 11, false, ReasonCostExceedsCapacity, 10, 0, 0},
		{3100 * ms, false, 10, true, ReasonAllowed, 0, 0, time.Second},
	})
}

func TestFixedWindowChargeSteps(t *testing.T) {
	runOps(t, Limit{Algorithm: FixedWindow, Rate: 5, Period: time.Second}, []op{
		{500 * ms, false, 2, true, ReasonAllowed, 3, 0, 500 * ms},
		// A window cannot hold debt: it fills up and forgets at its end.
		{500 * ms, true, 10, true, ReasonAllowed, 0, 500 * ms, 500 * ms},
		{600 * ms, false, 1, false, ReasonLimited, 0, 400 * ms, 400 * ms},
		{1000 * ms, true, 2, true, ReasonAllowed, 3, 0, time.Second},
		{1000 * ms, false, 3, true, ReasonAllowed, 0, 0, time.Second},
	})
}

func TestSlidingWindowChargeSteps(t *testing.T) {
	runOps(t, Limit{Algorithm: SlidingWindow, Rate: 10, Period: time.Second}, []op{
		{0, true, 25, true, ReasonAllowed, 0, time.Second + 1, 2 * time.Second},
		// The full previous window weighs half way through the next one.
		{1500 * ms, false, 5, true, ReasonAllowed, 0, 0, 1500 * ms},
		{1500 * ms, true, 1, true, ReasonAllowed, 0, 100*ms + 1, 1500 * ms},
	})
}

// Charge must not panic or leave an out-of-range result for any state,
// time and amount, and must never lower a debt (short of the end of
// int64 time, where a TAT saturates).
func TestChargeExtremes(t *testing.T) {
	limits := []Limit{
		{Rate: 100, Period: time.Second, Burst: 20},
		{Rate: MaxRate, Period: MinPeriod, Burst: MaxRate},
		{Rate: 1, Period: MaxPeriod},
		{Algorithm: FixedWindow, Rate: MaxRate, Period: MinPeriod},
		{Algorithm: SlidingWindow, Rate: MaxRate, Period: MaxPeriod},
		{},
	}
	vals := []int64{math.MinInt64, -1, 0, 1, t0, math.MaxInt64 - 1, math.MaxInt64}
	for _, l := range limits {
		for _, at := range vals {
			for _, now := range vals {
				for _, nn := range []uint32{0, 1, math.MaxUint32} {
					st := State{At: at, N: nn, Prev: nn}
					for _, n := range []int64{math.MinInt64, 0, 1, l.Capacity() + 1, math.MaxInt64} {
						next, r := l.Charge(st, now, n)
						if r.Allowed != (l.valid() && n >= 1) {
							t.Fatalf("%+v st=%+v now=%d n=%d: %+v", l, st, now, n, r)
						}
						if r.Remaining < 0 || r.Remaining > l.Capacity() || r.RetryAfter < 0 || r.ResetAfter < 0 {
							t.Fatalf("%+v st=%+v now=%d n=%d: out of range %+v", l, st, now, n, r)
						}
						_, before := l.Decide(st, now, 0)
						_, after := l.Decide(next, now, 0)
						if l.valid() && l.Algorithm == TokenBucket && now > 0 && now <= t0 && after.ResetAfter < before.ResetAfter {
							t.Fatalf("%+v st=%+v now=%d n=%d: debt fell from %v to %v", l, st, now, n, before.ResetAfter, after.ResetAfter)
						}
					}
				}
			}
		}
	}
}

// Charging n units is the same as deciding them when they are available,
// so a cost known in advance and one reported afterwards agree.
func TestChargeMatchesDecideWhenAvailable(t *testing.T) {
	for _, l := range []Limit{
		{Rate: 7, Period: 100 * ms, Burst: 3},
		{Algorithm: FixedWindow, Rate: 7, Period: 100 * ms},
		{Algorithm: SlidingWindow, Rate: 7, Period: 100 * ms},
	} {
		var st State
		now := t0
		for i := 0; i < 500; i++ {
			now += int64(i%17) * int64(ms)
			n := int64(1 + i%3)
			decided, dr := l.Decide(st, now, n)
			if !dr.Allowed {
				continue
			}
			charged, cr := l.Charge(st, now, n)
			if charged != decided || cr.Remaining != dr.Remaining || cr.ResetAfter != dr.ResetAfter {
				t.Fatalf("%v step %d: charge %+v %+v, decide %+v %+v", l.Algorithm, i, charged, cr, decided, dr)
			}
			st = decided
		}
	}
}
