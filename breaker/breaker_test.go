package breaker

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter/store"
)

func mustMachine(t testing.TB, s Settings) *Machine {
	t.Helper()
	m, err := NewMachine(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func storedRecord(t testing.TB, st store.Store, key string) Record {
	t.Helper()
	v, _, err := st.Get(key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	var r Record
	if err := r.Decode(v); err != nil {
		t.Fatalf("stored value does not decode: %v", err)
	}
	return r
}

func TestBreakerLifecycle(t *testing.T) {
	st := store.NewMemory()
	m := mustMachine(t, Settings{FailureThreshold: 2, OpenTimeout: 10 * sec, SuccessThreshold: 1})
	b := NewBreaker(m, st, "cb:backend")
	other := NewBreaker(m, st, "cb:backend") // a second worker
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	if err := other.Init(); err != nil {
		t.Fatal(err)
	}
	tk1, d, err := b.Check(t0)
	if err != nil || !d.Allowed || d.State != Closed {
		t.Fatalf("check: %+v %v", d, err)
	}
	tk2, _, _ := other.Check(t0)
	if tr, err := b.Report(tk1, fail, t0); tr != NoTransition || err != nil {
		t.Fatalf("first failure: %v %v", tr, err)
	}
	if tr, err := other.Report(tk2, fail, t0); tr != Opened || err != nil {
		t.Fatalf("second failure from the other worker: %v %v", tr, err)
	}
	if s, _ := b.Peek(); s != Open {
		t.Fatalf("peek %v", s)
	}
	_, d, _ = b.Check(t0.Add(4 * sec))
	if d.Allowed || d.RetryAfter != 6*sec || d.State != Open {
		t.Fatalf("open check: %+v", d)
	}
	probe, d, _ := other.Check(t0.Add(10 * sec))
	if !d.Allowed || !probe.Probe() || d.Transition != HalfOpened {
		t.Fatalf("probe check: %+v %+v", probe, d)
	}
	_, d, _ = b.Check(t0.Add(10 * sec))
	if d.Allowed || d.State != HalfOpen {
		t.Fatalf("second worker during probe: %+v", d)
	}
	if tr, _ := b.Report(probe, ok, t0.Add(11*sec)); tr != Recovered {
		t.Fatalf("probe success: %v", tr)
	}
	if r := storedRecord(t, st, "cb:backend"); r.State() != Closed || r.Generation() != 4 {
		t.Fatalf("stored %v gen %d", r.State(), r.Generation())
	}
	if st.Len() != 1 {
		t.Fatalf("%d keys", st.Len())
	}
}

func TestBreakerClosedCheckDoesNotWrite(t *testing.T) {
	st := store.NewMemory()
	var sets atomic.Int64
	st.BeforeSet = func(string) bool { sets.Add(1); return false }
	b := NewBreaker(mustMachine(t, DefaultSettings()), st, "k")
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		b.Check(t0)
	}
	if n := sets.Load(); n != 1 {
		t.Fatalf("%d writes for Init plus 100 closed checks, want 1", n)
	}
}

// TestBreakerQuietSuccessSkipsStore: the healthy steady state of a
// consecutive-failures breaker costs one read per request and no write,
// and what that gives up is exactly one thing: a success admitted before
// another request's failure does not reset that failure's streak.
func TestBreakerQuietSuccessSkipsStore(t *testing.T) {
	st := store.NewMemory()
	var sets atomic.Int64
	st.BeforeSet = func(string) bool { sets.Add(1); return false }
	m := mustMachine(t, Settings{FailureThreshold: 2, OpenTimeout: 10 * sec})
	b := NewBreaker(m, st, "k")
	other := NewBreaker(m, st, "k")
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		tk, _, _ := b.Check(t0)
		if tr, err := b.Report(tk, ok, t0); tr != NoTransition || err != nil {
			t.Fatalf("success: %v %v", tr, err)
		}
	}
	if n := sets.Load(); n != 1 {
		t.Fatalf("%d writes for Init plus 50 healthy requests, want 1", n)
	}

	quiet, _, _ := b.Check(t0)       // admitted with no streak
	failing, _, _ := other.Check(t0) // admitted alongside it
	if _, err := other.Report(failing, fail, t0); err != nil {
		t.Fatal(err)
	}
	b.Report(quiet, ok, t0)
	if r := storedRecord(t, st, "k"); r.consec != 1 {
		t.Fatalf("streak %d after a quiet success, want 1 (left as it was)", r.consec)
	}
	// A success admitted after the failure sees the streak and resets it.
	tk, _, _ := b.Check(t0)
	b.Report(tk, ok, t0)
	if r := storedRecord(t, st, "k"); r.consec != 0 {
		t.Fatalf("streak %d after a success that saw it, want 0", r.consec)
	}
	// A slow call is never quiet when slow calls are tracked.
	slowM := mustMachine(t, Settings{FailureThreshold: 2, SlowCallDuration: sec, SlowCallPercent: 100, Window: Window{Size: 10}})
	sb := NewBreaker(slowM, store.NewMemory(), "s")
	tk, _, _ = sb.Check(t0)
	if tk.quiet {
		t.Fatal("a windowed breaker must not hand out quiet tickets")
	}
}

func TestBreakerCorruptValue(t *testing.T) {
	st := store.NewMemory()
	if err := st.Set("k", []byte("garbage"), 0); err != nil {
		t.Fatal(err)
	}
	b := NewBreaker(mustMachine(t, Settings{FailureThreshold: 1, OpenTimeout: 10 * sec}), st, "k")
	// Init leaves an existing key alone, even a corrupt one.
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	tk, d, err := b.Check(t0)
	if err != nil || !d.Allowed || d.State != Closed || !tk.Tracked() {
		t.Fatalf("check over corrupt value: %+v %+v %v", tk, d, err)
	}
	if b.Stats().CorruptResets != 1 {
		t.Fatalf("stats %+v", b.Stats())
	}
	// The check already replaced the garbage, though it decided nothing new.
	if r := storedRecord(t, st, "k"); r.State() != Closed || r.Generation() != 1 {
		t.Fatalf("stored %v gen %d", r.State(), r.Generation())
	}
	// The fresh state the check decided on has generation 1, so the ticket
	// still counts, and the report overwrites the garbage via CAS.
	if tr, err := b.Report(tk, fail, t0); tr != Opened || err != nil {
		t.Fatalf("report: %v %v", tr, err)
	}
	if r := storedRecord(t, st, "k"); r.State() != Open {
		t.Fatalf("stored state %v", r.State())
	}
}

func TestBreakerConfigChangeResetsWindow(t *testing.T) {
	st := store.NewMemory()
	small := NewBreaker(mustMachine(t, Settings{FailureRatePercent: 50, Window: Window{Size: 10}}), st, "k")
	for i := 0; i < 5; i++ {
		tk, _, _ := small.Check(t0)
		small.Report(tk, fail, t0)
	}
	if c, f, _ := func() (uint32, uint32, uint32) { r := storedRecord(t, st, "k"); return r.WindowCounts() }(); c != 5 || f != 5 {
		t.Fatalf("window %d/%d", c, f)
	}
	big := NewBreaker(mustMachine(t, Settings{FailureRatePercent: 50, Window: Window{Size: 20}}), st, "k")
	tk, _, _ := big.Check(t0)
	big.Report(tk, ok, t0)
	r := storedRecord(t, st, "k")
	if c, f, _ := r.WindowCounts(); c != 1 || f != 0 || r.Generation() != 1 {
		t.Fatalf("after resize: window %d/%d gen %d", c, f, r.Generation())
	}
}

func TestBreakerContention(t *testing.T) {
	for _, policy := range []ContentionPolicy{FailSafe, FailOpen} {
		st := store.NewMemory()
		m := mustMachine(t, Settings{FailureThreshold: 1, OpenTimeout: 10 * sec, MaxRetries: 3, OnContention: policy})
		b := NewBreaker(m, st, "k")
		tk, _, _ := b.Check(t0)
		if tr, err := b.Report(tk, fail, t0); tr != Opened || err != nil {
			t.Fatalf("trip: %v %v", tr, err)
		}
		var sets atomic.Int64
		st.BeforeSet = func(string) bool { sets.Add(1); return true }

		// Open and not yet due: no write needed, so no contention.
		_, d, err := b.Check(t0.Add(sec))
		if err != nil || d.Allowed {
			t.Fatalf("open check: %+v %v", d, err)
		}
		// Going half-open needs a write that never lands.
		tk, d, err = b.Check(t0.Add(10 * sec))
		if !errors.Is(err, ErrContended) || tk.Tracked() {
			t.Fatalf("contended check: %+v %v", tk, err)
		}
		if want := policy == FailOpen; d.Allowed != want {
			t.Fatalf("policy %d: allowed %v", policy, d.Allowed)
		}
		if n := sets.Load(); n != 4 {
			t.Fatalf("%d attempts, want 1 + MaxRetries", n)
		}
		if s := b.Stats(); s.Exhausted != 1 || s.Retries != 3 {
			t.Fatalf("stats %+v", s)
		}
	}

	// A report that cannot land is dropped with an error.
	st := store.NewMemory()
	b := NewBreaker(mustMachine(t, Settings{FailureThreshold: 1, MaxRetries: 2}), st, "k")
	b.Init()
	st.BeforeSet = func(string) bool { return true }
	tk, _, _ := b.Check(t0)
	if tr, err := b.Report(tk, fail, t0); tr != NoTransition || !errors.Is(err, ErrContended) {
		t.Fatalf("report: %v %v", tr, err)
	}
	st.BeforeSet = nil
	if r := storedRecord(t, st, "k"); r.State() != Closed {
		t.Fatalf("dropped report changed state to %v", r.State())
	}
}

type failingStore struct {
	getErr, setErr error
	touched        bool
}

func (f *failingStore) Get(string) ([]byte, uint32, error) {
	f.touched = true
	return nil, 0, f.getErr
}

func (f *failingStore) Set(string, []byte, uint32) error {
	f.touched = true
	return f.setErr
}

func TestBreakerStoreErrors(t *testing.T) {
	boom := errors.New("host says no")
	fs := &failingStore{getErr: boom}
	b := NewBreaker(mustMachine(t, DefaultSettings()), fs, "k")
	tk, d, err := b.Check(t0)
	if !errors.Is(err, boom) || !d.Allowed || tk.Tracked() {
		t.Fatalf("check with failing store: %+v %+v %v", tk, d, err)
	}
	if _, err := b.Report(Ticket{gen: 1}, fail, t0); !errors.Is(err, boom) {
		t.Fatalf("report: %v", err)
	}
	if err := b.Init(); !errors.Is(err, boom) {
		t.Fatalf("init: %v", err)
	}
	if _, err := b.Peek(); !errors.Is(err, boom) {
		t.Fatalf("peek: %v", err)
	}
	fs = &failingStore{getErr: store.ErrNotFound, setErr: boom}
	b = NewBreaker(mustMachine(t, Settings{FailureThreshold: 1}), fs, "k")
	if _, err := b.Report(Ticket{gen: 1}, fail, t0); !errors.Is(err, boom) {
		t.Fatalf("report with failing set: %v", err)
	}
	if b.Stats().StoreErrors == 0 {
		t.Fatal("store errors not counted")
	}
}

func TestBreakerModesSkipStore(t *testing.T) {
	for _, mode := range []Mode{ModeDisabled, ModeForcedOpen} {
		fs := &failingStore{getErr: errors.New("must not be called")}
		b := NewBreaker(mustMachine(t, Settings{Mode: mode}), fs, "k")
		tk, d, err := b.Check(t0)
		if err != nil || d.Allowed != (mode == ModeDisabled) || tk.Tracked() {
			t.Fatalf("%v: %+v %+v %v", mode, tk, d, err)
		}
		b.Report(Ticket{gen: 1}, fail, t0)
		b.Init()
		s, err := b.Peek()
		if fs.touched || err != nil || (s == Open) != (mode == ModeForcedOpen) {
			t.Fatalf("%v: touched=%v peek=%v %v", mode, fs.touched, s, err)
		}
	}
}

// injectEveryThird makes every third Set fail with a CAS mismatch, and
// yields between every Get and Set so that other workers run inside that
// window: on two cores the real races would otherwise be too rare for a
// broken CAS discipline to show.
func injectEveryThird(st *store.Memory) *atomic.Int64 {
	var n atomic.Int64
	st.BeforeSet = func(string) bool {
		runtime.Gosched()
		return n.Add(1)%3 == 0
	}
	return &n
}

const workers = 8

// TestConcurrentProbes runs eight workers, each with its own Breaker over
// one store, against a half-open breaker, and checks that no more than
// HalfOpenMaxRequests probes are ever out at once and that every success is
// counted exactly once.
func TestConcurrentProbes(t *testing.T) {
	const maxProbes = 3
	st := store.NewMemory()
	m := mustMachine(t, Settings{
		FailureThreshold: 1, OpenTimeout: sec, HalfOpenMaxRequests: maxProbes,
		SuccessThreshold: MaxCounter, ProbeTimeout: time.Hour, MaxRetries: 10_000,
	})
	setup := NewBreaker(m, st, "k")
	setup.Init()
	tk, _, _ := setup.Check(t0)
	if tr, _ := setup.Report(tk, fail, t0); tr != Opened {
		t.Fatal("setup did not trip")
	}
	injected := injectEveryThird(st)
	now := t0.Add(2 * sec)

	var inFlight, peak, probes, rejected atomic.Int64
	var halfOpened atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := NewBreaker(m, st, "k")
			for i := 0; i < 1500; i++ {
				tk, d, err := b.Check(now)
				if err != nil {
					errs <- err
					return
				}
				if d.Transition == HalfOpened {
					halfOpened.Add(1)
				}
				if !tk.Probe() {
					rejected.Add(1)
					runtime.Gosched()
					continue
				}
				probes.Add(1)
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				runtime.Gosched()
				inFlight.Add(-1)
				if _, err := b.Report(tk, ok, now); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if p := peak.Load(); p > maxProbes {
		t.Fatalf("%d probes in flight at once, limit %d", p, maxProbes)
	}
	if halfOpened.Load() != 1 {
		t.Fatalf("open → half-open committed %d times", halfOpened.Load())
	}
	st.BeforeSet = nil
	r := storedRecord(t, st, "k")
	if r.State() != HalfOpen || r.InFlight() != 0 || int64(r.consec) != probes.Load() {
		t.Fatalf("final %v inflight %d successes %d, want half_open 0 %d", r.State(), r.InFlight(), r.consec, probes.Load())
	}
	t.Logf("probes %d, rejected %d, peak in flight %d, Sets %d (every third failed)", probes.Load(), rejected.Load(), peak.Load(), injected.Load())
}

// TestConcurrentReportsExact checks that no outcome is lost when eight
// workers report into one count window through injected CAS mismatches.
func TestConcurrentReportsExact(t *testing.T) {
	st := store.NewMemory()
	m := mustMachine(t, Settings{FailureRatePercent: 100, SlowCallDuration: sec, SlowCallPercent: 100, Window: Window{Size: MaxCountWindow}, MaxRetries: 10_000})
	NewBreaker(m, st, "k").Init()
	injectEveryThird(st)
	const each = 120
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			b := NewBreaker(m, st, "k")
			for i := 0; i < each; i++ {
				tk, _, _ := b.Check(t0)
				// Worker w fails its first w calls and is slow on every
				// fourth, so the totals are known exactly.
				o := Outcome{Failure: i < w, Duration: time.Duration(i%4/3) * 2 * sec}
				if _, err := b.Report(tk, o, t0); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	st.BeforeSet = nil
	r := storedRecord(t, st, "k")
	calls, fails, slow := r.WindowCounts()
	if calls != workers*each || fails != 0+1+2+3+4+5+6+7 || slow != workers*each/4 || r.State() != Closed {
		t.Fatalf("window %d calls %d failures %d slow (%v), want %d %d %d", calls, fails, slow, r.State(), workers*each, 28, workers*each/4)
	}
}

// TestConcurrentTripOnce has eight workers report failures admitted in the
// same generation: exactly one of them commits the trip, and everything
// after it is ignored as stale.
func TestConcurrentTripOnce(t *testing.T) {
	st := store.NewMemory()
	m := mustMachine(t, Settings{FailureThreshold: 50, OpenTimeout: 10 * sec, MaxRetries: 10_000})
	NewBreaker(m, st, "k").Init()
	injectEveryThird(st)
	var opened atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := NewBreaker(m, st, "k")
			var tickets []Ticket
			for i := 0; i < 20; i++ {
				tk, _, _ := b.Check(t0)
				tickets = append(tickets, tk)
			}
			for _, tk := range tickets {
				tr, err := b.Report(tk, fail, t0)
				if err != nil {
					t.Error(err)
				}
				if tr == Opened {
					opened.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	st.BeforeSet = nil
	r := storedRecord(t, st, "k")
	if opened.Load() != 1 || r.State() != Open || r.Generation() != 2 {
		t.Fatalf("opened %d times; state %v gen %d", opened.Load(), r.State(), r.Generation())
	}
}

// Preview decides as Check would and changes nothing stored: an open
// breaker past its timeout previews allowed and leaves its probe slot to
// the next Check; with the probe out it previews refused.
func TestBreakerPreviewTakesNoProbe(t *testing.T) {
	st := store.NewMemory()
	b := NewBreaker(mustMachine(t, Settings{FailureThreshold: 1, OpenTimeout: 10 * sec, SuccessThreshold: 1}), st, "k")
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	tk, _, _ := b.Check(t0)
	if tr, _ := b.Report(tk, fail, t0); tr != Opened {
		t.Fatalf("failure: %v", tr)
	}
	if d, err := b.Preview(t0.Add(4 * sec)); err != nil || d.Allowed || d.State != Open || d.RetryAfter != 6*sec {
		t.Fatalf("open: %+v %v", d, err)
	}
	before := storedRecord(t, st, "k")
	for range 3 {
		if d, err := b.Preview(t0.Add(10 * sec)); err != nil || !d.Allowed || d.Transition != NoTransition {
			t.Fatalf("past the timeout: %+v %v", d, err)
		}
	}
	if after := storedRecord(t, st, "k"); after != before {
		t.Fatalf("preview wrote %+v over %+v", after, before)
	}
	probe, d, _ := b.Check(t0.Add(10 * sec))
	if !d.Allowed || !probe.Probe() {
		t.Fatalf("the probe after previews: %+v %+v", probe, d)
	}
	if d, _ := b.Preview(t0.Add(11 * sec)); d.Allowed || d.State != HalfOpen {
		t.Fatalf("probe out: %+v", d)
	}
	if tr, _ := b.Report(probe, ok, t0.Add(11*sec)); tr != Recovered {
		t.Fatalf("probe report: %v", tr)
	}
}

// TestBreakerCreationRaceWithoutInit: the engine leaves a healthy
// breaker's record unwritten (no Init), so the first failures may reach a
// missing key on two workers at once. A healthy check writes nothing; the
// worker that loses the race to create the record gets a CAS mismatch
// (store.CreateCAS) and decides again on the winner's record, so both
// failures count and the second one opens the breaker.
func TestBreakerCreationRaceWithoutInit(t *testing.T) {
	st := store.NewMemory()
	m := mustMachine(t, Settings{FailureThreshold: 2, OpenTimeout: 10 * sec, SuccessThreshold: 1})
	a := NewBreaker(m, st, "cb:backend")
	b := NewBreaker(m, st, "cb:backend") // a second worker
	ta, da, errA := a.Check(t0)
	tb, db, errB := b.Check(t0)
	if !da.Allowed || !db.Allowed || errA != nil || errB != nil {
		t.Fatalf("checks: %+v %v, %+v %v", da, errA, db, errB)
	}
	if _, _, err := st.Get("cb:backend"); !store.IsNotFound(err) {
		t.Fatalf("a healthy check wrote the record: %v", err)
	}
	raced := false
	st.BeforeSet = func(string) bool {
		if !raced {
			// a has read the missing key and is about to create it: b
			// reports its failure, creating the record, in between.
			raced = true
			if tr, err := b.Report(tb, fail, t0); tr != NoTransition || err != nil {
				t.Fatalf("b's failure: %v %v", tr, err)
			}
		}
		return false
	}
	tr, err := a.Report(ta, fail, t0)
	st.BeforeSet = nil
	if !raced {
		t.Fatal("the race was not staged")
	}
	if tr != Opened || err != nil {
		t.Fatalf("a's failure after losing the creation race: %v %v, want Opened (both failures counted)", tr, err)
	}
	if a.Stats().Retries != 1 {
		t.Fatalf("a's stats %+v, want the lost creation retried once", a.Stats())
	}
	if s, _ := b.Peek(); s != Open {
		t.Fatalf("b peeks %v, want Open", s)
	}
}
