package limiter

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// writeSlot stores st as key's state in slot.
func writeSlot(t *testing.T, s store.Store, tab *Table, slot string, key string, st State) {
	t.Helper()
	v := tab.limit.AppendState(binary.LittleEndian.AppendUint64(nil, Hash(tab.seed, key)), st)
	if err := s.Set(slot, v, 0); err != nil {
		t.Fatal(err)
	}
}

// A newcomer whose candidates are all held forgets the key that used the
// least, if it used at most ForgetMaxUsed units: here the key whose one
// unit is older (less debt left), not the one that just used its unit,
// and under a cap of 1 never the one that used two. By default
// (ForgetAny) the least-used is forgotten whatever it used.
func TestForgetTakesTheLeastUsedCandidate(t *testing.T) {
	l := Limit{Rate: 10, Period: time.Second}
	for _, c := range []struct {
		name       string
		used       [3]int64         // units each resident used
		ago        [3]time.Duration // how long before now
		forgotten  int              // -1: none, the newcomer is homeless
		forgetMost int64
	}{
		{"older of two single units", [3]int64{1, 1, 2}, [3]time.Duration{0, 50 * ms, 0}, 1, 1},
		{"first of equals", [3]int64{1, 1, 2}, [3]time.Duration{0, 0, 0}, 0, 1},
		{"all above the cap", [3]int64{2, 3, 2}, [3]time.Duration{0, 0, 0}, -1, 1},
		{"a larger cap", [3]int64{3, 4, 5}, [3]time.Duration{0, 0, 0}, 0, 3},
		{"by default whatever it used", [3]int64{4, 3, 5}, [3]time.Duration{0, 0, 0}, 1, 0},
		{"by default the older of equal units", [3]int64{10, 10, 10}, [3]time.Duration{0, 50 * ms, 0}, 1, 0},
		{"an idle key loses nothing", [3]int64{1, 1, 1}, [3]time.Duration{0, 0, 100 * ms}, 2, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := store.NewMemory()
			tab := newTable(t, s, l, TableConfig{Slots: 64, Ways: 3, ForgetMaxUsed: c.forgetMost})
			residents := [3]string{"r0", "r1", "r2"}
			for i, k := range residents {
				st, _ := l.Decide(State{}, t0-int64(c.ago[i]), c.used[i])
				writeSlot(t, s, tab, slotOf(tab, "newcomer", i), k, st)
			}
			if got := drain(t, tab, "newcomer", t0); got != 10 && c.forgotten >= 0 {
				t.Fatalf("the newcomer admitted %d, want its own 10", got)
			}
			st := tab.Stats()
			for i, k := range residents {
				v, _, _ := s.Get(slotOf(tab, "newcomer", i))
				held := binary.LittleEndian.Uint64(v) == Hash(0, k)
				if held == (i == c.forgotten) {
					t.Errorf("resident %s held its slot: %v", k, held)
				}
			}
			switch {
			case c.forgotten < 0:
				if st.Forgotten != 0 || st.Overflow == 0 {
					t.Fatalf("stats %+v: want the newcomer on the overflow bucket", st)
				}
			case c.ago[c.forgotten] >= 100*ms:
				if st.Forgotten != 0 || st.LosslessTakeovers != 1 {
					t.Fatalf("stats %+v: an idle key is taken over losslessly", st)
				}
			default:
				if st.Forgotten != 1 || st.ForgottenUnits != uint64(c.used[c.forgotten]) || st.Overflow != 0 {
					t.Fatalf("stats %+v: want 1 key of %d units forgotten", st, c.used[c.forgotten])
				}
			}
		})
	}
}

// The bound, for every algorithm: a key forgotten after using u units
// (u ≤ ForgetMaxUsed) gets at most its own remaining allowance plus u when
// it comes back, and exactly that when it comes back at once; a key that
// used more than ForgetMaxUsed is never forgotten and gets exactly its
// own.
func TestForgetOverAdmitsByTheUnitsUsed(t *testing.T) {
	for _, l := range perMinute5Algorithms {
		for _, used := range []int64{1, 2, 3} {
			const most = 2
			s := store.NewMemory()
			a := newTable(t, s, l, TableConfig{Slots: 1, Ways: 1, ForgetMaxUsed: most})
			if r, err := a.AllowN("victim", t0, used); err != nil || !r.Allowed {
				t.Fatalf("%+v %v", r, err)
			}
			own, _ := l.Decide(State{}, t0, used)
			at := t0 + int64(time.Second)
			if r, err := a.AllowN("newcomer", at, 1); err != nil || !r.Allowed {
				t.Fatalf("%v used=%d: the newcomer's first request: %+v %v", l.Algorithm, used, r, err)
			}
			st := a.Stats()
			got, want := drain(t, a, "victim", at), pureDrain(l, own, at)
			if used > most {
				if got != want || st.Forgotten != 0 {
					t.Errorf("%v used=%d: the victim got %d, its own %d; stats %+v", l.Algorithm, used, got, want, st)
				}
				continue
			}
			if got != want+int(used) || st.Forgotten != 1 || st.ForgottenUnits != uint64(used) {
				t.Errorf("%v used=%d: the victim got %d, its own %d plus %d forgotten; stats %+v",
					l.Algorithm, used, got, want, used, st)
			}
		}
	}
}

// A newcomer placed by forgetting a key starts from its overflow bucket's
// state, like every placement: a key that drained the bucket while
// homeless cannot get a fresh bucket on top by forgetting someone.
func TestForgetPlacementInheritsOverflow(t *testing.T) {
	s := store.NewMemory()
	l := Limit{Rate: 10, Period: time.Second}
	tab := newTable(t, s, l, TableConfig{Slots: 1, Ways: 1, ForgetMaxUsed: 1})
	if r, _ := tab.AllowN("heavy", t0, 5); !r.Allowed {
		t.Fatal("heavy denied")
	}
	// heavy used 5, more than the cap of 1: k is homeless and drains the
	// overflow bucket.
	if got := drain(t, tab, "k", t0); got != 10 {
		t.Fatalf("homeless k admitted %d", got)
	}
	// By +400ms heavy's debt is 1 unit: k forgets it but carries the
	// overflow bucket's debt (4 refilled), not a fresh 10.
	at := t0 + int64(400*ms)
	if got := drain(t, tab, "k", at); got != 4 {
		t.Fatalf("k admitted %d after forgetting heavy, want the 4 its overflow bucket refilled", got)
	}
	if st := tab.Stats(); st.Forgotten != 1 || st.ForgottenUnits != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// raceTables are two workers' tables over one store, the victim holding
// the only slot with one unit used.
func raceTables(t *testing.T, most int64) (s *store.Memory, owner, other *Table) {
	s = store.NewMemory()
	cfg := TableConfig{Slots: 1, Ways: 1, ForgetMaxUsed: most}
	owner, other = newTable(t, s, rps10, cfg), newTable(t, s, rps10, cfg)
	if r, _ := owner.AllowN("victim", t0, 1); !r.Allowed {
		t.Fatal("victim denied")
	}
	return s, owner, other
}

var rps10 = Limit{Rate: 10, Period: time.Second}

// raced runs decide with race injected once, before the first Set of key
// (between decide's read and its CAS), and fails unless it ran.
func raced(t *testing.T, s *store.Memory, key string, race, decide func()) {
	t.Helper()
	done := false
	s.BeforeSet = func(k string) bool {
		if k == key && !done {
			done = true
			race()
		}
		return false
	}
	decide()
	s.BeforeSet = nil
	if !done {
		t.Fatal("the race was not staged")
	}
}

// allow takes n units for key from tab at t0 and fails unless admitted.
func allow(t *testing.T, tab *Table, key string, n int64) func() {
	return func() {
		t.Helper()
		if r, err := tab.AllowN(key, t0, n); err != nil || !r.Allowed {
			t.Errorf("%s: %+v %v", key, r, err)
		}
	}
}

// Forgetting is a CAS on the victim's slot. Here the victim's own update
// (its second unit) lands between the newcomer's read and its CAS, and the
// CAS fails. The newcomer reads again. With a cap of 1 the victim may no
// longer be forgotten: the newcomer is decided on its overflow bucket and
// the victim keeps its state. With a cap of 2 the retried forget replaces
// the state the CAS matched and counts its units (2, not the 1 first
// read), which is exactly what the victim gets back when it returns (and
// forgets the newcomer).
func TestForgetRaceOwnerUpdateFirst(t *testing.T) {
	for _, c := range []struct {
		most, forgotten, units, overflow int64
		victimGets                       int
	}{
		{most: 1, overflow: 1, victimGets: 8},
		{most: 2, forgotten: 1, units: 2, victimGets: 10},
	} {
		s, owner, other := raceTables(t, c.most)
		raced(t, s, other.SlotKey(0), allow(t, owner, "victim", 1), allow(t, other, "newcomer", 1))
		if st := other.Stats(); st.Forgotten != uint64(c.forgotten) || st.ForgottenUnits != uint64(c.units) ||
			st.CASMismatches != 1 || st.Overflow != uint64(c.overflow) {
			t.Fatalf("cap %d: stats %+v", c.most, st)
		}
		if got := drain(t, owner, "victim", t0); got != c.victimGets {
			t.Fatalf("cap %d: victim admitted %d, want %d", c.most, got, c.victimGets)
		}
	}
}

// The forget lands between the victim's read and its CAS: the victim's
// update fails, it reads again, finds its slot gone and comes back as a
// newcomer, forgetting the newcomer in turn. Nothing is lost but the one
// unit the forget gave back.
func TestForgetRaceForgetBeforeOwnerUpdate(t *testing.T) {
	s, owner, other := raceTables(t, 1)
	raced(t, s, owner.SlotKey(0), allow(t, other, "newcomer", 1), allow(t, owner, "victim", 1))
	if o, n := owner.Stats(), other.Stats(); o.CASMismatches != 1 || o.Forgotten != 1 || n.Forgotten != 1 || n.ForgottenUnits != 1 {
		t.Fatalf("stats owner %+v newcomer %+v", o, n)
	}
	// The victim: 1 before it was forgotten, then a fresh bucket: the
	// retried unit and 9 more, 1 over its limit.
	if got := drain(t, owner, "victim", t0); got != 9 {
		t.Fatalf("victim admitted %d, want the 9 its new bucket holds", got)
	}
}

// AllowAll rolls back a forget with the rest of the request: a commit race
// on its second limit denies it, and the forgotten key gets its state back.
func TestForgetRolledBackByAllowAll(t *testing.T) {
	s, owner, other := raceTables(t, 1)
	b := newTable(t, s, Limit{Rate: 1, Period: time.Second}, TableConfig{Prefix: "b."})
	otherB := newTable(t, s, b.Limit(), TableConfig{Prefix: "b."})
	// Another worker takes y's only unit before our commit.
	raced(t, s, slotOf(b, "y", 0), allow(t, otherB, "y", 1), func() {
		res := make([]Result, 2)
		if ok, err := AllowAll(t0, []Request{{other, "newcomer", 1}, {b, "y", 1}}, res); ok || err != nil {
			t.Fatalf("%v %v %+v", ok, err, res)
		}
	})
	if got := drain(t, owner, "victim", t0); got != 9 {
		t.Fatalf("victim admitted %d, want its own 9 back", got)
	}
}

// forgetModelRuns numbers the runs of TestForgetModel in this process, so
// that -count=N plays N different schedules, each reproducible from the
// seed in its name.
var forgetModelRuns atomic.Int64

// TestForgetModel is the flood model (runFloodModel: three workers, small
// tables, AllowN, Charge and AllowAll mixed, another worker's whole
// decision injected between reads and writes) with forgetting on, capped or not (ForgetAny, the default).
// Every key's admissions must stay within its own limit plus the units
// the store saw forgotten of it, each at most ForgetMaxUsed, and under
// ForgetAny no decision may fall to an overflow bucket.
func TestForgetModel(t *testing.T) {
	run := forgetModelRuns.Add(1)
	for _, l := range []Limit{
		{Rate: 5, Period: time.Second, Burst: 2},
		{Algorithm: FixedWindow, Rate: 5, Period: time.Second},
		{Algorithm: SlidingWindow, Rate: 5, Period: time.Second},
		{Algorithm: SlidingLog, Rate: 5, Period: time.Second},
	} {
		for i := int64(0); i < 2; i++ {
			seed := run*2 + i
			forget := [...]int64{1, 3, ForgetAny}[seed%3]
			t.Run(fmt.Sprintf("%v/seed=%d/forget=%d", l.Algorithm, seed, forget), func(t *testing.T) {
				runFloodModel(t, l, seed, forget)
			})
		}
	}
}

// checkForgetBound checks one key's admissions (ops, charges included)
// against its limit l, given the units forgotten of it. Forgetting u units
// at f gives the key at most u more in any span that contains f:
//
//	token_bucket:   admitted in [s, t] ≤ C + (t−s)·L/P + forgotten in [s, t]
//	fixed/sliding:  admitted in a window ≤ L + forgotten in it (a sliding
//	                window's cur never passes L)
//	sliding_log:    admitted in (t−P, t] ≤ L + forgotten in [t−P, t]
//
// Charges only take from what admissions can get. Equal instants count on
// both sides, so the order of a race's writes within one now is moot.
func checkForgetBound(t *testing.T, name string, l Limit, ops []modelOp, forgets []forgetEvent) {
	t.Helper()
	var adm []modelOp
	for _, o := range ops {
		if !o.charge {
			adm = append(adm, o)
		}
	}
	sort.SliceStable(adm, func(i, j int) bool { return adm[i].now < adm[j].now })
	sort.SliceStable(forgets, func(i, j int) bool { return forgets[i].now < forgets[j].now })
	// units admitted, and forgotten, in [from, to], from running sums over
	// the sorted events: the token-bucket check below tries every pair of
	// admissions, and a flood under ForgetAny gives a key hundreds.
	admSum, forgotSum := make([]int64, len(adm)+1), make([]int64, len(forgets)+1)
	for i, o := range adm {
		admSum[i+1] = admSum[i] + o.n
	}
	for i, f := range forgets {
		forgotSum[i+1] = forgotSum[i] + f.used
	}
	admitted := func(from, to int64) int64 {
		lo := sort.Search(len(adm), func(i int) bool { return adm[i].now >= from })
		hi := sort.Search(len(adm), func(i int) bool { return adm[i].now > to })
		return admSum[max(hi, lo)] - admSum[lo]
	}
	forgot := func(from, to int64) int64 {
		lo := sort.Search(len(forgets), func(i int) bool { return forgets[i].now >= from })
		hi := sort.Search(len(forgets), func(i int) bool { return forgets[i].now > to })
		return forgotSum[max(hi, lo)] - forgotSum[lo]
	}
	period := int64(l.Period)
	for j, last := range adm {
		switch l.Algorithm {
		case TokenBucket:
			for _, first := range adm[:j+1] {
				a, u := admitted(first.now, last.now), forgot(first.now, last.now)
				if a*period > l.Capacity()*period+(last.now-first.now)*l.Rate+u*period {
					t.Fatalf("%s: %d admitted from +%v to +%v, more than its bucket and the %d forgotten allow",
						name, a, time.Duration(first.now-t0), time.Duration(last.now-t0), u)
				}
			}
		case SlidingLog:
			if a, u := admitted(last.now-period+1, last.now), forgot(last.now-period, last.now); a > l.Rate+u {
				t.Fatalf("%s: %d admitted in the window to +%v, more than %d and the %d forgotten", name, a, time.Duration(last.now-t0), l.Rate, u)
			}
		default:
			start := last.now / period * period
			if a, u := admitted(start, start+period-1), forgot(start, start+period-1); a > l.Rate+u {
				t.Fatalf("%s: %d admitted in the window of +%v, more than %d and the %d forgotten", name, a, time.Duration(last.now-t0), l.Rate, u)
			}
		}
	}
}

// Issue #23's contention between workers: a newcomer's placement loses
// its CAS to another worker that placed a key in the same candidate, a
// moment later by that worker's clock. Read at the newcomer's now, that
// key's one unit weighs as two (its debt is τ plus the skew), as does the
// other candidate's. Under the old cap of one unit the retry found nobody
// to forget and sent the newcomer to the shared overflow bucket; by
// default it forgets the least-used candidate and gets its own allowance,
// and the other resident keeps its state.
func TestForgetRaceWithAWorkerAheadKeepsTheNewcomerPlaced(t *testing.T) {
	s := store.NewMemory()
	l := Limit{Rate: 5, Period: time.Minute}
	a := newTable(t, s, l, TableConfig{Slots: 64})
	light, heavy := slotOf(a, "newcomer", 0), slotOf(a, "newcomer", 1)
	one := func(at int64) State { st, _ := l.Decide(State{}, at, 1); return st }
	two, _ := l.Decide(State{}, t0, 2)
	writeSlot(t, s, a, light, "light", one(t0))
	writeSlot(t, s, a, heavy, "heavy", two)
	ahead := t0 + int64(time.Microsecond)
	raced(t, s, light, func() { writeSlot(t, s, a, light, "other", one(ahead)) }, allow(t, a, "newcomer", 1))
	if st := a.Stats(); st.Overflow != 0 || st.CASMismatches != 1 || st.Forgotten != 1 || st.ForgottenUnits != 2 {
		t.Fatalf("stats %+v: want the newcomer placed by forgetting after its lost CAS", st)
	}
	if got := drain(t, a, "newcomer", t0); got != 4 {
		t.Fatalf("the newcomer admitted %d more, want its own 4", got)
	}
	for slot, key := range map[string]string{light: "newcomer", heavy: "heavy"} {
		if v, _, _ := s.Get(slot); binary.LittleEndian.Uint64(v) != Hash(0, key) {
			t.Errorf("slot %s does not hold %s", slot, key)
		}
	}
}

// Issue #23's flood of heavy keys: ten clients use one unit of five,
// then 400 keys use two each through a 64-slot table. Every client is
// either still in its slot or forgotten and placed afresh when it
// returns: it gets its own 4, or 5 with the one unit forgotten, never
// less; ten newcomers after the flood get their own 5 each; no decision
// is made on a shared overflow bucket.
func TestForgetHeavyFloodLocksNobodyOut(t *testing.T) {
	l := Limit{Rate: 5, Period: time.Minute}
	tab := newTable(t, store.NewMemory(), l, TableConfig{Slots: 64})
	now := t0
	for i := 0; i < 10; i++ {
		allow(t, tab, "E"+strconv.Itoa(i), 1)()
	}
	for i := 0; i < 400; i++ {
		now += int64(time.Millisecond)
		for j := 0; j < 2; j++ {
			if r, err := tab.AllowN("attacker-"+strconv.Itoa(i), now, 1); err != nil || !r.Allowed {
				t.Fatalf("attacker %d's request %d: %+v %v", i, j, r, err)
			}
		}
	}
	for i := 0; i < 10; i++ {
		if got := drain(t, tab, "E"+strconv.Itoa(i), now); got != 4 && got != 5 {
			t.Errorf("client E%d admitted %d after the flood, want its own 4 (or 5 if forgotten)", i, got)
		}
		if got := drain(t, tab, "late-"+strconv.Itoa(i), now); got != 5 {
			t.Errorf("newcomer %d admitted %d, want its own 5", i, got)
		}
	}
	if st := tab.Stats(); st.Overflow != 0 || st.Forgotten == 0 {
		t.Fatalf("stats %+v", st)
	}
}
