package limiter

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// Table defaults and bounds.
const (
	// DefaultSlots bounds a table to 16384 shared-data keys (about 24 bytes
	// of value each plus the host's per-key overhead).
	DefaultSlots = 1 << 14
	// MaxSlots caps Slots. What it bounds is the host's shared data: a
	// million slots are a million keys of some 50 bytes of name and value
	// plus the host's per-entry overhead, well over 100 MB for one limit.
	// A worker only keeps the names of slots it has used.
	MaxSlots = 1 << 20
	// DefaultOverflowDivisor sets the default number of overflow buckets:
	// Slots/16 (at least 1). See the package doc, "Bounded keys".
	DefaultOverflowDivisor = 16
	// DefaultWays is the number of candidate slots per client key. Two
	// candidates make it far likelier that a new key finds a free or idle
	// slot instead of being decided on a shared overflow bucket.
	DefaultWays = 2
	// MaxWays caps Ways.
	MaxWays = 4
	// DefaultMaxRetries is the CAS retry budget per key and decision.
	DefaultMaxRetries = 8
	// DefaultPrefix prefixes every shared-data key of a table.
	DefaultPrefix = "sluice.rl."
	// ForgetAny, as TableConfig.ForgetMaxUsed (or any larger value),
	// forgets the least-used candidate whatever it used: no newcomer is
	// ever homeless, so none is decided on a shared overflow bucket, and a
	// forgotten key that returns is a newcomer that gets its own fresh
	// allowance. Each forgetting over-admits its key by at most the units
	// it had used, at most its Capacity (twice that after charges). It is
	// MaxRate so that a config can spell it.
	ForgetAny = MaxRate
	// DefaultForgetMaxUsed is the default TableConfig.ForgetMaxUsed. A
	// smaller cap leaves the keys above it in place, which during a flood
	// makes newcomers homeless and lets a returning forgotten key find its
	// overflow bucket drained (see the package doc).
	DefaultForgetMaxUsed = ForgetAny
	// ForgetNone, as TableConfig.ForgetMaxUsed, forgets no key: a
	// newcomer takes only a slot idle for a refill span, and the table
	// never over-admits.
	ForgetNone = -1

	fingerprintLen = 8

	// overflowFingerprint marks the value of an overflow bucket. Overflow
	// buckets have their own key names, so it only has to be readable.
	overflowFingerprint = 0x776f6c667265766f // "overflow"

)

// ContentionPolicy decides a request whose CAS retries ran out or whose
// store failed.
type ContentionPolicy uint8

const (
	// ContentionDeny (the default) denies: the limiter's promise is that it
	// never admits more than the limit, and running out of retries means
	// the key is hot, i.e. exactly when an unaccounted admission could
	// exceed it. Such denials are counted in Stats.Contention.
	ContentionDeny ContentionPolicy = iota
	// ContentionAllow admits without consuming (fail open).
	ContentionAllow
)

// TableConfig configures a Table. Every zero value means the default.
type TableConfig struct {
	// Prefix starts every shared-data key of the table; tables sharing a
	// store need distinct prefixes. Zero: DefaultPrefix. Keep a limit's
	// prefix across config reloads so memory stays bounded: a token-bucket
	// state written under another rate is carried over (its TAT rounded up
	// to a whole nanosecond), while state impossible under the new Limit
	// (another algorithm, counts above a lowered limit) is treated as used
	// up at the time it is found.
	Prefix string
	// Slots is the number of client-key slots, rounded up to a power of
	// two. Zero: DefaultSlots. Max: MaxSlots. The table creates at most
	// Slots + OverflowSlots shared-data keys.
	Slots int
	// OverflowSlots is the number of overflow buckets that decide keys
	// finding no slot (see the package doc, "Bounded keys"), rounded up to
	// a power of two. Zero: Slots/DefaultOverflowDivisor, at least 1.
	// Max: Slots.
	OverflowSlots int
	// Ways is how many candidate slots a client key may live in (1..MaxWays,
	// at most Slots). Zero: DefaultWays.
	Ways int
	// Seed is mixed into the key hash. Every worker must use the same seed;
	// deriving it from configuration makes slot collisions hard to aim at.
	// Zero is a valid seed.
	Seed uint64
	// MaxRetries is how many times a decision is retried after a CAS
	// mismatch. Zero: DefaultMaxRetries. Negative: no retries.
	MaxRetries int
	// OnContention decides when retries run out or the store fails.
	// Zero: ContentionDeny.
	OnContention ContentionPolicy
	// ForgetMaxUsed is the most units (Limit.Used) a key may have used
	// and still be forgotten, its slot given to a newcomer whose
	// candidates are all held; a forgotten key that returns can be
	// over-admitted by at most the units it had used (see the package
	// doc, "Forgetting the least-used key"). Zero: DefaultForgetMaxUsed.
	// ForgetAny or more: any key. Negative (ForgetNone): no key is
	// forgotten.
	ForgetMaxUsed int64
}

// Stats counts events since the Table was created; the filter exports them
// as metrics. They are per Table, i.e. per worker.
type Stats struct {
	// Evictions counts slots taken over whose value was unreadable even
	// after healing (a slot holding another key's readable, non-idle state
	// is never taken over). The new key starts from a used-up state.
	Evictions uint64
	// LosslessTakeovers counts slots taken over whose state was idle
	// (full): for at least one refill span, or, when forgetting is on
	// (TableConfig.ForgetMaxUsed), at all.
	LosslessTakeovers uint64
	// Overflow counts decisions made on an overflow bucket's state: of keys
	// with no slot and no candidate free to take (homeless), and of keys
	// placed in a slot while their overflow bucket was not full (they start
	// from its state).
	Overflow uint64
	// OverflowDenied counts the Overflow decisions that were denied.
	OverflowDenied uint64
	// Forgotten counts keys forgotten to place a newcomer: a slot holding
	// another key's state that had used from 1 to ForgetMaxUsed units
	// (any number under ForgetAny).
	// ForgottenUnits adds up those units (Limit.Used when forgotten): the
	// most the forgotten keys can be over-admitted by, all together.
	Forgotten, ForgottenUnits uint64
	// OverflowRaces counts keys placed in a slot while a decision of the
	// same key on its overflow bucket raced with the placement; the placed
	// state is then raised to used up (see "Bounded keys").
	OverflowRaces uint64
	// CASMismatches counts commits that lost a race and were re-decided.
	CASMismatches uint64
	// Contention counts decisions whose retry budget ran out.
	Contention uint64
	// CorruptStates counts stored values that failed to decode or were
	// impossible. Each is overwritten with the empty state at the time it
	// was found (keeping its fingerprint when readable), from which it
	// refills like any bucket.
	CorruptStates uint64
	// StoreErrors counts store failures other than CAS mismatches.
	StoreErrors uint64
	// DuplicateMerges counts keys found in two slots after a takeover race
	// and merged back into one.
	DuplicateMerges uint64
	// RefundsLost counts AllowAll rollbacks that could not restore a key
	// because another worker had written it in between; those units stay
	// consumed (under-admission, never over-admission).
	RefundsLost uint64
}

// Table keeps the state of one Limit for any number of client keys in a
// fixed set of shared-data keys. It is not safe for concurrent use: each
// worker (VM) has its own Table over the shared store, and the store's CAS
// is what makes the workers exact together.
type Table struct {
	store      store.Store
	limit      Limit
	mask       uint64
	ways       int
	seed       uint64
	maxRetries int
	policy     ContentionPolicy
	ovMask     uint64
	// forgetMax is TableConfig.ForgetMaxUsed resolved; negative: none;
	// math.MaxInt64: any.
	forgetMax int64
	// hold is how long a slot's state must have been idle before another
	// key may take the slot: the limit's refill span.
	hold int64
	// slotKeys and ovKeys name the slots, built as they are used.
	slotKeys *store.SlotNames
	ovKeys   *store.SlotNames
	buf      []byte
	// stats is shared with the tables WithLimit derives, which count
	// into the same slots.
	stats *Stats
	// scanned are the sliding logs this table last checked when reading
	// slots (a decision reads every candidate and the overflow bucket):
	// the decision that follows would scan its log again.
	scanned     [MaxWays + 1]logScan
	nextScanned int
	// logBuf holds the log an AllowN or Charge of a sliding log is about
	// to write (see addToLog), reused from one decision to the next.
	logBuf []byte
}

// logScan is what scanLog found in one log at one instant. The log is
// named by its bytes' address and length, which within one read of the
// slots (lookup clears the scans) can only be the same log.
type logScan struct {
	data *byte
	size int
	now  int64
	live string
	used uint64
	ok   bool
}

// NewTable validates l and cfg and returns a Table over s.
func NewTable(s store.Store, l Limit, cfg TableConfig) (*Table, error) {
	if s == nil {
		return nil, errors.New("limiter: nil store")
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	slots, err := Option("limiter: slots", cfg.Slots, DefaultSlots, MaxSlots)
	if err != nil {
		return nil, err
	}
	size := PowerOfTwo(slots)
	ways, err := Option("limiter: ways", cfg.Ways, DefaultWays, MaxWays)
	if err != nil {
		return nil, err
	}
	ways = min(ways, size)
	retries := RetriesOption(cfg.MaxRetries, DefaultMaxRetries)
	if cfg.OnContention > ContentionAllow {
		return nil, fmt.Errorf("limiter: unknown contention policy %d", cfg.OnContention)
	}
	ov, err := Option("limiter: overflow slots", cfg.OverflowSlots, max(size/DefaultOverflowDivisor, 1), size)
	if err != nil {
		return nil, err
	}
	ovSize := PowerOfTwo(ov)
	forget := cfg.ForgetMaxUsed
	if forget == 0 {
		forget = DefaultForgetMaxUsed
	}
	if forget >= ForgetAny {
		// Used can pass MaxRate (a charged bucket of a large Capacity).
		forget = math.MaxInt64
	}
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Table{
		store:      s,
		limit:      l,
		mask:       uint64(size - 1),
		ways:       ways,
		seed:       cfg.Seed,
		maxRetries: retries,
		policy:     cfg.OnContention,
		ovMask:     uint64(ovSize - 1),
		forgetMax:  max(forget, ForgetNone),
		hold:       refillSpan(l),
		slotKeys:   store.NewSlotNames(prefix, uint64(size)),
		ovKeys:     store.NewSlotNames(prefix+"of.", uint64(ovSize)),
		buf:        make([]byte, 0, fingerprintLen+MaxStateLen),
		stats:      &Stats{},
	}, nil
}

// WithLimit returns a table deciding with l over the same slots, prefix,
// seed and Stats as t, for limits whose rate is chosen per key (answers of
// a limits service): whatever the number of rates, they together use at
// most t's slots. A key met under another rate keeps its state as a
// reload keeps it (see TableConfig.Prefix). It costs a small allocation
// and no slots of its own; like t, it is for one worker.
func (t *Table) WithLimit(l Limit) (*Table, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	d := *t
	d.limit = l
	d.hold = refillSpan(l)
	d.scanned = [MaxWays + 1]logScan{} // scanned under t's limit
	d.logBuf = nil                     // d's decisions must not overwrite t's
	d.buf = make([]byte, 0, fingerprintLen+MaxStateLen)
	return &d, nil
}

// Limit returns the table's Limit.
func (t *Table) Limit() Limit { return t.limit }

// Slots returns the number of client-key slots.
func (t *Table) Slots() int { return int(t.mask + 1) }

// OverflowSlots returns the number of overflow buckets. Slots() +
// OverflowSlots() is the most shared-data keys the table will ever create.
func (t *Table) OverflowSlots() int { return int(t.ovMask + 1) }

// Stats returns the counters so far.
func (t *Table) Stats() Stats { return *t.stats }

// SlotKey returns the shared-data key of slot i.
func (t *Table) SlotKey(i int) string { return t.slotKey(uint64(i) & t.mask) }

// OverflowKey returns the shared-data key of overflow bucket i.
func (t *Table) OverflowKey(i int) string { return t.overflowKey(uint64(i) & t.ovMask) }

func (t *Table) slotKey(i uint64) string { return t.slotKeys.Name(i) }

// overflowKey names overflow bucket i: prefix + "of." + decimal(i), which
// no slot (prefix + decimal) and no other limit's prefix (limit names have
// no dots) can spell.
func (t *Table) overflowKey(i uint64) string {
	return t.ovKeys.Name(i)
}

// overflowIndex is the overflow bucket of a key hash: always the same
// one, and independent of the key's candidate slots.
func (t *Table) overflowIndex(h uint64) uint64 { return mix64(h^overflowFingerprint) & t.ovMask }

// candidate is the i-th slot of a key (store.Probe).
func (t *Table) candidate(h uint64, i int) uint64 { return store.Probe(h, i) & t.mask }

// slotRead is one candidate slot as read from the store.
type slotRead struct {
	key    string
	value  []byte
	cas    uint32
	exists bool
	mine   bool // fingerprint matches
	valid  bool // decoded and possible
	state  State
}

// view is what a decision works on: the slot it will write and the state
// it decides from.
type view struct {
	h        uint64 // the client key's hash
	fp       uint64 // fingerprint written: h, or overflowFingerprint
	slot     slotRead
	state    State
	takeover takeoverKind
	hasDup   bool
	dup      slotRead // second slot holding this key, reset after commit
	// ov is the key's overflow bucket as read for a placement (newSlot or
	// a takeover): the placed key starts from its state, and a change to
	// it before the placement is settled may be a racing decision of the
	// same key on it.
	ov slotRead
	// inherits marks a placement whose overflow bucket was not full: the
	// key is decided on that bucket's state like a homeless one.
	inherits bool
}

type takeoverKind uint8

const (
	ownSlot takeoverKind = iota
	newSlot
	losslessTakeover
	lossyTakeover
	// forgetTakeover: the slot held the least-used live state of another
	// key, which is forgotten (TableConfig.ForgetMaxUsed).
	forgetTakeover
	// overflowBucket: the key is homeless and decided on its overflow
	// bucket; the view's slot is that bucket.
	overflowBucket
	// noSlot: readOwn found no slot of the key (never committed).
	noSlot
)

// refillSpan is how long a used-up key of l takes to become full again:
// Σ = Capacity·Period/Rate for a token bucket, one Period for the windows.
func refillSpan(l Limit) int64 {
	if l.Algorithm != TokenBucket {
		return int64(l.Period)
	}
	q, _ := mul(uint64(l.Capacity()), uint64(l.Period)).div(uint64(l.Rate))
	return int64(min(q, math.MaxInt64))
}

// reclaimable reports a slot state that was already idle one refill span
// ago. Taking such a slot over is lossless (the state is full), and a key
// keeps its slot for at least a refill span after its last request, so
// a key active within its refill span keeps its state however many new
// keys arrive.
func (t *Table) reclaimable(st State, now int64) bool {
	then := now - t.hold
	return then <= now && t.limit.Idle(st, then)
}

// placed reports a view that puts the key into a slot it did not hold.
func (k takeoverKind) placed() bool {
	return k == newSlot || k == losslessTakeover || k == lossyTakeover || k == forgetTakeover
}

// readSlot reads one slot into r, healing a corrupt value. Slots are read
// in place, here and in lookup, because a slot or view returned by value
// is a memory copy in the wasm guest on every request.
func (t *Table) readSlot(r *slotRead, key string, fp uint64, now int64) error {
	corrupt, err := t.parseSlot(r, key, fp, now)
	if err != nil || !corrupt {
		return err
	}
	// Heal: a conservative state relative to now is only conservative if it
	// is stored; recomputing Empty(now) on every read would keep the slot
	// empty forever. The fingerprint is kept when readable so the slot still
	// belongs to its key. Losing the CAS race just means someone else wrote.
	t.stats.CorruptStates++
	owner := fp
	if len(r.value) >= fingerprintLen {
		owner = binary.LittleEndian.Uint64(r.value)
	}
	if err := t.store.Set(key, t.encode(owner, t.limit.Empty(now)), r.cas); err != nil &&
		!store.IsCASMismatch(err) {
		return err
	}
	corrupt, err = t.parseSlot(r, key, fp, now)
	if corrupt {
		t.stats.CorruptStates++
	}
	return err
}

// parseSlot reads one slot into r; corrupt reports a value that exists
// but is not a possible record of this table.
func (t *Table) parseSlot(r *slotRead, key string, fp uint64, now int64) (corrupt bool, err error) {
	*r = slotRead{key: key}
	v, cas, err := t.store.Get(key)
	if store.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.value, r.cas, r.exists = v, cas, true
	if len(v) < fingerprintLen {
		return true, nil
	}
	r.mine = binary.LittleEndian.Uint64(v) == fp
	alg, st, err := DecodeState(v[fingerprintLen:])
	if err == nil && alg == TokenBucket && uint64(st.N) >= uint64(t.limit.Rate) && st.At < math.MaxInt64 {
		// Written under a higher Rate (config reload): the remainder is
		// below one nanosecond in that rate's units, so rounding the TAT up
		// to the next nanosecond keeps the debt without ever shrinking it.
		st = State{At: st.At + 1}
	}
	if err == nil && alg == SlidingLog && t.limit.Algorithm == SlidingLog {
		live, used, ok := t.limit.scanLog(st.Log, now)
		t.scanned[t.nextScanned] = logScan{data: unsafe.StringData(st.Log), size: len(st.Log), now: now, live: live, used: used, ok: ok}
		t.nextScanned = (t.nextScanned + 1) % len(t.scanned)
		if !ok {
			return true, nil
		}
	} else if err == nil {
		// t.limit passed Validate in NewTable (or WithLimit).
		err = t.limit.checkValidState(alg, st, now)
	}
	if err != nil {
		return true, nil
	}
	r.valid, r.state = true, st
	return false, nil
}

// read finds the key's slot, or chooses one to take over, or else its
// overflow bucket, and the state to decide from. See the package doc,
// "Bounded keys".
func (t *Table) read(v *view, h uint64, now int64) error { return t.lookup(v, h, now, true) }

// readOwn finds the key's own slot only: a view that is not ownSlot means
// the key holds none.
func (t *Table) readOwn(v *view, h uint64, now int64) error { return t.lookup(v, h, now, false) }

func (t *Table) lookup(v *view, h uint64, now int64, place bool) error {
	if t.limit.Algorithm == SlidingLog {
		// Only this read's scans may be reused: a log shares the bytes
		// the store handed out, and the host may reuse that memory once
		// the callback returns.
		t.scanned, t.nextScanned = [MaxWays + 1]logScan{}, 0
	}
	var slots [MaxWays]slotRead
	*v = view{h: h, fp: h}
	stateOf := func(r *slotRead) State {
		if r.valid {
			return r.state
		}
		return t.limit.Empty(now)
	}
	owner := -1
	for i := 0; i < t.ways; i++ {
		r := &slots[i]
		if err := t.readSlot(r, t.slotKey(t.candidate(h, i)), h, now); err != nil {
			return err
		}
		if r.mine && owner < 0 {
			owner = i
		}
	}
	if owner >= 0 {
		v.slot, v.state = slots[owner], stateOf(&slots[owner])
		for i := owner + 1; i < t.ways; i++ {
			if r := &slots[i]; r.mine && !(r.valid && t.limit.Idle(r.state, now)) {
				v.state = t.limit.Merge(v.state, stateOf(r), now)
				v.hasDup, v.dup = true, *r
				break
			}
		}
		return nil
	}
	if !place {
		v.takeover = noSlot
		return nil
	}
	chosen, kind := -1, ownSlot
	for i := 0; i < t.ways && chosen < 0; i++ {
		if !slots[i].exists {
			chosen, kind = i, newSlot
		}
	}
	for i := 0; i < t.ways && chosen < 0; i++ {
		if r := &slots[i]; r.valid && t.reclaimable(r.state, now) {
			chosen, kind = i, losslessTakeover
		}
	}
	for i := 0; i < t.ways && chosen < 0; i++ {
		// Unreadable even after healing: no readable state is lost.
		if !slots[i].valid {
			chosen, kind = i, lossyTakeover
		}
	}
	if chosen < 0 {
		if chosen = t.leastUsed(&slots, now); chosen >= 0 {
			kind = forgetTakeover
		}
	}
	// Every placement starts from the overflow bucket's state, which has
	// admitted at least everything this key was admitted while homeless:
	// fresh in normal operation (the bucket is idle or absent), drained
	// during a flood. See the package doc, "Bounded keys".
	var ov slotRead
	if err := t.readSlot(&ov, t.overflowKey(t.overflowIndex(h)), overflowFingerprint, now); err != nil {
		return err
	}
	ovState := State{}
	if ov.exists {
		ovState = stateOf(&ov)
	}
	if chosen < 0 {
		// Every candidate holds live state of other keys, which is never
		// taken over: the key is homeless and decided on its overflow
		// bucket, sharing that bucket's allowance.
		v.slot, v.fp, v.state, v.takeover = ov, overflowFingerprint, ovState, overflowBucket
		return nil
	}
	v.slot, v.state, v.takeover, v.ov = slots[chosen], ovState, kind, ov
	v.inherits = ov.exists && !t.limit.Idle(ovState, now)
	if kind == lossyTakeover {
		v.state = t.limit.Merge(ovState, t.limit.Empty(now), now)
	}
	return nil
}

// leastUsed is the candidate, every one holding valid live state of
// another key, whose key has used the least, if at most forgetMax units;
// the first of equals; -1 if none may be forgotten.
func (t *Table) leastUsed(slots *[MaxWays]slotRead, now int64) int {
	if t.forgetMax < 0 {
		return -1
	}
	chosen, least := -1, u128{}
	for i := 0; i < t.ways; i++ {
		units, rank := t.limit.usage(slots[i].state, now)
		if units <= uint64(t.forgetMax) && (chosen < 0 || rank.less(least)) {
			chosen, least = i, rank
		}
	}
	return chosen
}

func (t *Table) encode(fp uint64, st State) []byte {
	b := binary.LittleEndian.AppendUint64(t.buf[:0], fp)
	b = t.limit.appendState(b, st)
	t.buf = b
	return b
}

// commit writes next into the view's slot with CAS. n is what the
// decision took (units admitted or charged); a decision on an overflow
// bucket also charges it to the key's own slot if one appeared meanwhile.
func (t *Table) commit(v *view, next State, now, n int64) error {
	cas := v.slot.cas
	if !v.slot.exists {
		cas = store.CreateCAS
	}
	if err := t.store.Set(v.slot.key, t.encode(v.fp, next), cas); err != nil {
		return err
	}
	switch v.takeover {
	case lossyTakeover:
		t.stats.Evictions++
	case losslessTakeover:
		t.stats.LosslessTakeovers++
	case forgetTakeover:
		// The CAS replaced the state read: what the forgotten key may get
		// back. A key that had used nothing loses nothing.
		if u := t.limit.Used(v.slot.state, now); u == 0 {
			t.stats.LosslessTakeovers++
		} else {
			t.stats.Forgotten++
			t.stats.ForgottenUnits += uint64(u)
		}
	}
	if v.hasDup {
		// Best effort: if this loses a race the duplicate is merged again
		// next time, which can only over-count.
		if t.store.Set(v.dup.key, t.encode(v.fp, State{}), v.dup.cas) == nil {
			t.stats.DuplicateMerges++
		}
	}
	switch {
	case v.takeover.placed():
		t.settlePlacement(v, now)
	case v.takeover == overflowBucket:
		t.settleOverflow(v.h, now, n)
	}
	return nil
}

// settlePlacement closes the race between placing a key (which read its
// overflow bucket, then wrote the slot) and a decision of the same key on
// that bucket by another worker that found no slot before the placement:
// if the bucket changed between the placement's read of it and now, that
// decision may be missing from the placed state, so the key's state is
// raised to used up (merged with the bucket's and with Empty). A decision
// committed to the bucket after this read finds the key's slot in its own
// settleOverflow.
func (t *Table) settlePlacement(v *view, now int64) {
	var ov slotRead
	err := t.readSlot(&ov, v.ov.key, overflowFingerprint, now)
	if err == nil && ov.exists == v.ov.exists && ov.cas == v.ov.cas {
		return
	}
	t.stats.OverflowRaces++
	ovState := t.limit.Empty(now)
	if err == nil && ov.valid {
		ovState = ov.state
	}
	t.adjustOwn(v.h, now, func(st State) State {
		return t.limit.Merge(t.limit.Merge(st, ovState, now), t.limit.Empty(now), now)
	})
}

// settleOverflow follows a decision committed to an overflow bucket: if
// the key was placed in a slot since it found none, the units are charged
// there as well, so the placed state carries them.
func (t *Table) settleOverflow(h uint64, now, n int64) {
	t.adjustOwn(h, now, func(st State) State {
		next, _ := t.limit.Charge(st, now, n)
		return next
	})
}

// adjustOwn rewrites the key's own slot, if it has one, with f of its
// state, retrying lost races up to MaxRetries times. found reports that
// the key had a slot; err is a store failure, or store.ErrContended when
// the retries ran out.
func (t *Table) adjustOwn(h uint64, now int64, f func(State) State) (found bool, err error) {
	for attempt := 0; attempt <= t.maxRetries; attempt++ {
		var v view
		if err := t.readOwn(&v, h, now); err != nil || v.takeover != ownSlot {
			return false, err
		}
		err := t.commit(&v, f(v.state), now, 0)
		if !store.IsCASMismatch(err) {
			return true, err
		}
		t.stats.CASMismatches++
	}
	return true, store.ErrContended
}

// Reset gives key its full allowance back at now (an operator unblocking
// a client): its own slot, and a second slot a race left it, get the
// fresh key's state, with the CAS loop of every decision. held is false
// when the key holds no slot of its own: it is fresh already, or decided
// on a shared overflow bucket, which Reset leaves alone because refilling
// it would refill every key sharing it.
func (t *Table) Reset(key string, now int64) (held bool, err error) {
	return t.adjustOwn(Hash(t.seed, key), now, func(State) State { return State{} })
}

// AllowN decides n units for key at now (Unix ns) and, if granted, commits
// them to the store: read, decide, write with CAS, and on a mismatch read
// and decide again, up to MaxRetries times. A denial writes nothing. The
// error is non-nil only for store failures, in which case the Result
// follows OnContention with ReasonStoreError.
func (t *Table) AllowN(key string, now int64, n int64) (Result, error) {
	var res Result
	err := t.allowN(key, now, n, &res)
	return res, err
}

// allowN is AllowN writing its Result through res (see decideValid for
// why).
func (t *Table) allowN(key string, now int64, n int64, res *Result) error {
	exhausted, err := t.update(key, now, n, false, res)
	switch {
	case err != nil:
		var ferr error
		*res, ferr = t.storeFailure(err)
		return ferr
	case exhausted:
		t.contended(res)
	}
	return nil
}

// update is the CAS loop of AllowN and of Charge (charge set): read,
// decide, write with the CAS read, and on a mismatch read and decide
// again, up to MaxRetries more times. A decision that is not Allowed
// writes nothing. exhausted reports that the retries ran out; err is a
// store failure other than a CAS mismatch.
func (t *Table) update(key string, now, n int64, charge bool, res *Result) (exhausted bool, err error) {
	h := Hash(t.seed, key)
	var v view
	for attempt := 0; ; attempt++ {
		err := t.read(&v, h, now)
		if err != nil {
			return false, err
		}
		var next State
		if charge {
			next, *res = t.limit.Charge(v.state, now, n)
		} else {
			next = t.decide(v.state, now, n, true, res)
		}
		if !res.Allowed {
			t.countOverflow(&v, res.Allowed)
			return false, nil
		}
		err = t.commit(&v, next, now, n)
		if err == nil {
			t.countOverflow(&v, res.Allowed)
			return false, nil
		}
		if !store.IsCASMismatch(err) {
			return false, err
		}
		t.stats.CASMismatches++
		if attempt >= t.maxRetries {
			t.countOverflow(&v, false)
			return true, nil
		}
	}
}

// decide is t.limit.Decide, reusing the scan of a sliding log that
// reading its slot just made. With reuse, an admitted log is built in
// t.logBuf: the State returned is only good until the table's next
// decision, so only a caller that writes it before deciding again (the
// CAS loop of AllowN and Charge, Peek) may ask for that.
func (t *Table) decide(st State, now, n int64, reuse bool, res *Result) State {
	if t.limit.Algorithm == SlidingLog && t.limit.valid() {
		var into *[]byte
		if reuse {
			into = &t.logBuf
		}
		for i := range t.scanned {
			if c := &t.scanned[i]; c.ok && c.now == now && c.size == len(st.Log) && c.data == unsafe.StringData(st.Log) {
				return t.limit.decideScannedLog(st, c.live, c.used, now, n, into, res)
			}
		}
	}
	return t.limit.decideValid(st, now, n, res)
}

// countOverflow counts a final decision, allowed or not, made on an
// overflow bucket's state.
func (t *Table) countOverflow(v *view, allowed bool) {
	if v.takeover == overflowBucket || v.inherits {
		t.stats.Overflow++
		if !allowed {
			t.stats.OverflowDenied++
		}
	}
}

// Peek decides n units for key at now without consuming anything. With
// n = 0 it reports the key's current Remaining (Reason is then
// ReasonInvalidCost).
func (t *Table) Peek(key string, now int64, n int64) (Result, error) {
	var v view
	if err := t.read(&v, Hash(t.seed, key), now); err != nil {
		return t.storeFailure(err)
	}
	var res Result
	t.decide(v.state, now, n, true, &res)
	return res, nil
}

// Charge takes n units for key at now whether or not they are available
// (Limit.Charge: a token bucket goes into debt), with the CAS loop of
// AllowN. It is for costs known only after the work was done. When the
// retries run out the charge is lost: the Result is not Allowed, with
// ReasonContention (Stats.Contention). A store failure is returned as the
// error with ReasonStoreError, whatever OnContention says: a charge has
// nothing to admit.
func (t *Table) Charge(key string, now int64, n int64) (Result, error) {
	var res Result
	exhausted, err := t.update(key, now, n, true, &res)
	switch {
	case err != nil:
		return t.chargeFailure(err)
	case exhausted:
		t.stats.Contention++
		res.Allowed, res.Reason = false, ReasonContention
	}
	return res, nil
}

func (t *Table) chargeFailure(err error) (Result, error) {
	res, err := t.storeFailure(err)
	res.Allowed = false
	return res, err
}

func (t *Table) contended(res *Result) {
	t.stats.Contention++
	res.Reason = ReasonContention
	res.Allowed = t.policy == ContentionAllow
	if !res.Allowed {
		res.Remaining = 0
	}
}

func (t *Table) storeFailure(err error) (Result, error) {
	t.stats.StoreErrors++
	return Result{
		Allowed: t.policy == ContentionAllow,
		Limit:   t.limit.Rate,
		Period:  t.limit.Period,
		Reason:  ReasonStoreError,
	}, fmt.Errorf("limiter: store: %w", err)
}

// Request is one limit that applies to a request: which table, which
// client key in it, and how many units the request costs there.
type Request struct {
	Table *Table
	Key   string
	Cost  int64
}

// committed remembers enough of a commit to undo it.
type committed struct {
	table   *Table
	view    view
	written State
}

// AllowAll decides several limits for one request: a request denied by any
// of them consumes from none. results[i] receives the decision of reqs[i]'s
// own limit (len(results) must be at least len(reqs)); the request is
// admitted only if AllowAll returns true. Limits are evaluated in order and
// evaluation stops at the first denial (the filter's "short-circuit on the
// first denial"): when it returns false, nothing was consumed, the denying
// limit is the first result that is not Allowed, earlier results read
// Allowed with the Remaining they would have left, and later results are
// the zero Result. A store failure is returned as the
// error; under ContentionAllow the request can still be admitted, so
// (true, err) means admitted with that limit not enforced.
//
// It reads and decides every key first; if any denies, nothing is written.
// Otherwise it commits the keys in order, each with the CAS loop of AllowN.
// If a commit loses a race and the re-decision of that key now denies (or
// its retries run out under ContentionDeny), the keys committed before it
// are rolled back: each is restored to its pre-commit value if it still
// holds exactly what this call wrote; if another worker has written it
// since, the units stay consumed and Stats.RefundsLost counts it. So a race
// can make AllowAll under-admit by at most the costs of that request, and
// never over-admit.
func AllowAll(now int64, reqs []Request, results []Result) (bool, error) {
	if len(results) < len(reqs) {
		return false, fmt.Errorf("limiter: %d results for %d requests", len(results), len(reqs))
	}
	if len(reqs) == 1 && reqs[0].Table != nil {
		// One limit is exactly AllowN, without the rollback bookkeeping,
		// whose arrays cost more to clear than the decision in the guest.
		r := &reqs[0]
		err := r.Table.allowN(r.Key, now, r.Cost, &results[0])
		return results[0].Allowed, err
	}
	var viewsArr [8]view
	var nextArr [8]State
	views, nexts := viewsArr[:0], nextArr[:0]
	var failOpen error
	for i, r := range reqs {
		if r.Table == nil {
			return false, fmt.Errorf("limiter: request %d has no table", i)
		}
		var v view
		err := r.Table.read(&v, Hash(r.Table.seed, r.Key), now)
		if err != nil {
			results[i], err = r.Table.storeFailure(err)
			if !results[i].Allowed {
				return false, err
			}
			// Fail open for this limit: decide the rest without it.
			failOpen = cmp.Or(failOpen, err)
			v = view{fp: 0}
			views, nexts = append(views, v), append(nexts, State{})
			continue
		}
		next := r.Table.decide(v.state, now, r.Cost, false, &results[i])
		r.Table.countOverflow(&v, results[i].Allowed)
		if !results[i].Allowed {
			// Short-circuit: later limits are neither read nor decided,
			// so their results are left as the zero Result.
			for j := i + 1; j < len(reqs); j++ {
				results[j] = Result{}
			}
			return false, nil
		}
		views, nexts = append(views, v), append(nexts, next)
	}
	var doneArr [8]committed
	done := doneArr[:0]
	for i, r := range reqs {
		t := r.Table
		if results[i].Reason == ReasonStoreError {
			continue
		}
		v, next := views[i], nexts[i]
		for attempt := 0; ; attempt++ {
			err := t.commit(&v, next, now, r.Cost)
			if err == nil {
				done = append(done, committed{table: t, view: v, written: next})
				break
			}
			if store.IsCASMismatch(err) {
				t.stats.CASMismatches++
				if attempt >= t.maxRetries {
					t.contended(&results[i])
					if results[i].Allowed {
						break
					}
					rollback(done)
					return false, nil
				}
				if err = t.read(&v, v.h, now); err == nil {
					next = t.decide(v.state, now, r.Cost, false, &results[i])
					if !results[i].Allowed {
						rollback(done)
						return false, nil
					}
					continue
				}
			}
			// The store failed, writing or reading again.
			results[i], err = t.storeFailure(err)
			if results[i].Allowed {
				failOpen = cmp.Or(failOpen, err)
				break
			}
			rollback(done)
			return false, err
		}
	}
	return true, failOpen
}

// rollback undoes commits in reverse order where nobody wrote since.
func rollback(done []committed) {
	for i := len(done) - 1; i >= 0; i-- {
		c := &done[i]
		t := c.table
		cur, cas, err := t.store.Get(c.view.slot.key)
		if err != nil || !bytes.Equal(cur, t.encode(c.view.fp, c.written)) {
			t.stats.RefundsLost++
			continue
		}
		restore := t.encode(c.view.fp, c.view.state)
		if c.view.slot.exists && !c.view.hasDup && c.view.takeover != newSlot {
			// Put back exactly what was there, including another key's
			// fingerprint after a takeover.
			restore = c.view.slot.value
		}
		if t.store.Set(c.view.slot.key, restore, cas) != nil {
			t.stats.RefundsLost++
		}
	}
}
