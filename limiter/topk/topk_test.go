package topk

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Each step offers one key; want is the summary after it, largest first.
func TestOfferSteps(t *testing.T) {
	type step struct {
		digest uint64
		weight uint64
		want   []Entry
	}
	e := func(d, c, err uint64) Entry { return Entry{Digest: d, Count: c, Err: err} }
	steps := []step{
		{1, 1, []Entry{e(1, 1, 0)}},
		{2, 3, []Entry{e(2, 3, 0), e(1, 1, 0)}},
		{1, 1, []Entry{e(2, 3, 0), e(1, 2, 0)}},
		{3, 0, []Entry{e(2, 3, 0), e(1, 2, 0)}}, // weight 0 counts nothing
		// Full (k = 2): 3 takes 1's counter, inheriting its 2 as error.
		{3, 1, []Entry{e(2, 3, 0), e(3, 3, 2)}},
		// A tie for smallest (3 and 2 at 3): the first in the table,
		// 3, which took 1's place, goes.
		{4, 1, []Entry{e(4, 4, 3), e(2, 3, 0)}},
		{4, 5, []Entry{e(4, 9, 3), e(2, 3, 0)}},
	}
	s := New(2, false)
	for i, st := range steps {
		s.Offer(st.digest, "ignored", st.weight)
		got := s.Entries(nil)
		if !slices.Equal(got, st.want) {
			t.Fatalf("step %d: offer %d×%d: got %+v, want %+v", i, st.digest, st.weight, got, st.want)
		}
	}
	if s.Total() != 12 {
		t.Fatalf("total %d, want 12", s.Total())
	}
}

// The Space-Saving guarantees hold on skewed random streams, against
// exact counts: every count bounds its key's true count from above, by at
// most its error, and every key over N/k is present.
func TestGuaranteesAgainstExactCounts(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed*7))
		k := 1 + int(seed%9)
		s := New(k, false)
		exact := map[uint64]uint64{}
		for range 3000 {
			// Zipf-like: small digests are far more common.
			d := uint64(rng.ExpFloat64() * 6)
			w := 1 + rng.Uint64N(3)
			s.Offer(d, "", w)
			exact[d] += w
		}
		checkGuarantees(t, seed, k, s.Total(), s.Entries(nil), exact)
	}
}

func checkGuarantees(t *testing.T, seed uint64, k int, total uint64, entries []Entry, exact map[uint64]uint64) {
	t.Helper()
	var n uint64
	for _, c := range exact {
		n += c
	}
	if total != n {
		t.Fatalf("seed %d: total %d, want %d", seed, total, n)
	}
	if len(entries) > k {
		t.Fatalf("seed %d: %d entries for k %d", seed, len(entries), k)
	}
	present := map[uint64]bool{}
	for _, e := range entries {
		present[e.Digest] = true
		tr := exact[e.Digest]
		if e.Count < tr || e.Count-e.Err > tr {
			t.Fatalf("seed %d: digest %d true %d outside [%d-%d, %d]", seed, e.Digest, tr, e.Count, e.Err, e.Count)
		}
	}
	for d, c := range exact {
		if c*uint64(k) > n && !present[d] {
			t.Fatalf("seed %d: digest %d with %d of %d (over N/k, k=%d) missing", seed, d, c, n, k)
		}
	}
}

// Merging per-worker summaries keeps the guarantees for the whole stream.
func TestMergeKeepsGuarantees(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		k := 2 + int(seed%6)
		workers := 1 + int(seed%4)
		parts := make([]*Summary, workers)
		for i := range parts {
			parts[i] = New(k, false)
		}
		exact := map[uint64]uint64{}
		var total uint64
		for range 2000 {
			d := uint64(rng.ExpFloat64() * 5)
			w := uint64(1)
			parts[rng.IntN(workers)].Offer(d, "", w)
			exact[d] += w
			total += w
		}
		var es [][]Entry
		for _, p := range parts {
			es = append(es, p.Entries(nil))
		}
		checkGuarantees(t, seed, k, total, Merge(k, es...), exact)
	}
}

func TestMergeIgnoresARepeatedDigestWithinAPart(t *testing.T) {
	got := Merge(4, []Entry{{Digest: 1, Count: 5}, {Digest: 1, Count: 50}}, []Entry{{Digest: 1, Count: 2}})
	if len(got) != 1 || got[0].Count != 7 {
		t.Fatalf("got %+v, want digest 1 counted 5+2", got)
	}
}

func TestKeysKeptOnlyWhenAsked(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen+40)
	s := New(3, true)
	buf := []byte("user-1")
	s.Offer(1, string(buf), 1)
	s.Offer(2, long, 1)
	buf[0] = 'X' // the caller reuses its buffer
	got := s.Entries(nil)
	if got[0].Key != "user-1" || got[1].Key != long[:MaxKeyLen] {
		t.Fatalf("keys %q, %q", got[0].Key, got[1].Key)
	}
	s = New(3, false)
	s.Offer(1, "user-1", 1)
	if k := s.Entries(nil)[0].Key; k != "" {
		t.Fatalf("key %q kept without keepKeys", k)
	}
}

// Counting a key already present allocates nothing: that is the offer a
// repeat offender's limited requests make.
func TestOfferOfAPresentKeyAllocatesNothing(t *testing.T) {
	s := New(8, true)
	for d := range uint64(8) {
		s.Offer(d, "key-"+strconv.Itoa(int(d)), 1)
	}
	if n := testing.AllocsPerRun(1000, func() { s.Offer(3, "key-3", 1) }); n != 0 {
		t.Fatalf("%v allocations per offer", n)
	}
}

func TestCountsSaturate(t *testing.T) {
	s := New(1, false)
	s.Offer(1, "", ^uint64(0)-1)
	s.Offer(1, "", 5)
	if e := s.Entries(nil)[0]; e.Count != ^uint64(0) || s.Total() != ^uint64(0) {
		t.Fatalf("count %d total %d, want saturated", e.Count, s.Total())
	}
}

func TestCodecRoundTrip(t *testing.T) {
	s := New(4, true)
	for i, w := range []uint64{5, 1, 300, 2, 7, 1 << 40} {
		s.Offer(uint64(i*1000+1), "k"+strconv.Itoa(i), w)
	}
	want := s.Entries(nil)
	b := Encode(nil, s.Total(), want)
	got, total, err := Decode(nil, b, 4)
	if err != nil || total != s.Total() || !slices.Equal(got, want) {
		t.Fatalf("decode: %v total %d entries %+v, want %d %+v", err, total, got, s.Total(), want)
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := Encode(nil, 9, []Entry{{Digest: 1, Count: 5, Err: 1, Key: "a"}, {Digest: 2, Count: 4}})
	cases := map[string][]byte{
		"empty":          {},
		"version":        append([]byte{2}, good[1:]...),
		"truncated":      good[:len(good)-1],
		"trailing":       append(append([]byte(nil), good...), 0),
		"over k":         Encode(nil, 9, []Entry{{Digest: 1}, {Digest: 2}, {Digest: 3}}),
		"digest twice":   Encode(nil, 9, []Entry{{Digest: 1, Count: 1}, {Digest: 1, Count: 1}}),
		"err over count": {1, 9, 1, 1, 0, 0, 0, 0, 0, 0, 0, 2, 3, 0},
		"key too long":   append([]byte{1, 9, 1, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, MaxKeyLen + 1, 1}, bytes.Repeat([]byte("x"), MaxKeyLen+1)...),
		"huge count":     {1, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	}
	for name, b := range cases {
		got, total, err := Decode([]Entry{{Digest: 77}}, b, 2)
		if !errors.Is(err, ErrCorrupt) || len(got) != 1 || total != 0 {
			t.Errorf("%s: err %v, entries %+v, total %d: want ErrCorrupt and dst unchanged", name, err, got, total)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(nil, 9, []Entry{{Digest: 1, Count: 5, Err: 1, Key: "a"}, {Digest: 2, Count: 4}}), 2)
	f.Add([]byte{1, 0, 0}, 0)
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1}, 3)
	f.Add([]byte{}, 1)
	f.Fuzz(func(t *testing.T, b []byte, k int) {
		k = k % 300
		got, total, err := Decode(nil, b, k)
		if err != nil {
			if len(got) != 0 || total != 0 {
				t.Fatalf("refused record left entries %+v total %d", got, total)
			}
			return
		}
		if len(got) > max(k, 0) {
			t.Fatalf("%d entries for k %d", len(got), k)
		}
		seen := map[uint64]bool{}
		for _, e := range got {
			if e.Err > e.Count || len(e.Key) > MaxKeyLen || seen[e.Digest] {
				t.Fatalf("entry %+v accepted", e)
			}
			seen[e.Digest] = true
		}
		// What Decode accepts, Encode writes back the same way.
		again, total2, err := Decode(nil, Encode(nil, total, got), k)
		if err != nil || total2 != total || !slices.Equal(again, got) {
			t.Fatalf("re-encoded record reads %+v %d %v, want %+v %d", again, total2, err, got, total)
		}
	})
}
