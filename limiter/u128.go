package limiter

import (
	"math"
	"math/bits"
	"time"
)

// u128 is an unsigned 128-bit integer. Products of a count (< 2^34) and a
// period or time offset (< 2^64) need more than 64 bits; math/bits keeps
// them exact without allocating.
type u128 struct{ hi, lo uint64 }

func mul(a, b uint64) u128 {
	// Most products fit in 64 bits. The check is two count-leading-zeros
	// instructions, while bits.Mul64 is a software routine on GOARCH=wasm.
	if bits.Len64(a)+bits.Len64(b) <= 64 {
		return u128{0, a * b}
	}
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return u128{hi, lo}
}

func (x u128) add64(y uint64) u128 { return x.add(u128{0, y}) }

// sub assumes x >= y.
func (x u128) sub(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return u128{hi, lo}
}

func (x u128) less(y u128) bool { return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo) }

// div returns x/d and x%d, saturating the quotient at MaxUint64 where
// bits.Div64 would panic; d must be nonzero.
func (x u128) div(d uint64) (q, r uint64) {
	if x.hi == 0 {
		// One hardware division; bits.Div64 is a long software routine
		// on GOARCH=wasm, about half a microsecond per decision.
		return x.lo / d, x.lo % d
	}
	if x.hi >= d {
		return math.MaxUint64, 0
	}
	return bits.Div64(x.hi, x.lo, d)
}

func (x u128) divCeil(d uint64) uint64 {
	q, r := x.div(d)
	if r != 0 && q != math.MaxUint64 {
		q++
	}
	return q
}

func (x u128) divFloor(d uint64) uint64 {
	q, _ := x.div(d)
	return q
}

// dur converts nanoseconds to a Duration, saturating instead of wrapping.
func dur(ns uint64) time.Duration {
	if ns > math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// addSat adds nanosecond counts without wrapping.
func addSat(a, b uint64) uint64 {
	s, c := bits.Add64(a, b, 0)
	if c != 0 {
		return math.MaxUint64
	}
	return s
}
