package breaker

import (
	"github.com/sluice-proxy/sluice/internal/enum"
	"math"
	"math/bits"
	"time"
)

// State is the breaker's position.
type State uint8

const (
	Closed State = iota
	Open
	HalfOpen
)

func (s State) String() string {
	return enum.Name(s, "State", "closed", "open", "half_open")
}

// Transition is a state change committed by one Check or Report. Exactly one
// caller sees each transition, because only the winner of the CAS commits it,
// so the filter can count them as metrics.
type Transition uint8

const (
	NoTransition Transition = iota
	// Opened is closed → open: a trip.
	Opened
	// Reopened is half-open → open: a failed, slow or lost probe.
	Reopened
	// HalfOpened is open → half-open: the open timeout passed.
	HalfOpened
	// Recovered is half-open → closed.
	Recovered
)

func (t Transition) String() string {
	return enum.Name(t, "Transition", "none", "opened", "reopened", "half_opened", "recovered")
}

// IsOpen reports whether the transition entered the open state, which is
// what an "opens" counter counts.
func (t Transition) IsOpen() bool { return t == Opened || t == Reopened }

// Ticket ties an admitted request to the generation that admitted it. Keep
// it with the request and hand it to Report with the outcome. The zero Ticket
// is untracked: its outcome is ignored.
type Ticket struct {
	gen   uint32
	probe bool
	// quiet: admitted by a closed breaker with no failure streak and no
	// window, where a success changes nothing that was stored at the time.
	quiet bool
}

// Generation is the generation that admitted the request, 0 if untracked.
func (t Ticket) Generation() uint32 { return t.gen }

// Quiet reports a ticket whose success Report ignores: admitted by a
// closed breaker with no failure streak and no window. Only a failure or,
// with SlowCallDuration set, a slow call is recorded for it, so a caller
// can skip measuring an outcome it knows is a fast success.
func (t Ticket) Quiet() bool { return t.quiet }

// Probe reports whether the request holds a half-open probe slot.
func (t Ticket) Probe() bool { return t.probe }

// Tracked reports whether the request's outcome will be considered.
func (t Ticket) Tracked() bool { return t.gen != 0 }

// Outcome is what happened to an admitted request.
type Outcome struct {
	// Failure is the filter's verdict (status, reset, timeout).
	Failure bool
	// Duration is the call's latency, compared with SlowCallDuration.
	Duration time.Duration
}

// Decision is the result of a Check.
type Decision struct {
	// Allowed says whether to forward the request.
	Allowed bool
	// Shadowed is set in ModeMetricsOnly when the request is allowed but
	// enforce would have rejected it.
	Shadowed bool
	// RetryAfter, on a rejection, is the time until the breaker goes
	// half-open. It is 0 when no deadline is known: half-open with every
	// probe slot taken (a slot may free at any moment), forced open, or a
	// rejection on contention. Retry-After should then be its minimum.
	RetryAfter time.Duration
	// State is the breaker's state after the decision.
	State State
	// Transition is the state change this Check committed, if any.
	Transition Transition
}

// Record is one breaker's state as kept in the store: a fixed-size value, so
// decisions never allocate. The zero Record is not valid; get one from
// Machine.Reset or Decode.
type Record struct {
	state State
	// gen changes on every transition and is never 0, so the zero Ticket
	// never matches.
	gen uint32
	// at is, when open, the Unix ns at which half-open begins; when
	// half-open with probes in flight, the Unix ns of the latest probe
	// admission; otherwise 0.
	at int64
	// streak counts opens since the last close, for the timeout multiplier.
	streak uint16
	// consec is consecutive failures when closed, consecutive successful
	// probes when half-open, and 0 when open.
	consec uint32
	// inflight is the number of probes out in half-open, 0 otherwise.
	inflight uint32

	win windowKind
	// Count window: a ring of size outcomes; head is the next slot to
	// write and filled how many slots hold an outcome.
	size, filled, head uint16
	failBits, slowBits [countWords]uint64
	// Time window: epoch is the index (Unix ns / bucket width) of the
	// newest bucket, which lives at buckets[epoch mod TimeWindowBuckets].
	epoch   int64
	buckets [TimeWindowBuckets]bucket
}

type windowKind uint8

const (
	winNone windowKind = iota
	winCount
	winTime
)

const countWords = MaxCountWindow / 64

type bucket struct{ calls, fails, slow uint32 }

// State is the breaker's state as last recorded; an open breaker whose
// timeout has passed still reads Open until the next Check moves it.
func (r *Record) State() State { return r.state }

// Generation is the current generation.
func (r *Record) Generation() uint32 { return r.gen }

// InFlight is the number of half-open probes out.
func (r *Record) InFlight() uint32 { return r.inflight }

// WindowCounts returns the calls, failures and slow calls in the window as
// last recorded (a time window is not aged to any clock here).
func (r *Record) WindowCounts() (calls, failures, slow uint32) {
	switch r.win {
	case winCount:
		calls = uint32(r.filled)
		for i := range min(wordsFor(r.size), countWords) {
			failures += uint32(bits.OnesCount64(r.failBits[i]))
			slow += uint32(bits.OnesCount64(r.slowBits[i]))
		}
	case winTime:
		for _, b := range r.buckets {
			calls += b.calls
			failures += b.fails
			slow += b.slow
		}
	}
	return calls, failures, slow
}

// Machine is the compiled, immutable form of Settings: the pure decision
// functions. It is safe for concurrent use; the Records it works on are not.
type Machine struct {
	mode             Mode
	failureThreshold uint32
	failureRate      uint64
	slowDuration     time.Duration
	slowRate         uint64
	win              windowKind
	winSize          uint16
	bucketWidth      int64
	minCalls         uint32
	successThreshold uint32
	openTimeout      int64
	multiplier       float64
	maxOpenTimeout   int64
	jitterPercent    uint8
	random           func() uint64
	maxProbes        uint32
	probeTimeout     int64
	maxRetries       int
	onContention     ContentionPolicy
}

// NewMachine validates s and resolves its defaults.
func NewMachine(s Settings) (*Machine, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	m := &Machine{
		mode:             s.Mode,
		failureThreshold: s.FailureThreshold,
		failureRate:      uint64(s.FailureRatePercent),
		slowDuration:     s.SlowCallDuration,
		successThreshold: orDefault(s.SuccessThreshold, DefaultSuccessThreshold),
		openTimeout:      int64(s.OpenTimeout),
		maxOpenTimeout:   int64(s.MaxOpenTimeout),
		jitterPercent:    s.JitterPercent,
		random:           s.Random,
		maxProbes:        orDefault(s.HalfOpenMaxRequests, DefaultHalfOpenMaxRequests),
		probeTimeout:     int64(s.ProbeTimeout),
		maxRetries:       s.MaxRetries,
		onContention:     s.OnContention,
	}
	if s.SlowCallDuration > 0 {
		m.slowRate = uint64(orDefault(s.SlowCallPercent, 100))
	}
	if m.openTimeout == 0 {
		m.openTimeout = int64(DefaultOpenTimeout)
	}
	if s.OpenTimeoutMultiplier > 1 {
		m.multiplier = s.OpenTimeoutMultiplier
		if m.maxOpenTimeout == 0 {
			m.maxOpenTimeout = satMul(m.openTimeout, 10)
		}
	}
	if m.probeTimeout == 0 {
		m.probeTimeout = m.openTimeout
	}
	if m.maxRetries == 0 {
		m.maxRetries = DefaultMaxRetries
	}
	if m.failureRate > 0 || m.slowRate > 0 {
		w := s.Window
		if w.Type == WindowTime {
			m.win = winTime
			d := w.Duration
			if d == 0 {
				d = DefaultWindowDuration
			}
			m.bucketWidth = int64(d) / TimeWindowBuckets
			m.minCalls = orDefault(w.MinimumCalls, DefaultMinimumCalls)
		} else {
			m.win = winCount
			m.winSize = uint16(orDefault(w.Size, DefaultWindowSize))
			m.minCalls = orDefault(w.MinimumCalls, uint32(m.winSize))
		}
	}
	return m, nil
}

func orDefault(v, def uint32) uint32 {
	if v == 0 {
		return def
	}
	return v
}

// Mode is the breaker's configured mode.
func (m *Machine) Mode() Mode { return m.mode }

// Reset makes r a fresh closed breaker with an empty window. It is the safe
// state a key starts from when it is missing or its stored bytes are
// corrupt: a healthy backend keeps its traffic, and a failing one re-trips
// after FailureThreshold calls.
func (m *Machine) Reset(r *Record) {
	*r = Record{state: Closed, gen: 1}
	m.resetWindow(r)
}

// adopt fits a decoded Record to the current settings: a window of another
// kind or size (the config changed) restarts empty, since its outcomes
// cannot be reinterpreted.
func (m *Machine) adopt(r *Record) {
	if r.win != m.win || (m.win == winCount && r.size != m.winSize) {
		m.resetWindow(r)
	}
}

func (m *Machine) resetWindow(r *Record) {
	r.win = m.win
	r.size, r.filled, r.head = 0, 0, 0
	r.failBits = [countWords]uint64{}
	r.slowBits = [countWords]uint64{}
	r.epoch = 0
	r.buckets = [TimeWindowBuckets]bucket{}
	if m.win == winCount {
		r.size = m.winSize
	}
}

// Check decides whether a request may go through at now. changed reports
// whether r was modified and must be written back; a closed breaker never
// changes on Check.
func (m *Machine) Check(r *Record, now time.Time) (t Ticket, d Decision, changed bool) {
	return m.check(r, now.UnixNano(), nil)
}

// check is Check; c, when not nil, receives the cause of a transition.
func (m *Machine) check(r *Record, now int64, c *Cause) (Ticket, Decision, bool) {
	switch m.mode {
	case ModeDisabled:
		return Ticket{}, Decision{Allowed: true, State: Closed}, false
	case ModeForcedOpen:
		return Ticket{}, Decision{State: Open}, false
	}
	var d Decision
	changed := false
	if r.state == Open {
		if now < r.at {
			d.State = Open
			d.RetryAfter = time.Duration(r.at - now)
			return Ticket{}, m.reject(d), false
		}
		m.toHalfOpen(r)
		setCause(c, Cause{Reason: ReasonOpenTimeout})
		d.Transition = HalfOpened
		changed = true
	}
	if r.state == HalfOpen {
		if r.inflight > 0 && now-r.at >= m.probeTimeout {
			setCause(c, Cause{Reason: ReasonProbeFailed, Failures: r.inflight, Calls: r.inflight + r.consec})
			m.open(r, now)
			d.State = Open
			d.Transition = Reopened
			d.RetryAfter = time.Duration(r.at - now)
			return Ticket{}, m.reject(d), true
		}
		d.State = HalfOpen
		if r.inflight < m.maxProbes {
			r.inflight++
			r.at = now
			d.Allowed = true
			return Ticket{gen: r.gen, probe: true}, d, true
		}
		return Ticket{}, m.reject(d), changed
	}
	return Ticket{gen: r.gen, quiet: r.consec == 0 && r.win == winNone}, Decision{Allowed: true, State: Closed}, false
}

func (m *Machine) reject(d Decision) Decision {
	if m.mode == ModeMetricsOnly {
		d.Allowed = true
		d.Shadowed = true
	} else {
		d.Allowed = false
	}
	return d
}

// Report records the outcome of a request admitted with t. Outcomes of an
// earlier generation, of untracked tickets, and any outcome while open are
// ignored. changed reports whether r must be written back.
func (m *Machine) Report(r *Record, t Ticket, o Outcome, now time.Time) (tr Transition, changed bool) {
	return m.report(r, t, o, now.UnixNano(), nil)
}

// report is Report; c, when not nil, receives the cause of a transition.
func (m *Machine) report(r *Record, t Ticket, o Outcome, now int64, c *Cause) (Transition, bool) {
	if m.mode == ModeDisabled || m.mode == ModeForcedOpen || t.gen == 0 || t.gen != r.gen {
		return NoTransition, false
	}
	failed := o.Failure
	slow := m.slowDuration > 0 && o.Duration > m.slowDuration
	switch r.state {
	case HalfOpen:
		if !t.probe {
			return NoTransition, false
		}
		if r.inflight > 0 {
			r.inflight--
		}
		// A slow probe has not shown recovery either, so it re-opens too.
		if failed || slow {
			setCause(c, Cause{Reason: ReasonProbeFailed, Failures: 1, Calls: r.consec + 1})
			m.open(r, now)
			return Reopened, true
		}
		r.consec++
		if r.consec >= m.successThreshold {
			setCause(c, Cause{Reason: ReasonProbesSucceeded, Calls: r.consec})
			m.close(r)
			return Recovered, true
		}
		if r.inflight == 0 {
			r.at = 0
		}
		return NoTransition, true
	case Closed:
		if t.probe {
			return NoTransition, false
		}
		if failed {
			if r.consec < math.MaxUint32 {
				r.consec++
			}
		} else {
			if r.consec == 0 && r.win == winNone {
				return NoTransition, false // nothing to store
			}
			r.consec = 0
		}
		m.record(r, failed, slow, now)
		if why := m.trip(r); why != ReasonNone {
			setCause(c, tripCause(r, why))
			m.open(r, now)
			return Opened, true
		}
		return NoTransition, true
	}
	return NoTransition, false
}

func (m *Machine) record(r *Record, failed, slow bool, now int64) {
	switch r.win {
	case winCount:
		i := r.head
		word, bit := i/64, uint64(1)<<(i%64)
		r.failBits[word] &^= bit
		r.slowBits[word] &^= bit
		if failed {
			r.failBits[word] |= bit
		}
		if slow {
			r.slowBits[word] |= bit
		}
		r.head++
		if r.head == r.size {
			r.head = 0
		}
		if r.filled < r.size {
			r.filled++
		}
	case winTime:
		m.advance(r, now)
		b := &r.buckets[mod(r.epoch, TimeWindowBuckets)]
		if b.calls < math.MaxUint32 {
			b.calls++
			if failed {
				b.fails++
			}
			if slow {
				b.slow++
			}
		}
	}
}

// advance moves a time window's newest bucket to now's, clearing the
// buckets that fell out. A clock behind the newest bucket (another worker's
// clock, or time going backwards) records into the newest bucket instead.
func (m *Machine) advance(r *Record, now int64) {
	e := floorDiv(now, m.bucketWidth)
	if e <= r.epoch {
		return
	}
	// Unsigned, because a far-apart pair of epochs overflows int64.
	if uint64(e)-uint64(r.epoch) >= TimeWindowBuckets {
		r.buckets = [TimeWindowBuckets]bucket{}
	} else {
		for i := r.epoch + 1; i <= e; i++ {
			r.buckets[mod(i, TimeWindowBuckets)] = bucket{}
		}
	}
	r.epoch = e
}

// trip is why a closed record trips: ReasonNone when it does not.
func (m *Machine) trip(r *Record) Reason {
	if m.failureThreshold > 0 && r.consec >= m.failureThreshold {
		return ReasonConsecutiveFailures
	}
	if r.win == winNone {
		return ReasonNone
	}
	calls, fails, slow := r.WindowCounts()
	if calls == 0 || calls < m.minCalls {
		return ReasonNone
	}
	c := uint64(calls)
	if m.failureRate > 0 && uint64(fails)*100 >= m.failureRate*c {
		return ReasonFailureRate
	}
	if m.slowRate > 0 && uint64(slow)*100 >= m.slowRate*c {
		return ReasonSlowCallRate
	}
	return ReasonNone
}

func (m *Machine) open(r *Record, now int64) {
	r.state = Open
	r.gen = nextGen(r.gen)
	if r.streak < math.MaxUint16 {
		r.streak++
	}
	r.at = satAdd(now, m.jittered(m.timeout(r.streak)))
	r.consec = 0
	r.inflight = 0
	m.resetWindow(r)
}

func (m *Machine) toHalfOpen(r *Record) {
	r.state = HalfOpen
	r.gen = nextGen(r.gen)
	r.at = 0
	r.consec = 0
	r.inflight = 0
}

func (m *Machine) close(r *Record) {
	r.state = Closed
	r.gen = nextGen(r.gen)
	r.at = 0
	r.streak = 0
	r.consec = 0
	r.inflight = 0
	m.resetWindow(r)
}

// timeout is the open timeout of the streak-th consecutive open.
func (m *Machine) timeout(streak uint16) int64 {
	if m.multiplier <= 1 || streak <= 1 {
		return m.openTimeout
	}
	d := float64(m.openTimeout) * math.Pow(m.multiplier, float64(streak-1))
	if d >= float64(m.maxOpenTimeout) || math.IsInf(d, 0) || math.IsNaN(d) {
		return m.maxOpenTimeout
	}
	return int64(d)
}

// OpenTimeout is the open timeout of the n-th consecutive open (n >= 1).
func (m *Machine) OpenTimeout(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if n > math.MaxUint16 {
		n = math.MaxUint16
	}
	return time.Duration(m.timeout(uint16(n)))
}

func nextGen(g uint32) uint32 {
	g++
	if g == 0 {
		g = 1
	}
	return g
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func mod(a, b int64) int64 {
	r := a % b
	if r < 0 {
		r += b
	}
	return r
}
