package inflight

import (
	"encoding/binary"
	"errors"
	"math"
)

// Entry is one instance's share of one key's requests in flight.
type Entry struct {
	// FP is the key's fingerprint; 0 in tally records.
	FP uint64
	// Instance is the id of the instance that wrote the entry; never 0.
	Instance uint32
	// Count is the instance's requests in flight for the key; at least 1.
	Count uint32
	// Beat is when the instance last wrote the entry, Unix ns.
	Beat int64
}

const (
	recordVersion = 1
	entryLen      = 24
	// MaxCount bounds one entry's Count: no worker holds anywhere near
	// this many streams, so a larger value can only be garbage.
	MaxCount = 1 << 24
	// maxDecodeEntries bounds the work one unreadable value can cause.
	maxDecodeEntries = 4096
)

// ErrMalformed reports a value that is not a record.
var ErrMalformed = errors.New("inflight: malformed record")

// AppendRecord encodes entries as a record.
func AppendRecord(dst []byte, entries []Entry) []byte {
	dst = append(dst, recordVersion)
	for _, e := range entries {
		dst = appendEntry(dst, e)
	}
	return dst
}

func appendEntry(dst []byte, e Entry) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, e.FP)
	dst = binary.LittleEndian.AppendUint32(dst, e.Instance)
	dst = binary.LittleEndian.AppendUint32(dst, e.Count)
	return binary.LittleEndian.AppendUint64(dst, uint64(e.Beat))
}

// DecodeRecord appends the entries of b to dst. It checks the structure
// only; whether an entry is possible at a given time is checkEntry's job.
func DecodeRecord(dst []Entry, b []byte) ([]Entry, error) {
	if len(b) == 0 || b[0] != recordVersion || (len(b)-1)%entryLen != 0 || (len(b)-1)/entryLen > maxDecodeEntries {
		return dst, ErrMalformed
	}
	for p := b[1:]; len(p) > 0; p = p[entryLen:] {
		dst = append(dst, Entry{
			FP:       binary.LittleEndian.Uint64(p),
			Instance: binary.LittleEndian.Uint32(p[8:]),
			Count:    binary.LittleEndian.Uint32(p[12:]),
			Beat:     int64(binary.LittleEndian.Uint64(p[16:])),
		})
	}
	return dst, nil
}

// possible reports whether a live instance could have written e by now.
func possible(e Entry, now, staleAfter int64) bool {
	return e.Instance != 0 && e.Count >= 1 && e.Count <= MaxCount && satSub(e.Beat, now) <= staleAfter
}

// fresh reports whether e still counts at now.
func fresh(e Entry, now, staleAfter int64) bool { return satSub(now, e.Beat) <= staleAfter }

// satSub is a − b clamped to the int64 range: beats read from shared data
// can hold anything, and a wrapped difference would make garbage fresh.
func satSub(a, b int64) int64 {
	d := a - b
	if b > 0 && d > a {
		return math.MinInt64
	}
	if b < 0 && d < a {
		return math.MaxInt64
	}
	return d
}
