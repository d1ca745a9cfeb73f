package engine

// Metrics #17 added: near_limit, the capacity and refill gauges of each
// limit, and a state gauge per breaker instance.

import (
	"math"
	"strconv"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/limiter"
)

// defineRateGauges sets sluice.limit.<name>.capacity and
// .refill_per_second from the limit's own rate (overrides have their own
// and are not reported). Gauges are integers: refill_per_second is
// rounded to the nearest, so a rate under 0.5/s reads 0.
func defineRateGauges(hm host.Metrics, cfg *config.Limit) {
	if cfg.Rate.Limit <= 0 || cfg.Rate.Window <= 0 {
		return // the external limit's fallback is checked elsewhere
	}
	p := metricPrefixLimit + cfg.Name + "."
	hm.Gauge(p + "capacity").Set(uint64(cfg.Rate.Capacity(cfg.Algorithm)))
	perSecond := float64(cfg.Rate.Limit) / cfg.Rate.Window.Seconds()
	hm.Gauge(p + "refill_per_second").Set(uint64(math.Round(perSecond)))
}

// defineMaxInFlightGauge sets sluice.concurrency.<name>.max_in_flight, so
// dashboards and alerts can compare in_flight with it.
func defineMaxInFlightGauge(hm host.Metrics, cfg *config.ConcurrencyLimit) {
	hm.Gauge(metricPrefixCC + cfg.Name + ".max_in_flight").Set(uint64(cfg.MaxInFlight))
}

// admitted counts an admission by l under lim, and near_limit when it
// left at most (1 - near_limit_ratio) of lim's capacity.
func (l *limitRuntime) admitted(lim limiter.Limit, res limiter.Result) {
	l.metrics.allowed.Increment(1)
	// In millionths, so 20% of 10 is 2 exactly, which 1-0.8 in floating
	// point is not. Capacities stay below 2^33, far from overflowing.
	if res.Remaining*perMillionAll <= lim.Capacity()*l.nearLeft {
		l.metrics.nearLimit.Increment(1)
	}
}

// breakerInstance is one cluster or route a breaker guards.
type breakerInstance struct {
	name  string
	state host.Gauge
}

// logTransition writes one JSON line per committed transition: the worker
// whose compare-and-swap committed it is the only one that sees it. WARN
// when the breaker opens, INFO otherwise.
func (b *breakerRuntime) logTransition(instance string, from, to breaker.State, c breaker.Cause) {
	l := make([]byte, 0, 192)
	l = append(l, `{"sluice":"breaker_transition","breaker":`...)
	l = appendJSONString(l, b.cfg.Name)
	l = append(l, `,"instance":`...)
	l = appendJSONString(l, instance)
	l = append(l, `,"from":`...)
	l = appendJSONString(l, from.String())
	l = append(l, `,"to":`...)
	l = appendJSONString(l, to.String())
	l = append(l, `,"reason":`...)
	l = appendJSONString(l, c.Reason.String())
	l = append(l, `,"failures":`...)
	l = strconv.AppendUint(l, uint64(c.Failures), 10)
	l = append(l, `,"calls":`...)
	l = strconv.AppendUint(l, uint64(c.Calls), 10)
	l = append(l, '}')
	if to == breaker.Open {
		b.log.Warn(string(l))
	} else {
		b.log.Info(string(l))
	}
}

// stateGauge is the per-instance gauge sluice.breaker.<name>.<instance>.state,
// defined when the instance is first seen: instances are the clusters or
// routes the breaker guards, bounded by maxBreakerInstances. It starts at
// the state br holds (Peek), which is open for a breaker forced open:
// that breaker rejects every request without ever making a transition,
// and the SluiceBreakerOpen alert reads this gauge.
func (b *breakerRuntime) stateGauge(hm host.Metrics, scope string, br *breaker.Breaker) host.Gauge {
	g := hm.Gauge(metricPrefixBreaker + b.cfg.Name + "." + scope + ".state")
	s, _ := br.Peek() // closed when unreadable, as a fresh instance is
	g.Set(uint64(s))
	return g
}
