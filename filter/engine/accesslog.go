package engine

// Access-log attribution. When the filter refuses, delays or shadows a
// request, it tells the proxy which limit decided, the outcome and the
// limit's rule (never the key value) as filter state, which Envoy's
// access log prints:
//
//	%FILTER_STATE(wasm.sluice_outcome:PLAIN)%  rate_limited
//	%FILTER_STATE(wasm.sluice_limit:PLAIN)%    per-tenant
//	%FILTER_STATE(wasm.sluice_rule:PLAIN)%     token_bucket 100/1m0s
//
// proxy_set_property stores each value as the filter state object
// "wasm." and the name. The last decision wins: a refusal replaces the
// shadow denial recorded before it, and a delayed request that is then
// admitted keeps "delayed". An allowed request that no shadow limit
// would have refused sets nothing and costs nothing.

import (
	"strconv"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/limiter"
)

// The filter state names, without Envoy's "wasm." prefix.
const (
	stateOutcome = "sluice_outcome"
	stateLimit   = "sluice_limit"
	stateRule    = "sluice_rule"
)

// FilterStateNames are the names the filter sets filter state under, for
// hosts and harnesses that read it back.
var FilterStateNames = [...]string{stateOutcome, stateLimit, stateRule}

// attribute records for the access log that the limit, breaker or
// bulkhead named by decided outcome under rule. An empty value is not
// written: the access log then prints "-" for it, as for a request the
// filter let through.
func attribute(st host.Stream, log host.Log, outcome, by, rule string) {
	for _, kv := range [...][2]string{{stateOutcome, outcome}, {stateLimit, by}, {stateRule, rule}} {
		if kv[1] == "" {
			continue
		}
		if err := st.SetFilterState(kv[0], kv[1]); err != nil {
			log.Warnf("sluice: setting filter state %s: %v", kv[0], err)
			return
		}
	}
}

// ruleText is a rate limit's rule as the access log shows it: the
// algorithm, then limit/window and the burst, if any ("token_bucket
// 100/1m0s burst 20", "fixed_window 1000/month +09:00").
func ruleText(a config.Algorithm, r config.Rate) string {
	s := a.String() + " " + strconv.FormatInt(r.Limit, 10) + "/" + r.WindowString()
	if a == config.TokenBucket && r.Burst > 0 {
		s += " burst " + strconv.FormatInt(r.Burst, 10)
	}
	return s
}

// ruleOfLimit is the rule of a decision at lim, as ruleText writes it.
func ruleOfLimit(lim limiter.Limit) string {
	return ruleText(lim.Algorithm, config.Rate{Limit: lim.Rate, Window: lim.Period, Burst: lim.Burst, Calendar: lim.Calendar, Offset: lim.Offset})
}

// ruleOf is l's rule at rate lim. It is rendered when a refusal first
// needs it and kept for the next refusal at the same rate, so a flood of
// refusals renders it once, and a limit that refuses nothing costs none.
func (l *limitRuntime) ruleOf(lim limiter.Limit) string {
	if l.rule == "" || l.ruleLim != lim {
		l.rule, l.ruleLim = ruleOfLimit(lim), lim
	}
	return l.rule
}

// baseRule is l's configured rule, for an outcome no rate decided (a
// missing key, an unusable cost).
func (l *limitRuntime) baseRule() string {
	return l.ruleOf(l.cfg.Rate.Limiter(l.cfg.Algorithm))
}
