package breaker

import (
	"bytes"
	"math"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

type op uint8

const (
	opCheck op = iota
	opReport
)

// step is one row of a step table. A check saves its ticket under name; a
// report sends the outcome for the ticket saved under name. The want fields
// are compared for every step of their kind.
type step struct {
	at      time.Duration
	op      op
	name    string
	outcome Outcome

	allowed  bool
	shadowed bool
	probe    bool
	retry    time.Duration
	state    State // state after the step, checked on every step
	tr       Transition
}

func chk(at time.Duration, name string, allowed bool, state State) step {
	return step{at: at, op: opCheck, name: name, allowed: allowed, state: state}
}

func (s step) withRetry(d time.Duration) step { s.retry = d; return s }
func (s step) withTr(tr Transition) step      { s.tr = tr; return s }
func (s step) asProbe() step                  { s.probe = true; return s }
func (s step) asShadowed() step               { s.shadowed = true; return s }
func rep(at time.Duration, name string, o Outcome, state State) step {
	return step{at: at, op: opReport, name: name, outcome: o, state: state}
}

var (
	ok   = Outcome{}
	fail = Outcome{Failure: true}
)

func slowOK(d time.Duration) Outcome { return Outcome{Duration: d} }

func runSteps(t *testing.T, s Settings, steps []step) {
	t.Helper()
	m, err := NewMachine(s)
	if err != nil {
		t.Fatalf("NewMachine: %v", err)
	}
	var r Record
	m.Reset(&r)
	tickets := map[string]Ticket{}
	for i, st := range steps {
		now := t0.Add(st.at)
		switch st.op {
		case opCheck:
			tk, d, _ := m.Check(&r, now)
			tickets[st.name] = tk
			if d.Allowed != st.allowed || d.Shadowed != st.shadowed || d.RetryAfter != st.retry ||
				d.State != st.state || d.Transition != st.tr || tk.Probe() != st.probe {
				t.Fatalf("step %d check %q at %v: got %+v probe=%v, want allowed=%v shadowed=%v retry=%v state=%v tr=%v probe=%v",
					i, st.name, st.at, d, tk.Probe(), st.allowed, st.shadowed, st.retry, st.state, st.tr, st.probe)
			}
			if tk.Tracked() != (d.Allowed && !d.Shadowed && m.mode != ModeDisabled) {
				t.Fatalf("step %d: ticket tracked=%v for %+v", i, tk.Tracked(), d)
			}
		case opReport:
			tk, found := tickets[st.name]
			if !found {
				t.Fatalf("step %d: no ticket %q", i, st.name)
			}
			tr, _ := m.Report(&r, tk, st.outcome, now)
			if tr != st.tr {
				t.Fatalf("step %d report %q: transition %v, want %v", i, st.name, tr, st.tr)
			}
		}
		if m.mode != ModeDisabled && m.mode != ModeForcedOpen && r.State() != st.state {
			t.Fatalf("step %d: record state %v, want %v", i, r.State(), st.state)
		}
		// Every state the machine produces must survive the codec unchanged.
		enc := r.Encode(nil)
		var back Record
		if err := back.Decode(enc); err != nil {
			t.Fatalf("step %d: decode of own encoding: %v", i, err)
		}
		if back != r || !bytes.Equal(back.Encode(nil), enc) {
			t.Fatalf("step %d: codec round trip changed the record", i)
		}
	}
}

const sec = time.Second

func TestConsecutiveFailures(t *testing.T) {
	runSteps(t, Settings{FailureThreshold: 3, OpenTimeout: 10 * sec}, []step{
		chk(0, "a", true, Closed),
		chk(0, "b", true, Closed),
		chk(0, "c", true, Closed),
		chk(0, "d", true, Closed),
		chk(0, "e", true, Closed),
		rep(1, "a", fail, Closed),
		rep(1, "b", fail, Closed),
		// A success breaks the run of failures.
		rep(1, "c", ok, Closed),
		rep(2, "d", fail, Closed),
		rep(2, "e", fail, Closed),
		chk(3, "f", true, Closed),
		rep(sec, "f", fail, Open).withTr(Opened),
		chk(sec, "g", false, Open).withRetry(10 * sec),
		chk(4*sec, "g", false, Open).withRetry(7 * sec),
		chk(11*sec-1, "g", false, Open).withRetry(1),
	})
}

func TestRecovery(t *testing.T) {
	runSteps(t, Settings{FailureThreshold: 1, OpenTimeout: 10 * sec}, []step{
		chk(0, "a", true, Closed),
		rep(0, "a", fail, Open).withTr(Opened),
		chk(10*sec, "p1", true, HalfOpen).asProbe().withTr(HalfOpened),
		// One probe at a time by default; no deadline is known.
		chk(10*sec, "x", false, HalfOpen),
		rep(11*sec, "p1", ok, HalfOpen),
		chk(11*sec, "p2", true, HalfOpen).asProbe(),
		rep(12*sec, "p2", ok, Closed).withTr(Recovered),
		chk(12*sec, "c", true, Closed),
	})
}

func TestHalfOpenFailureReopens(t *testing.T) {
	s := Settings{FailureThreshold: 1, OpenTimeout: 10 * sec, SlowCallDuration: sec, SuccessThreshold: 3}
	runSteps(t, s, []step{
		chk(0, "a", true, Closed),
		rep(0, "a", fail, Open).withTr(Opened),
		chk(10*sec, "p1", true, HalfOpen).asProbe().withTr(HalfOpened),
		rep(10*sec, "p1", ok, HalfOpen),
		chk(10*sec, "p2", true, HalfOpen).asProbe(),
		// A failure after successes still re-opens.
		rep(10*sec, "p2", fail, Open).withTr(Reopened),
		chk(10*sec, "x", false, Open).withRetry(10 * sec),
		chk(20*sec, "p3", true, HalfOpen).asProbe().withTr(HalfOpened),
		// Exactly the slow threshold is not slow; one ns more is.
		rep(20*sec, "p3", slowOK(sec), HalfOpen),
		chk(20*sec, "p4", true, HalfOpen).asProbe(),
		rep(21*sec, "p4", slowOK(sec+1), Open).withTr(Reopened),
	})
}

func TestStaleGenerationIgnored(t *testing.T) {
	runSteps(t, Settings{FailureThreshold: 2, OpenTimeout: 10 * sec, SuccessThreshold: 1}, []step{
		chk(0, "a", true, Closed),
		chk(0, "b", true, Closed),
		chk(0, "c", true, Closed),
		chk(0, "late", true, Closed),
		rep(0, "a", fail, Closed),
		rep(0, "b", fail, Open).withTr(Opened),
		// c was admitted before the trip: its outcome belongs to the old
		// generation and must not touch the open state.
		rep(1, "c", ok, Open),
		rep(1, "c", fail, Open),
		chk(10*sec, "p", true, HalfOpen).asProbe().withTr(HalfOpened),
		rep(10*sec, "late", fail, HalfOpen),
		rep(10*sec, "p", ok, Closed).withTr(Recovered),
		// Reporting the probe again, or the stale one, changes nothing.
		rep(10*sec, "p", fail, Closed),
		rep(10*sec, "late", fail, Closed),
		chk(10*sec, "d", true, Closed),
		rep(10*sec, "d", fail, Closed),
	})
}

func TestProbeTimeout(t *testing.T) {
	s := Settings{FailureThreshold: 1, OpenTimeout: 10 * sec, ProbeTimeout: 5 * sec, HalfOpenMaxRequests: 2}
	runSteps(t, s, []step{
		chk(0, "a", true, Closed),
		rep(0, "a", fail, Open).withTr(Opened),
		chk(10*sec, "p1", true, HalfOpen).asProbe().withTr(HalfOpened),
		chk(12*sec, "p2", true, HalfOpen).asProbe(),
		chk(13*sec, "x", false, HalfOpen),
		// p1 is 5s old but p2 only 3s: not every probe has expired yet.
		chk(15*sec, "x", false, HalfOpen),
		chk(17*sec-1, "x", false, HalfOpen),
		// Both lost: they count as a failure.
		chk(17*sec, "x", false, Open).withTr(Reopened).withRetry(10 * sec),
		// Their outcomes arrive too late to matter.
		rep(18*sec, "p1", ok, Open),
		rep(18*sec, "p2", ok, Open),
		chk(27*sec, "p3", true, HalfOpen).asProbe().withTr(HalfOpened),
	})
	// The default probe timeout is the open timeout.
	runSteps(t, Settings{FailureThreshold: 1, OpenTimeout: 10 * sec}, []step{
		chk(0, "a", true, Closed),
		rep(0, "a", fail, Open).withTr(Opened),
		chk(10*sec, "p1", true, HalfOpen).asProbe().withTr(HalfOpened),
		chk(20*sec-1, "x", false, HalfOpen),
		chk(20*sec, "x", false, Open).withTr(Reopened).withRetry(10 * sec),
	})
}

func TestHalfOpenMaxRequests(t *testing.T) {
	s := Settings{FailureThreshold: 1, OpenTimeout: 10 * sec, HalfOpenMaxRequests: 2, SuccessThreshold: 3}
	runSteps(t, s, []step{
		chk(0, "a", true, Closed),
		rep(0, "a", fail, Open).withTr(Opened),
		chk(10*sec, "p1", true, HalfOpen).asProbe().withTr(HalfOpened),
		chk(10*sec, "p2", true, HalfOpen).asProbe(),
		chk(10*sec, "x", false, HalfOpen),
		rep(10*sec, "p1", ok, HalfOpen),
		chk(10*sec, "p3", true, HalfOpen).asProbe(),
		chk(10*sec, "x", false, HalfOpen),
		rep(10*sec, "p2", ok, HalfOpen),
		rep(10*sec, "p3", ok, Closed).withTr(Recovered),
	})
}

func TestOpenTimeoutGrowth(t *testing.T) {
	s := Settings{FailureThreshold: 1, OpenTimeout: 10 * sec, OpenTimeoutMultiplier: 2, MaxOpenTimeout: 30 * sec}
	runSteps(t, s, []step{
		chk(0, "a", true, Closed),
		rep(0, "a", fail, Open).withTr(Opened),
		chk(0, "x", false, Open).withRetry(10 * sec),
		chk(10*sec, "p", true, HalfOpen).asProbe().withTr(HalfOpened),
		rep(10*sec, "p", fail, Open).withTr(Reopened),
		chk(10*sec, "x", false, Open).withRetry(20 * sec),
		chk(30*sec, "p", true, HalfOpen).asProbe().withTr(HalfOpened),
		rep(30*sec, "p", fail, Open).withTr(Reopened),
		// 40s is capped at 30s.
		chk(30*sec, "x", false, Open).withRetry(30 * sec),
		chk(60*sec, "p", true, HalfOpen).asProbe().withTr(HalfOpened),
		rep(60*sec, "p", fail, Open).withTr(Reopened),
		chk(60*sec, "x", false, Open).withRetry(30 * sec),
		chk(90*sec, "p", true, HalfOpen).asProbe().withTr(HalfOpened),
		rep(90*sec, "p", ok, HalfOpen),
		chk(90*sec, "p", true, HalfOpen).asProbe(),
		rep(90*sec, "p", ok, Closed).withTr(Recovered),
		// A close resets the growth.
		chk(90*sec, "a", true, Closed),
		rep(90*sec, "a", fail, Open).withTr(Opened),
		chk(90*sec, "x", false, Open).withRetry(10 * sec),
	})
	m, _ := NewMachine(Settings{FailureThreshold: 1, OpenTimeout: sec, OpenTimeoutMultiplier: 1.5})
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{0, sec}, {1, sec}, {2, 1500 * time.Millisecond}, {3, 2250 * time.Millisecond}, {6, 7593750 * time.Microsecond}, {7, 10 * sec}, {1 << 20, 10 * sec}} {
		if got := m.OpenTimeout(c.n); got != c.want {
			t.Errorf("OpenTimeout(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}

func TestFailureRateCountWindow(t *testing.T) {
	s := Settings{FailureRatePercent: 50, Window: Window{Size: 4}, OpenTimeout: 10 * sec}
	runSteps(t, s, []step{
		chk(0, "a", true, Closed), chk(0, "b", true, Closed), chk(0, "c", true, Closed),
		chk(0, "d", true, Closed), chk(0, "e", true, Closed), chk(0, "f", true, Closed),
		chk(0, "g", true, Closed),
		// 3 failures in 3 calls, but the minimum is the window size 4.
		rep(0, "a", fail, Closed),
		rep(0, "b", fail, Closed),
		rep(0, "c", fail, Closed),
		// 3 of 4 is over 50%.
		rep(0, "d", ok, Open).withTr(Opened),
	})
	runSteps(t, s, []step{
		chk(0, "a", true, Closed), chk(0, "b", true, Closed), chk(0, "c", true, Closed),
		chk(0, "d", true, Closed), chk(0, "e", true, Closed), chk(0, "f", true, Closed),
		rep(0, "a", fail, Closed),
		rep(0, "b", ok, Closed),
		rep(0, "c", ok, Closed),
		rep(0, "d", ok, Closed), // 1 of 4
		rep(0, "e", ok, Closed), // the failure slid out: 0 of 4
		rep(0, "f", fail, Closed),
		chk(0, "g", true, Closed), chk(0, "h", true, Closed),
		rep(0, "g", ok, Closed),
		// Exactly 50% trips: the threshold is inclusive.
		rep(0, "h", fail, Open).withTr(Opened),
	})
}

func TestMinimumCalls(t *testing.T) {
	s := Settings{FailureRatePercent: 50, Window: Window{Size: 10, MinimumCalls: 2}, OpenTimeout: 10 * sec}
	runSteps(t, s, []step{
		chk(0, "a", true, Closed), chk(0, "b", true, Closed),
		rep(0, "a", fail, Closed),
		rep(0, "b", ok, Open).withTr(Opened),
	})
}

func TestSlowCallRate(t *testing.T) {
	s := Settings{SlowCallDuration: sec, SlowCallPercent: 60, Window: Window{Size: 5}, OpenTimeout: 10 * sec}
	runSteps(t, s, []step{
		chk(0, "a", true, Closed), chk(0, "b", true, Closed), chk(0, "c", true, Closed),
		chk(0, "d", true, Closed), chk(0, "e", true, Closed),
		rep(0, "a", slowOK(2*sec), Closed),
		rep(0, "b", slowOK(2*sec), Closed),
		// Failures are not slow calls, and the failure rate is off.
		rep(0, "c", Outcome{Failure: true}, Closed),
		rep(0, "d", ok, Closed),
		rep(0, "e", slowOK(sec+1), Open).withTr(Opened),
	})
}

func TestTimeWindow(t *testing.T) {
	s := Settings{FailureRatePercent: 50, Window: Window{Type: WindowTime, Duration: 10 * sec, MinimumCalls: 3}, OpenTimeout: 10 * sec}
	var ck []step
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		ck = append(ck, chk(0, n, true, Closed))
	}
	runSteps(t, s, append(ck,
		rep(0, "a", fail, Closed),
		rep(sec, "b", fail, Closed),
		// 10s later, bucket 0 (a) has aged out; b (bucket 1) has not.
		rep(10*sec, "c", ok, Closed),
		rep(10*sec, "d", ok, Closed), // 1 of 3
		// 11s: b ages out too, so 0 of 2.
		rep(11*sec, "e", fail, Closed),                // 1 of 3
		rep(11*sec+1, "f", fail, Open).withTr(Opened), // 2 of 4
	))
	// A window that goes quiet for longer than its span starts empty.
	runSteps(t, s, append(ck,
		rep(0, "a", fail, Closed),
		rep(0, "b", fail, Closed),
		rep(100*sec, "c", fail, Closed),
		rep(100*sec, "d", ok, Closed),
		rep(100*sec, "e", ok, Closed),
		rep(100*sec, "f", ok, Closed),
	))
	// Time going backwards records into the newest bucket; no panic.
	runSteps(t, s, append(ck,
		rep(50*sec, "a", fail, Closed),
		rep(0, "b", fail, Closed),
		rep(-100*sec, "c", fail, Open).withTr(Opened),
	))
}

func TestClockBackwards(t *testing.T) {
	runSteps(t, Settings{FailureThreshold: 1, OpenTimeout: 10 * sec}, []step{
		chk(0, "a", true, Closed),
		rep(0, "a", fail, Open).withTr(Opened),
		chk(-5*sec, "x", false, Open).withRetry(15 * sec),
		chk(10*sec, "p", true, HalfOpen).asProbe().withTr(HalfOpened),
		// A probe admitted "in the future" does not expire early.
		chk(-time.Hour, "x", false, HalfOpen),
	})
}

func TestMetricsOnly(t *testing.T) {
	runSteps(t, Settings{Mode: ModeMetricsOnly, FailureThreshold: 1, OpenTimeout: 10 * sec}, []step{
		chk(0, "a", true, Closed),
		rep(0, "a", fail, Open).withTr(Opened),
		chk(sec, "x", true, Open).asShadowed().withRetry(9 * sec),
		rep(sec, "x", fail, Open),
		chk(10*sec, "p", true, HalfOpen).asProbe().withTr(HalfOpened),
		chk(10*sec, "y", true, HalfOpen).asShadowed(),
		rep(10*sec, "y", fail, HalfOpen),
		rep(10*sec, "p", ok, HalfOpen),
		chk(10*sec, "p", true, HalfOpen).asProbe(),
		rep(10*sec, "p", ok, Closed).withTr(Recovered),
	})
}

func TestForcedOpenAndDisabled(t *testing.T) {
	runSteps(t, Settings{Mode: ModeForcedOpen}, []step{
		chk(0, "a", false, Open),
		chk(time.Hour, "a", false, Open),
	})
	runSteps(t, Settings{Mode: ModeDisabled}, []step{
		chk(0, "a", true, Closed),
		rep(0, "a", fail, Closed),
		chk(0, "a", true, Closed),
	})
}

func TestSettingsValidation(t *testing.T) {
	cases := []struct {
		name string
		s    Settings
		want string // substring of the error; "" means valid
	}{
		{"defaults", DefaultSettings(), ""},
		{"zero has no trip", Settings{}, "failure_threshold: no trip condition"},
		{"forced open needs no trip", Settings{Mode: ModeForcedOpen}, ""},
		{"disabled needs no trip", Settings{Mode: ModeDisabled}, ""},
		{"bad mode", Settings{Mode: 9, FailureThreshold: 1}, "mode: unknown"},
		{"rate over 100", Settings{FailureRatePercent: 101}, "failure_rate.threshold_percent"},
		{"window too big", Settings{FailureRatePercent: 50, Window: Window{Size: 1025}}, "failure_rate.window: must be <= 1024"},
		{"min calls over size", Settings{FailureRatePercent: 50, Window: Window{Size: 10, MinimumCalls: 11}}, "failure_rate.minimum_calls"},
		{"min calls over default size", Settings{FailureRatePercent: 50, Window: Window{MinimumCalls: 101}}, "failure_rate.minimum_calls"},
		{"duration on count", Settings{FailureRatePercent: 50, Window: Window{Duration: sec}}, "failure_rate.window_duration: only used"},
		{"size on time", Settings{FailureRatePercent: 50, Window: Window{Type: WindowTime, Size: 5}}, "failure_rate.window: only used"},
		{"time too short", Settings{FailureRatePercent: 50, Window: Window{Type: WindowTime, Duration: time.Millisecond}}, "failure_rate.window_duration: must be >= 10ms"},
		{"bad window type", Settings{FailureRatePercent: 50, Window: Window{Type: 7}}, "failure_rate.window_type"},
		{"slow percent alone", Settings{FailureThreshold: 1, SlowCallPercent: 50}, "slow_call.threshold_percent: set without"},
		{"negative slow", Settings{SlowCallDuration: -1}, "slow_call.duration"},
		{"slow alone trips", Settings{SlowCallDuration: sec}, ""},
		{"negative open", Settings{FailureThreshold: 1, OpenTimeout: -1}, "open_timeout: must be >= 0"},
		{"multiplier below 1", Settings{FailureThreshold: 1, OpenTimeoutMultiplier: 0.5}, "open_timeout_multiplier"},
		{"cap without multiplier", Settings{FailureThreshold: 1, MaxOpenTimeout: time.Minute}, "max_open_timeout: has no effect"},
		{"cap below open", Settings{FailureThreshold: 1, OpenTimeoutMultiplier: 2, MaxOpenTimeout: sec}, "max_open_timeout: must be >= open_timeout 30s"},
		{"negative probe timeout", Settings{FailureThreshold: 1, ProbeTimeout: -1}, "probe_timeout"},
		{"negative retries", Settings{FailureThreshold: 1, MaxRetries: -1}, "max_retries"},
		{"huge threshold", Settings{FailureThreshold: 1 << 30}, "failure_threshold: must be <="},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.s.Validate()
			_, nerr := NewMachine(c.s)
			if (err == nil) != (nerr == nil) {
				t.Fatalf("Validate %v but NewMachine %v", err, nerr)
			}
			if c.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
	// All problems are reported together.
	err := (&Settings{Mode: 9, FailureRatePercent: 200, OpenTimeout: -1}).Validate()
	for _, f := range []string{"mode:", "failure_rate.threshold_percent:", "open_timeout:"} {
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(f)) {
			t.Errorf("joined error %v lacks %q", err, f)
		}
	}
}

func TestParse(t *testing.T) {
	for i, n := range modeNames {
		if m, err := ParseMode(n); err != nil || m != Mode(i) || m.String() != n {
			t.Errorf("ParseMode(%q) = %v, %v", n, m, err)
		}
	}
	if m, err := ParseMode(""); err != nil || m != ModeEnforce {
		t.Errorf("ParseMode(\"\") = %v, %v", m, err)
	}
	if _, err := ParseMode("open"); err == nil {
		t.Error("ParseMode accepted an unknown mode")
	}
	if w, err := ParseWindowType("time"); err != nil || w != WindowTime {
		t.Errorf("ParseWindowType(time) = %v, %v", w, err)
	}
	if _, err := ParseWindowType("sliding"); err == nil {
		t.Error("ParseWindowType accepted an unknown type")
	}
}

func TestAdvanceFarApartEpochs(t *testing.T) {
	m := mustMachine(t, Settings{FailureRatePercent: 50, Window: Window{Type: WindowTime, Duration: 10 * sec}})
	var r Record
	m.Reset(&r)
	r.buckets[3] = bucket{calls: 4, fails: 1}
	// A subtraction of these epochs overflows int64; the window must still
	// simply empty, at once.
	r.epoch = math.MinInt64
	m.advance(&r, t0.UnixNano())
	if c, _, _ := r.WindowCounts(); c != 0 || r.epoch != t0.UnixNano()/int64(sec) {
		t.Fatalf("calls %d epoch %d", c, r.epoch)
	}
	r.buckets[3] = bucket{calls: 4}
	r.epoch = math.MaxInt64
	m.advance(&r, t0.UnixNano())
	if c, _, _ := r.WindowCounts(); c != 4 {
		t.Fatalf("a clock behind the newest bucket cleared the window: %d calls", c)
	}
}
