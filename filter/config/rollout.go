package config

import "math"

// Rollout is a limit's rollout, as Envoy's filter_enabled and
// filter_enforced fractions: both are drawn per request.
type Rollout struct {
	// EnabledPercent of requests are evaluated by the limit at all; the
	// others skip it as if it did not match: nothing is counted or
	// consumed, and it replaces no other limit for them.
	EnabledPercent float64
	// EnforcedPercent of the requests the limit would reject are
	// rejected; the others pass like a shadow limit's.
	EnforcedPercent float64
}

// FullRollout is the default: every request evaluated and enforced.
var FullRollout = Rollout{EnabledPercent: 100, EnforcedPercent: 100}

// PerMillion is p percent in millionths, the resolution of the draws.
func PerMillion(p float64) uint32 { return uint32(math.Round(p * 10_000)) }

var rolloutFields = fieldsOf[wireRollout]()

// rollout reads a limit's rollout and upstream_headers_when_limited.
func (p *parser) rollout(o *object, l *Limit) {
	l.Rollout = FullRollout
	if c := o.child("rollout", rolloutFields...); c != nil {
		if v, ok := c.percent("enabled_percent"); ok {
			l.Rollout.EnabledPercent = v
		}
		if v, ok := c.percent("enforced_percent"); ok {
			l.Rollout.EnforcedPercent = v
		}
	}
	if v, ok := o.fields["upstream_headers_when_limited"]; ok {
		l.UpstreamHeadersWhenLimited = p.headerMap(o.path1("upstream_headers_when_limited"), v)
	}
}
