package limiter

import (
	"encoding/binary"
	"strings"
	"time"
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

func logEntry(log string, i int) uint64 {
	var e uint64
	for j := logEntryLen - 1; j >= 0; j-- {
		e = e<<8 | uint64(log[i*logEntryLen+j])
	}
	return e
}

func appendLogEntry(b *strings.Builder, at, n uint64) {
	e := at<<logCountBits | n
	for j := 0; j < logEntryLen; j++ {
		b.WriteByte(byte(e >> (8 * j)))
	}
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

func (l Limit) periodMicros() uint64 { return uint64(l.Period / time.Microsecond) }

// scanLog reads a log at now: its live suffix (entries younger than
// Period at the evaluation instant, including entries ahead of the clock
// after it went back) and the units in it. ok is false for a log this
// limit cannot hold: malformed, entries out of order, more than Rate live
// units, or entries further ahead than ClockStepTolerance. Such a log is
// decided as Limit.Empty, never as fresher than a used-up key.
func (l Limit) scanLog(log string, now int64) (live string, used uint64, ok bool) {
	if len(log)%logEntryLen != 0 {
		return "", 0, false
	}
	_, floor, ceil := logClock(now)
	p := l.periodMicros()
	start, last := 0, uint64(0)
	for i := 0; i < len(log)/logEntryLen; i++ {
		e := logEntry(log, i)
		at, n := e>>logCountBits, e&logCountMask
		if n == 0 || (i > 0 && at <= last) {
			return "", 0, false
		}
		last = at
		if at+p <= floor {
			start, used = i+1, 0
			continue
		}
		used += n
	}
	if used > uint64(l.Rate) || last > ceil+logTolerance {
		return "", 0, false
	}
	return log[start*logEntryLen:], used, true
}

// liveLog is scanLog with an impossible log replaced by Empty's.
func (l Limit) liveLog(log string, now int64) (string, uint64) {
	live, used, ok := l.scanLog(log, now)
	if !ok {
		return l.emptyLog(now), uint64(l.Rate)
	}
	return live, used
}

// emptyLog is the log of a key that used its whole allowance at now.
func (l Limit) emptyLog(now int64) string {
	_, _, ceil := logClock(now)
	var b strings.Builder
	b.Grow(logEntryLen)
	appendLogEntry(&b, ceil, uint64(l.Rate))
	return b.String()
}

// mergeLogs merges two live logs in time order, adding the counts of a
// shared microsecond, and keeps only the newest units up to most: entries
// leave a log oldest first, so at every later instant the result holds
// min(most, units of both), never fewer than either.
func mergeLogs(a, b string, most uint64) string {
	total := uint64(0)
	for _, log := range [2]string{a, b} {
		for i := 0; i < len(log)/logEntryLen; i++ {
			total += logEntry(log, i) & logCountMask
		}
	}
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
		appendLogEntry(&out, at, n)
	}
	return out.String()
}

// addToLog records n units at now (its microsecond rounded up), keeping
// the newest Rate units.
func (l Limit) addToLog(live string, now int64, n uint64) string {
	_, _, ceil := logClock(now)
	var one [logEntryLen]byte
	binary.LittleEndian.PutUint64(one[:], ceil<<logCountBits|min(n, uint64(l.Rate)))
	// mergeLogs only reads its arguments, so this conversion stays on the
	// stack: an admission costs one allocation, the new log.
	return mergeLogs(live, string(one[:]), uint64(l.Rate))
}

// logUntil is how long from now until the entry at index i of a live log
// leaves the window: the first instant it is evaluated as expired.
func (l Limit) logUntil(live string, i int, now int64) time.Duration {
	t, _, _ := logClock(now)
	at := logEntry(live, i) >> logCountBits
	return dur((at+l.periodMicros())*nanosPerMicro - t)
}

// logReset is how long until the newest entry of a live log leaves the
// window; 0 for an empty one.
func (l Limit) logReset(live string, now int64) time.Duration {
	if len(live) == 0 {
		return 0
	}
	return l.logUntil(live, len(live)/logEntryLen-1, now)
}

// decideLog admits n units when the live log holds at most Rate−n units.
// RetryAfter is when enough of the oldest entries have left for n to fit.
func (l Limit) decideLog(st State, now int64, n int64) (State, Result) {
	live, used := l.liveLog(st.Log, now)
	limit := uint64(l.Rate)
	res := Result{Limit: l.Rate, Period: l.Period}
	reason, ok := l.costReason(n)
	if ok {
		if used+uint64(n) <= limit {
			next := l.addToLog(live, now, uint64(n))
			res.Allowed, res.Reason = true, ReasonAllowed
			res.Remaining = int64(limit - used - uint64(n))
			res.ResetAfter = l.logReset(next, now)
			return State{Log: next}, res
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
	return st, res
}

// chargeLog records n units at now whatever is left, keeping the newest
// Rate units: a log cannot carry debt, so it fills up and forgets the
// excess as its entries leave the window.
func (l Limit) chargeLog(st State, now int64, n int64) State {
	live, _ := l.liveLog(st.Log, now)
	return State{Log: l.addToLog(live, now, uint64(n))}
}
