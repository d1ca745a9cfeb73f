package breaker

import (
	"math/bits"
	"math/rand/v2"
	"time"
)

// MaxJitterPercent is the largest JitterPercent.
const MaxJitterPercent = 100

// Jitter shortens d by a random share of at most percent of it, drawn from
// u (uniform over uint64): the result lies in (d − d×percent/100, d], or
// is d for percent 0. Waits are only ever shortened, so a configured
// timeout stays an upper bound that budgets can rely on, while many
// instances that failed together spread their next attempts apart.
func Jitter(d time.Duration, percent uint8, u uint64) time.Duration {
	if d <= 0 || percent == 0 {
		return d
	}
	p := uint64(min(percent, MaxJitterPercent))
	span := uint64(d)/100*p + uint64(d)%100*p/100
	// The high word of span×u is span×(u/2^64), uniform in [0, span).
	cut, _ := bits.Mul64(span, u)
	return d - time.Duration(cut)
}

// jittered is the open timeout d after the machine's jitter.
func (m *Machine) jittered(d int64) int64 {
	if m.jitterPercent == 0 {
		return d
	}
	random := m.random
	if random == nil {
		random = rand.Uint64
	}
	return int64(Jitter(time.Duration(d), m.jitterPercent, random()))
}
