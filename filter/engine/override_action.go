package engine

import (
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/limiter"
)

// overrideAction applies an unlimited or block override of value. done
// reports that the limit is settled for this request: an unlimited value
// is allowed without consuming anything; a blocked one is rejected as an
// over-limit request (a shadow limit only counts it). Both are decided
// before any limit consumes, so a rejection consumes from none.
func overrideAction(l *limitRuntime, value string) (o outcome, done bool) {
	switch l.cfg.OverrideActions[value] {
	case config.OverrideUnlimited:
		l.metrics.allowed.Increment(1)
		return allow, true
	case config.OverrideBlock:
		if l.cfg.Shadow {
			l.metrics.shadowLimited.Increment(1)
			return allow, true
		}
		// No capacity and no time after which it would pass: a delay
		// action cannot help, so the denial is answered at once.
		return deny(l, limiter.Result{}), true
	}
	return allow, false
}
