package breaker

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// refBreaker is the slow, obviously correct reference: plain fields, the
// window as a slice of every recorded outcome, and timeouts grown by
// repeated integer multiplication.
type refBreaker struct {
	s Settings

	state     State
	gen       uint32
	openUntil int64
	lastProbe int64
	opens     int
	consec    int
	inflight  int

	events   []refEvent
	maxEpoch int64
}

type refEvent struct {
	epoch      int64
	failed     bool
	slow       bool
	recordedAt int
}

func newRef(s Settings) *refBreaker { return &refBreaker{s: s, state: Closed, gen: 1} }

func (b *refBreaker) successThreshold() int {
	if b.s.SuccessThreshold == 0 {
		return DefaultSuccessThreshold
	}
	return int(b.s.SuccessThreshold)
}

func (b *refBreaker) maxProbes() int {
	if b.s.HalfOpenMaxRequests == 0 {
		return DefaultHalfOpenMaxRequests
	}
	return int(b.s.HalfOpenMaxRequests)
}

func (b *refBreaker) baseTimeout() int64 {
	if b.s.OpenTimeout == 0 {
		return int64(DefaultOpenTimeout)
	}
	return int64(b.s.OpenTimeout)
}

func (b *refBreaker) probeTimeout() int64 {
	if b.s.ProbeTimeout == 0 {
		return b.baseTimeout()
	}
	return int64(b.s.ProbeTimeout)
}

// openTimeout assumes an integral multiplier, which is what the model test
// configures, so that integer arithmetic is the obvious truth.
func (b *refBreaker) openTimeout() int64 {
	d := b.baseTimeout()
	if b.s.OpenTimeoutMultiplier <= 1 {
		return d
	}
	limit := int64(b.s.MaxOpenTimeout)
	if limit == 0 {
		limit = 10 * d
	}
	for i := 1; i < b.opens; i++ {
		d *= int64(b.s.OpenTimeoutMultiplier)
		if d >= limit {
			return limit
		}
	}
	return d
}

func (b *refBreaker) usesWindow() bool { return b.s.FailureRatePercent > 0 || b.s.SlowCallDuration > 0 }

func (b *refBreaker) windowCounts() (calls, fails, slow int) {
	var in []refEvent
	if b.s.Window.Type == WindowTime {
		for _, e := range b.events {
			if e.epoch > b.maxEpoch-TimeWindowBuckets {
				in = append(in, e)
			}
		}
	} else {
		size := int(b.s.Window.Size)
		if size == 0 {
			size = DefaultWindowSize
		}
		in = b.events
		if len(in) > size {
			in = in[len(in)-size:]
		}
	}
	for _, e := range in {
		calls++
		if e.failed {
			fails++
		}
		if e.slow {
			slow++
		}
	}
	return
}

func (b *refBreaker) minCalls() int {
	if b.s.Window.MinimumCalls != 0 {
		return int(b.s.Window.MinimumCalls)
	}
	if b.s.Window.Type == WindowTime {
		return DefaultMinimumCalls
	}
	if b.s.Window.Size == 0 {
		return DefaultWindowSize
	}
	return int(b.s.Window.Size)
}

func (b *refBreaker) newGen() { b.gen++ }

func (b *refBreaker) trip(now int64) {
	b.state = Open
	b.newGen()
	b.opens++
	b.openUntil = now + b.openTimeout()
	b.consec = 0
	b.inflight = 0
	b.events = nil
	b.maxEpoch = 0
}

func (b *refBreaker) reject(d Decision) Decision {
	if b.s.Mode == ModeMetricsOnly {
		d.Allowed, d.Shadowed = true, true
	}
	return d
}

func (b *refBreaker) check(now int64) (Ticket, Decision) {
	var d Decision
	if b.state == Open && now >= b.openUntil {
		b.state = HalfOpen
		b.newGen()
		b.consec = 0
		b.inflight = 0
		d.Transition = HalfOpened
	}
	switch b.state {
	case Open:
		return Ticket{}, b.reject(Decision{State: Open, RetryAfter: time.Duration(b.openUntil - now)})
	case HalfOpen:
		if b.inflight > 0 && now-b.lastProbe >= b.probeTimeout() {
			b.trip(now)
			return Ticket{}, b.reject(Decision{State: Open, Transition: Reopened, RetryAfter: time.Duration(b.openUntil - now)})
		}
		d.State = HalfOpen
		if b.inflight < b.maxProbes() {
			b.inflight++
			b.lastProbe = now
			d.Allowed = true
			return Ticket{gen: b.gen, probe: true}, d
		}
		return Ticket{}, b.reject(d)
	}
	return Ticket{gen: b.gen}, Decision{Allowed: true, State: Closed}
}

func (b *refBreaker) report(t Ticket, o Outcome, now int64) Transition {
	if t.gen == 0 || t.gen != b.gen {
		return NoTransition
	}
	slow := b.s.SlowCallDuration > 0 && o.Duration > b.s.SlowCallDuration
	if b.state == HalfOpen && t.probe {
		b.inflight--
		if o.Failure || slow {
			b.trip(now)
			return Reopened
		}
		b.consec++
		if b.consec >= b.successThreshold() {
			b.state = Closed
			b.newGen()
			b.opens = 0
			b.consec = 0
			b.inflight = 0
			b.events = nil
			b.maxEpoch = 0
			return Recovered
		}
		return NoTransition
	}
	if b.state != Closed || t.probe {
		return NoTransition
	}
	if o.Failure {
		b.consec++
	} else {
		b.consec = 0
	}
	if b.usesWindow() {
		epoch := int64(0)
		if b.s.Window.Type == WindowTime {
			width := int64(b.s.Window.Duration) / TimeWindowBuckets
			epoch = now / width
			if now < 0 && now%width != 0 {
				epoch--
			}
			if epoch > b.maxEpoch {
				b.maxEpoch = epoch
			}
			epoch = b.maxEpoch
		}
		b.events = append(b.events, refEvent{epoch: epoch, failed: o.Failure, slow: slow})
	}
	if b.s.FailureThreshold > 0 && b.consec >= int(b.s.FailureThreshold) {
		b.trip(now)
		return Opened
	}
	if b.usesWindow() {
		calls, fails, slowN := b.windowCounts()
		if calls > 0 && calls >= b.minCalls() {
			if b.s.FailureRatePercent > 0 && fails*100 >= int(b.s.FailureRatePercent)*calls {
				b.trip(now)
				return Opened
			}
			if b.s.SlowCallDuration > 0 {
				pct := int(b.s.SlowCallPercent)
				if pct == 0 {
					pct = 100
				}
				if slowN*100 >= pct*calls {
					b.trip(now)
					return Opened
				}
			}
		}
	}
	return NoTransition
}

func randomSettings(rng *rand.Rand) Settings {
	s := Settings{
		FailureThreshold:    uint32(rng.IntN(6)),
		SuccessThreshold:    uint32(rng.IntN(4)),
		OpenTimeout:         time.Duration(1+rng.IntN(20)) * sec,
		HalfOpenMaxRequests: uint32(rng.IntN(4)),
	}
	if rng.IntN(2) == 0 {
		s.ProbeTimeout = time.Duration(1+rng.IntN(10)) * sec
	}
	if rng.IntN(2) == 0 {
		s.OpenTimeoutMultiplier = float64(2 + rng.IntN(2))
		if rng.IntN(2) == 0 {
			s.MaxOpenTimeout = s.OpenTimeout * time.Duration(1+rng.IntN(8))
		}
	}
	if rng.IntN(3) > 0 {
		s.FailureRatePercent = uint32(1 + rng.IntN(100))
	}
	if rng.IntN(2) == 0 {
		s.SlowCallDuration = time.Duration(100+rng.IntN(900)) * time.Millisecond
		if rng.IntN(2) == 0 {
			s.SlowCallPercent = uint32(1 + rng.IntN(100))
		}
	}
	if rng.IntN(2) == 0 {
		s.Window.Type = WindowTime
		s.Window.Duration = time.Duration(1+rng.IntN(30)) * sec
		s.Window.MinimumCalls = uint32(rng.IntN(20))
	} else {
		if rng.IntN(4) > 0 {
			sizes := []uint32{1, 3, 63, 64, 65, 200, MaxCountWindow}
			s.Window.Size = sizes[rng.IntN(len(sizes))]
		}
		size := s.Window.Size
		if size == 0 {
			size = DefaultWindowSize
		}
		s.Window.MinimumCalls = uint32(rng.IntN(int(size) + 1))
	}
	if s.FailureThreshold == 0 && s.FailureRatePercent == 0 && s.SlowCallDuration == 0 {
		s.FailureThreshold = 1
	}
	if rng.IntN(5) == 0 {
		s.Mode = ModeMetricsOnly
	}
	return s
}

func compareState(m *Machine, r *Record, b *refBreaker) error {
	calls, fails, slow := r.WindowCounts()
	rc, rf, rs := 0, 0, 0
	if m.win != winNone {
		rc, rf, rs = b.windowCounts()
	}
	if r.state != b.state || r.gen != b.gen || int(r.inflight) != b.inflight || int(r.consec) != b.consec ||
		int(calls) != rc || int(fails) != rf || int(slow) != rs {
		return fmt.Errorf("state %v gen %d inflight %d consec %d window %d/%d/%d; reference %v gen %d inflight %d consec %d window %d/%d/%d",
			r.state, r.gen, r.inflight, r.consec, calls, fails, slow,
			b.state, b.gen, b.inflight, b.consec, rc, rf, rs)
	}
	return nil
}

// TestModel drives the machine and the reference with the same random
// schedule of checks, outcomes and lost outcomes, and requires identical
// decisions, transitions and counts at every step. Between steps the record
// goes through the codec, as it does through shared data.
func TestModel(t *testing.T) {
	seen := map[string]int{}
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		s := randomSettings(rng)
		m, err := NewMachine(s)
		if err != nil {
			t.Fatalf("seed %d: %v (%+v)", seed, err, s)
		}
		ref := newRef(s)
		var r Record
		m.Reset(&r)
		type pending struct{ mt, rt Ticket }
		var out []pending
		now := t0.UnixNano()
		failP := rng.Float64()
		for i := 0; i < 3000; i++ {
			switch rng.IntN(10) {
			case 0:
				now += int64(rng.IntN(int(5 * sec)))
			case 1:
				now -= int64(rng.IntN(int(sec))) // the clock may step back
			default:
				now += int64(rng.IntN(int(50 * time.Millisecond)))
			}
			if len(out) == 0 || rng.IntN(2) == 0 {
				mt, md, _ := m.check(&r, now, nil)
				rt, rd := ref.check(now)
				// quiet is Breaker's read-skipping hint, not machine state.
				if mt.Generation() != rt.Generation() || mt.Probe() != rt.Probe() || md != rd {
					t.Fatalf("seed %d step %d check: machine %+v %+v, reference %+v %+v (settings %+v)", seed, i, mt, md, rt, rd, s)
				}
				if mt.Tracked() {
					out = append(out, pending{mt, rt})
				}
				seen["check "+md.Transition.String()]++
				if md.Shadowed {
					seen["shadowed"]++
				}
			} else {
				j := rng.IntN(len(out))
				p := out[j]
				out[j] = out[len(out)-1]
				out = out[:len(out)-1]
				if rng.IntN(20) == 0 {
					continue // the outcome is lost
				}
				o := Outcome{Failure: rng.Float64() < failP, Duration: time.Duration(rng.IntN(int(2 * sec)))}
				mtr, _ := m.report(&r, p.mt, o, now, nil)
				rtr := ref.report(p.rt, o, now)
				if mtr != rtr {
					t.Fatalf("seed %d step %d report %+v: machine %v, reference %v (settings %+v)", seed, i, o, mtr, rtr, s)
				}
				seen["report "+mtr.String()]++
			}
			if err := compareState(m, &r, ref); err != nil {
				t.Fatalf("seed %d step %d: %v (settings %+v)", seed, i, err, s)
			}
			enc := r.Encode(nil)
			var back Record
			if err := back.Decode(enc); err != nil {
				t.Fatalf("seed %d step %d: decode own encoding: %v", seed, i, err)
			}
			if !bytes.Equal(back.Encode(nil), enc) {
				t.Fatalf("seed %d step %d: encoding not canonical", seed, i)
			}
			r = back
		}
	}
	// The schedules must actually reach every transition, or agreement
	// would prove little.
	for _, k := range []string{"check half_opened", "check reopened", "report opened", "report reopened", "report recovered", "shadowed"} {
		if seen[k] == 0 {
			t.Errorf("no %q in any schedule: %v", k, seen)
		}
	}
	t.Logf("events: %v", seen)
}
