package store

import (
	"errors"
	"testing"
)

// The limiter relies on these exact shared-data semantics, in particular
// that creating a key ignores the CAS while an existing key checks it.
func TestMemorySharedDataSemantics(t *testing.T) {
	m := NewMemory()
	if _, _, err := m.Get("k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	if err := m.Set("k", []byte("a"), 12345); err != nil {
		t.Fatalf("create with arbitrary CAS: %v", err)
	}
	v, cas, err := m.Get("k")
	if err != nil || string(v) != "a" || cas == 0 {
		t.Fatalf("Get = %q %d %v", v, cas, err)
	}
	if err := m.Set("k", []byte("b"), cas+1); !errors.Is(err, ErrCASMismatch) {
		t.Fatalf("stale CAS: %v", err)
	}
	if err := m.Set("k", []byte("b"), cas); err != nil {
		t.Fatalf("current CAS: %v", err)
	}
	if err := m.Set("k", []byte("c"), cas); !errors.Is(err, ErrCASMismatch) {
		t.Fatalf("reused CAS: %v", err)
	}
	if err := m.Set("k", []byte("d"), 0); err != nil {
		t.Fatalf("unconditional: %v", err)
	}
	v[0] = 'x' // Get returned a copy
	if v, _, _ := m.Get("k"); string(v) != "d" || m.Len() != 1 {
		t.Fatalf("value %q, len %d", v, m.Len())
	}
}
