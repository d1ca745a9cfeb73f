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

// IsNotFound is errors.Is(err, ErrNotFound), and IsCASMismatch
// errors.Is(err, ErrCASMismatch), for the paths that test the error of
// every Get or Set a request makes. The stores here return the bare
// sentinels, and a nil error is the common case; both are answered by
// comparisons the compiler inlines, while errors.Is is a call (two on a
// non-nil error) on GOARCH=wasm. A wrapped sentinel still matches.
func IsNotFound(err error) bool {
	return err == ErrNotFound || (err != nil && errors.Is(err, ErrNotFound))
}

// IsCASMismatch: see IsNotFound.
func IsCASMismatch(err error) bool {
	return err == ErrCASMismatch || (err != nil && errors.Is(err, ErrCASMismatch))
}
