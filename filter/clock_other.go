//go:build !wasip1

package filter

import "time"

// wallClock is time.Now outside the wasm (native tests and tools).
func wallClock() time.Time { return time.Now() }
