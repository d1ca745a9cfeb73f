// Package store describes the key-value store that limiter and breaker state
// lives in. Its semantics are those of proxy-wasm shared data as Envoy
// implements it, so the decision cores can be tested natively against the
// exact contract they meet in production.
package store

import "errors"

var (
	// ErrNotFound is returned by Get when the key was never written.
	ErrNotFound = errors.New("store: key not found")
	// ErrCASMismatch is returned by Set when the key exists and its CAS
	// differs from the one supplied.
	ErrCASMismatch = errors.New("store: cas mismatch")
)

// Store is proxy-wasm shared data: Get returns the value and its CAS; Set
// with cas == 0 writes unconditionally, otherwise only if the key does not
// exist or its current CAS equals cas. Every successful Set gives the key a
// new nonzero CAS. There is no delete.
type Store interface {
	Get(key string) (value []byte, cas uint32, err error)
	Set(key string, value []byte, cas uint32) error
}
