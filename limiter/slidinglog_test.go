package limiter

import (
	"errors"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter/store"
)

func TestSlidingLogSteps(t *testing.T) {
	l := Limit{Algorithm: SlidingLog, Rate: 3, Period: time.Second}
	runSteps(t, l, State{}, []step{
		{0, 1, true, ReasonAllowed, 2, 0, time.Second},
		{100 * ms, 2, true, ReasonAllowed, 0, 0, time.Second},
		// The oldest unit leaves one window after it was admitted.
		{500 * ms, 1, false, ReasonLimited, 0, 500 * ms, 600 * ms},
		{1000 * ms, 1, true, ReasonAllowed, 0, 0, time.Second},
		// Two units need the two admitted at 100ms gone.
		{1000 * ms, 2, false, ReasonLimited, 0, 100 * ms, time.Second},
		{1000 * ms, 4, false, ReasonCostExceedsCapacity, 0, 0, time.Second},
		{1000 * ms, 0, false, ReasonInvalidCost, 0, 0, time.Second},
		// Exactly: a nanosecond before they leave, they still count.
		{1100*ms - 1, 2, false, ReasonLimited, 0, 1, 900*ms + 1},
		{1100 * ms, 2, true, ReasonAllowed, 0, 0, time.Second},
		// Clock back: entries ahead of the clock count until they leave,
		// so a backwards step releases nothing.
		{900 * ms, 1, false, ReasonLimited, 0, 1100 * ms, 1200 * ms},
		// A time inside a microsecond is recorded at its end, so the unit
		// stays up to 1µs longer than exact, never shorter.
		{2000*ms + 500, 1, true, ReasonAllowed, 0, 0, time.Second + 500},
		{10 * time.Second, 3, true, ReasonAllowed, 0, 0, time.Second},
	})
}

func TestSlidingLogChargeSteps(t *testing.T) {
	runOps(t, Limit{Algorithm: SlidingLog, Rate: 5, Period: time.Second}, []op{
		// A log cannot carry debt: it keeps the newest Rate units.
		{0, true, 8, true, ReasonAllowed, 0, time.Second, time.Second},
		{500 * ms, false, 1, false, ReasonLimited, 0, 500 * ms, 500 * ms},
		{500 * ms, true, 2, true, ReasonAllowed, 0, 500 * ms, time.Second},
		{1000 * ms, false, 3, true, ReasonAllowed, 0, 0, time.Second},
		{1000 * ms, true, 0, false, ReasonInvalidCost, 0, 0, time.Second},
	})
}

// logModel is the sliding log from its definition: every admission's
// time, recorded at the end of its microsecond and evaluated at the start
// of now's, as the package doc specifies.
type logModel struct {
	l    Limit
	at   []int64
	cost []int64
}

func (m *logModel) used(now int64) int64 {
	floor := now / 1000 * 1000
	used := int64(0)
	for i, at := range m.at {
		if at > floor-int64(m.l.Period) {
			used += m.cost[i]
		}
	}
	return used
}

func (m *logModel) canAdmit(now, n int64) bool { return m.used(now)+n <= m.l.Rate }
func (m *logModel) idle(now int64) bool        { return m.used(now) == 0 }
func (m *logModel) commit(now, n int64) {
	m.at = append(m.at, (now+999)/1000*1000)
	m.cost = append(m.cost, n)
}

// The sliding log never admits more than Rate units in any window of
// length Period, measured on the exact nanoseconds of the admissions.
// (The clock only moves forward here: units that left the log cannot be
// counted again by a clock that comes back to them; the step table shows
// that a backwards step releases nothing the log still holds.)
func TestSlidingLogNeverExceedsAnyWindow(t *testing.T) {
	for _, l := range []Limit{
		{Algorithm: SlidingLog, Rate: 5, Period: 10 * ms},
		{Algorithm: SlidingLog, Rate: 100, Period: time.Second},
		{Algorithm: SlidingLog, Rate: MaxLogLimit, Period: time.Minute},
	} {
		rng := rand.New(rand.NewSource(int64(l.Rate)))
		var st State
		now := t0
		var at, cost []int64
		for i := 0; i < 5000; i++ {
			gap := int64(l.Period) / l.Rate
			switch rng.Intn(10) {
			case 0: // the same instant
			case 1:
				now += rng.Int63n(2 * int64(l.Period))
			default:
				now += rng.Int63n(2*gap + 1)
			}
			n := 1 + rng.Int63n(max(l.Rate/4, 1))
			next, r := l.Decide(st, now, n)
			if r.Allowed {
				at, cost = append(at, now), append(cost, n)
			}
			st = next
			if len(st.Log) > logEntryLen*int(l.Rate) {
				t.Fatalf("log of %d bytes for limit %d", len(st.Log), l.Rate)
			}
		}
		for i := range at {
			sum := int64(0)
			for j := range at {
				if at[j] > at[i]-int64(l.Period) && at[j] <= at[i] {
					sum += cost[j]
				}
			}
			if sum > l.Rate {
				t.Fatalf("%+v: %d units in the window ending at admission %d", l, sum, i)
			}
		}
		if len(at) < 100 {
			t.Fatalf("weak run: %d admissions", len(at))
		}
	}
}

func TestSlidingLogValidate(t *testing.T) {
	if err := (Limit{Algorithm: SlidingLog, Rate: MaxLogLimit, Period: time.Hour}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []Limit{
		{Algorithm: SlidingLog, Rate: MaxLogLimit + 1, Period: time.Second},
		{Algorithm: SlidingLog, Rate: 10, Period: time.Second + 1},
		{Algorithm: SlidingLog, Rate: 10, Period: time.Second, Burst: 1},
	} {
		if l.Validate() == nil || l.valid() {
			t.Errorf("%+v accepted", l)
		}
		if _, r := l.Decide(State{}, t0, 1); r.Allowed || r.Reason != ReasonInvalidLimit {
			t.Errorf("%+v decided %+v", l, r)
		}
	}
}

func TestSlidingLogDecodeRejects(t *testing.T) {
	l := Limit{Algorithm: SlidingLog, Rate: 3, Period: time.Second}
	us := uint64(t0 / 1000)
	entries := func(es ...uint64) []byte {
		b := []byte{codecVersion<<4 | byte(SlidingLog)}
		for _, e := range es {
			for j := 0; j < 8; j++ {
				b = append(b, byte(e>>(8*j)))
			}
		}
		return b
	}
	entry := func(at, n uint64) uint64 { return at<<logCountBits | n }
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"partial entry", entries(entry(us, 1))[:5], ErrMalformed},
		{"zero count", entries(entry(us, 0)), ErrImpossible},
		{"count above the cap", entries(entry(us, MaxLogLimit+1)), ErrImpossible},
		{"out of order", entries(entry(us, 1), entry(us-1, 1)), ErrImpossible},
		{"repeated microsecond", entries(entry(us, 1), entry(us, 1)), ErrImpossible},
		{"too many entries", entries(make([]uint64, MaxLogLimit+1)...), ErrMalformed},
		{"more units than the limit", entries(entry(us-10, 2), entry(us, 2)), ErrImpossible},
		{"beyond the clock tolerance", entries(entry(us+logTolerance+1, 1)), ErrImpossible},
	}
	for _, c := range cases {
		st, err := l.DecodeState(c.b, t0)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
		}
		if st != l.Empty(t0) {
			t.Errorf("%s: on error got %+v, want Empty", c.name, st)
		}
	}
	// Expired units do not count against the limit; the tolerance's edge
	// is accepted.
	for _, b := range [][]byte{
		entries(entry(us-uint64(time.Second/time.Microsecond), 3), entry(us, 3)),
		entries(entry(us+logTolerance, 3)),
	} {
		if _, err := l.DecodeState(b, t0); err != nil {
			t.Errorf("%x rejected: %v", b, err)
		}
	}
}

// Decide, Charge, Merge and Idle take any State without panicking: a
// log that is not one the codec accepts is decided as used up.
func TestSlidingLogHostileStates(t *testing.T) {
	l := Limit{Algorithm: SlidingLog, Rate: 4, Period: time.Second}
	for _, log := range []string{"x", "\x00\x00\x00\x00\x00\x00\x00\x00", "\xff\xff\xff\xff\xff\xff\xff\xff", "\x01\x04\x00\x00\x00\x00\x00\x00"} {
		for _, now := range []int64{math.MinInt64, -1, 0, t0, math.MaxInt64} {
			st := State{Log: log}
			if _, r := l.Decide(st, now, 1); r.Allowed && now > 0 && now < math.MaxInt64 && len(log) != 8 {
				t.Errorf("log %q at %d admitted", log, now)
			}
			next, _ := l.Charge(st, now, 3)
			if _, _, ok := l.scanLog(next.Log, now); !ok {
				t.Errorf("charge of %q at %d left an impossible log", log, now)
			}
			l.Merge(st, next, now)
			l.Idle(st, now)
		}
	}
}

// arenaStore hands out values the way the wasm bridge does: copied into
// one buffer, bumped per read and started over at every callback (reset),
// so a later callback sees its values at the addresses of earlier ones.
type arenaStore struct {
	*store.Memory
	arena []byte
	used  int
}

func (a *arenaStore) Get(key string) ([]byte, uint32, error) {
	v, cas, err := a.Memory.Get(key)
	if err != nil {
		return nil, 0, err
	}
	out := a.arena[a.used : a.used+len(v) : a.used+len(v)]
	copy(out, v)
	a.used += len(v)
	return out, cas, nil
}

func (a *arenaStore) reset() { a.used = 0 }

// A log shares the bytes the store handed out, and the table reuses the
// scan its read made: neither may carry over to a later callback whose
// log lands at the same address with the same length at the same instant.
// Without the table forgetting its scans at each read, b would be decided
// with a's three units.
func TestTableLogSurvivesReusedReadMemory(t *testing.T) {
	l := Limit{Algorithm: SlidingLog, Rate: 4, Period: time.Second}
	s := &arenaStore{Memory: store.NewMemory(), arena: make([]byte, 1<<16)}
	tab := newTable(t, s, l, TableConfig{Slots: 64, Ways: 1})
	pure := map[string]State{}
	for i, op := range []struct {
		key  string
		at   time.Duration
		cost int64
	}{
		{"a", 0, 3}, {"b", 0, 1}, // one entry each: logs of the same length
		{"a", 500 * ms, 1}, {"b", 500 * ms, 3}, // the same instant, the same address
		{"a", 700 * ms, 1}, {"b", 700 * ms, 1},
	} {
		s.reset()
		got, err := tab.AllowN(op.key, t0+int64(op.at), op.cost)
		var want Result
		pure[op.key], want = l.Decide(pure[op.key], t0+int64(op.at), op.cost)
		if err != nil || got != want {
			t.Fatalf("step %d (%s): table %+v (%v), pure %+v", i, op.key, got, err, want)
		}
	}
}

// A table's decision on a log builds the new log in a buffer it reuses:
// an admission allocates no more than the sliding window's (the in-memory
// store's two copies), where a new string per admission made the guest's
// garbage collector the largest cost of a decision.
func TestTableLogAdmissionAllocates(t *testing.T) {
	for _, l := range []Limit{
		{Algorithm: SlidingWindow, Rate: 100, Period: time.Second},
		{Algorithm: SlidingLog, Rate: 100, Period: time.Second},
	} {
		tab := newTable(t, store.NewMemory(), l, TableConfig{Slots: 64})
		now := t0
		step := func() {
			now += int64(10500 * time.Microsecond)
			if r, err := tab.AllowN("k", now, 1); err != nil || !r.Allowed {
				t.Fatalf("%v: %+v %v", l.Algorithm, r, err)
			}
		}
		for range 200 { // 95 entries in the log from here on
			step()
		}
		if a := testing.AllocsPerRun(500, step); a > 2 {
			t.Errorf("%v: AllowN %v allocs/op, want the store's 2", l.Algorithm, a)
		}
	}
}

// FuzzSlidingLog feeds arbitrary bytes as a log to every operation on it:
// none may panic, every log they leave is one the codec accepts, a
// decision never admits beyond the units the log leaves free, and a merge
// is at least as used as either side, now and a window later.
func FuzzSlidingLog(f *testing.F) {
	l := Limit{Algorithm: SlidingLog, Rate: 5, Period: time.Second}
	var st State
	for i := range 4 {
		st, _ = l.Decide(st, t0+int64(i)*int64(400*ms), 1+int64(i%2))
	}
	f.Add([]byte(st.Log), []byte(l.Empty(t0).Log), int64(0), int64(2))
	f.Fuzz(func(t *testing.T, a, b []byte, offset, n int64) {
		now := t0 + offset%int64(time.Hour)
		sa, sb := State{Log: string(a)}, State{Log: string(b)}
		_, used, ok := l.scanLog(sa.Log, now)
		if !ok {
			used = uint64(l.Rate)
		}
		next, r := l.Decide(sa, now, n)
		if r.Allowed && (n < 1 || uint64(n) > uint64(l.Rate)-used) {
			t.Fatalf("admitted %d with %d of %d used", n, used, l.Rate)
		}
		if r.Remaining < 0 || r.Remaining > l.Rate || (!r.Allowed && next != sa) {
			t.Fatalf("result %+v", r)
		}
		charged, _ := l.Charge(sa, now, max(n, 1))
		merged := l.Merge(sa, sb, now)
		left := []State{charged, merged}
		if r.Allowed {
			left = append(left, next) // a denial leaves the input as it was
		}
		for _, s := range left {
			if err := l.CheckState(SlidingLog, s, now); err != nil {
				t.Fatalf("left %x: %v", s.Log, err)
			}
		}
		for _, at := range []int64{now, now + int64(l.Period)/2} {
			_, rm := l.Decide(merged, at, 0)
			for _, s := range []State{sa, sb} {
				if _, rs := l.Decide(s, at, 0); rm.Remaining > rs.Remaining {
					t.Fatalf("merge leaves %d at +%v, a side %d", rm.Remaining, time.Duration(at-now), rs.Remaining)
				}
			}
		}
		l.Idle(sa, now)
	})
}

// A log whose newest entry left the window a window ago is idle: its slot
// goes to a newcomer without loss, as any idle slot does, and until then
// (with forgetting off) the newcomer is decided on the overflow bucket.
func TestTableReclaimsIdleLog(t *testing.T) {
	l := Limit{Algorithm: SlidingLog, Rate: 3, Period: time.Second}
	s := store.NewMemory()
	tab := newTable(t, s, l, TableConfig{Slots: 1, Ways: 1, ForgetMaxUsed: ForgetNone})
	for _, at := range []time.Duration{0, 300 * ms} {
		if r, _ := tab.AllowN("a", t0+int64(at), 1); !r.Allowed {
			t.Fatal("a denied")
		}
	}
	// a's entries leave at +1.3s; the slot is a's until +2.3s.
	if r, _ := tab.AllowN("b", t0+int64(2200*ms), 1); !r.Allowed || tab.Stats().Overflow != 1 {
		t.Fatalf("b at +2.2s: %+v, stats %+v: want it decided on the overflow bucket", r, tab.Stats())
	}
	// Placed, b starts from the overflow bucket, which holds its unit of
	// +2.2s: two are left.
	if r, _ := tab.AllowN("b", t0+int64(2300*ms), 3); r.Allowed {
		t.Fatalf("b at +2.3s admitted 3 after its unit on the overflow bucket: %+v", r)
	}
	if r, _ := tab.AllowN("b", t0+int64(2300*ms), 2); !r.Allowed || tab.Stats().LosslessTakeovers != 1 {
		t.Fatalf("b at +2.3s: %+v, stats %+v: want a's slot taken over", r, tab.Stats())
	}
	if got := s.Len(); got != 2 {
		t.Fatalf("%d shared-data keys, want the slot and one overflow bucket", got)
	}
}
