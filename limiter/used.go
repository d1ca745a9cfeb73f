package limiter

// Used is how many whole units st still counts against its key at now:
// what forgetting the key (replacing st by a fresh state) can give back
// to it. See the package doc, "Forgetting the least-used key".
//
//	token_bucket:   ⌈D/τ⌉, the debt in units (up to 2·C after charges)
//	fixed_window:   the units used in now's window
//	sliding_window: cur + prev, every unit either window still weighs
//	sliding_log:    the live units
//
// A state this Limit could not hold counts as Empty's (Capacity, or
// Rate for the windows).
func (l Limit) Used(st State, now int64) int64 {
	u, _ := l.usage(st, now)
	return int64(u)
}

// usage is Used and a finer measure to pick the least-used of several
// states of the same Limit at one instant: the debt itself for a token
// bucket (a key that made its request earlier has used less), the
// weighted count for a sliding window, the units otherwise.
func (l Limit) usage(st State, now int64) (units uint64, rank u128) {
	if !l.valid() {
		return 0, u128{}
	}
	period := uint64(l.Period)
	switch l.Algorithm {
	case TokenBucket:
		debt, _ := l.bucketDebt(st, now)
		return debt.divCeil(period), debt
	case SlidingLog:
		_, used := l.liveLog(st.Log, now)
		return used, u128{0, used}
	}
	win, elapsed, _, plausible := l.window(st, now)
	cur, prev := l.windowCounts(st, win, plausible)
	if l.Algorithm == FixedWindow {
		return cur, u128{0, cur}
	}
	return cur + prev, mul(prev, period-elapsed).add(mul(cur, period))
}
