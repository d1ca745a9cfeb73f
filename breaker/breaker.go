package breaker

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// ErrContended is returned when the CAS retries ran out.
var ErrContended = errors.New("breaker: cas retries exhausted")

// Breaker runs a Machine against one key of a Store with a bounded CAS loop:
// read, decide, write with the CAS just read, and on a mismatch start over
// from the fresh value. Every committed change is therefore based on the
// latest state, and no update is lost.
//
// A Breaker keeps scratch buffers and is not safe for concurrent use; give
// each worker its own, all sharing the Store, just as each Envoy worker VM
// has its own plugin instance over one shared data.
type Breaker struct {
	m     *Machine
	store store.Store
	key   string
	rec   Record
	buf   [MaxEncodedLen]byte
	stats Stats
	// cause is the cause of the last transition committed (cause.go).
	cause Cause
}

// Stats counts what the CAS loop had to deal with, for metrics.
type Stats struct {
	// Retries counts CAS mismatches that were retried.
	Retries uint64
	// Exhausted counts Checks and Reports that gave up after MaxRetries.
	Exhausted uint64
	// CorruptResets counts stored values that failed to decode and were
	// replaced with a fresh closed breaker.
	CorruptResets uint64
	// StoreErrors counts Get or Set failures other than not-found and CAS
	// mismatch.
	StoreErrors uint64
}

// NewBreaker binds m to key in s.
func NewBreaker(m *Machine, s store.Store, key string) *Breaker {
	return &Breaker{m: m, store: s, key: key}
}

// Machine returns the breaker's compiled settings.
func (b *Breaker) Machine() *Machine { return b.m }

// Stats returns the counters so far.
func (b *Breaker) Stats() Stats { return b.stats }

// Init writes a fresh state if the key does not exist yet. It is optional:
// a missing key reads as a fresh closed breaker and is created with
// store.CreateCAS, so two workers creating it at once cannot lose an update.
func (b *Breaker) Init() error {
	if b.m.mode == ModeDisabled || b.m.mode == ModeForcedOpen {
		return nil
	}
	_, _, err := b.store.Get(b.key)
	if err == nil {
		return nil
	}
	if !store.IsNotFound(err) {
		b.stats.StoreErrors++
		return fmt.Errorf("breaker %q: %w", b.key, err)
	}
	b.m.Reset(&b.rec)
	err = b.store.Set(b.key, b.rec.Encode(b.buf[:0]), store.CreateCAS)
	if store.IsCASMismatch(err) {
		return nil // another worker created it first
	}
	if err != nil {
		b.stats.StoreErrors++
		return fmt.Errorf("breaker %q: %w", b.key, err)
	}
	return nil
}

// load reads the key into b.rec. A missing key or a corrupt value yields a
// fresh closed breaker. corrupt asks the caller to write even an unchanged
// decision back, so that the garbage is replaced (under its CAS) at once.
func (b *Breaker) load() (cas uint32, corrupt bool, err error) {
	v, cas, err := b.store.Get(b.key)
	if err != nil {
		if store.IsNotFound(err) {
			b.m.Reset(&b.rec)
			return store.CreateCAS, false, nil
		}
		b.stats.StoreErrors++
		return 0, false, err
	}
	if err := b.rec.Decode(v); err != nil {
		b.stats.CorruptResets++
		b.m.Reset(&b.rec)
		return cas, true, nil
	}
	b.m.adopt(&b.rec)
	return cas, false, nil
}

// Check decides whether a request may go through at now. A non-nil error
// means the decision could not be committed (ErrContended or a store error)
// and OnContention decided instead; the Decision is still the one to apply.
func (b *Breaker) Check(now time.Time) (Ticket, Decision, error) {
	if b.m.mode == ModeDisabled || b.m.mode == ModeForcedOpen {
		t, d, _ := b.m.Check(&b.rec, now)
		return t, d, nil
	}
	ns := now.UnixNano()
	for attempt := 0; ; attempt++ {
		cas, corrupt, err := b.load()
		if err != nil {
			// Without the state, rejecting could cut off a healthy backend
			// because of a store fault, so both policies allow.
			return Ticket{}, Decision{Allowed: true, State: Closed}, fmt.Errorf("breaker %q: %w", b.key, err)
		}
		last := b.rec.state
		t, d, changed := b.m.check(&b.rec, ns, &b.cause)
		if !changed && !corrupt {
			return t, d, nil
		}
		err = b.store.Set(b.key, b.rec.Encode(b.buf[:0]), cas)
		if err == nil {
			return t, d, nil
		}
		if !store.IsCASMismatch(err) {
			b.stats.StoreErrors++
			return Ticket{}, b.contended(last), fmt.Errorf("breaker %q: %w", b.key, err)
		}
		if attempt >= b.m.maxRetries {
			b.stats.Exhausted++
			return Ticket{}, b.contended(last), fmt.Errorf("breaker %q: %w", b.key, ErrContended)
		}
		b.stats.Retries++
	}
}

// contended is the decision when a needed write could not be committed.
// Only open and half-open ever need a write on Check.
func (b *Breaker) contended(last State) Decision {
	if b.m.onContention == FailOpen || last == Closed {
		return Decision{Allowed: true, State: last}
	}
	return b.m.reject(Decision{State: last})
}

// Report records the outcome of a request admitted with t. On ErrContended
// or a store error the outcome is dropped; a dropped probe outcome leaves
// its slot taken until ProbeTimeout re-opens the breaker.
//
// A success admitted by a closed breaker that counted only consecutive
// failures and had none (the healthy steady state) is not read or written
// at all: it would have changed nothing that was stored when it was
// admitted. The one thing this gives up is a success resetting a failure
// streak that other requests started while it was in flight, so such a
// streak can trip the breaker despite an interleaved success: the breaker
// errs towards opening, never towards staying closed.
func (b *Breaker) Report(t Ticket, o Outcome, now time.Time) (Transition, error) {
	if !t.Tracked() || b.m.mode == ModeDisabled || b.m.mode == ModeForcedOpen {
		return NoTransition, nil
	}
	if t.quiet && !o.Failure && (b.m.slowDuration == 0 || o.Duration <= b.m.slowDuration) {
		return NoTransition, nil
	}
	ns := now.UnixNano()
	for attempt := 0; ; attempt++ {
		cas, corrupt, err := b.load()
		if err != nil {
			return NoTransition, fmt.Errorf("breaker %q: %w", b.key, err)
		}
		tr, changed := b.m.report(&b.rec, t, o, ns, &b.cause)
		if !changed && !corrupt {
			return NoTransition, nil
		}
		err = b.store.Set(b.key, b.rec.Encode(b.buf[:0]), cas)
		if err == nil {
			return tr, nil
		}
		if !store.IsCASMismatch(err) {
			b.stats.StoreErrors++
			return NoTransition, fmt.Errorf("breaker %q: %w", b.key, err)
		}
		if attempt >= b.m.maxRetries {
			b.stats.Exhausted++
			return NoTransition, fmt.Errorf("breaker %q: %w", b.key, ErrContended)
		}
		b.stats.Retries++
	}
}

// Preview is the decision Check would make at now, without taking a
// probe slot or writing anything, and without a ticket: for a request
// that will not reach the upstream, so has no outcome to report, but
// must be refused where a request would be (the admin route's denied
// requests). An open breaker past its timeout previews as half-open with
// a free probe slot: allowed.
func (b *Breaker) Preview(now time.Time) (Decision, error) {
	if b.m.mode == ModeDisabled || b.m.mode == ModeForcedOpen {
		_, d, _ := b.m.Check(&b.rec, now)
		return d, nil
	}
	if _, _, err := b.load(); err != nil {
		// As Check: without the state, allow.
		return Decision{Allowed: true, State: Closed}, fmt.Errorf("breaker %q: %w", b.key, err)
	}
	rec := b.rec // check changes the record it is given; this one is thrown away
	_, d, _ := b.m.check(&rec, now.UnixNano(), nil)
	d.Transition = NoTransition
	return d, nil
}

// Peek returns the state stored for the key without changing it, for a
// state gauge. An open breaker past its timeout still reads Open.
func (b *Breaker) Peek() (State, error) {
	switch b.m.mode {
	case ModeDisabled:
		return Closed, nil
	case ModeForcedOpen:
		return Open, nil
	}
	if _, _, err := b.load(); err != nil {
		return Closed, fmt.Errorf("breaker %q: %w", b.key, err)
	}
	return b.rec.state, nil
}
