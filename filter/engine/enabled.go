package engine

import (
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
)

// A switched-off entry ("enabled": false) gets its metrics defined, so a
// dashboard sees it at zero rather than missing, and nothing else: no
// table, no Redis backend, no breaker state, no heartbeat.

// newDisabledLimit keeps limit index's place in Plugin.limits, whose
// positions are the indexes replaces refers to; matchLimits never applies
// it, so it is neither evaluated nor counted and does not replace others.
func newDisabledLimit(hc *host.Host, cfg *config.Limit, index int) *limitRuntime {
	l := &limitRuntime{cfg: cfg, index: index, disabled: true, metrics: defineLimitMetrics(hc.Metrics, cfg.Name)}
	l.metrics.cost = defineCostMetrics(hc.Metrics, cfg)
	return l
}

// defineDisabledBreaker defines the breaker's metrics with its state gauge
// at closed (0): a breaker switched off on a reload must not keep showing
// the open state it had.
func defineDisabledBreaker(hc *host.Host, cfg *config.Breaker) {
	defineBreakerMetrics(hc.Metrics, cfg.Name).setState(0)
}

// defineDisabledConcurrency defines the limit's metrics with nothing in
// flight.
func defineDisabledConcurrency(hc *host.Host, cfg *config.ConcurrencyLimit) {
	defineConcurrencyMetrics(hc.Metrics, cfg.Name).setInFlight(0)
}

// enabledConcurrency is how many concurrency limits are switched on.
func enabledConcurrency(cfg *config.Config) int {
	n := 0
	for i := range cfg.Concurrency {
		if !cfg.Concurrency[i].Disabled {
			n++
		}
	}
	return n
}

// enabledLimits is how many of the runtimes are switched on.
func enabledLimits(limits []*limitRuntime) int {
	n := 0
	for _, l := range limits {
		if !l.disabled {
			n++
		}
	}
	return n
}
