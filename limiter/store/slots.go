package store

import (
	"errors"
	"math"
	"strconv"
)

// This file is the one slot-table mechanism every table over a Store
// shares: the limiter's tables, the concurrency tables, the breaker
// records, the hybrid leases and the external cache. A table is a fixed
// number of keys, prefix + decimal(i), a client key hashes to candidate
// slots, and a slot is changed with a read, a compute and a write under
// the read's CAS, retried on a mismatch.

// CreateCAS is the CAS to write a key Get reported missing with. Shared
// data ignores the CAS when it creates a key, but checks it when a racing
// worker created the key first; a value the host's global CAS counter has
// not handed out turns that race into a CAS mismatch (and a retry)
// instead of a lost update. Envoy's counter starts at 1 and counts up, so
// it reaches this value only after ~4.3e9 writes (a documented residual
// risk).
const CreateCAS = math.MaxUint32

// Probe is the i-th candidate of hash h, before it is reduced to the
// table's size: an odd stride, so over a power-of-two table the first
// candidates are distinct slots.
func Probe(h uint64, i int) uint64 { return h + uint64(i)*((h>>32)|1) }

// nameChunk is how many slot names SlotNames builds per allocation, so
// that its memory grows with the slots in use, not with the table.
const nameChunk = 1 << 12

// SlotNames names the slots of a table, prefix + decimal(i), building each
// name once, on first use. Not safe for concurrent use: one per worker.
type SlotNames struct {
	prefix string
	size   uint64
	chunks [][]string
}

// NewSlotNames names size slots under prefix.
func NewSlotNames(prefix string, size uint64) *SlotNames {
	return &SlotNames{prefix: prefix, size: size, chunks: make([][]string, (size+nameChunk-1)/nameChunk)}
}

// Name is the key of slot i (i < size).
func (n *SlotNames) Name(i uint64) string {
	chunk := n.chunks[i/nameChunk]
	if chunk == nil {
		chunk = make([]string, min(nameChunk, n.size-i/nameChunk*nameChunk))
		n.chunks[i/nameChunk] = chunk
	}
	if k := chunk[i%nameChunk]; k != "" {
		return k
	}
	k := n.prefix + strconv.FormatUint(i, 10)
	chunk[i%nameChunk] = k
	return k
}

// Load reads key for an update: its value and the CAS to write the update
// back with, CreateCAS when the key is missing (found false). err is a
// store failure, never ErrNotFound.
func Load(s Store, key string) (value []byte, cas uint32, found bool, err error) {
	v, cas, err := s.Get(key)
	if IsNotFound(err) {
		return nil, CreateCAS, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	return v, cas, true, nil
}

// ErrContended is Update's error when every try met a CAS mismatch.
var ErrContended = errors.New("store: cas retries exhausted")

// Update changes key under CAS, reading it again after a mismatch, at most
// tries times. f gets the current value (nil when the key is missing), or
// the read's error, and returns the value to write, or write false to
// leave the key as it is. What f writes after a failed read is written as
// a creation, with CreateCAS. Update returns the write's error, or
// ErrContended when every try met a mismatch.
func Update(s Store, key string, tries int, f func(value []byte, readErr error) (next []byte, write bool)) error {
	for range tries {
		v, cas, _, err := Load(s, key)
		if err != nil {
			cas = CreateCAS
		}
		next, write := f(v, err)
		if !write {
			return nil
		}
		err = s.Set(key, next, cas)
		if !IsCASMismatch(err) {
			return err
		}
	}
	return ErrContended
}
