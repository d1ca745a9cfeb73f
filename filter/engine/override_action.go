package engine

import (
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/limiter"
)

// overrideAction applies an unlimited or block override of value. done
// reports that the limit is settled for this request: an unlimited value
// is allowed without consuming anything; a blocked one is rejected as an
// over-limit request (a shadow limit only counts it). Both are decided
// before any limit consumes, so a rejection consumes from none.
func (h *Stream) overrideAction(l *limitRuntime, value string, now time.Time) (v verdict, done bool) {
	switch l.cfg.OverrideActions[value] {
	case config.OverrideUnlimited:
		l.metrics.allowed.Increment(1)
		return verdictAllow, true
	case config.OverrideBlock:
		if l.cfg.Shadow {
			l.metrics.shadowLimited.Increment(1)
			return verdictAllow, true
		}
		// No capacity and no time after which it would pass: a delay
		// action cannot help, so onLimited rejects at once.
		return h.onLimited(l, limiter.Result{}, now), true
	}
	return verdictAllow, false
}
