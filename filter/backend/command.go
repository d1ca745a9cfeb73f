package backend

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluice-proxy/sluice/limiter"
)

// maxExact is 2^53: below it every integer is exact in Lua's float64.
const maxExact = 1 << 53

// ErrOutOfRange says a limit cannot be evaluated exactly by the scripts:
// its period is not a whole number of microseconds (Redis TIME has µs
// resolution), or its products reach 2^53. Such a limit needs local mode.
var ErrOutOfRange = errors.New("backend: limit outside the exact range of the Redis scripts")

// Command is one script invocation: EVALSHA Script.SHA1 1 Key Args[:NArgs].
// Args are kept as integers so that building a command allocates nothing;
// the encoders format them.
type Command struct {
	Script *Script
	Key    string
	Args   [6]int64
	NArgs  int
}

// WithTime returns c with the script's clock fixed to now instead of
// Redis TIME. It exists for tests that need exact instants and for a
// client-clock deployment; the scripts' clock-step tolerance (the same as
// limiter.ClockStepTolerance) then guards against a client clock that goes
// backwards, exactly as the local limiter does. Times before the epoch are
// clamped to it, as the local limiter clamps them.
func (c Command) WithTime(now time.Time) Command {
	us := now.UnixMicro()
	if us < 0 {
		us = 0
	}
	if c.NArgs < len(c.Args) {
		c.Args[c.NArgs] = us
		c.NArgs++
	}
	return c
}

// Decide builds the command that makes the same decision as l.Decide for
// cost units on key, with Redis TIME as the clock.
func Decide(l limiter.Limit, key string, cost int64) (Command, error) {
	if err := l.Validate(); err != nil {
		return Command{}, err
	}
	switch l.Algorithm {
	case limiter.TokenBucket:
		r, p, err := bucketUnits(l)
		if err != nil {
			return Command{}, err
		}
		return Command{Script: TokenBucketScript, Key: key, Args: [6]int64{r, p, l.Capacity(), clampCost(cost)}, NArgs: 4}, nil
	case limiter.FixedWindow, limiter.SlidingWindow:
		p, err := windowUnits(l)
		if err != nil {
			return Command{}, err
		}
		if l.Algorithm == limiter.SlidingWindow {
			return Command{Script: SlidingWindowScript, Key: key, Args: [6]int64{l.Rate, p, clampCost(cost)}, NArgs: 3}, nil
		}
		return Command{Script: FixedWindowScript, Key: key, Args: [6]int64{l.Rate, p, clampCost(cost), int64(l.Calendar), int64(l.Offset)}, NArgs: 5}, nil
	case limiter.SlidingLog:
		// Validate keeps the log's numbers small: L ≤ 1,000 members, P
		// whole µs of at most a year.
		return Command{Script: SlidingLogScript, Key: key, Args: [6]int64{l.Rate, int64(l.Period / time.Microsecond), clampCost(cost)}, NArgs: 3}, nil
	}
	return Command{}, fmt.Errorf("backend: unsupported algorithm %v", l.Algorithm)
}

// Lease builds the command that takes up to want tokens at once from the
// token bucket l on key (hybrid mode), reserving up to ahead of future
// refill beyond an empty bucket: limiter.Limit.Lease with Redis TIME as
// the clock. ahead is clamped to [0, limiter.MaxLeaseAhead] and truncated
// to the microsecond, which can only reserve less. A fixed window (a
// calendar quota) is leased from what is left in its current window, all
// spendable at once, ignoring ahead: its reply's ResetAfter is when that
// window ends, which the lease must not outlive. Other algorithms cannot
// be leased.
func Lease(l limiter.Limit, key string, want int64, ahead time.Duration) (Command, error) {
	if l.Algorithm == limiter.FixedWindow {
		c, err := Decide(l, key, want)
		c.Script = WindowLeaseScript
		return c, err
	}
	r, p, err := tokenBucketUnits(l, "leased")
	if err != nil {
		return Command{}, err
	}
	ahead = min(max(ahead, 0), limiter.MaxLeaseAhead)
	return Command{Script: LeaseScript, Key: key, Args: [6]int64{r, p, l.Capacity(), clampCost(want), int64(ahead / time.Microsecond)}, NArgs: 5}, nil
}

// Want is how many units lease command c asks for: a reply granting
// more is not what the script returns. 0 for any other command.
func (c Command) Want() int64 {
	switch c.Script {
	case LeaseScript:
		return c.Args[3]
	case WindowLeaseScript:
		return c.Args[2]
	}
	return 0
}

// tokenBucketUnits is bucketUnits for the commands only a valid token
// bucket can take; done says what the others cannot be.
func tokenBucketUnits(l limiter.Limit, done string) (rate, period int64, err error) {
	if err := l.Validate(); err != nil {
		return 0, 0, err
	}
	if l.Algorithm != limiter.TokenBucket {
		return 0, 0, fmt.Errorf("backend: only token_bucket limits can be %s, not %v", done, l.Algorithm)
	}
	return bucketUnits(l)
}

// Charge builds the command that makes the same charge as l.Charge for n
// units on key (a cost reported after the fact), with Redis TIME as the
// clock. Only token buckets can carry the debt a charge leaves. The reply
// is granted with RetryAfter 0; ChargeRetryAfter derives the wait.
func Charge(l limiter.Limit, key string, n int64) (Command, error) {
	r, p, err := tokenBucketUnits(l, "charged")
	if err != nil {
		return Command{}, err
	}
	// Two capacities fill the most debt a charge can leave; a larger n
	// charges the same and would only leave the scripts' exact range.
	n = min(clampCost(n), 2*l.Capacity())
	return Command{Script: ChargeScript, Key: key, Args: [6]int64{r, p, l.Capacity(), n}, NArgs: 4}, nil
}

// ChargeRetryAfter is how long after a charge reply the key of token
// bucket l has a unit again, never more than the exact wait: the reply's
// reset time less the refill of capacity−1 units, less the millisecond
// the reset time may have been rounded up by.
func ChargeRetryAfter(l limiter.Limit, r Reply) time.Duration {
	if !r.Allowed() || r.Remaining > 0 || l.Rate < 1 {
		return 0
	}
	refill := time.Duration(float64(l.Capacity()-1) * float64(l.Period) / float64(l.Rate))
	return max(r.ResetAfter-refill-time.Millisecond, 0)
}

// clampCost maps costs the script cannot parse (negative) to 0, which the
// script reports as an invalid cost like the local limiter does.
func clampCost(n int64) int64 {
	if n < 0 {
		return 0
	}
	if n >= maxExact {
		return maxExact - 1
	}
	return n
}

// bucketUnits reduces Rate/Period (in µs) by their gcd: the scripts count
// in units of 1/R' µs, so Capacity×P' must stay below 2^53 after adding
// the clock-step tolerance, and the reduction keeps that true for every
// limit with round numbers (100/s, 10000/day, 4e9/s …).
func bucketUnits(l limiter.Limit) (rate, period int64, err error) {
	if l.Period%time.Microsecond != 0 {
		return 0, 0, ErrOutOfRange
	}
	p := int64(l.Period / time.Microsecond)
	g := gcd(l.Rate, p)
	rate, period = l.Rate/g, p/g
	tol := int64(limiter.ClockStepTolerance / time.Microsecond)
	c := l.Capacity()
	// full + tolerance×R' + cost×P' ≤ 2×C×P' + tol×R' must stay exact.
	if period > maxExact/(2*c) || rate > maxExact/(4*tol) || 2*c*period+tol*rate >= maxExact {
		return 0, 0, ErrOutOfRange
	}
	return rate, period, nil
}

// windowUnits checks the window scripts' ranges: the sliding weight
// prev×(P−e) + (cur+n−1)×P is at most 3×L×P (µs), and the retry search
// works with P in ns. Periods up to 52 days pass; L×P up to 2^51 µs.
// A calendar period's script computes no such products (its count is at
// most L, its times µs since the epoch), so only the period is checked.
func windowUnits(l limiter.Limit) (int64, error) {
	if l.Period%time.Microsecond != 0 {
		return 0, ErrOutOfRange
	}
	p := int64(l.Period / time.Microsecond)
	if p > maxExact/1000/2 || (l.Calendar == limiter.NoCalendar && l.Rate > maxExact/(4*p)) {
		return 0, ErrOutOfRange
	}
	return p, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Peek builds the command that reads key's state without changing it:
// the decision script of l with cost 0, which Redis answers as an invalid
// cost and writes nothing, reporting the units Remaining and ResetAfter
// (limiter.Table.Peek does the same locally). It is the filter's own
// script, so an operator reads exactly what the next decision sees.
func Peek(l limiter.Limit, key string) (Command, error) { return Decide(l, key, 0) }

// Reset builds the command that gives key its full allowance back, for any
// algorithm: the key is deleted, which every script reads as a fresh key.
// Its reply is a Peek of that fresh key.
func Reset(l limiter.Limit, key string) (Command, error) {
	if err := l.Validate(); err != nil {
		return Command{}, err
	}
	return Command{Script: ResetScript, Key: key, Args: [6]int64{l.Capacity()}, NArgs: 1}, nil
}

// Reserved is how many units of token bucket l a Peek reply shows taken
// beyond an empty bucket: hybrid leases that reserved future refill and
// are not spendable yet, or a charged debt. Redis keeps no record of
// leases other than the bucket, so that is all it can tell of them;
// tokens a lease took within the bucket read as spent. It is derived from
// the reply's reset time, rounded up to the millisecond, so the
// millisecond of rounding is taken off first: never more than the truth.
func Reserved(l limiter.Limit, r Reply) int64 {
	if l.Algorithm != limiter.TokenBucket || l.Rate < 1 || l.Period <= 0 {
		return 0
	}
	refill := time.Duration(float64(l.Capacity()) * float64(l.Period) / float64(l.Rate))
	beyond := r.ResetAfter - time.Millisecond - refill
	if beyond <= 0 {
		return 0
	}
	return int64(math.Ceil(float64(beyond) * float64(l.Rate) / float64(l.Period)))
}
