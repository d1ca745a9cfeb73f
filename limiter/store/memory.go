package store

import "sync"

// Memory is an in-process Store with shared-data semantics, for tests and
// native benchmarks. It is safe for concurrent use.
type Memory struct {
	mu      sync.Mutex
	entries map[string]memoryEntry
	nextCAS uint32

	// BeforeSet, if set, is called before every Set while no lock is held.
	// Returning true makes that Set fail with ErrCASMismatch, which lets tests
	// inject the CAS races that eight workers would cause.
	BeforeSet func(key string) (forceMismatch bool)
}

type memoryEntry struct {
	value []byte
	cas   uint32
}

// NewMemory returns an empty store.
func NewMemory() *Memory {
	return &Memory{entries: make(map[string]memoryEntry)}
}

// Get returns a copy of the value, as the proxy-wasm host does.
func (m *Memory) Get(key string) ([]byte, uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok {
		return nil, 0, ErrNotFound
	}
	return append([]byte(nil), e.value...), e.cas, nil
}

// Set follows Envoy: the CAS is only checked when the key exists.
func (m *Memory) Set(key string, value []byte, cas uint32) error {
	if m.BeforeSet != nil && m.BeforeSet(key) {
		return ErrCASMismatch
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if ok && cas != 0 && e.cas != cas {
		return ErrCASMismatch
	}
	m.nextCAS++
	if m.nextCAS == 0 {
		m.nextCAS = 1
	}
	m.entries[key] = memoryEntry{value: append([]byte(nil), value...), cas: m.nextCAS}
	return nil
}

// Len reports how many keys exist, which is what bounds Envoy's memory.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}
