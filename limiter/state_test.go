package limiter

import (
	"bytes"
	"errors"
	"math"
	"math/rand"
	"testing"
	"time"
)

var codecLimits = []Limit{
	{Rate: 100, Period: time.Second, Burst: 20},
	{Algorithm: FixedWindow, Rate: 5, Period: time.Second},
	{Algorithm: SlidingWindow, Rate: 10, Period: time.Second},
	{Algorithm: SlidingLog, Rate: 10, Period: time.Second},
	{Algorithm: FixedWindow, Rate: 7, Period: CalendarMonth.Longest(), Calendar: CalendarMonth, Offset: -(9*3600 + 30*60)},
}

// maxStateLen is the longest encoding of l's states.
func maxStateLen(l Limit) int {
	if l.Algorithm == SlidingLog {
		return 1 + logEntryLen*int(l.Rate)
	}
	return MaxStateLen
}

func TestCodecRoundTrip(t *testing.T) {
	for _, l := range codecLimits {
		rng := rand.New(rand.NewSource(7))
		var st State
		now := t0
		for i := 0; i < 5000; i++ {
			now += rng.Int63n(int64(50 * ms))
			st, _ = l.Decide(st, now, 1+rng.Int63n(3))
			b := l.AppendState(nil, st)
			if len(b) > maxStateLen(l) {
				t.Fatalf("%v: encoded %d bytes, more than %d", l.Algorithm, len(b), maxStateLen(l))
			}
			got, err := l.DecodeState(b, now)
			if err != nil || got != st {
				t.Fatalf("%v: round trip of %+v gave %+v, %v", l.Algorithm, st, got, err)
			}
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	tb, fw, sw := codecLimits[0], codecLimits[1], codecLimits[2]
	enc := func(l Limit, st State) []byte { return l.AppendState(nil, st) }
	tbFresh := enc(tb, State{At: t0})
	cases := []struct {
		name string
		l    Limit
		b    []byte
		want error
	}{
		{"empty", tb, nil, ErrMalformed},
		{"short", tb, tbFresh[:12], ErrMalformed},
		{"long", tb, append(append([]byte(nil), tbFresh...), 0), ErrMalformed},
		{"version 0", tb, append([]byte{0x00}, tbFresh[1:]...), ErrMalformed},
		{"version 2", tb, append([]byte{0x20}, tbFresh[1:]...), ErrMalformed},
		{"unknown algorithm", tb, append([]byte{0x1f}, tbFresh[1:]...), ErrMalformed},
		{"sliding with bucket length", sw, append([]byte{0x12}, tbFresh[1:]...), ErrMalformed},
		{"other algorithm", fw, tbFresh, ErrImpossible},
		{"remainder not below rate", tb, enc(tb, State{At: t0, N: 100}), ErrImpossible},
		{"TAT far ahead", tb, enc(tb, State{At: t0 + int64(2400*ms+ClockStepTolerance) + 1}), ErrImpossible},
		{"fixed count above limit", fw, enc(fw, State{At: t0 / int64(time.Second), N: 6}), ErrImpossible},
		{"fixed negative window", fw, enc(fw, State{At: -1}), ErrMalformed},
		{"fixed window far ahead", fw, enc(fw, State{At: t0/int64(time.Second) + 62}), ErrImpossible},
		{"sliding prev above limit", sw, enc(sw, State{At: t0 / int64(time.Second), Prev: 11}), ErrImpossible},
		{"sliding negative window", sw, enc(sw, State{At: -5}), ErrMalformed},
	}
	for _, c := range cases {
		st, err := c.l.DecodeState(c.b, t0)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
		}
		if st != c.l.Empty(t0) {
			t.Errorf("%s: on error got state %+v, want Empty %+v", c.name, st, c.l.Empty(t0))
		}
	}
	// Just inside the bounds is accepted.
	ok := []struct {
		l  Limit
		st State
	}{
		{tb, State{At: t0 + int64(2400*ms+ClockStepTolerance)}}, // charged a full bucket past empty
		{fw, State{At: t0/int64(time.Second) + 61, N: 5}},
		{sw, State{At: t0 / int64(time.Second), N: 10, Prev: 10}},
	}
	for _, c := range ok {
		if _, err := c.l.DecodeState(enc(c.l, c.st), t0); err != nil {
			t.Errorf("%v %+v rejected: %v", c.l.Algorithm, c.st, err)
		}
	}
}

// The state a caller falls back to after a decode error is never more
// generous than a fresh key: it grants nothing now, and only refills.
func TestEmptyIsConservative(t *testing.T) {
	for _, l := range codecLimits {
		e := l.Empty(t0)
		if _, r := l.Decide(e, t0, 1); r.Allowed || r.Remaining != 0 {
			t.Errorf("%v: Empty grants %+v", l.Algorithm, r)
		}
		for d := time.Duration(0); d < 3*time.Second; d += 7 * ms {
			_, fromEmpty := l.Decide(e, t0+int64(d), 1)
			_, fromFresh := l.Decide(State{}, t0+int64(d), 1)
			if fromEmpty.Remaining > fromFresh.Remaining {
				t.Fatalf("%v at +%v: Empty has %d remaining, fresh %d", l.Algorithm, d, fromEmpty.Remaining, fromFresh.Remaining)
			}
		}
		if l.Idle(e, t0) {
			t.Errorf("%v: Empty reported idle", l.Algorithm)
		}
		if !l.Idle(State{}, t0) {
			t.Errorf("%v: zero state not idle", l.Algorithm)
		}
	}
}

func TestMergeAddsConsumption(t *testing.T) {
	for _, l := range codecLimits {
		a, _ := l.Decide(State{}, t0, 2)
		b, _ := l.Decide(State{}, t0, 3)
		m := l.Merge(a, b, t0)
		_, r := l.Decide(m, t0, 0) // cost 0 consumes nothing but reports Remaining
		want := l.Capacity() - 5
		if r.Remaining != want {
			t.Errorf("%v: merged remaining %d, want %d", l.Algorithm, r.Remaining, want)
		}
		if got := l.Merge(l.Empty(t0), l.Empty(t0), t0); !sameAllowance(l, got, l.Empty(t0)) {
			t.Errorf("%v: merging two empties gave %+v", l.Algorithm, got)
		}
	}
}

func sameAllowance(l Limit, a, b State) bool {
	_, ra := l.Decide(a, t0, 1)
	_, rb := l.Decide(b, t0, 1)
	return ra == rb
}

func FuzzDecodeState(f *testing.F) {
	for _, l := range codecLimits {
		f.Add(l.AppendState(nil, State{At: t0, N: 3, Prev: 2}), int64(0), int64(1))
		f.Add(l.AppendState(nil, l.Empty(t0)), int64(time.Second), int64(2))
	}
	f.Add([]byte{0x11, 0xff}, int64(-1), int64(math.MaxInt64))
	// A log of several entries, some about to leave the window.
	logLimit := codecLimits[3]
	var st State
	for i := range 6 {
		st, _ = logLimit.Decide(st, t0-int64(time.Second)+int64(i)*int64(300*ms), 1+int64(i%2))
	}
	f.Add(logLimit.AppendState(nil, st), int64(0), int64(2))
	f.Fuzz(func(t *testing.T, b []byte, offset int64, n int64) {
		now := t0 + offset%int64(24*time.Hour)
		alg, raw, rawErr := DecodeState(b)
		for _, l := range codecLimits {
			st, err := l.DecodeState(b, now)
			if err != nil {
				if st != l.Empty(now) {
					t.Fatalf("error %v but state %+v is not Empty", err, st)
				}
			} else {
				if rawErr != nil || alg != l.Algorithm || raw != st {
					t.Fatalf("Limit.DecodeState accepted what DecodeState did not")
				}
				// Accepted bytes re-encode to exactly themselves.
				if re := l.AppendState(nil, st); !bytes.Equal(re, b) {
					t.Fatalf("re-encoded %x, input %x", re, b)
				}
			}
			// Whatever was decoded is safe to decide from: no panic and
			// never beyond the capacity.
			_, r := l.Decide(st, now, n)
			if r.Allowed && (n < 1 || n > l.Capacity()) {
				t.Fatalf("granted cost %d", n)
			}
			if r.Remaining < 0 || r.Remaining > l.Capacity() {
				t.Fatalf("remaining %d", r.Remaining)
			}
		}
	})
}

func TestAllocs(t *testing.T) {
	buf := make([]byte, 0, MaxLogStateLen)
	for _, l := range codecLimits {
		// A sliding log's decision builds the new log: one allocation,
		// and one for a decoded log.
		want := 0.0
		if l.Algorithm == SlidingLog {
			want = 1
		}
		var st State
		now := t0
		a := testing.AllocsPerRun(1000, func() {
			now += int64(ms)
			st, _ = l.Decide(st, now, 1)
		})
		if a > want {
			t.Errorf("%v Decide: %v allocs/op", l.Algorithm, a)
		}
		a = testing.AllocsPerRun(1000, func() {
			now += int64(ms)
			st, _ = l.Charge(st, now, 3)
		})
		if a > want {
			t.Errorf("%v Charge: %v allocs/op", l.Algorithm, a)
		}
		a = testing.AllocsPerRun(1000, func() {
			buf = l.AppendState(buf[:0], st)
		})
		if a != 0 {
			t.Errorf("%v AppendState: %v allocs/op", l.Algorithm, a)
		}
		b := l.AppendState(nil, st)
		a = testing.AllocsPerRun(1000, func() {
			if _, err := l.DecodeState(b, now); err != nil {
				t.Fatal(err)
			}
		})
		if a > want {
			t.Errorf("%v DecodeState: %v allocs/op", l.Algorithm, a)
		}
	}
	a := testing.AllocsPerRun(1000, func() { Hash(1, "203.0.113.7|/api/v1") })
	if a != 0 {
		t.Errorf("Hash: %v allocs/op", a)
	}
}

func TestUsed(t *testing.T) {
	bucket := Limit{Rate: 10, Period: time.Second, Burst: 2} // τ = 100ms, C = 12
	fixed := Limit{Algorithm: FixedWindow, Rate: 10, Period: time.Second}
	sliding := Limit{Algorithm: SlidingWindow, Rate: 10, Period: time.Second}
	log := Limit{Algorithm: SlidingLog, Rate: 10, Period: time.Second}
	after := func(l Limit, st State, at int64, n int64) State {
		next, r := l.Decide(st, at, n)
		if !r.Allowed {
			t.Fatalf("%v: %d denied at +%v", l.Algorithm, n, time.Duration(at-t0))
		}
		return next
	}
	charged, _ := bucket.Charge(after(bucket, State{}, t0, 12), t0, 12)
	win := t0 / int64(time.Second) // t0 is at a whole second
	cases := []struct {
		name string
		l    Limit
		st   State
		now  int64
		want int64
	}{
		{"bucket fresh", bucket, State{}, t0, 0},
		{"bucket 3 used", bucket, after(bucket, State{}, t0, 3), t0, 3},
		{"bucket 3 used, 150ms later: 1.5 left, rounded up", bucket, after(bucket, State{}, t0, 3), t0 + int64(150*ms), 2},
		{"bucket refilled", bucket, after(bucket, State{}, t0, 3), t0 + int64(300*ms), 0},
		{"bucket charged a full bucket past empty", bucket, charged, t0, 24},
		{"bucket implausible", bucket, State{At: t0 + int64(time.Hour)}, t0, 12},
		{"fixed this window", fixed, State{At: win, N: 4}, t0 + int64(999*ms), 4},
		{"fixed last window", fixed, State{At: win - 1, N: 4}, t0, 0},
		{"fixed implausible", fixed, State{At: win + 1000}, t0, 10},
		{"sliding both windows", sliding, State{At: win, N: 4, Prev: 3}, t0, 7},
		{"sliding last window is prev", sliding, State{At: win - 1, N: 4, Prev: 3}, t0, 4},
		{"sliding older", sliding, State{At: win - 2, N: 4, Prev: 3}, t0, 0},
		{"log live units", log, after(log, after(log, State{}, t0, 2), t0+int64(600*ms), 3), t0 + int64(900*ms), 5},
		{"log first entry left", log, after(log, after(log, State{}, t0, 2), t0+int64(600*ms), 3), t0 + int64(1100*ms), 3},
		{"log implausible", log, State{Log: "short"}, t0, 10},
	}
	for _, c := range cases {
		if got := c.l.Used(c.st, c.now); got != c.want {
			t.Errorf("%s: Used = %d, want %d", c.name, got, c.want)
		}
	}
}
