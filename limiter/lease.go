package limiter

import (
	"math"
	"time"
)

// MaxLeaseAhead bounds how far beyond an empty bucket Lease may reserve.
// It stays far below ClockStepTolerance, so that a reserved debt is never
// mistaken for an implausible state and reset (which would hand the
// reserved units out a second time).
const MaxLeaseAhead = 10 * time.Second

// LeaseResult is the outcome of Lease.
type LeaseResult struct {
	// Granted is how many units were taken, 0 to want.
	Granted int64
	// Remaining is the whole units one more decision at the same now could
	// still get; 0 while the bucket is empty or reserved ahead.
	Remaining int64
	// ReadyAfter is how long until the last granted unit may be spent
	// (rounded up to the nanosecond); 0 when all may be spent now.
	ReadyAfter time.Duration
	// RetryAfter is, when nothing was granted, how long until one unit
	// could be leased; 0 otherwise.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its full allowance.
	ResetAfter time.Duration
	Reason     Reason
}

// Lease takes up to want units at once from a token bucket, reserving
// beyond the empty bucket by up to ahead of future refill. It is the pure
// form of the hybrid mode's Redis script (see the package documentation,
// "token_bucket leases").
//
// Unit j of a grant (1-based, after a debt D) may be spent from
// now + max(0, D + j·τ − Σ): the instant at which a Decide for that one
// unit would first be allowed. Granted units become spendable one τ apart,
// the last one ReadyAfter from now; spending each no earlier than that is
// equivalent to a sequence of single-unit decisions in time order, so
// leases never admit more than the bucket itself. Only token buckets can
// be leased; other algorithms return ReasonInvalidLimit.
func (l Limit) Lease(st State, now int64, want int64, ahead time.Duration) (State, LeaseResult) {
	if !l.valid() || l.Algorithm != TokenBucket {
		return st, LeaseResult{Reason: ReasonInvalidLimit}
	}
	rate, period := uint64(l.Rate), uint64(l.Period)
	// The same plausibility ceiling as Decide and Charge (and the scripts):
	// a charged bucket may be in debt up to a second full bucket.
	debt, full := l.bucketDebt(st, now)
	var res LeaseResult
	if debt.less(full) {
		res.Remaining = int64(full.sub(debt).divFloor(period))
	}
	res.ResetAfter = dur(debt.divCeil(rate))
	if want < 1 {
		res.Remaining = 0
		res.Reason = ReasonInvalidCost
		return st, res
	}
	ahead = min(max(ahead, 0), MaxLeaseAhead)
	top := full.add(mul(uint64(ahead), rate))
	one := debt.add64(period)
	if top.less(one) {
		res.Remaining = 0
		res.RetryAfter = dur(one.sub(top).divCeil(rate))
		res.Reason = ReasonLimited
		return st, res
	}
	k := top.sub(debt).divFloor(period)
	if k > uint64(want) {
		k = uint64(want)
	}
	after := debt.add(mul(k, period))
	q, r := after.div(rate)
	at := int64(math.MaxInt64)
	if now <= 0 || q <= uint64(math.MaxInt64-now) {
		at = now + int64(q)
	}
	res.Granted = int64(k)
	res.Remaining = 0
	if after.less(full) {
		res.Remaining = int64(full.sub(after).divFloor(period))
	} else if full.less(after) {
		res.ReadyAfter = dur(after.sub(full).divCeil(rate))
	}
	res.ResetAfter = dur(after.divCeil(rate))
	return State{At: at, N: uint32(r)}, res
}
