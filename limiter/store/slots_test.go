package store

import (
	"errors"
	"testing"
)

func TestSlotNamesNameEachSlotOnce(t *testing.T) {
	n := NewSlotNames("p.", nameChunk+3)
	for _, i := range []uint64{0, 7, nameChunk - 1, nameChunk, nameChunk + 2} {
		want := "p." + itoa(i)
		if got := n.Name(i); got != want {
			t.Fatalf("Name(%d) = %q, want %q", i, got, want)
		}
		if got := n.Name(i); got != want {
			t.Fatalf("second Name(%d) = %q", i, got)
		}
	}
	if got := len(n.chunks[1]); got != 3 {
		t.Fatalf("last chunk holds %d names, want the 3 slots left", got)
	}
	if allocs := testing.AllocsPerRun(100, func() { n.Name(7) }); allocs != 0 {
		t.Fatalf("a named slot costs %v allocations", allocs)
	}
}

func itoa(i uint64) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func TestProbeVisitsDistinctSlots(t *testing.T) {
	const mask = 1<<10 - 1
	for _, h := range []uint64{0, 1, 1 << 32, 0xdeadbeefcafebabe, ^uint64(0)} {
		seen := map[uint64]bool{}
		for i := 0; i < 4; i++ {
			s := Probe(h, i) & mask
			if seen[s] {
				t.Fatalf("hash %#x: candidate %d repeats slot %d", h, i, s)
			}
			seen[s] = true
		}
	}
}

func TestLoadReportsMissingKeysWithCreateCAS(t *testing.T) {
	m := NewMemory()
	v, cas, found, err := Load(m, "k")
	if v != nil || cas != CreateCAS || found || err != nil {
		t.Fatalf("missing key: %q %d %v %v", v, cas, found, err)
	}
	_ = m.Set("k", []byte("a"), 0)
	v, cas, found, err = Load(m, "k")
	if string(v) != "a" || cas == 0 || cas == CreateCAS || !found || err != nil {
		t.Fatalf("present key: %q %d %v %v", v, cas, found, err)
	}
}

// A creation racing Update's must not be overwritten: the loser reads
// the winner's value and applies its change on top of it.
func TestUpdateRetriesARacingCreation(t *testing.T) {
	m := NewMemory()
	raced := false
	m.BeforeSet = func(key string) bool {
		if !raced {
			raced = true
			_ = m.Set(key, []byte("1"), 0) // another worker creates it first
		}
		return false
	}
	calls := 0
	err := Update(m, "k", 4, func(v []byte, readErr error) ([]byte, bool) {
		calls++
		return append(append([]byte(nil), v...), '+'), true
	})
	if err != nil || calls != 2 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
	if v, _, _ := m.Get("k"); string(v) != "1+" {
		t.Fatalf("value %q: the racing creation was lost", v)
	}
}

func TestUpdateGivesUpAfterItsTries(t *testing.T) {
	m := NewMemory()
	m.BeforeSet = func(string) bool { return true }
	calls := 0
	err := Update(m, "k", 3, func([]byte, error) ([]byte, bool) { calls++; return []byte("x"), true })
	if !errors.Is(err, ErrContended) || calls != 3 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
}

func TestUpdateWritesNothingWhenAsked(t *testing.T) {
	m := NewMemory()
	if err := Update(m, "k", 3, func([]byte, error) ([]byte, bool) { return nil, false }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Get("k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a key was written: %v", err)
	}
}

type failingStore struct{ *Memory }

var errBroken = errors.New("broken")

func (*failingStore) Get(string) ([]byte, uint32, error) { return nil, 0, errBroken }

func TestUpdatePassesAReadErrorAndWritesAsACreation(t *testing.T) {
	s := &failingStore{Memory: NewMemory()}
	var got error
	err := Update(s, "k", 3, func(v []byte, readErr error) ([]byte, bool) {
		got = readErr
		return []byte("x"), true
	})
	if err != nil || !errors.Is(got, errBroken) {
		t.Fatalf("err %v, f saw %v", err, got)
	}
	if v, _, _ := s.Memory.Get("k"); string(v) != "x" {
		t.Fatalf("value %q", v)
	}
}
