package breaker

// Reason is why a transition happened, for logs.
type Reason uint8

const (
	ReasonNone Reason = iota
	// ReasonConsecutiveFailures: closed → open on failure_threshold.
	ReasonConsecutiveFailures
	// ReasonFailureRate: closed → open on the failure rate.
	ReasonFailureRate
	// ReasonSlowCallRate: closed → open on the slow-call rate.
	ReasonSlowCallRate
	// ReasonProbeFailed: half-open → open on a failed, slow or lost probe.
	ReasonProbeFailed
	// ReasonProbesSucceeded: half-open → closed.
	ReasonProbesSucceeded
	// ReasonOpenTimeout: open → half-open once the open timeout passed.
	ReasonOpenTimeout
	// ReasonForced is a forced mode's state; no transition has it today,
	// as forced modes never change state.
	ReasonForced
)

func (r Reason) String() string {
	return [...]string{"none", "consecutive_failures", "failure_rate", "slow_call_rate", "probe_failed",
		"probes_succeeded", "open_timeout", "forced"}[r]
}

// Cause describes the transition the last Check or Report committed:
// why, and the failures among the calls that decided it (the streak, the
// window's counts, or the probes).
type Cause struct {
	Reason          Reason
	Failures, Calls uint32
}

// tripCause is the cause of a trip for why (trip's answer), read before
// open resets the counts: the streak, or the window's calls and its
// failures or slow calls.
func tripCause(r *Record, why Reason) Cause {
	if why == ReasonConsecutiveFailures {
		return Cause{Reason: why, Failures: r.consec, Calls: r.consec}
	}
	calls, fails, slow := r.WindowCounts()
	if why == ReasonSlowCallRate {
		fails = slow
	}
	return Cause{Reason: why, Failures: fails, Calls: calls}
}

// LastCause is the cause of the transition the last Check or Report of
// this Breaker returned; meaningless when it returned none.
func (b *Breaker) LastCause() Cause { return b.cause }

func setCause(c *Cause, v Cause) {
	if c != nil {
		*c = v
	}
}
