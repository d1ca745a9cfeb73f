package topk

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The shared-data form of a summary, which a worker writes and any
// worker reads back:
//
//	version  1 byte, 1
//	total    uvarint, N
//	n        uvarint, entries that follow (at most the reader's k)
//	entries  n × (digest 8 bytes little-endian, count uvarint,
//	              err uvarint ≤ count, key length uvarint ≤ MaxKeyLen,
//	              key bytes)
//
// Other workers (or anything else with access to the VM's shared data)
// can write these bytes, so Decode trusts nothing in them: a record it
// refuses is reported as such and read as no entries, never a panic, and
// never more than k entries or MaxKeyLen bytes of a key.

const codecVersion = 1

// ErrCorrupt is the error of a record Decode refuses.
var ErrCorrupt = errors.New("topk: corrupt summary record")

// Encode appends the shared-data form of entries (at most k of them) and
// total to dst.
func Encode(dst []byte, total uint64, entries []Entry) []byte {
	dst = append(dst, codecVersion)
	dst = binary.AppendUvarint(dst, total)
	dst = binary.AppendUvarint(dst, uint64(len(entries)))
	for _, e := range entries {
		dst = binary.LittleEndian.AppendUint64(dst, e.Digest)
		dst = binary.AppendUvarint(dst, e.Count)
		dst = binary.AppendUvarint(dst, min(e.Err, e.Count))
		key := e.Key
		if len(key) > MaxKeyLen {
			key = key[:MaxKeyLen]
		}
		dst = binary.AppendUvarint(dst, uint64(len(key)))
		dst = append(dst, key...)
	}
	return dst
}

// Decode reads a record Encode wrote, for a summary of k entries,
// appending its entries to dst. A record with more than k entries, a
// digest twice, an error over its count, a key over MaxKeyLen, bytes
// missing or left over is refused with ErrCorrupt.
func Decode(dst []Entry, b []byte, k int) ([]Entry, uint64, error) {
	start := len(dst)
	fail := func(what string) ([]Entry, uint64, error) {
		return dst[:start], 0, fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
	if len(b) == 0 || b[0] != codecVersion {
		return fail("unknown version")
	}
	i := 1
	total, ok := uvarint(b, &i)
	if !ok {
		return fail("total")
	}
	n, ok := uvarint(b, &i)
	if !ok || n > uint64(max(k, 0)) {
		return fail("entry count")
	}
	for range n {
		if len(b)-i < 8 {
			return fail("digest")
		}
		var e Entry
		e.Digest = binary.LittleEndian.Uint64(b[i:])
		i += 8
		var okC, okE, okL bool
		e.Count, okC = uvarint(b, &i)
		e.Err, okE = uvarint(b, &i)
		keyLen, okL := uvarint(b, &i)
		switch {
		case !okC || !okE || !okL:
			return fail("entry fields")
		case e.Err > e.Count:
			return fail("error over count")
		case keyLen > MaxKeyLen || keyLen > uint64(len(b)-i):
			return fail("key length")
		}
		e.Key = string(b[i : i+int(keyLen)])
		i += int(keyLen)
		for _, prev := range dst[start:] {
			if prev.Digest == e.Digest {
				return fail("digest twice")
			}
		}
		dst = append(dst, e)
	}
	if i != len(b) {
		return fail("trailing bytes")
	}
	return dst, total, nil
}

// uvarint reads a uvarint at b[*i:], moving *i past it.
func uvarint(b []byte, i *int) (uint64, bool) {
	v, n := binary.Uvarint(b[*i:])
	if n <= 0 {
		return 0, false
	}
	*i += n
	return v, true
}
