package engine

import (
	"strings"

	"github.com/sluice-proxy/sluice/filter/config"
)

// Trace is a read-only account of what the pipeline did with one request
// and why, for sluicectl explain. The pipeline fills it at the points
// where it decides (matchLimits, decideLimits, breakerHold.check,
// ccHolds.acquire), from the values it decides with, so the account
// cannot drift from the behaviour. A stream without a trace pays one nil
// check per phase.
type Trace struct {
	// Limits has one entry per configured limit, in configuration order
	// (the external limit last), once the limits were matched.
	Limits []LimitTrace
	// Breakers and Concurrency are the entries whose match held, in
	// the order the pipeline checked them.
	Breakers    []BreakerTrace
	Concurrency []ConcurrencyTrace
}

// ConditionTrace is one match condition and whether it held.
type ConditionTrace struct {
	Path, JSON string
	Held       bool
}

// LimitTrace is one limit's part in the request.
type LimitTrace struct {
	Name     string
	Disabled bool
	// Conditions are the limit's match conditions; Matched is that all
	// held (and a rollout did not skip it).
	Conditions []ConditionTrace
	Matched    bool
	// ReplacedBy are the indexes of matching limits whose replaces named
	// this one; Applied is Matched without such a limit.
	ReplacedBy []int
	Applied    bool
	// Evaluated is set when the pipeline built the limit's key. Keys are
	// built for every applying limit before any is decided; a rejection
	// while building them (a blocked override, a missing key denied, an
	// invalid cost) leaves the later ones unbuilt.
	Evaluated bool
	// Shadow: the limit only observes this request (configured shadow, or
	// not enforced by this request's rollout draw).
	Shadow bool
	// Key is the composite key, its parts escaped and joined as
	// request.Info.AppendKey does (request.SplitKey reads them back);
	// KeyOK false is a missing key.
	Key   string
	KeyOK bool
	// OverrideValue is the override the key selected ("" for the limit's
	// own rate); Action is "unlimited" or "block" for such overrides.
	OverrideValue string
	Action        string
	Rate          config.Rate
	Cost          int64
	Mode          config.Mode
	// RedisKey is the bucket in Redis of a global or hybrid limit.
	RedisKey string
	// Decided is set when a local decision was made for the request:
	// Allowed and Remaining are its result.
	Decided   bool
	Allowed   bool
	Remaining int64
}

// BreakerTrace is a breaker whose match held.
type BreakerTrace struct {
	Name string
	// Instance is the cluster or route it guards for this request.
	Instance string
	Allowed  bool
}

// ConcurrencyTrace is a concurrency limit whose match held.
type ConcurrencyTrace struct {
	Name  string
	Key   string
	KeyOK bool
	// Allowed is false when the request found the key at max_in_flight.
	Allowed bool
}

// traceKey records limit i's key as decideLimits built it.
func (t *Trace) traceKey(i int, shadow bool, key []byte, ok bool, overrideValue string) {
	lt := &t.Limits[i]
	lt.Evaluated, lt.Shadow = true, shadow
	// Copies: the key arena and the request's values are reused.
	lt.Key, lt.KeyOK, lt.OverrideValue = string(key), ok, strings.Clone(overrideValue)
}
