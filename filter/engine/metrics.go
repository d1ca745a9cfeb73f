package engine

import (
	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"math"
)

// Metric names put the limit or breaker name in the middle so Envoy's
// stats_tags can lift it into a label (see envoy/envoy.yaml):
//
//	sluice.limit.<name>.<counter>        -> sluice_limit_<counter>{sluice_limit="<name>"}
//	sluice.breaker.<name>.<metric>       -> sluice_breaker_<metric>{sluice_breaker="<name>"}
//	sluice.concurrency.<name>.<metric>   -> sluice_concurrency_<metric>{sluice_concurrency="<name>"}
//
// Only configured names appear, never key values, so cardinality is bounded
// by the config.
const (
	metricPrefixLimit   = "sluice.limit."
	metricPrefixBreaker = "sluice.breaker."
	metricPrefixCC      = "sluice.concurrency."
	metricRequests      = "sluice.requests_total"
)

type limitMetrics struct {
	allowed, limited, shadowLimited, delayed, missingKey, nearLimit host.Counter
	// evictions, overflow, overflowDenied and forgotten export the local
	// table's Stats of the same names (see limiter.Stats).
	evictions, overflow, overflowDenied, forgotten host.Counter
	cost                                           costMetrics
}

func defineLimitMetrics(hm host.Metrics, name string) limitMetrics {
	p := metricPrefixLimit + name + "."
	return limitMetrics{
		allowed:        hm.Counter(p + "allowed"),
		limited:        hm.Counter(p + "limited"),
		shadowLimited:  hm.Counter(p + "shadow_limited"),
		nearLimit:      hm.Counter(p + "near_limit"),
		delayed:        hm.Counter(p + "delayed"),
		missingKey:     hm.Counter(p + "missing_key"),
		evictions:      hm.Counter(p + "evictions"),
		overflow:       hm.Counter(p + "overflow"),
		overflowDenied: hm.Counter(p + "overflow_denied"),
		forgotten:      hm.Counter(p + "forgotten"),
	}
}

type breakerMetrics struct {
	state                                                   host.Gauge
	opens, closes, rejected, failures, successes, slowCalls host.Counter
}

// setState records the breaker state gauge: 0 closed, 1 open, 2 half-open.
// The SDK's gauge type only exposes increments; proxy_record_metric is what
// sets a gauge in Envoy, and the SDK reaches it through the histogram type,
// whose id is the same kind of handle.
func (m breakerMetrics) setState(s breaker.State) {
	m.state.Set(uint64(s))
}

func defineBreakerMetrics(hm host.Metrics, name string) breakerMetrics {
	p := metricPrefixBreaker + name + "."
	return breakerMetrics{
		state:     hm.Gauge(p + "state"),
		opens:     hm.Counter(p + "opens"),
		closes:    hm.Counter(p + "closes"),
		rejected:  hm.Counter(p + "rejected"),
		failures:  hm.Counter(p + "failures"),
		successes: hm.Counter(p + "successes"),
		slowCalls: hm.Counter(p + "slow_calls"),
	}
}

type concurrencyMetrics struct {
	admitted, rejected, shadowRejected, missingKey, reclaimed host.Counter
	// inFlight is the requests in flight under the limit across the live
	// VMs, set from the heartbeat (so it lags by at most heartbeatEvery).
	inFlight host.Gauge
}

func defineConcurrencyMetrics(hm host.Metrics, name string) concurrencyMetrics {
	p := metricPrefixCC + name + "."
	return concurrencyMetrics{
		admitted:       hm.Counter(p + "admitted"),
		rejected:       hm.Counter(p + "rejected"),
		shadowRejected: hm.Counter(p + "shadow_rejected"),
		missingKey:     hm.Counter(p + "missing_key"),
		reclaimed:      hm.Counter(p + "reclaimed"),
		inFlight:       hm.Gauge(p + "in_flight"),
	}
}

// setInFlight sets the gauge the way setState does for breakers.
func (m concurrencyMetrics) setInFlight(n int64) {
	if n < 0 {
		n = 0
	}
	m.inFlight.Set(uint64(n))
}

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

// costMetrics are defined only for limits with a header cost or a cost
// from the response, so other limits keep their usual set.
type costMetrics struct {
	// invalid counts requests whose cost header was unusable.
	invalid host.Counter
	// responseCost sums the costs responses reported (or default), the
	// unit taken at admission included.
	responseCost host.Counter
	// invalidResponse counts responses whose cost header, or the value at
	// the body's path, was unusable.
	invalidResponse host.Counter
	// usageMissing counts bodies without the path (or not JSON at all),
	// bodyTooLarge JSON bodies over max_body_bytes, sseEventTooLarge
	// server-sent events dropped for their size; each is charged
	// default, the event only when no later one has the path.
	usageMissing, bodyTooLarge, sseEventTooLarge host.Counter
}

func defineCostMetrics(hm host.Metrics, cfg *config.Limit) costMetrics {
	p := metricPrefixLimit + cfg.Name + "."
	var m costMetrics
	if cfg.CostHeader != nil {
		m.invalid = hm.Counter(p + "invalid_cost")
	}
	if cfg.CostFromResponse != nil {
		m.responseCost = hm.Counter(p + "response_cost")
		m.invalidResponse = hm.Counter(p + "invalid_response_cost")
		if cfg.CostFromResponse.JSON != nil {
			m.usageMissing = hm.Counter(p + "response_usage_missing")
			m.bodyTooLarge = hm.Counter(p + "response_body_too_large")
			m.sseEventTooLarge = hm.Counter(p + "response_event_too_large")
		}
	}
	return m
}
