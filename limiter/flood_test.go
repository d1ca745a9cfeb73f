package limiter

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter/store"
)

var perMinute5 = Limit{Rate: 5, Period: time.Minute}

// pureDrain is how many single units a key with state st gets at now.
func pureDrain(l Limit, st State, now int64) int {
	n := 0
	for {
		next, r := l.Decide(st, now, 1)
		if !r.Allowed {
			return n
		}
		st, n = next, n+1
	}
}

var perMinute5Algorithms = []Limit{perMinute5, {Algorithm: FixedWindow, Rate: 5, Period: time.Minute},
	{Algorithm: SlidingWindow, Rate: 5, Period: time.Minute}, {Algorithm: SlidingLog, Rate: 5, Period: time.Minute}}

// TestTableActiveKeyKeepsStateUnderFlood is defect 3 of issue #13: a key
// that made one request, then a flood of distinct keys far larger than the
// table. With forgetting off, the key must get exactly what its own bucket
// has left, not the drained state of whoever took its slot over, and the
// flood is decided on the overflow buckets.
func TestTableActiveKeyKeepsStateUnderFlood(t *testing.T) {
	for _, l := range perMinute5Algorithms {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			s := store.NewMemory()
			// A tiny one-way table, so that flood keys keep arriving on the
			// existing key's slot after its state went idle (+12s).
			tab := newTable(t, s, l, TableConfig{Slots: 4, Ways: 1, ForgetMaxUsed: ForgetNone})
			if r, err := tab.AllowN("existing", t0, 1); err != nil || !r.Allowed {
				t.Fatalf("first request: %+v %v", r, err)
			}
			own, _ := l.Decide(State{}, t0, 1)
			const flood = 10000
			span := int64(15 * time.Second)
			for i := 0; i < flood; i++ {
				if _, err := tab.AllowN("flood-"+strconv.Itoa(i), t0+1+span*int64(i)/flood, 1); err != nil {
					t.Fatal(err)
				}
			}
			end := t0 + span
			if got, want := drain(t, tab, "existing", end), pureDrain(l, own, end); got != want {
				t.Fatalf("existing key admitted %d after the flood, its own bucket has %d", got, want)
			}
			st := tab.Stats()
			if st.Evictions != 0 || st.Overflow == 0 || st.OverflowDenied == 0 {
				t.Fatalf("stats %+v: want no evictions and a flood decided on the overflow buckets", st)
			}
			if max := tab.Slots() + tab.OverflowSlots(); s.Len() > max {
				t.Fatalf("%d shared-data keys, more than %d", s.Len(), max)
			}
		})
	}
}

// With forgetting off, a key keeps its slot for a refill span after its
// state went idle: a newcomer arriving meanwhile is decided on the
// overflow bucket instead of making the key a newcomer when it comes back.
func TestTableRecentKeyKeepsSlot(t *testing.T) {
	s := store.NewMemory()
	l := Limit{Rate: 10, Period: time.Second} // refill span 1s
	tab := newTable(t, s, l, TableConfig{Slots: 1, Ways: 1, ForgetMaxUsed: ForgetNone})
	if r, _ := tab.AllowN("a", t0, 1); !r.Allowed {
		t.Fatal("a denied")
	}
	// z finds a's live slot and drains the overflow bucket.
	if got := drain(t, tab, "z", t0); got != 10 {
		t.Fatalf("z admitted %d on the overflow bucket", got)
	}
	// a is full again from +100ms, but keeps its slot until +1.1s: b is
	// decided on the overflow bucket (5 refilled by +500ms).
	if r, _ := tab.AllowN("b", t0+int64(500*ms), 1); !r.Allowed {
		t.Fatal("b denied on the overflow bucket")
	}
	if got := drain(t, tab, "a", t0+int64(600*ms)); got != 10 {
		t.Fatalf("a admitted %d, want its own full 10, not a share of the overflow bucket", got)
	}
	if st := tab.Stats(); st.LosslessTakeovers != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// fillSlots gives every slot of a one-way table a live key that has used
// two units at now (more than a ForgetMaxUsed of 1: none is forgotten),
// and returns those keys by slot.
func fillSlots(t *testing.T, tab *Table, now int64) []string {
	t.Helper()
	owners := make([]string, tab.Slots())
	left := len(owners)
	for i := 0; left > 0; i++ {
		k := "resident-" + strconv.Itoa(i)
		slot := tab.candidate(Hash(tab.seed, k), 0)
		if owners[slot] != "" {
			continue
		}
		owners[slot] = k
		left--
		if r, err := tab.AllowN(k, now, 2); err != nil || !r.Allowed {
			t.Fatalf("%s: %+v %v", k, r, err)
		}
	}
	return owners
}

// Homeless keys (every candidate live with another key above the
// forgetting cap) share their overflow bucket: together they get one
// bucket, the residents keep theirs.
func TestTableHomelessShareOverflow(t *testing.T) {
	s := store.NewMemory()
	l := Limit{Rate: 10, Period: time.Second}
	tab := newTable(t, s, l, TableConfig{Slots: 4, Ways: 1, OverflowSlots: 1, ForgetMaxUsed: 1})
	residents := fillSlots(t, tab, t0)
	admitted := 0
	for i := 0; i < 30; i++ {
		r, err := tab.AllowN("newcomer-"+strconv.Itoa(i), t0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("30 homeless newcomers admitted %d, want one shared bucket of 10", admitted)
	}
	for _, k := range residents {
		if got := drain(t, tab, k, t0); got != 8 {
			t.Fatalf("resident %s admitted %d, want its own 8 left", k, got)
		}
	}
	if st := tab.Stats(); st.Overflow != 30 || st.OverflowDenied != 20 || st.Evictions != 0 {
		t.Fatalf("stats %+v", st)
	}
	if s.Len() != 5 {
		t.Fatalf("%d keys, want 4 slots + 1 overflow bucket", s.Len())
	}
}

// A key that drained the overflow bucket while homeless and then finds a
// slot (its candidate went idle) starts from the bucket's state: it cannot
// get a fresh bucket on top of what it was given while homeless.
func TestTablePlacementInheritsOverflow(t *testing.T) {
	s := store.NewMemory()
	l := Limit{Rate: 10, Period: time.Second}
	tab := newTable(t, s, l, TableConfig{Slots: 1, Ways: 1, ForgetMaxUsed: ForgetNone})
	if r, _ := tab.AllowN("resident", t0, 1); !r.Allowed {
		t.Fatal("resident denied")
	}
	// The resident's slot is idle from +100ms (its unit refilled) and may
	// be taken a refill span (1s) later, from +1.1s.
	if got := drain(t, tab, "k", t0+int64(time.Second)); got != 10 {
		t.Fatalf("homeless k admitted %d, want the overflow bucket's 10", got)
	}
	// At +1.15s k takes the slot over losslessly but carries the overflow
	// debt, so it gets the one unit refilled since +1s, not 10.
	at := t0 + int64(1150*ms)
	if got := drain(t, tab, "k", at); got != 1 {
		t.Fatalf("k admitted %d after taking a slot, want the 1 unit the overflow bucket refilled", got)
	}
	// 11 homeless decisions (1 denied), and the placement from the drained
	// bucket.
	if st := tab.Stats(); st.LosslessTakeovers != 1 || st.Overflow != 12 || st.OverflowDenied != 1 {
		t.Fatalf("stats %+v", st)
	}
	// In normal operation the overflow bucket is idle and a new key starts
	// fresh.
	if got := drain(t, tab, "later", t0+int64(time.Hour)); got != 10 {
		t.Fatalf("a new key in a quiet table admitted %d, want 10", got)
	}
}

// The race settlePlacement closes: worker A finds k homeless and decides
// it on the overflow bucket; before A commits, worker B places k in a slot
// that went idle, starting from the bucket's state without A's unit. The
// placed state must end up carrying A's unit.
func TestTablePlacementRacesOverflowDecision(t *testing.T) {
	for _, bFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("placementFirst=%v", bFirst), func(t *testing.T) {
			s := store.NewMemory()
			l := Limit{Rate: 10, Period: time.Second}
			cfg := TableConfig{Slots: 1, Ways: 1, ForgetMaxUsed: ForgetNone}
			a, b := newTable(t, s, l, cfg), newTable(t, s, l, cfg)
			if r, _ := a.AllowN("resident", t0, 1); !r.Allowed {
				t.Fatal("resident denied")
			}
			ovKey := a.OverflowKey(int(a.overflowIndex(Hash(0, "k"))))
			slotKey := a.SlotKey(0)
			at := t0 + int64(1100*ms) // the resident's slot may be taken from here on
			staged := false
			s.BeforeSet = func(key string) bool {
				if staged {
					return false
				}
				if bFirst && key == ovKey {
					// A is about to commit k's unit to the overflow bucket:
					// B places k in the idle slot first.
					staged = true
					if r, err := b.AllowN("k", at, 4); err != nil || !r.Allowed {
						t.Errorf("B: %+v %v", r, err)
					}
				}
				if !bFirst && key == slotKey {
					// B is about to place k: A decides k on the overflow
					// bucket in between (it read before the placement).
					staged = true
					if r, err := a.AllowN("k", at-1, 3); err != nil || !r.Allowed {
						t.Errorf("A: %+v %v", r, err)
					}
				}
				return false
			}
			if bFirst {
				if r, err := a.AllowN("k", at-1, 3); err != nil || !r.Allowed {
					t.Fatalf("A: %+v %v", r, err)
				}
			} else {
				if r, err := b.AllowN("k", at, 4); err != nil || !r.Allowed {
					t.Fatalf("B: %+v %v", r, err)
				}
			}
			s.BeforeSet = nil
			if !staged {
				t.Fatal("the race was not staged")
			}
			// k's own bucket: 3 then 4 at once: 3 left. The table may
			// under-admit after the race, never over-admit.
			if got := drain(t, b, "k", at); got > 3 {
				t.Fatalf("k admitted %d more after 7 of 10, over its limit", got)
			}
		})
	}
}

// A random model test: several workers, each with its own tables over one
// store, small tables flooded with keys, races injected at random moments
// (another worker runs a whole decision between a read and a write), and
// AllowN, Charge and AllowAll mixed. With forgetting off, whatever each
// key was admitted (and charged) must be admissible by that key's own
// fresh bucket, replayed in commit order: no key ever gets more than its
// own limit.
func TestTableFloodNeverOverAdmitsModel(t *testing.T) {
	for _, l := range []Limit{
		{Rate: 5, Period: time.Second, Burst: 2},
		{Algorithm: FixedWindow, Rate: 5, Period: time.Second},
		{Algorithm: SlidingWindow, Rate: 5, Period: time.Second},
		{Algorithm: SlidingLog, Rate: 5, Period: time.Second},
	} {
		for seed := int64(1); seed <= 6; seed++ {
			t.Run(fmt.Sprintf("%v/seed=%d", l.Algorithm, seed), func(t *testing.T) {
				runFloodModel(t, l, seed, ForgetNone)
			})
		}
	}
}

type modelOp struct {
	now    int64
	n      int64
	charge bool
}

// forgetEvent is a key's state replaced by another key's in its slot, as
// the store saw it: Used units of the state replaced, at now.
type forgetEvent struct{ now, used int64 }

// watchedStore reports every successful Set with the value it replaced.
// Every Set of a table is conditional (a CAS or CreateCAS), so the value
// read before a successful Set is the one it replaced, even when an
// injected race ran in between.
type watchedStore struct {
	*store.Memory
	written func(key string, old, value []byte)
}

func (w *watchedStore) Set(key string, value []byte, cas uint32) error {
	old, _, err := w.Memory.Get(key)
	if err != nil {
		old = nil
	}
	if err := w.Memory.Set(key, value, cas); err != nil {
		return err
	}
	w.written(key, old, value)
	return nil
}

// runFloodModel runs the model with forgetting set to forget: with
// ForgetNone every key's admissions must replay on its own bucket; with
// forgetting, within its own limit plus the units the store saw forgotten
// (checkForgetBound).
func runFloodModel(t *testing.T, l Limit, seed int64, forget int64) {
	rng := rand.New(rand.NewSource(seed))
	s := store.NewMemory()
	other := Limit{Algorithm: FixedWindow, Rate: 7, Period: time.Second}
	const workers = 3
	type worker struct{ main, second *Table }
	ws := make([]worker, workers)
	cfg := TableConfig{Slots: 8, Ways: 1 + int(seed)%2, OverflowSlots: 1 + int(seed)%3, MaxRetries: 3, ForgetMaxUsed: forget}
	watched := &watchedStore{Memory: s}
	for i := range ws {
		c2 := cfg
		c2.Prefix = "second."
		ws[i] = worker{newTable(t, watched, l, cfg), newTable(t, watched, other, c2)}
	}
	history := map[string][]modelOp{} // "table/key" -> ops that took effect
	now := t0
	key := func() string {
		if rng.Intn(3) == 0 {
			return "steady-" + strconv.Itoa(rng.Intn(4))
		}
		return "flood-" + strconv.Itoa(rng.Intn(400))
	}
	names := map[uint64]string{}
	for i := 0; i < 400; i++ {
		names[Hash(0, "flood-"+strconv.Itoa(i))] = "flood-" + strconv.Itoa(i)
	}
	for i := 0; i < 4; i++ {
		names[Hash(0, "steady-"+strconv.Itoa(i))] = "steady-" + strconv.Itoa(i)
		names[Hash(0, "route-"+strconv.Itoa(i))] = "route-" + strconv.Itoa(i)
	}
	forgotten := map[string][]forgetEvent{}
	// The op under way (nested ones included), and each slot's last write:
	// an AllowAll rollback puts back, in the same op, the value its commit
	// replaced, which is no key forgotten.
	opID, ops := 0, 0
	type lastWrite struct {
		op  int
		old []byte
	}
	replaced := map[string]lastWrite{}
	watched.written = func(slot string, old, value []byte) {
		last := replaced[slot]
		restored := last.op == opID && bytes.Equal(value, last.old)
		replaced[slot] = lastWrite{opID, old}
		table, lim := "main/", l
		if strings.HasPrefix(slot, "second.") {
			table, lim = "second/", other
		}
		if restored || strings.Contains(slot, "of.") || len(old) < fingerprintLen ||
			binary.LittleEndian.Uint64(old) == binary.LittleEndian.Uint64(value) {
			return
		}
		name, ok := names[binary.LittleEndian.Uint64(old)]
		st, err := lim.DecodeState(old[fingerprintLen:], now)
		if !ok || err != nil {
			return
		}
		u := lim.Used(st, now)
		if u > max(forget, 0) {
			t.Errorf("%s%s forgotten with %d units used, more than %d", table, name, u, forget)
		}
		forgotten[table+name] = append(forgotten[table+name], forgetEvent{now, u})
	}
	busy := -1 // the worker whose decision is under way: a Table is not reentrant
	var op func(w int)
	op = func(wi int) {
		w := ws[wi]
		busy = wi
		ops++
		defer func(outer int) { opID = outer }(opID)
		opID = ops
		k, n := key(), 1+rng.Int63n(3)
		switch rng.Intn(5) {
		case 0:
			r, err := w.main.Charge(k, now, n)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				history["main/"+k] = append(history["main/"+k], modelOp{now, n, true})
			}
		case 1:
			k2 := "route-" + strconv.Itoa(rng.Intn(3))
			res := make([]Result, 2)
			ok, err := AllowAll(now, []Request{{w.main, k, n}, {w.second, k2, 1}}, res)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				history["main/"+k] = append(history["main/"+k], modelOp{now, n, false})
				history["second/"+k2] = append(history["second/"+k2], modelOp{now, 1, false})
			}
		default:
			r, err := w.main.AllowN(k, now, n)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				history["main/"+k] = append(history["main/"+k], modelOp{now, n, false})
			}
		}
	}
	nested := false
	s.BeforeSet = func(string) bool {
		if nested || rng.Intn(4) != 0 {
			return false
		}
		outer := busy
		nested = true
		op((outer + 1 + rng.Intn(workers-1)) % workers)
		nested, busy = false, outer
		return false
	}
	for i := 0; i < 6000; i++ {
		now += rng.Int63n(int64(30 * ms))
		op(rng.Intn(workers))
	}
	s.BeforeSet = nil
	for name, ops := range history {
		lim := l
		if name[:7] == "second/" {
			lim = other
		}
		if forget != ForgetNone {
			checkForgetBound(t, name, lim, ops, forgotten[name])
			continue
		}
		// Nested decisions are recorded before the outer one even when they
		// commit after it (during its rollback or settling writes), always
		// at the same now. Within one now, replay admissions before charges:
		// the most lenient order, so only a real over-admission fails.
		sort.SliceStable(ops, func(i, j int) bool {
			return ops[i].now < ops[j].now || (ops[i].now == ops[j].now && !ops[i].charge && ops[j].charge)
		})
		var st State
		for i, o := range ops {
			if o.charge {
				st, _ = lim.Charge(st, o.now, o.n)
				continue
			}
			next, r := lim.Decide(st, o.now, o.n)
			if !r.Allowed {
				t.Fatalf("%s: admission %d (%d units at +%v) exceeds the key's own limit", name, i, o.n, time.Duration(o.now-t0))
			}
			st = next
		}
	}
	var st Stats
	for _, w := range ws {
		ws := w.main.Stats()
		st.Overflow += ws.Overflow
		st.LosslessTakeovers += ws.LosslessTakeovers
		st.Forgotten += ws.Forgotten
		st.CASMismatches += ws.CASMismatches
	}
	switch {
	case forget == ForgetNone && (st.Overflow == 0 || st.LosslessTakeovers == 0):
		t.Fatalf("stats %+v: the flood did not exercise overflow and takeovers", st)
	case forget != ForgetNone && (st.Forgotten == 0 || st.CASMismatches == 0):
		t.Fatalf("stats %+v: the flood did not exercise forgetting and races", st)
	case forget == ForgetAny && st.Overflow != 0:
		t.Fatalf("stats %+v: a newcomer fell to an overflow bucket though any key may be forgotten", st)
	}
	if s.Len() > 2*(cfg.Slots+ws[0].main.OverflowSlots()) {
		t.Fatalf("%d shared-data keys", s.Len())
	}
}
