package store

import (
	"errors"
	"fmt"
	"testing"
)

// TestIsNotFoundIsCASMismatch: the inlined checks answer as errors.Is
// does, for the bare sentinels the stores return, for wrapped ones, and
// for nil and other errors.
func TestIsNotFoundIsCASMismatch(t *testing.T) {
	other := errors.New("store: down")
	for _, err := range []error{nil, other, ErrNotFound, ErrCASMismatch,
		fmt.Errorf("get: %w", ErrNotFound), fmt.Errorf("set: %w", ErrCASMismatch), fmt.Errorf("wrapped: %w", other)} {
		if got, want := IsNotFound(err), errors.Is(err, ErrNotFound); got != want {
			t.Errorf("IsNotFound(%v) = %v, errors.Is says %v", err, got, want)
		}
		if got, want := IsCASMismatch(err), errors.Is(err, ErrCASMismatch); got != want {
			t.Errorf("IsCASMismatch(%v) = %v, errors.Is says %v", err, got, want)
		}
	}
}
