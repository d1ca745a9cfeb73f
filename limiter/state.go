package limiter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"unsafe"
)

// A State's encoding (the codec) and what is read off a state without
// deciding on it: is it Empty, is it Idle, how much has it Used, and the
// Merge of two. The decisions (decide.go, slidinglog.go) change states;
// the Table (table.go) places them in slots and asks these questions to
// choose a slot. The per-algorithm readings the two share (a bucket's
// debt, a window's counts, a log's live entries) are at the end.

// Codec layout, little-endian. Byte 0 is version<<4 | algorithm.
//
//	TokenBucket   (13 bytes): hdr, TAT int64, N uint32
//	FixedWindow   (13 bytes): hdr, window int64, N uint32
//	SlidingWindow (16 bytes): hdr, window int56, N uint32, Prev uint32
//	SlidingLog    (1 + 8k bytes, k ≤ Rate ≤ MaxLogLimit): hdr, k entries
//	              of uint64 µs<<10 | units, strictly increasing in time
//
// The sliding window index is stored in 7 bytes to keep the value at 16;
// MinPeriod (1µs) bounds any real window index below 2^44.
const (
	codecVersion   = 1
	bucketLen      = 13
	fixedLen       = 13
	slidingLen     = 16
	MaxStateLen    = slidingLen // longest encoded State but a sliding log's (MaxLogStateLen)
	maxWindowIndex = 1<<55 - 1
)

// Errors from DecodeState; wrap-checked with errors.Is.
var (
	ErrMalformed  = errors.New("limiter: malformed state")
	ErrImpossible = errors.New("limiter: impossible state")
)

// AppendState appends the encoding of st under l's algorithm to dst. It
// does not allocate when dst has MaxStateLen spare capacity.
func (l Limit) AppendState(dst []byte, st State) []byte { return l.appendState(dst, st) }

// appendState is AppendState for a Table, which holds its Limit by
// pointer (see decideValid).
func (l *Limit) appendState(dst []byte, st State) []byte {
	hdr := byte(codecVersion<<4) | byte(l.Algorithm&0x0f)
	switch l.Algorithm {
	case SlidingLog:
		return append(append(dst, hdr), st.Log...)
	case SlidingWindow:
		var b [slidingLen]byte
		b[0] = hdr
		w := uint64(st.At)
		for i := 0; i < 7; i++ {
			b[1+i] = byte(w >> (8 * i))
		}
		binary.LittleEndian.PutUint32(b[8:], st.N)
		binary.LittleEndian.PutUint32(b[12:], st.Prev)
		return append(dst, b[:]...)
	default:
		var b [bucketLen]byte
		b[0] = hdr
		binary.LittleEndian.PutUint64(b[1:], uint64(st.At))
		binary.LittleEndian.PutUint32(b[9:], st.N)
		return append(dst, b[:]...)
	}
}

// DecodeState parses an encoded State without knowing its Limit: it checks
// version, algorithm and length, and that window indexes are not negative.
// A sliding log's State shares b's bytes (see decodeLog).
// Use Limit.DecodeState to also reject values that are impossible for a
// particular Limit.
func DecodeState(b []byte) (Algorithm, State, error) {
	if len(b) == 0 {
		return 0, State{}, fmt.Errorf("%w: empty", ErrMalformed)
	}
	if v := b[0] >> 4; v != codecVersion {
		return 0, State{}, fmt.Errorf("%w: version %d", ErrMalformed, v)
	}
	alg := Algorithm(b[0] & 0x0f)
	want := bucketLen
	switch alg {
	case TokenBucket, FixedWindow:
	case SlidingWindow:
		want = slidingLen
	case SlidingLog:
		return decodeLog(b)
	default:
		return 0, State{}, fmt.Errorf("%w: algorithm %d", ErrMalformed, alg)
	}
	if len(b) != want {
		return 0, State{}, fmt.Errorf("%w: %v state is %d bytes, want %d", ErrMalformed, alg, len(b), want)
	}
	var st State
	if alg == SlidingWindow {
		var w uint64
		for i := 0; i < 7; i++ {
			w |= uint64(b[1+i]) << (8 * i)
		}
		// Sign-extend so that a negative index is seen, then rejected.
		st.At = int64(w<<8) >> 8
		st.N = binary.LittleEndian.Uint32(b[8:])
		st.Prev = binary.LittleEndian.Uint32(b[12:])
	} else {
		st.At = int64(binary.LittleEndian.Uint64(b[1:]))
		st.N = binary.LittleEndian.Uint32(b[9:])
	}
	if alg != TokenBucket && st.At < 0 {
		return 0, State{}, fmt.Errorf("%w: negative window index %d", ErrMalformed, st.At)
	}
	return alg, st, nil
}

// decodeLog checks a sliding log's length: whole entries, at most
// MaxLogLimit of them. Their order and counts are checked with the limit
// (CheckState), in the same pass that finds the live ones.
//
// The log shares b's bytes instead of copying up to 8 KB per read: a
// store hands out a value that is the reader's own (a copy, or host
// memory that stays put until the callback returns), and a decision keeps
// its State no longer than that. So b must not change while the State is
// in use.
func decodeLog(b []byte) (Algorithm, State, error) {
	entries := b[1:]
	if len(entries)%logEntryLen != 0 || len(entries) > MaxLogStateLen-1 {
		return 0, State{}, fmt.Errorf("%w: sliding_log state is %d bytes", ErrMalformed, len(b))
	}
	return SlidingLog, State{Log: unsafe.String(unsafe.SliceData(entries), len(entries))}, nil
}

// DecodeState decodes b and checks it is a state l could have produced by
// now. On any error it returns Empty(now), the conservative state to
// continue from: a key whose stored bytes are unreadable gets nothing until
// it refills, never more than a fresh key.
func (l Limit) DecodeState(b []byte, now int64) (State, error) {
	alg, st, err := DecodeState(b)
	if err == nil {
		err = l.CheckState(alg, st, now)
	}
	if err != nil {
		return l.Empty(now), err
	}
	return st, nil
}

// CheckState reports why st (stored under alg) is impossible for l at now:
// wrong algorithm, counts above the limit, a TAT remainder not below Rate,
// or state further in the future than a bucket charged one full bucket past
// empty (see Charge) plus ClockStepTolerance.
func (l Limit) CheckState(alg Algorithm, st State, now int64) error {
	if !l.valid() {
		return fmt.Errorf("%w: invalid limit", ErrImpossible)
	}
	return l.checkValidState(alg, st, now)
}

// checkValidState is CheckState for a Limit known to pass valid (see
// decideValid).
func (l *Limit) checkValidState(alg Algorithm, st State, now int64) error {
	if alg != l.Algorithm {
		return fmt.Errorf("%w: stored %v, configured %v", ErrImpossible, alg, l.Algorithm)
	}
	limit := uint64(l.Rate)
	switch alg {
	case SlidingLog:
		if _, _, ok := l.scanLog(st.Log, now); !ok || st != (State{Log: st.Log}) {
			return fmt.Errorf("%w: sliding log out of order, beyond its limit or ahead of now %d", ErrImpossible, now)
		}
	case TokenBucket:
		if uint64(st.N) >= limit {
			return fmt.Errorf("%w: TAT remainder %d not below rate %d", ErrImpossible, st.N, l.Rate)
		}
		if st.At > now {
			debt := mul(uint64(st.At)-uint64(now), limit).add64(uint64(st.N))
			full := mul(uint64(l.capacity()), uint64(l.Period))
			ceiling := full.add(full).add(mul(uint64(ClockStepTolerance), limit))
			if ceiling.less(debt) {
				return fmt.Errorf("%w: TAT %d is beyond a bucket charged a full bucket past empty, ahead of %d", ErrImpossible, st.At, now)
			}
		}
	default:
		if uint64(st.N) > limit || uint64(st.Prev) > limit {
			return fmt.Errorf("%w: counts %d/%d exceed limit %d", ErrImpossible, st.N, st.Prev, l.Rate)
		}
		if alg == FixedWindow && st.Prev != 0 {
			return fmt.Errorf("%w: fixed window with previous count", ErrImpossible)
		}
		if _, _, _, _, plausible := l.window(st, now); !plausible {
			return fmt.Errorf("%w: window %d is ahead of now %d", ErrImpossible, st.At, now)
		}
	}
	return nil
}

// State operations, for every algorithm.

// Empty is the state of a key that has used its whole allowance at now:
// the safe starting point when stored state cannot be trusted.
func (l Limit) Empty(now int64) State {
	if !l.valid() {
		return State{At: now}
	}
	switch l.Algorithm {
	case TokenBucket:
		q, r := mul(uint64(l.capacity()), uint64(l.Period)).div(uint64(l.Rate))
		st := State{At: now + int64(q), N: uint32(r)}
		if now > 0 && q > uint64(1<<63-1-now) {
			st = State{At: 1<<63 - 1}
		}
		return st
	case SlidingLog:
		return State{Log: l.emptyLog(now)}
	default:
		win, _, _, _, _ := l.window(State{}, now)
		return State{At: win, N: uint32(l.Rate)}
	}
}

// Idle reports whether st carries no information at now: the key has its
// full allowance, exactly like a key never seen. Replacing an idle state is
// lossless.
func (l Limit) Idle(st State, now int64) bool {
	if !l.valid() {
		return false
	}
	switch l.Algorithm {
	case TokenBucket:
		return st.At < now || (st.At == now && st.N == 0)
	case SlidingLog:
		live, _, ok := l.scanLog(st.Log, now)
		return ok && live == ""
	default:
		win, _, _, _, plausible := l.window(st, now)
		if !plausible {
			return false
		}
		switch {
		case l.inWindow(st.At, win):
			return st.N == 0 && (l.Algorithm == FixedWindow || st.Prev == 0)
		case st.At == win-1:
			return st.N == 0 || l.Algorithm == FixedWindow
		}
		return true
	}
}

// Merge returns one state that carries the consumption of both a and b at
// now, capped at Empty, or for a token bucket charged into debt at the
// larger of the two debts. A key found in two slots after a race is merged
// so that neither slot's consumption is forgotten; adding may over-count
// (the safe direction), never under-count.
func (l Limit) Merge(a, b State, now int64) State {
	if !l.valid() {
		return l.Empty(now)
	}
	if l.Algorithm == TokenBucket {
		da, full := l.bucketDebt(a, now)
		db, _ := l.bucketDebt(b, now)
		most := full
		if most.less(da) {
			most = da
		}
		if most.less(db) {
			most = db
		}
		sum := da.add(db)
		if most.less(sum) {
			sum = most
		}
		return l.bucketState(now, sum)
	}
	if l.Algorithm == SlidingLog {
		la, _ := l.liveLog(a.Log, now)
		lb, _ := l.liveLog(b.Log, now)
		return State{Log: mergeLogs(la, lb, uint64(l.Rate))}
	}
	wa, _, _, _, okA := l.window(a, now)
	wb, _, _, _, okB := l.window(b, now)
	if !okA || !okB {
		return l.Empty(now)
	}
	w := max(wa, wb)
	counts := func(s State) (cur, prev uint64) {
		switch {
		case l.inWindow(s.At, w):
			return uint64(s.N), uint64(s.Prev)
		case s.At == w-1:
			return 0, uint64(s.N)
		}
		return 0, 0
	}
	ca, pa := counts(a)
	cb, pb := counts(b)
	limit := uint64(l.Rate)
	out := State{At: w, N: uint32(min(ca+cb, limit))}
	if l.Algorithm == SlidingWindow {
		out.Prev = uint32(min(pa+pb, limit))
	}
	return out
}

// Used is how many whole units st still counts against its key at now:
// what forgetting the key (replacing st by a fresh state) can give back
// to it. See the package doc, "Forgetting the least-used key".
//
//	token_bucket:   ⌈D/τ⌉, the debt in units (up to 2·C after charges)
//	fixed_window:   the units used in now's window
//	sliding_window: cur + prev, every unit either window still weighs
//	sliding_log:    the live units
//
// A state this Limit could not hold counts as Empty's (Capacity, or
// Rate for the windows).
func (l Limit) Used(st State, now int64) int64 {
	u, _ := l.usage(st, now)
	return int64(u)
}

// usage is Used and a finer measure to pick the least-used of several
// states of the same Limit at one instant: the debt itself for a token
// bucket (a key that made its request earlier has used less), the
// weighted count for a sliding window, the units otherwise.
func (l *Limit) usage(st State, now int64) (units uint64, rank u128) {
	if !l.valid() {
		return 0, u128{}
	}
	period := uint64(l.Period)
	switch l.Algorithm {
	case TokenBucket:
		debt, _ := l.bucketDebt(st, now)
		return debt.divCeil(period), debt
	case SlidingLog:
		_, used := l.liveLog(st.Log, now)
		return used, u128{0, used}
	}
	win, elapsed, _, _, plausible := l.window(st, now)
	cur, prev := l.windowCounts(st, win, plausible)
	if l.Algorithm == FixedWindow {
		return cur, u128{0, cur}
	}
	return cur + prev, mul(prev, period-elapsed).add(mul(cur, period))
}

// Readings of one algorithm's state, shared by the operations above and
// the decisions.

// bucketDebt returns how far the TAT of st is ahead of now (zero: the
// bucket is full) and the debt of an empty bucket, both in units of
// 1/Rate ns. A debt beyond what Charge can leave plus ClockStepTolerance
// cannot come from a sane clock and reads as an empty bucket.
func (l *Limit) bucketDebt(st State, now int64) (debt, full u128) {
	rate := uint64(l.Rate)
	full = mul(uint64(l.capacity()), uint64(l.Period))
	if st.At > now || (st.At == now && st.N > 0) {
		debt = mul(uint64(st.At)-uint64(now), rate).add64(uint64(st.N))
		if full.add(full).add(mul(uint64(ClockStepTolerance), rate)).less(debt) {
			debt = full
		}
	}
	return debt, full
}

// bucketState is the state whose TAT is debt (in units of 1/Rate ns)
// ahead of now.
func (l *Limit) bucketState(now int64, debt u128) State {
	q, r := debt.div(uint64(l.Rate))
	// q is below 2^63 for practical limits; an extreme one (capacity ×
	// period near the 146-year bound, charged into debt) or a now near
	// MaxInt64 saturates instead of wrapping.
	at := int64(math.MaxInt64)
	if now <= 0 || q <= uint64(math.MaxInt64-now) {
		at = now + int64(q)
	}
	return State{At: at, N: uint32(r)}
}

// window finds the window a decision is evaluated in. Normally that is the
// window containing now (clamped to the epoch); when the state's window is
// later (clock went back) the decision is evaluated at the start of the
// state's window, so a backwards clock never releases units, and delay is
// the time from now until that evaluation point. A state window too far
// ahead to be a clock step is reported as implausible. length is the
// length of window win: Period, or one calendar period.
func (l *Limit) window(st State, now int64) (win int64, elapsed, length, delay uint64, plausible bool) {
	if l.Calendar != NoCalendar {
		return l.calendarWindow(st, now)
	}
	period := int64(l.Period)
	t := max(now, 0)
	cur := t / period
	elapsed = uint64(t - cur*period)
	if st.At <= cur || st.At >= calendarBit {
		// A calendar window's span (the config changed) counts by overlap.
		return cur, elapsed, uint64(period), 0, true
	}
	ahead := uint64(st.At - cur)
	if ahead > uint64(ClockStepTolerance/l.Period)+1 {
		return cur, elapsed, uint64(period), 0, false
	}
	return st.At, 0, uint64(period), ahead*uint64(period) - elapsed, true
}

// calendarWindow is window for a calendar limit, whose window index is
// calendarAt of the period (see Calendar). A state counted in a window that
// began before now's period ends is in the past or overlaps now's period
// (inWindow tells which), and a duration window's state reads as one in
// the past; one that begins exactly where now's period ends is a clock
// that went back, evaluated at that period's start; any other is
// implausible.
func (l *Limit) calendarWindow(st State, now int64) (win int64, elapsed, length, delay uint64, plausible bool) {
	t := max(now, calendarFloor)
	_, start, length := l.Calendar.Period(t, l.Offset)
	win = calendarAt(start, length)
	elapsed = uint64(t - start)
	end := addSatInt(start, length)
	s0, e0 := calendarSpan(st.At)
	switch {
	case s0 < end:
		return win, elapsed, length, 0, true
	case s0 == end && e0 > s0:
		return st.At, 0, uint64(e0 - s0), length - elapsed, true
	}
	return win, elapsed, length, 0, false
}

// inWindow reports whether a state stored with window index at counts in
// window win: the same window, or for a window stored as a calendar span
// (see calendarAt) any overlap of the two spans. So when the config changes
// between day, week and month, or from a calendar period to a duration,
// what a key used in a window overlapping the current one still counts.
func (l *Limit) inWindow(at, win int64) bool {
	if at == win || at < calendarBit {
		return at == win
	}
	s0, e0 := calendarSpan(at)
	var s1, e1 int64
	if l.Calendar != NoCalendar {
		s1, e1 = calendarSpan(win)
	} else {
		s1 = win * int64(l.Period) // win is now's window: no overflow
		e1 = addSatInt(s1, uint64(l.Period))
	}
	return s0 < e1 && e0 > s1
}

// A calendar window's index is its span: calendarBit, above any index of
// a window of constant length, then its start in Unix minutes (every offset
// is a whole number of minutes) shifted left 5 bits, or'ed with its length
// in days (1 to 31). A stored state so stays meaningful when the period
// changes, and indexes still order by start.
const (
	calendarBit     = 1 << 62
	calendarLenBits = 5
)

func calendarAt(start int64, length uint64) int64 {
	return calendarBit | (start/nanosPerMinute)<<calendarLenBits | int64(length/nanosPerDay)
}

// calendarSpan is the span [s, e) in Unix nanoseconds that the calendar
// window index at names, saturated at MaxInt64 for an index beyond 2262.
// An index below calendarBit is not a calendar window (a duration window's
// index, or a fresh state): its span is empty, at the epoch.
func calendarSpan(at int64) (s, e int64) {
	if at < calendarBit {
		return 0, 0
	}
	minutes := uint64(at-calendarBit) >> calendarLenBits
	if minutes > uint64(math.MaxInt64/nanosPerMinute) {
		return math.MaxInt64, math.MaxInt64
	}
	s = int64(minutes) * nanosPerMinute
	return s, addSatInt(s, uint64(at&(1<<calendarLenBits-1))*nanosPerDay)
}

// addSatInt is t+d saturated at MaxInt64.
func addSatInt(t int64, d uint64) int64 {
	if d > uint64(math.MaxInt64-t) {
		return math.MaxInt64
	}
	return t + int64(d)
}

// windowCounts is what st counts in window win, as window found it
// (plausible or not): the units in win and, for a sliding window, in
// win−1 (a fixed window's Prev is always 0). An implausible state counts
// as a full window.
func (l *Limit) windowCounts(st State, win int64, plausible bool) (cur, prev uint64) {
	switch {
	case !plausible:
		return uint64(l.Rate), 0
	case l.inWindow(st.At, win):
		return uint64(st.N), uint64(st.Prev)
	case st.At == win-1 && l.Algorithm == SlidingWindow:
		return 0, uint64(st.N)
	}
	return 0, 0
}

// logClock is now in microseconds, clamped to the epoch: floor is the
// instant decisions are evaluated at and ceil the one admissions are
// recorded at. An entry thus stays up to 1µs longer than the exact
// nanosecond rule would keep it, never shorter, so rounding can only
// under-admit.
func logClock(now int64) (t, floor, ceil uint64) {
	t = uint64(max(now, 0))
	floor = t / nanosPerMicro
	ceil = floor
	if t%nanosPerMicro != 0 {
		ceil++
	}
	return t, floor, ceil
}

// scanLog reads a log at now: its live suffix (entries younger than
// Period at the evaluation instant, including entries ahead of the clock
// after it went back) and the units in it. ok is false for a log this
// limit cannot hold: malformed, entries out of order, more than Rate live
// units, or entries further ahead than ClockStepTolerance. Such a log is
// decided as Limit.Empty, never as fresher than a used-up key.
func (l *Limit) scanLog(log string, now int64) (live string, used uint64, ok bool) {
	if len(log)%logEntryLen != 0 {
		return "", 0, false
	}
	_, floor, ceil := logClock(now)
	// An entry below this (time and count together, as stored) has left
	// the window: its time plus Period is at most floor.
	expired := uint64(0)
	if p := l.periodMicros(); floor >= p {
		expired = (floor - p + 1) << logCountBits
	}
	// One pass, over the bytes in place: this runs on every decision of
	// a log that may hold a thousand entries.
	b := unsafe.Slice(unsafe.StringData(log), len(log))
	start, prev := 0, uint64(0)
	for off := 0; off+logEntryLen <= len(b); off += logEntryLen {
		e := binary.LittleEndian.Uint64(b[off:])
		if e&logCountMask == 0 || (off > 0 && e>>logCountBits <= prev>>logCountBits) {
			return "", 0, false
		}
		prev = e
		if e < expired {
			start, used = off+logEntryLen, 0
			continue
		}
		used += e & logCountMask
	}
	last := prev >> logCountBits
	if used > uint64(l.Rate) || last > ceil+logTolerance {
		return "", 0, false
	}
	return log[start:], used, true
}

// liveLog is scanLog with an impossible log replaced by Empty's.
func (l *Limit) liveLog(log string, now int64) (string, uint64) {
	live, used, ok := l.scanLog(log, now)
	if !ok {
		return l.emptyLog(now), uint64(l.Rate)
	}
	return live, used
}

// emptyLog is the log of a key that used its whole allowance at now.
func (l *Limit) emptyLog(now int64) string {
	_, _, ceil := logClock(now)
	e := oneEntry(ceil, uint64(l.Rate))
	return string(e[:])
}

// mergeLogs merges two live logs in time order, adding the counts of a
// shared microsecond, and keeps only the newest units up to most: entries
// leave a log oldest first, so at every later instant the result holds
// min(most, units of both), never fewer than either.
func mergeLogs(a, b string, most uint64) string {
	total := logUnits(a) + logUnits(b)
	drop := total - min(total, most)
	var out strings.Builder
	out.Grow(len(a) + len(b))
	i, j := 0, 0
	na, nb := len(a)/logEntryLen, len(b)/logEntryLen
	for i < na || j < nb {
		var at, n uint64
		switch {
		case j >= nb || (i < na && logEntry(a, i)>>logCountBits < logEntry(b, j)>>logCountBits):
			at, n = logEntry(a, i)>>logCountBits, logEntry(a, i)&logCountMask
			i++
		case i >= na || logEntry(b, j)>>logCountBits < logEntry(a, i)>>logCountBits:
			at, n = logEntry(b, j)>>logCountBits, logEntry(b, j)&logCountMask
			j++
		default:
			at, n = logEntry(a, i)>>logCountBits, logEntry(a, i)&logCountMask+logEntry(b, j)&logCountMask
			i, j = i+1, j+1
		}
		if drop >= n {
			drop -= n
			continue
		}
		n -= drop
		drop = 0
		e := oneEntry(at, n)
		out.Write(e[:])
	}
	return out.String()
}
