package config

import (
	"errors"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-proxy/sluice/breaker"
)

func (p *parser) breakers(cfg *Config, path string, items []gjson.Result) {
	p.namedEntries(path, items, breakerFields, func(_ int, o *object) string {
		b := p.breaker(o)
		cfg.Breakers = append(cfg.Breakers, b)
		return b.Name
	}, func() {})
}

var (
	breakerFields     = fieldsOf[wireBreaker]()
	failureRateFields = fieldsOf[wireFailureRate]()
	slowCallFields    = fieldsOf[wireSlowCall]()
)

// defaultBreaker is a breaker entry before its fields are read.
func defaultBreaker() Breaker {
	return Breaker{
		FailureStatuses:     append([]int(nil), DefaultFailureStatuses...),
		FailureOnTimeout:    true,
		FailureThreshold:    DefaultFailureThreshold,
		SuccessThreshold:    DefaultSuccessThreshold,
		OpenTimeout:         DefaultOpenTimeout,
		HalfOpenMaxRequests: DefaultHalfOpenMaxRequests,
		Status:              DefaultBreakerStatus,
	}
}

func (p *parser) breaker(o *object) Breaker {
	errsBefore := p.found
	b := defaultBreaker()
	b.Name = p.name(o)
	b.Disabled = p.disabled(o)
	if m := o.child("match", matchFields...); m != nil {
		b.Match = p.match(m)
	}
	if v, ok := readEnum(o, "per", breakerScopeNames); ok {
		b.Per = v
	}
	if items, ok := o.array("failure_statuses", ""); ok {
		b.FailureStatuses = p.failureStatuses(o.path1("failure_statuses"), items)
	}
	if v, ok := o.boolean("failure_on_timeout"); ok {
		b.FailureOnTimeout = v
	}
	if c := o.child("failure_rate", failureRateFields...); c != nil {
		b.FailureRate = failureRate(c)
	}
	if n, ok := o.integer("failure_threshold", 0, breaker.MaxCounter); ok {
		b.FailureThreshold = int(n)
		if n == 0 && b.FailureRate == nil {
			o.errorf("failure_threshold", "must be >= 1 unless failure_rate is set, or the breaker never opens")
		}
	}
	if c := o.child("slow_call", slowCallFields...); c != nil {
		b.SlowCall = slowCall(c, b.FailureRate != nil)
	}
	if n, ok := o.integer("success_threshold", 1, breaker.MaxCounter); ok {
		b.SuccessThreshold = int(n)
	}
	if d, ok := o.duration("open_timeout", time.Millisecond, 24*time.Hour); ok {
		b.OpenTimeout = d
	}
	if n, ok := o.integer("half_open_max_requests", 1, breaker.MaxCounter); ok {
		b.HalfOpenMaxRequests = int(n)
	}
	if v, ok := readEnum(o, "mode", breakerModeNames); ok {
		b.Mode = v
	}
	if n, ok := o.integer("status", 400, 599); ok {
		b.Status = int(n)
	}
	if p.found == errsBefore {
		breakerSettings(o, &b)
	}
	return b
}

// failureStatuses reads failure_statuses: distinct upstream statuses.
func (p *parser) failureStatuses(path string, items []gjson.Result) []int {
	statuses := []int{}
	for i, item := range items {
		ipath := IndexPath(path, i)
		n, ok := p.integer(ipath, item, 100, 599)
		if !ok {
			continue
		}
		if containsInt(statuses, int(n)) {
			p.errorf(ipath, item.Index, "duplicate status %d", n)
			continue
		}
		statuses = append(statuses, int(n))
	}
	return statuses
}

// failureRate reads a breaker's failure_rate.
func failureRate(c *object) *FailureRate {
	fr := &FailureRate{ThresholdPercent: DefaultFailureRatePercent, MinimumCalls: DefaultMinimumCalls}
	if n, ok := c.integer("threshold_percent", 1, 100); ok {
		fr.ThresholdPercent = int(n)
	}
	if v, ok := readEnum(c, "window_type", windowTypeNames); ok {
		fr.WindowType = v
	}
	if n, ok := c.integer("minimum_calls", 1, breaker.MaxCounter); ok {
		fr.MinimumCalls = int(n)
	}
	if fr.WindowType == CountWindow {
		fr.Window = DefaultFailureRateWindow
		if n, ok := c.integer("window", 1, breaker.MaxCountWindow); ok {
			fr.Window = int(n)
		}
		c.onlyWith("window_duration", `window_type "time"`)
		if fr.MinimumCalls > fr.Window {
			c.errorf("minimum_calls", "must be <= window (%d), or the rate is never judged", fr.Window)
		}
	} else {
		fr.WindowDuration = DefaultFailureRateDuration
		if d, ok := c.duration("window_duration", time.Second, 24*time.Hour); ok {
			fr.WindowDuration = d
		}
		c.onlyWith("window", `window_type "count"`)
	}
	return fr
}

// slowCall reads a breaker's slow_call; threshold_percent belongs only
// with a failure_rate.
func slowCall(c *object, withRate bool) *SlowCall {
	sc := &SlowCall{}
	if d, ok := c.duration("duration", time.Millisecond, time.Hour); ok {
		sc.Duration = d
	} else if !c.has("duration") {
		c.errorf("duration", "required")
	}
	if withRate {
		sc.ThresholdPercent = DefaultSlowCallPercent
		if n, ok := c.integer("threshold_percent", 1, 100); ok {
			sc.ThresholdPercent = int(n)
		}
	} else {
		c.onlyWith("threshold_percent", "failure_rate (without it each slow call counts as a failure)")
	}
	return sc
}

// breakerSettings asks the breaker core, the authority on its settings,
// about b: anything it would refuse at plugin start becomes errors with
// their paths, all at once, even if the bounds above drift from its.
func breakerSettings(o *object, b *Breaker) {
	set := b.Settings()
	joined, ok := set.Validate().(interface{ Unwrap() []error })
	if !ok {
		return
	}
	for _, err := range joined.Unwrap() {
		var fe *breaker.FieldError
		if errors.As(err, &fe) {
			o.errorf(fe.Field, "%s", fe.Reason)
		} else {
			o.errorf("", "%v", err)
		}
	}
}

func containsInt(ns []int, n int) bool {
	for _, x := range ns {
		if x == n {
			return true
		}
	}
	return false
}
