package breaker

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Encoded layout, little endian, version 1:
//
//	0      version (1)
//	1      flags: bits 0-1 state, bits 2-3 window kind, rest zero
//	2..6   generation uint32, never 0
//	6..14  at int64 (see Record.at)
//	14..16 open streak uint16
//	16..20 consecutive count uint32
//	20..24 probes in flight uint32
//
// then, for a count window: size, filled, head (uint16 each) and two bit
// rings (failed, slow) of ceil(size/64) uint64 words each; for a time
// window: the newest bucket's epoch (int64) and TimeWindowBuckets buckets
// of calls, failures, slow (uint32 each). The encoding is canonical: a
// valid value re-encodes to the same bytes.
const (
	codecVersion  = 1
	headerLen     = 24
	countFixedLen = headerLen + 6
	timeLen       = headerLen + 8 + TimeWindowBuckets*12
	// MaxEncodedLen is the largest encoded Record (a 1024-call window).
	MaxEncodedLen = countFixedLen + 2*countWords*8
)

// ErrCorrupt is wrapped by every Decode error.
var ErrCorrupt = errors.New("breaker: corrupt state")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// Encode appends the encoded r to buf. With cap(buf) >= MaxEncodedLen it
// does not allocate.
func (r *Record) Encode(buf []byte) []byte {
	le := binary.LittleEndian
	buf = append(buf, codecVersion, byte(r.state)|byte(r.win)<<2)
	buf = le.AppendUint32(buf, r.gen)
	buf = le.AppendUint64(buf, uint64(r.at))
	buf = le.AppendUint16(buf, r.streak)
	buf = le.AppendUint32(buf, r.consec)
	buf = le.AppendUint32(buf, r.inflight)
	switch r.win {
	case winCount:
		buf = le.AppendUint16(buf, r.size)
		buf = le.AppendUint16(buf, r.filled)
		buf = le.AppendUint16(buf, r.head)
		w := wordsFor(r.size)
		for i := 0; i < w; i++ {
			buf = le.AppendUint64(buf, r.failBits[i])
		}
		for i := 0; i < w; i++ {
			buf = le.AppendUint64(buf, r.slowBits[i])
		}
	case winTime:
		buf = le.AppendUint64(buf, uint64(r.epoch))
		for _, b := range r.buckets {
			buf = le.AppendUint32(buf, b.calls)
			buf = le.AppendUint32(buf, b.fails)
			buf = le.AppendUint32(buf, b.slow)
		}
	}
	return buf
}

func wordsFor(size uint16) int { return (int(size) + 63) / 64 }

// Decode replaces r with the state encoded in b. Anything malformed (wrong
// length, unknown version, impossible combinations) is an error wrapping
// ErrCorrupt, after which r is unspecified: callers start the key over with
// Machine.Reset, a fresh closed breaker.
func (r *Record) Decode(b []byte) error {
	le := binary.LittleEndian
	if len(b) < headerLen {
		return corrupt("length %d, want at least %d", len(b), headerLen)
	}
	if b[0] != codecVersion {
		return corrupt("unknown version %d", b[0])
	}
	flags := b[1]
	if flags&^0x0f != 0 {
		return corrupt("reserved flag bits %#x", flags)
	}
	*r = Record{
		state:    State(flags & 3),
		win:      windowKind(flags >> 2),
		gen:      le.Uint32(b[2:]),
		at:       int64(le.Uint64(b[6:])),
		streak:   le.Uint16(b[14:]),
		consec:   le.Uint32(b[16:]),
		inflight: le.Uint32(b[20:]),
	}
	if r.state > HalfOpen {
		return corrupt("unknown state %d", r.state)
	}
	if r.gen == 0 {
		return corrupt("generation 0")
	}
	switch r.state {
	case Closed:
		if r.inflight != 0 || r.at != 0 || r.streak != 0 {
			return corrupt("closed with probes, deadline or open streak")
		}
	case Open:
		if r.inflight != 0 || r.consec != 0 || r.streak == 0 {
			return corrupt("open with probes, successes or no open streak")
		}
	case HalfOpen:
		if r.streak == 0 || (r.inflight == 0 && r.at != 0) || r.inflight > MaxCounter {
			return corrupt("half-open with impossible probe state")
		}
	}
	body := b[headerLen:]
	switch r.win {
	case winNone:
		if len(body) != 0 {
			return corrupt("length %d, want %d", len(b), headerLen)
		}
	case winCount:
		if len(b) < countFixedLen {
			return corrupt("length %d, want at least %d", len(b), countFixedLen)
		}
		r.size, r.filled, r.head = le.Uint16(body), le.Uint16(body[2:]), le.Uint16(body[4:])
		if r.size == 0 || r.size > MaxCountWindow {
			return corrupt("count window size %d", r.size)
		}
		if r.filled > r.size || r.head >= r.size || (r.filled < r.size && r.head != r.filled) {
			return corrupt("count window position %d/%d of %d", r.head, r.filled, r.size)
		}
		w := wordsFor(r.size)
		if want := countFixedLen + 2*w*8; len(b) != want {
			return corrupt("length %d, want %d", len(b), want)
		}
		rings := body[6:]
		for i := 0; i < w; i++ {
			r.failBits[i] = le.Uint64(rings[i*8:])
			r.slowBits[i] = le.Uint64(rings[(w+i)*8:])
		}
		// Bits past the outcomes recorded so far must be clear, or the
		// rates would count calls that never happened.
		filled := int(r.filled)
		for i := 0; i < w; i++ {
			var recorded uint64
			switch lo := i * 64; {
			case filled >= lo+64:
				recorded = ^uint64(0)
			case filled > lo:
				recorded = 1<<(filled-lo) - 1
			}
			if (r.failBits[i]|r.slowBits[i])&^recorded != 0 {
				return corrupt("outcome bits set beyond %d recorded calls", r.filled)
			}
		}
	case winTime:
		if len(b) != timeLen {
			return corrupt("length %d, want %d", len(b), timeLen)
		}
		r.epoch = int64(le.Uint64(body))
		// Epochs start at 0 and only move forward.
		if r.epoch < 0 {
			return corrupt("negative window epoch")
		}
		for i := range r.buckets {
			p := body[8+i*12:]
			bk := bucket{calls: le.Uint32(p), fails: le.Uint32(p[4:]), slow: le.Uint32(p[8:])}
			if bk.fails > bk.calls || bk.slow > bk.calls {
				return corrupt("bucket %d has more failures or slow calls than calls", i)
			}
			r.buckets[i] = bk
		}
	default:
		return corrupt("unknown window kind %d", r.win)
	}
	return nil
}
