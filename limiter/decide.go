package limiter

import "time"

// ClockStepTolerance is how far ahead of the caller's clock a state may
// legitimately be: another worker read a slightly later clock, or the clock
// stepped back a little. State further ahead than this (beyond a full
// bucket's refill span) cannot come from a sane clock, so it is replaced by
// the conservative empty state at the caller's time; that heals keys after
// a large backwards clock step instead of locking them out for its length.
const ClockStepTolerance = time.Minute

// Decide is the pure decision: would n units be granted at now (Unix ns)
// given st, and what is the state afterwards. A denied decision returns st
// unchanged. It does not allocate and never panics, whatever st, now and n.
func (l Limit) Decide(st State, now int64, n int64) (State, Result) {
	if !l.valid() {
		return st, Result{Limit: l.Rate, Period: l.Period, Reason: ReasonInvalidLimit}
	}
	var res Result
	next := l.decideValid(st, now, n, &res)
	return next, res
}

// decideValid is Decide for a Limit known to pass valid: one that passed
// Validate (a Table's) or was just checked. The check is two calls on
// GOARCH=wasm, which a request through a Table would otherwise make twice.
//
// The decisions write their Result through res and take the Limit by
// pointer: on GOARCH=wasm arguments and results live in linear memory,
// and a Result (56 bytes) or a Limit (40) passed by value is a bulk
// memory copy, which Wasmtime runs as a call into the runtime, on every
// call (a State is moved field by field).
func (l *Limit) decideValid(st State, now int64, n int64, res *Result) State {
	switch l.Algorithm {
	case FixedWindow:
		return l.decideFixed(st, now, n, res)
	case SlidingWindow:
		return l.decideSliding(st, now, n, res)
	case SlidingLog:
		return l.decideLog(st, now, n, res)
	default:
		return l.decideBucket(st, now, n, res)
	}
}

// start resets res for a decision over a period of length period, field
// by field: assigning a Result literal zeroes its 56 bytes as one bulk
// fill on GOARCH=wasm.
func (res *Result) start(limit int64, period time.Duration) {
	res.Allowed, res.Limit, res.Period = false, limit, period
	res.Remaining, res.RetryAfter, res.ResetAfter, res.Reason = 0, 0, 0, ReasonAllowed
}

// costReason classifies costs that no amount of waiting can grant.
func (l *Limit) costReason(n int64) (Reason, bool) {
	if n < 1 {
		return ReasonInvalidCost, false
	}
	if n > l.capacity() {
		return ReasonCostExceedsCapacity, false
	}
	return ReasonAllowed, true
}

// decideBucket is GCRA with the TAT kept exactly as At + N/Rate ns. All
// quantities below are in units of 1/Rate ns, where one unit of cost is
// exactly Period.
func (l *Limit) decideBucket(st State, now int64, n int64, res *Result) State {
	rate, period := uint64(l.Rate), uint64(l.Period)
	debt, full := l.bucketDebt(st, now)

	res.start(l.Rate, l.Period)
	reason, ok := l.costReason(n)
	if ok {
		after := debt.add(mul(uint64(n), period))
		if !full.less(after) {
			res.Allowed, res.Reason = true, ReasonAllowed
			res.Remaining = int64(full.sub(after).divFloor(period))
			res.ResetAfter = dur(after.divCeil(rate))
			return l.bucketState(now, after)
		}
		res.RetryAfter = dur(after.sub(full).divCeil(rate))
		reason = ReasonLimited
	}
	res.Reason = reason
	if debt.less(full) {
		res.Remaining = int64(full.sub(debt).divFloor(period))
	}
	res.ResetAfter = dur(debt.divCeil(rate))
	return st
}

// Charge takes n units at now whether or not they are available: the cost
// of work already done (a response that reports what it used), which
// cannot be refused. A token bucket goes into debt, down to one full
// bucket below empty, so later decisions wait until the debt is repaid;
// a window fills up to its limit and forgets the rest at its end. A
// charge never lowers a debt.
//
// The Result reads as a decision: Allowed when charged, Remaining after
// the charge, RetryAfter until one unit is available again and ResetAfter
// until the key is idle. n < 1 charges nothing and is reported as
// ReasonInvalidCost. Like Decide it does not allocate and never panics.
func (l Limit) Charge(st State, now int64, n int64) (State, Result) {
	if !l.valid() || n < 1 {
		_, res := l.Decide(st, now, n)
		return st, res
	}
	var next State
	switch l.Algorithm {
	case SlidingLog:
		next = l.chargeLog(st, now, n)
	case FixedWindow, SlidingWindow:
		limit := uint64(l.Rate)
		win, _, _, _, plausible := l.window(st, now)
		cur, prev := l.windowCounts(st, win, plausible)
		cur = min(cur+min(uint64(n), limit), limit)
		next = State{At: win, N: uint32(cur)}
		if l.Algorithm == SlidingWindow {
			next.Prev = uint32(prev)
		}
	default:
		debt, full := l.bucketDebt(st, now)
		most := full.add(full)
		after := debt.add(mul(uint64(n), uint64(l.Period)))
		if most.less(after) {
			after = most
			if most.less(debt) {
				after = debt
			}
		}
		next = l.bucketState(now, after)
	}
	// The decisions that would follow describe the charged key exactly as
	// Decide would: cost 0 reports Remaining and ResetAfter, cost 1 the
	// wait for the next unit.
	var res, one Result
	l.decideValid(next, now, 0, &res)
	if l.decideValid(next, now, 1, &one); !one.Allowed {
		res.RetryAfter = one.RetryAfter
	}
	res.Allowed, res.Reason = true, ReasonAllowed
	return next, res
}

func (l *Limit) decideFixed(st State, now int64, n int64, res *Result) State {
	limit := uint64(l.Rate)
	win, elapsed, length, delay, plausible := l.window(st, now)
	used := uint64(0)
	switch {
	case !plausible:
		used = limit
	case l.inWindow(st.At, win):
		used = uint64(st.N)
	}
	untilEnd := addSat(delay, length-elapsed)

	res.start(l.Rate, time.Duration(length))
	reason, ok := l.costReason(n)
	if ok {
		if used+uint64(n) <= limit {
			used += uint64(n)
			res.Allowed, res.Reason = true, ReasonAllowed
			res.Remaining = int64(limit - used)
			res.ResetAfter = dur(untilEnd)
			return State{At: win, N: uint32(used)}
		}
		reason = ReasonLimited
		res.RetryAfter = dur(untilEnd)
	}
	res.Reason = reason
	if used < limit {
		res.Remaining = int64(limit - used)
	}
	if used > 0 {
		res.ResetAfter = dur(untilEnd)
	}
	return st
}

// decideSliding admits n units when prev×(1−elapsed/Period) + cur + (n−1) <
// Rate, i.e. when each of the n units would pass the rule
// "prev×(1−f) + cur < L" if admitted one at a time. Everything is multiplied
// by Period to stay in integers.
func (l *Limit) decideSliding(st State, now int64, n int64, res *Result) State {
	limit := uint64(l.Rate)
	period := uint64(l.Period)
	win, elapsed, _, delay, plausible := l.window(st, now)
	cur, prev := l.windowCounts(st, win, plausible)
	capacity := mul(limit, period)
	// headroom(c) = L×P − prev×(P−e) − c×P: units still admissible, scaled.
	headroom := func(c uint64) (u128, bool) {
		used := mul(prev, period-elapsed).add(mul(c, period))
		if !used.less(capacity) {
			return u128{}, false
		}
		return capacity.sub(used), true
	}
	remaining := func(c uint64) int64 {
		if h, ok := headroom(c); ok {
			return int64(h.divCeil(period))
		}
		return 0
	}
	resetAfter := func(c uint64) time.Duration {
		switch {
		case c > 0:
			return dur(addSat(delay, 2*period-elapsed))
		case prev > 0:
			return dur(addSat(delay, period-elapsed))
		}
		return 0
	}

	res.start(l.Rate, l.Period)
	reason, ok := l.costReason(n)
	if ok {
		if _, ok := headroom(cur + uint64(n) - 1); ok {
			cur += uint64(n)
			res.Allowed, res.Reason = true, ReasonAllowed
			res.Remaining = remaining(cur)
			res.ResetAfter = resetAfter(cur)
			return State{At: win, N: uint32(cur), Prev: uint32(prev)}
		}
		reason = ReasonLimited
		res.RetryAfter = dur(addSat(delay, l.slidingWait(cur, prev, uint64(n), elapsed)))
	}
	res.Reason = reason
	res.Remaining = remaining(cur)
	res.ResetAfter = resetAfter(cur)
	return st
}

// slidingWait is the time from elapsed (within the evaluation window) until
// n units pass. The weighted count only falls as time passes and is
// continuous across the window boundary (prev×0 + cur becomes cur×1 + 0),
// so the first instant the rule holds is found in closed form: within this
// window, or else within the next one where cur has become prev.
func (l *Limit) slidingWait(cur, prev, n, elapsed uint64) uint64 {
	limit, period := uint64(l.Rate), uint64(l.Period)
	// firstPass: smallest e with p×(P−e) < need×P, i.e. e = P − ⌈need×P/p⌉ + 1.
	firstPass := func(p, need uint64) uint64 {
		q := mul(need, period).divCeil(p)
		if q > period {
			return 0
		}
		return period - q + 1
	}
	if cur+n <= limit && prev > 0 {
		if e := firstPass(prev, limit-cur-n+1); e < period && e > elapsed {
			return e - elapsed
		}
	}
	untilNext := period - elapsed
	need := limit - n + 1
	if cur < need {
		return untilNext
	}
	return untilNext + firstPass(cur, need)
}
