// Package topk keeps a bounded summary of the keys a limit refuses most:
// the Space-Saving algorithm (Metwally, Agrawal and El Abbadi, 2005) over
// k counters. It has no proxy-wasm import and allocates nothing per
// offer once its k entries exist.
//
// Guarantees, for a summary that has seen N units in all:
//   - an entry's Count is at least the key's true count and at most
//     Count - Err below it: true ∈ [Count-Err, Count];
//   - every key whose true count exceeds N/k is in the summary;
//   - memory is fixed: k entries, and with keys kept, at most MaxKeyLen
//     bytes of each.
//
// Keys are identified by a 64-bit digest (limiter.Hash of the key with a
// per-plugin seed): two keys with one digest are counted as one, which
// over-reports, never under-reports, and is as rare as a 64-bit
// collision. A key's text is kept only when the summary is made to keep
// it; an operator who may not see key values sees digests.
//
// Several summaries (one per worker) are combined by Merge, which sums
// the counts and the errors of a digest across them and keeps the k
// largest: a key absent from one part may have had up to that part's
// smallest count there, so the merged error is widened by it, and the
// guarantee above holds for the merged N.
package topk

import "sort"

// MaxKeyLen bounds the bytes of a key kept with its entry; a longer key
// is cut there (and the digest still tells keys apart).
const MaxKeyLen = 128

// Entry is one counter of a summary.
type Entry struct {
	Digest uint64
	// Count is an upper bound of the units the key was offered; Err is
	// how much of Count may belong to keys it replaced.
	Count, Err uint64
	// Key is the key's text (at most MaxKeyLen bytes), or "" when the
	// summary keeps no keys.
	Key string
}

// Summary is a Space-Saving summary of at most k entries. The zero value
// is unusable; use New.
type Summary struct {
	k        int
	keepKeys bool
	entries  []Entry
	// index maps a digest to its entry's position.
	index map[uint64]int
	// total is N, the units offered.
	total uint64
}

// New returns an empty summary of k ≥ 1 entries, keeping the keys' text
// when keepKeys is set.
func New(k int, keepKeys bool) *Summary {
	k = max(k, 1)
	return &Summary{k: k, keepKeys: keepKeys, entries: make([]Entry, 0, k), index: make(map[uint64]int, k)}
}

// K is the number of entries the summary holds at most.
func (s *Summary) K() int { return s.k }

// Total is N, the units offered so far.
func (s *Summary) Total() uint64 { return s.total }

// Offer counts weight units of the key with this digest (key is its text,
// read only when the summary keeps keys). A weight of 0 counts nothing.
func (s *Summary) Offer(digest uint64, key string, weight uint64) {
	if weight == 0 {
		return
	}
	s.total = addSat(s.total, weight)
	if i, ok := s.index[digest]; ok {
		s.entries[i].Count = addSat(s.entries[i].Count, weight)
		return
	}
	if len(s.entries) < s.k {
		s.index[digest] = len(s.entries)
		s.entries = append(s.entries, Entry{Digest: digest, Count: weight, Key: s.keyText(key)})
		return
	}
	// Full: the new key takes the smallest counter, and inherits its
	// count as its possible error.
	m := 0
	for i := 1; i < len(s.entries); i++ {
		if s.entries[i].Count < s.entries[m].Count {
			m = i
		}
	}
	old := s.entries[m]
	delete(s.index, old.Digest)
	s.index[digest] = m
	s.entries[m] = Entry{Digest: digest, Count: addSat(old.Count, weight), Err: old.Count, Key: s.keyText(key)}
}

// keyText is key as the summary keeps it: "" without keys, else cut to
// MaxKeyLen. The copy keeps the entry from holding the caller's buffer.
func (s *Summary) keyText(key string) string {
	if !s.keepKeys {
		return ""
	}
	if len(key) > MaxKeyLen {
		key = key[:MaxKeyLen]
	}
	return string(append([]byte(nil), key...))
}

// Entries appends the summary's entries to dst, largest count first (ties
// by digest, so the order is the same on every worker).
func (s *Summary) Entries(dst []Entry) []Entry {
	start := len(dst)
	dst = append(dst, s.entries...)
	sortEntries(dst[start:])
	return dst
}

// Reset empties the summary, keeping its storage.
func (s *Summary) Reset() {
	s.entries = s.entries[:0]
	clear(s.index)
	s.total = 0
}

// Merge combines parts (each a summary's entries, of at most k each) into
// the k largest, summing a digest's count and error across parts. A part
// that holds k entries and not the digest may have counted it up to its
// smallest count: that is added to the merged count and error, so the
// merged counts stay upper bounds.
func Merge(k int, parts ...[]Entry) []Entry {
	k = max(k, 1)
	type acc struct {
		e    Entry
		seen []bool
	}
	byDigest := map[uint64]*acc{}
	var order []uint64
	for pi, part := range parts {
		for _, e := range part {
			a := byDigest[e.Digest]
			if a == nil {
				a = &acc{e: Entry{Digest: e.Digest, Key: e.Key}, seen: make([]bool, len(parts))}
				byDigest[e.Digest] = a
				order = append(order, e.Digest)
			}
			if a.seen[pi] {
				continue // a part names a digest once; a repeat is ignored
			}
			a.seen[pi] = true
			a.e.Count = addSat(a.e.Count, e.Count)
			a.e.Err = addSat(a.e.Err, min(e.Err, e.Count))
			if a.e.Key == "" {
				a.e.Key = e.Key
			}
		}
	}
	// The count a full part may have held for a digest it does not name.
	floor := make([]uint64, len(parts))
	for pi, part := range parts {
		if len(part) >= k {
			floor[pi] = smallest(part)
		}
	}
	out := make([]Entry, 0, len(order))
	for _, d := range order {
		a := byDigest[d]
		for pi := range parts {
			if !a.seen[pi] {
				a.e.Count = addSat(a.e.Count, floor[pi])
				a.e.Err = addSat(a.e.Err, floor[pi])
			}
		}
		out = append(out, a.e)
	}
	sortEntries(out)
	if len(out) > k {
		out = out[:k]
	}
	return out
}

func smallest(part []Entry) uint64 {
	m := part[0].Count
	for _, e := range part[1:] {
		m = min(m, e.Count)
	}
	return m
}

func sortEntries(es []Entry) {
	sort.Slice(es, func(i, j int) bool {
		if es[i].Count != es[j].Count {
			return es[i].Count > es[j].Count
		}
		return es[i].Digest < es[j].Digest
	})
}

// addSat is a + b, held at the largest uint64 rather than wrapping.
func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}
