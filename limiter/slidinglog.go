package limiter

import (
	"encoding/binary"
	"time"
	"unsafe"
)

// The sliding log keeps the admission times themselves, so that it can
// admit at most Rate units in any window of length Period, exactly, where
// the sliding-window counter only approximates that. Its state is
// State.Log: entries of 8 bytes, little-endian, each a time in Unix
// microseconds shifted left by logCountBits and the units admitted at that
// microsecond in the low bits, oldest first, one entry per microsecond.
// A string keeps State comparable and immutable, so a decision never
// changes the state it was made from (AllowAll's rollback relies on it).
const (
	// MaxLogLimit caps Rate for a sliding log: a log holds at most Rate
	// entries, so its encoding stays one shared-data value of at most
	// MaxLogStateLen bytes.
	MaxLogLimit = 1000
	// MaxLogStateLen is the longest encoded sliding-log state: the header
	// byte and MaxLogLimit entries of logEntryLen bytes (8,001 bytes).
	MaxLogStateLen = 1 + logEntryLen*MaxLogLimit

	logEntryLen   = 8
	logCountBits  = 10 // holds counts up to 1023 ≥ MaxLogLimit
	logCountMask  = 1<<logCountBits - 1
	logTolerance  = uint64(ClockStepTolerance / time.Microsecond)
	nanosPerMicro = uint64(time.Microsecond)
)

// logEntry is entry i of a log: one 8-byte load through a read-only
// view of the string's bytes, not eight byte loads (a log of 100 entries
// is read several times per decision).
func logEntry(log string, i int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(log[i*logEntryLen:]), logEntryLen))
}

// oneEntry is the 8-byte encoding of an entry.
func oneEntry(at, n uint64) [logEntryLen]byte {
	var b [logEntryLen]byte
	binary.LittleEndian.PutUint64(b[:], at<<logCountBits|n)
	return b
}

func (l *Limit) periodMicros() uint64 { return uint64(l.Period / time.Microsecond) }

// addToLog records n units at now (its microsecond rounded up) in a live
// log holding used units, keeping the newest Rate units. A clock that
// moved forward only appends, or adds to the newest entry: one copy, no
// pass over the log. With into, that copy is built in *into and the
// string shares its bytes, which the caller must not change while it
// uses the log: a Table's decision then allocates nothing, where a new
// string per admission (up to 8 KB) would make the guest's garbage
// collector the largest cost of a decision.
func (l *Limit) addToLog(live string, used uint64, now int64, n uint64, into *[]byte) string {
	_, _, ceil := logClock(now)
	n = min(n, uint64(l.Rate))
	if k := len(live) / logEntryLen; used+n <= uint64(l.Rate) {
		keep, e := live, oneEntry(ceil, n)
		if k > 0 {
			switch last := logEntry(live, k-1); {
			case last>>logCountBits == ceil:
				keep, e = live[:len(live)-logEntryLen], oneEntry(ceil, last&logCountMask+n)
			case last>>logCountBits > ceil:
				// The clock went back: the entry goes before newer ones.
				return mergeLogs(live, string(e[:]), uint64(l.Rate))
			}
		}
		if into == nil {
			return keep + string(e[:])
		}
		*into = append(append((*into)[:0], keep...), e[:]...)
		return unsafe.String(unsafe.SliceData(*into), len(*into))
	}
	e := oneEntry(ceil, n)
	// mergeLogs only reads its arguments, so this conversion stays on the
	// stack.
	return mergeLogs(live, string(e[:]), uint64(l.Rate))
}

// logUnits is the units in a log.
func logUnits(log string) uint64 {
	total := uint64(0)
	for i := 0; i < len(log)/logEntryLen; i++ {
		total += logEntry(log, i) & logCountMask
	}
	return total
}

// logUntil is how long from now until the entry at index i of a live log
// leaves the window: the first instant it is evaluated as expired.
func (l *Limit) logUntil(live string, i int, now int64) time.Duration {
	t, _, _ := logClock(now)
	at := logEntry(live, i) >> logCountBits
	return dur((at+l.periodMicros())*nanosPerMicro - t)
}

// logReset is how long until the newest entry of a live log leaves the
// window; 0 for an empty one.
func (l *Limit) logReset(live string, now int64) time.Duration {
	if len(live) == 0 {
		return 0
	}
	return l.logUntil(live, len(live)/logEntryLen-1, now)
}

// decideLog admits n units when the live log holds at most Rate−n units.
// RetryAfter is when enough of the oldest entries have left for n to fit.
func (l *Limit) decideLog(st State, now int64, n int64, res *Result) State {
	live, used := l.liveLog(st.Log, now)
	return l.decideScannedLog(st, live, used, now, n, nil, res)
}

// decideScannedLog is decideLog on st's live log and units as liveLog
// found them at now, building an admission's log in into if not nil (see
// addToLog).
func (l *Limit) decideScannedLog(st State, live string, used uint64, now int64, n int64, into *[]byte, res *Result) State {
	limit := uint64(l.Rate)
	res.start(l.Rate, l.Period)
	reason, ok := l.costReason(n)
	if ok {
		if used+uint64(n) <= limit {
			next := l.addToLog(live, used, now, uint64(n), into)
			res.Allowed, res.Reason = true, ReasonAllowed
			res.Remaining = int64(limit - used - uint64(n))
			res.ResetAfter = l.logReset(next, now)
			return State{Log: next}
		}
		reason = ReasonLimited
		// The entry whose departure frees the last unit needed.
		need, i := used+uint64(n)-limit, 0
		for freed := logEntry(live, 0) & logCountMask; freed < need; freed += logEntry(live, i) & logCountMask {
			i++
		}
		res.RetryAfter = l.logUntil(live, i, now)
	}
	res.Reason = reason
	res.Remaining = int64(limit - min(used, limit))
	res.ResetAfter = l.logReset(live, now)
	return st
}

// chargeLog records n units at now whatever is left, keeping the newest
// Rate units: a log cannot carry debt, so it fills up and forgets the
// excess as its entries leave the window.
func (l *Limit) chargeLog(st State, now int64, n int64) State {
	live, used := l.liveLog(st.Log, now)
	return State{Log: l.addToLog(live, used, now, uint64(n), nil)}
}
