package filter

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/sluice-proxy/sluice/breaker"
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
	allowed, limited, shadowLimited, delayed, missingKey proxywasm.MetricCounter
	// evictions, overflow and overflowDenied export the local table's
	// Stats of the same names (see limiter.Stats).
	evictions, overflow, overflowDenied proxywasm.MetricCounter
	cost                                costMetrics
}

func defineLimitMetrics(name string) limitMetrics {
	p := metricPrefixLimit + name + "."
	return limitMetrics{
		allowed:        proxywasm.DefineCounterMetric(p + "allowed"),
		limited:        proxywasm.DefineCounterMetric(p + "limited"),
		shadowLimited:  proxywasm.DefineCounterMetric(p + "shadow_limited"),
		delayed:        proxywasm.DefineCounterMetric(p + "delayed"),
		missingKey:     proxywasm.DefineCounterMetric(p + "missing_key"),
		evictions:      proxywasm.DefineCounterMetric(p + "evictions"),
		overflow:       proxywasm.DefineCounterMetric(p + "overflow"),
		overflowDenied: proxywasm.DefineCounterMetric(p + "overflow_denied"),
	}
}

type breakerMetrics struct {
	state                                                   proxywasm.MetricGauge
	opens, closes, rejected, failures, successes, slowCalls proxywasm.MetricCounter
}

// setState records the breaker state gauge: 0 closed, 1 open, 2 half-open.
// The SDK's gauge type only exposes increments; proxy_record_metric is what
// sets a gauge in Envoy, and the SDK reaches it through the histogram type,
// whose id is the same kind of handle.
func (m breakerMetrics) setState(s breaker.State) {
	proxywasm.MetricHistogram(uint32(m.state)).Record(uint64(s))
}

func defineBreakerMetrics(name string) breakerMetrics {
	p := metricPrefixBreaker + name + "."
	return breakerMetrics{
		state:     proxywasm.DefineGaugeMetric(p + "state"),
		opens:     proxywasm.DefineCounterMetric(p + "opens"),
		closes:    proxywasm.DefineCounterMetric(p + "closes"),
		rejected:  proxywasm.DefineCounterMetric(p + "rejected"),
		failures:  proxywasm.DefineCounterMetric(p + "failures"),
		successes: proxywasm.DefineCounterMetric(p + "successes"),
		slowCalls: proxywasm.DefineCounterMetric(p + "slow_calls"),
	}
}

type concurrencyMetrics struct {
	admitted, rejected, shadowRejected, missingKey, reclaimed proxywasm.MetricCounter
	// inFlight is the requests in flight under the limit across the live
	// VMs, set from the heartbeat (so it lags by at most heartbeatEvery).
	inFlight proxywasm.MetricGauge
}

func defineConcurrencyMetrics(name string) concurrencyMetrics {
	p := metricPrefixCC + name + "."
	return concurrencyMetrics{
		admitted:       proxywasm.DefineCounterMetric(p + "admitted"),
		rejected:       proxywasm.DefineCounterMetric(p + "rejected"),
		shadowRejected: proxywasm.DefineCounterMetric(p + "shadow_rejected"),
		missingKey:     proxywasm.DefineCounterMetric(p + "missing_key"),
		reclaimed:      proxywasm.DefineCounterMetric(p + "reclaimed"),
		inFlight:       proxywasm.DefineGaugeMetric(p + "in_flight"),
	}
}

// setInFlight sets the gauge the way setState does for breakers.
func (m concurrencyMetrics) setInFlight(n int64) {
	if n < 0 {
		n = 0
	}
	proxywasm.MetricHistogram(uint32(m.inFlight)).Record(uint64(n))
}
