package limiter

import (
	"errors"
	"fmt"
	"time"
)

// Algorithm selects how a Limit counts.
type Algorithm uint8

const (
	// TokenBucket is the default: capacity Rate+Burst, continuous refill of
	// Rate units per Period, evaluated as GCRA (see the package doc).
	TokenBucket Algorithm = iota
	// FixedWindow admits at most Rate units per epoch-aligned Period, or
	// per calendar period (see Calendar).
	FixedWindow
	// SlidingWindow is the weighted two-window counter.
	SlidingWindow
	// SlidingLog keeps each admission's time: at most Rate units in any
	// window of length Period, exactly. Rate is at most MaxLogLimit.
	SlidingLog

	numAlgorithms
)

func (a Algorithm) String() string {
	switch a {
	case TokenBucket:
		return "token_bucket"
	case FixedWindow:
		return "fixed_window"
	case SlidingWindow:
		return "sliding_window"
	case SlidingLog:
		return "sliding_log"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm maps a config name (the String form) to an Algorithm; an
// empty name is the default, TokenBucket.
func ParseAlgorithm(name string) (Algorithm, error) {
	switch name {
	case "", "token_bucket":
		return TokenBucket, nil
	case "fixed_window":
		return FixedWindow, nil
	case "sliding_window":
		return SlidingWindow, nil
	case "sliding_log":
		return SlidingLog, nil
	}
	return 0, fmt.Errorf("limiter: unknown algorithm %q (want token_bucket, fixed_window, sliding_window or sliding_log)", name)
}

// Bounds on Limit fields. They exist so that every product in the decision
// code fits in 128 bits and every quotient back in 64, which is what lets
// Decide use exact integer arithmetic without overflow checks per step, and
// so that the codec can store counts in 32 bits.
const (
	// MaxRate is the largest Rate (and the largest Burst).
	MaxRate = 1<<32 - 1
	// MinPeriod is the shortest Period: windows shorter than a microsecond
	// are meaningless for HTTP and would overflow the 56-bit window index
	// the sliding-window codec stores.
	MinPeriod = time.Microsecond
	// MaxPeriod is the longest Period.
	MaxPeriod = 366 * 24 * time.Hour
	// maxSpanNanos bounds Capacity×Period/Rate, the time an empty token
	// bucket needs to refill completely.
	maxSpanNanos = 1 << 62
)

// Limit is one rate-limit policy. The zero value is invalid (Rate 0); call
// Validate before use. Decide on an invalid Limit denies with
// ReasonInvalidLimit instead of panicking.
type Limit struct {
	// Algorithm defaults to TokenBucket (the zero value).
	Algorithm Algorithm
	// Rate is the allowance per Period: R of "R per second" or L of
	// "L per window". It is also Result.Limit. Must be in [1, MaxRate].
	Rate int64
	// Period is the refill period (token bucket) or the window length.
	// "requests_per_second: R" is Rate R with Period time.Second.
	// Must be in [MinPeriod, MaxPeriod].
	Period time.Duration
	// Burst is extra token-bucket capacity above Rate; zero means capacity
	// equals Rate. Must be zero for the window algorithms.
	Burst int64
	// Calendar, when set, aligns a FixedWindow to calendar periods in the
	// UTC offset Offset instead of to the epoch; Period must then be
	// Calendar.Longest(). Only FixedWindow takes a calendar: the other
	// algorithms measure a sliding span of constant length.
	Calendar Calendar
	// Offset is the calendar's UTC offset in seconds east of UTC, a whole
	// number of minutes within ±MaxOffset; zero without a calendar.
	Offset int32
}

// Capacity is the most units one decision can ever get: Rate+Burst for the
// token bucket and Rate for the windows.
func (l Limit) Capacity() int64 { return l.capacity() }

// capacity is Capacity for the decisions, which hold l by pointer: a
// value method, even inlined, copies the Limit first (see decideValid).
func (l *Limit) capacity() int64 {
	if l.Algorithm == TokenBucket {
		return l.Rate + l.Burst
	}
	return l.Rate
}

// Validate reports why l cannot be used, or nil.
func (l Limit) Validate() error {
	switch {
	case l.Algorithm >= numAlgorithms:
		return fmt.Errorf("limiter: unknown algorithm %d", l.Algorithm)
	case l.Rate < 1:
		return fmt.Errorf("limiter: rate must be at least 1, got %d", l.Rate)
	case l.Rate > MaxRate:
		return fmt.Errorf("limiter: rate %d exceeds %d", l.Rate, int64(MaxRate))
	case l.Period < MinPeriod:
		return fmt.Errorf("limiter: period %v is shorter than %v", l.Period, MinPeriod)
	case l.Period > MaxPeriod:
		return fmt.Errorf("limiter: period %v is longer than %v", l.Period, MaxPeriod)
	case l.Burst < 0:
		return fmt.Errorf("limiter: burst must not be negative, got %d", l.Burst)
	case l.Burst != 0 && l.Algorithm != TokenBucket:
		return fmt.Errorf("limiter: burst is only valid for token_bucket, not %v", l.Algorithm)
	case l.Burst > MaxRate:
		return fmt.Errorf("limiter: burst %d exceeds %d", l.Burst, int64(MaxRate))
	case l.Algorithm == SlidingLog && l.Rate > MaxLogLimit:
		return fmt.Errorf("limiter: a sliding_log limit is at most %d (one entry per admission is kept), got %d", MaxLogLimit, l.Rate)
	case l.Algorithm == SlidingLog && l.Period%time.Microsecond != 0:
		return fmt.Errorf("limiter: a sliding_log window must be a whole number of microseconds, got %v", l.Period)
	case l.Calendar >= numCalendars:
		return fmt.Errorf("limiter: unknown calendar %d", l.Calendar)
	case l.Calendar != NoCalendar && l.Algorithm != FixedWindow:
		return fmt.Errorf("limiter: a calendar period is only valid for fixed_window, not %v", l.Algorithm)
	case l.Calendar != NoCalendar && l.Period != l.Calendar.Longest():
		return fmt.Errorf("limiter: a %v calendar's period must be %v, got %v", l.Calendar, l.Calendar.Longest(), l.Period)
	case !l.offsetValid():
		return fmt.Errorf("limiter: offset %ds must be whole minutes within ±%v, and zero without a calendar", l.Offset, MaxOffset)
	case !l.spanFits():
		return errors.New("limiter: capacity×period/rate (time to refill an empty bucket) exceeds 146 years")
	}
	return nil
}

// valid is Validate without building an error, cheap enough to run on every
// decision so that a Limit that skipped Validate cannot make Div64 panic.
func (l *Limit) valid() bool {
	return l.Algorithm < numAlgorithms &&
		l.Rate >= 1 && l.Rate <= MaxRate &&
		l.Period >= MinPeriod && l.Period <= MaxPeriod &&
		l.Burst >= 0 && l.Burst <= MaxRate &&
		(l.Burst == 0 || l.Algorithm == TokenBucket) &&
		(l.Algorithm != SlidingLog || (l.Rate <= MaxLogLimit && l.Period%time.Microsecond == 0)) &&
		(l.Calendar == NoCalendar || (l.Calendar < numCalendars && l.Algorithm == FixedWindow && l.Period == l.Calendar.Longest())) &&
		l.offsetValid() &&
		l.spanFits()
}

func (l *Limit) offsetValid() bool {
	if l.Calendar == NoCalendar {
		return l.Offset == 0
	}
	return l.Offset%60 == 0 && int64(l.Offset) >= -int64(MaxOffset/time.Second) && int64(l.Offset) <= int64(MaxOffset/time.Second)
}

// spanFits checks Capacity×Period < 2^62×Rate without dividing.
func (l *Limit) spanFits() bool {
	span := mul(uint64(l.Rate+l.Burst), uint64(l.Period))
	hi, lo := span.hi, span.lo
	limHi, limLo := uint64(l.Rate)>>2, uint64(l.Rate)<<62
	return hi < limHi || (hi == limHi && lo < limLo)
}

// Reason says why a decision came out as it did.
type Reason uint8

const (
	// ReasonAllowed: the units were granted.
	ReasonAllowed Reason = iota
	// ReasonLimited: not enough units now; RetryAfter says when.
	ReasonLimited
	// ReasonCostExceedsCapacity: the cost can never be granted because it
	// is larger than Capacity; retrying does not help (RetryAfter is 0).
	ReasonCostExceedsCapacity
	// ReasonInvalidCost: the cost was below 1.
	ReasonInvalidCost
	// ReasonInvalidLimit: the Limit fails Validate.
	ReasonInvalidLimit
	// ReasonContention: the CAS retry budget ran out; Allowed follows the
	// table's ContentionPolicy.
	ReasonContention
	// ReasonStoreError: the store failed with something other than a CAS
	// mismatch; Allowed follows the table's ContentionPolicy.
	ReasonStoreError
)

func (r Reason) String() string {
	switch r {
	case ReasonAllowed:
		return "allowed"
	case ReasonLimited:
		return "limited"
	case ReasonCostExceedsCapacity:
		return "cost_exceeds_capacity"
	case ReasonInvalidCost:
		return "invalid_cost"
	case ReasonInvalidLimit:
		return "invalid_limit"
	case ReasonContention:
		return "contention"
	case ReasonStoreError:
		return "store_error"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Result is one decision: everything the 429 response, Retry-After and the
// IETF RateLimit fields need.
type Result struct {
	Allowed bool
	// Limit is the per-period allowance (Limit.Rate), not the capacity.
	Limit int64
	// Period is the window Limit applies to (Limit.Period, or for a
	// calendar limit the length of the period decided in): the "w" of the
	// IETF RateLimit-Policy field.
	Period time.Duration
	// Remaining is the whole units still available after this decision.
	Remaining int64
	// RetryAfter is how long until the requested units would be granted,
	// rounded up to the nanosecond; 0 when allowed and when retrying cannot
	// help (ReasonCostExceedsCapacity, ReasonInvalidCost, ReasonInvalidLimit).
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its full allowance if
	// nothing more is consumed.
	ResetAfter time.Duration
	Reason     Reason
}

// State is the per-key state of one Limit. The zero State is a fresh key
// (full allowance) for every algorithm at any non-negative time. Field
// meaning depends on the algorithm:
//
//	TokenBucket:   At = theoretical arrival time (TAT) in Unix ns, integer part;
//	               N  = fractional part of the TAT in units of 1/Rate ns (N < Rate).
//	FixedWindow:   At = window index floor(t/Period), or for a calendar the
//	               period's span (see calendarAt); N = units used in that window.
//	SlidingWindow: At = window index; N = units used in window At;
//	               Prev = units used in window At-1.
//	SlidingLog:    Log = the admissions, oldest first (see slidinglog.go);
//	               At, N and Prev are zero.
type State struct {
	At   int64
	N    uint32
	Prev uint32
	Log  string
}
