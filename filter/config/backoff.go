package config

import (
	"math"
	"strconv"
	"time"

	"github.com/tidwall/gjson"
)

// Recovery settings of backend.breaker: the open timeout grows while
// probes keep failing, and retries and open timeouts are jittered.
const (
	// DefaultBackendJitterPercent spreads retries and re-probes of many
	// Envoys that saw Redis fail at the same moment.
	DefaultBackendJitterPercent = 20
	// maxOpenTimeoutMultiplier is the breaker core's bound.
	maxOpenTimeoutMultiplier = 100
	// openTimeoutMaxFactor is the default open_timeout_max, in
	// open_timeouts: the breaker core's default.
	openTimeoutMaxFactor = 10
)

var backendBreakerFields = fieldsOf[wireBackendBreaker]()

// backendRecovery reads open_timeout_multiplier, open_timeout_max and
// jitter_percent of backend.breaker, after open_timeout.
func (p *parser) backendRecovery(c *object, bb *BackendBreaker) {
	if m, ok := c.number("open_timeout_multiplier", 1, maxOpenTimeoutMultiplier); ok {
		bb.OpenTimeoutMultiplier = m
	}
	growing := bb.OpenTimeoutMultiplier > 1
	if d, ok := c.duration("open_timeout_max", time.Nanosecond, 24*time.Hour); ok {
		switch {
		case !growing:
			c.errorf("open_timeout_max", "has no effect without open_timeout_multiplier > 1")
		case d < bb.OpenTimeout:
			c.errorf("open_timeout_max", "%v is less than open_timeout %v", d, bb.OpenTimeout)
		default:
			bb.OpenTimeoutMax = d
		}
	} else if growing && !c.has("open_timeout_max") {
		bb.OpenTimeoutMax = min(bb.OpenTimeout*openTimeoutMaxFactor, 24*time.Hour)
	}
	if n, ok := c.integer("jitter_percent", 0, 100); ok {
		bb.JitterPercent = int(n)
	}
}

// number reads a finite JSON number in [lo, hi].
func (o *object) number(name string, lo, hi float64) (float64, bool) {
	v, ok := o.typed(name, gjson.Number, "must be a number")
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v.Raw, 64)
	switch {
	case err != nil && !math.IsInf(f, 0), math.IsNaN(f):
		o.errorf(name, "must be a number")
		return 0, false
	case f < lo:
		o.errorf(name, "must be >= %v", lo)
		return 0, false
	case f > hi:
		o.errorf(name, "must be <= %v", hi)
		return 0, false
	}
	return f, true
}
