package limiter

import (
	"math/big"
	"math/rand"
	"testing"
	"time"
)

// model is a slow, obviously-correct simulation of one key. Everything is
// exact rational arithmetic straight from the definitions; durations are
// found by searching the pure predicates, which is valid because waiting
// never makes a request less admissible.
type model interface {
	canAdmit(now, n int64) bool
	idle(now int64) bool
	commit(now, n int64)
}

// bucketModel is the textbook token bucket: a token level and the time it
// was last brought up to date, refilled at Rate/Period per ns, capped.
type bucketModel struct {
	l      Limit
	tokens *big.Rat
	last   int64
}

func newBucketModel(l Limit) *bucketModel {
	return &bucketModel{l: l, tokens: big.NewRat(l.Capacity(), 1)}
}

func (m *bucketModel) level(now int64) *big.Rat {
	refill := new(big.Rat).SetFrac(
		new(big.Int).Mul(big.NewInt(now-m.last), big.NewInt(m.l.Rate)),
		big.NewInt(int64(m.l.Period)))
	lv := new(big.Rat).Add(m.tokens, refill)
	if c := big.NewRat(m.l.Capacity(), 1); lv.Cmp(c) > 0 {
		lv = c
	}
	return lv
}

func (m *bucketModel) canAdmit(now, n int64) bool {
	return m.level(now).Cmp(big.NewRat(n, 1)) >= 0
}

func (m *bucketModel) idle(now int64) bool {
	return m.level(now).Cmp(big.NewRat(m.l.Capacity(), 1)) == 0
}

func (m *bucketModel) commit(now, n int64) {
	m.tokens = new(big.Rat).Sub(m.level(now), big.NewRat(n, 1))
	m.last = now
}

// windowModel keeps every window's count.
type windowModel struct {
	l      Limit
	counts map[int64]int64
}

func (m *windowModel) win(now int64) (int64, int64) {
	p := int64(m.l.Period)
	return now / p, now % p
}

// weighted is prev×(1−elapsed/P) + cur for the sliding window and just cur
// for the fixed window.
func (m *windowModel) weighted(now int64) *big.Rat {
	w, e := m.win(now)
	cur := big.NewRat(m.counts[w], 1)
	if m.l.Algorithm == FixedWindow {
		return cur
	}
	p := int64(m.l.Period)
	prev := new(big.Rat).SetFrac(
		new(big.Int).Mul(big.NewInt(m.counts[w-1]), big.NewInt(p-e)), big.NewInt(p))
	return cur.Add(cur, prev)
}

func (m *windowModel) canAdmit(now, n int64) bool {
	if m.l.Algorithm == FixedWindow {
		return m.counts[now/int64(m.l.Period)]+n <= m.l.Rate
	}
	// Each of the n units, admitted one by one, must see weighted < L.
	x := m.weighted(now)
	x.Add(x, big.NewRat(n-1, 1))
	return x.Cmp(big.NewRat(m.l.Rate, 1)) < 0
}

func (m *windowModel) idle(now int64) bool { return m.weighted(now).Sign() == 0 }

func (m *windowModel) commit(now, n int64) { m.counts[now/int64(m.l.Period)] += n }

func newModel(l Limit) model {
	switch l.Algorithm {
	case TokenBucket:
		return newBucketModel(l)
	case SlidingLog:
		return &logModel{l: l}
	}
	return &windowModel{l: l, counts: map[int64]int64{}}
}

// firstTrue finds the least d in [0, hi] with f(d), given f is monotone.
func firstTrue(hi int64, f func(int64) bool) int64 {
	lo := int64(0)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if f(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func modelDecide(m model, l Limit, now, n int64) Result {
	res := Result{Limit: l.Rate, Period: l.Period}
	horizon := 3*int64(l.Period) + int64(l.Capacity())*int64(l.Period)/l.Rate
	remaining := func() int64 {
		return firstTrue(l.Capacity()+1, func(k int64) bool { return !m.canAdmit(now, k+1) })
	}
	switch {
	case n < 1:
		res.Reason = ReasonInvalidCost
	case n > l.Capacity():
		res.Reason = ReasonCostExceedsCapacity
	case m.canAdmit(now, n):
		m.commit(now, n)
		res.Allowed, res.Reason = true, ReasonAllowed
	default:
		res.Reason = ReasonLimited
		res.RetryAfter = time.Duration(firstTrue(horizon, func(d int64) bool { return m.canAdmit(now+d, n) }))
	}
	res.Remaining = remaining()
	res.ResetAfter = time.Duration(firstTrue(horizon, func(d int64) bool { return m.idle(now + d) }))
	return res
}

func TestDecideMatchesModel(t *testing.T) {
	limits := []Limit{
		{Rate: 100, Period: time.Second, Burst: 20},
		{Rate: 3, Period: time.Second, Burst: 2},
		{Rate: 7, Period: 100 * ms},
		{Rate: 1, Period: MinPeriod, Burst: 4},
		{Rate: 1000, Period: time.Minute, Burst: 1},
		{Algorithm: FixedWindow, Rate: 5, Period: time.Second},
		{Algorithm: FixedWindow, Rate: 1, Period: 3 * ms},
		{Algorithm: SlidingWindow, Rate: 10, Period: time.Second},
		{Algorithm: SlidingWindow, Rate: 3, Period: 7 * ms},
		{Algorithm: SlidingWindow, Rate: 100, Period: time.Minute},
		{Algorithm: SlidingLog, Rate: 10, Period: time.Second},
		{Algorithm: SlidingLog, Rate: 3, Period: 7 * ms},
		{Algorithm: SlidingLog, Rate: 100, Period: time.Minute},
		{Algorithm: SlidingLog, Rate: 1, Period: MinPeriod},
	}
	for _, l := range limits {
		for seed := int64(1); seed <= 3; seed++ {
			rng := rand.New(rand.NewSource(seed))
			m := newModel(l)
			var st State
			now := t0 + rng.Int63n(int64(l.Period))
			emission := max(int64(l.Period)/l.Rate, 1)
			for i := 0; i < 1000; i++ {
				switch rng.Intn(6) {
				case 0: // same instant
				case 1:
					now += rng.Int63n(emission + 1)
				case 2:
					now += rng.Int63n(4*emission + 1)
				case 3:
					now += rng.Int63n(int64(l.Period) + 1)
				case 4:
					now += rng.Int63n(3*int64(l.Period) + 1)
				case 5:
					now += 1
				}
				n := 1 + rng.Int63n(max(l.Capacity()/3, 1))
				switch rng.Intn(20) {
				case 0:
					n = l.Capacity() + 1 + rng.Int63n(3)
				case 1:
					n = -rng.Int63n(2)
				case 2:
					n = l.Capacity()
				}
				want := modelDecide(m, l, now, n)
				var got Result
				st, got = l.Decide(st, now, n)
				if got != want {
					t.Fatalf("%v %+v seed %d step %d now=t0%+d n=%d:\n got  %+v\n want %+v",
						l.Algorithm, l, seed, i, now-t0, n, got, want)
				}
			}
		}
	}
}
