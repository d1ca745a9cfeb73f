package engine

import (
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/limiter"
)

func (h *Stream) evaluateShadows(shadows []limiter.Request, shadowLim []*limitRuntime, ns int64) {
	for i, r := range shadows {
		l := shadowLim[i]
		res, err := r.Table.AllowN(r.Key, ns, r.Cost)
		if err != nil {
			h.plugin.log.Warnf("sluice: limiter store: %v", err)
		}
		l.exportTableStats()
		if h.trace != nil {
			h.trace.traceResults(shadowLim[i:i+1], []limiter.Result{res})
		}
		if res.Allowed {
			l.admitted(r.Table.Limit(), res)
		} else {
			l.metrics.shadowLimited.Increment(1)
			l.logRejection(h.plugin.log, "shadow_limited", res)
			attribute(h.plugin.host.Stream, h.plugin.log, "shadow_limited", l.cfg.Name, l.ruleOf(r.Table.Limit()))
			h.charges.drop(l)
			h.plugin.tellUpstream(l)
		}
	}
}

// rateLimited is the answer to a request denied by l with res at now,
// which does not wait for it.
func (h *Stream) rateLimited(l *limitRuntime, res limiter.Result, rule string, now time.Time) *reply {
	p := h.plugin
	l.metrics.limited.Increment(1)
	q := l.quotaOf(res)
	l.logRejection(h.plugin.log, "rate_limited", res)
	headers, _ := appendRateLimitHeaders(nil, nil, p.cfg.Response.Headers, q, now, true)
	ct, body := rateLimitedBody(p.cfg.Response.Body, l.cfg.Name, l.cfg.OnLimit.Status, res.RetryAfter)
	return &reply{kind: config.ReplyRateLimited, values: replyValues{limit: l.cfg.Name, limitValue: q.limit, window: q.window, retryAfter: res.RetryAfter},
		status: l.cfg.OnLimit.Status, headers: headers, contentType: ct, body: body, rule: rule}
}

func (h *Stream) missingKey(l *limitRuntime) *reply {
	p := h.plugin
	l.logRejection(h.plugin.log, "missing_key", limiter.Result{})
	ct, body := missingKeyBody(p.cfg.Response.Body, l.cfg.Name, l.cfg.OnLimit.Status)
	return &reply{kind: config.ReplyMissingKey, values: replyValues{limit: l.cfg.Name}, status: l.cfg.OnLimit.Status, contentType: ct, body: body, rule: l.baseRule()}
}

// firstValue is the first value of header name in headers.
func firstValue(headers [][2]string, name string) (string, bool) {
	for _, kv := range headers {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

// decideLimits decides the applying limits at now: keys and costs, then
// the enforcing limits together (limiter.AllowAll: denied by any, charged
// by none), then the shadow limits on their own. Remote limits start
// their decisions here and leave the request waiting for them.
func (h *Stream) decideLimits(now time.Time) outcome {
	p := h.plugin
	p.reqs, p.reqLim = p.reqs[:0], p.reqLim[:0]
	h.gen++
	h.resetRemote()
	h.charges.pending = h.charges.pending[:0]
	var shadows shadowRequests
	// Every key of this evaluation is appended to one arena that lives
	// until the next evaluation, so the keys handed to AllowAll need no
	// allocation of their own.
	arena := p.keyBuf[:0]
	for i, l := range p.limits {
		if !p.applied[i] {
			continue
		}
		var o outcome
		if arena, o = h.prepareLimit(i, l, arena, &shadows, now); o.kind != outAllow {
			return o
		}
	}
	p.keyBuf = arena
	ns := now.UnixNano()
	if len(h.remote.reqs) > 0 {
		o := h.startRemote(now)
		h.evaluateShadows(shadows.reqs, shadows.lims, ns)
		return o
	}
	if len(p.reqs) > 0 {
		if o := h.decideLocal(ns); o.kind != outAllow {
			return o
		}
	}
	h.evaluateShadows(shadows.reqs, shadows.lims, ns)
	return allow
}

// shadowRequests are the local decisions of shadow limits, made after
// the enforcing ones and only counted.
type shadowRequests struct {
	reqs []limiter.Request
	lims []*limitRuntime
}

// prepareLimit builds applying limit i's key and cost, appending the key
// to arena, and files its decision: with the enforcing local limits
// (p.reqs), the shadow ones, or the remote ones (h.remote.reqs). A limit it
// settles on its own (an override action, a missing key, a bad cost) may
// decide the request.
func (h *Stream) prepareLimit(i int, l *limitRuntime, arena []byte, shadows *shadowRequests, now time.Time) ([]byte, outcome) {
	p := h.plugin
	// A limit not enforced for this request is a shadow for it.
	shadow := l.cfg.Shadow || h.roll.unenforced(i)
	start := len(arena)
	k := &p.keyed
	arena, o := h.limitKey(i, l, arena, shadow, k)
	if k.settled || o.kind != outAllow {
		return arena[:start], o
	}
	key := arena[start:]
	if !k.ok {
		if h.wait.delay.active {
			return arena, allow // counted on the first evaluation
		}
		l.metrics.missingKey.Increment(1)
		// An ambiguous key (Info.AppendKey) is refused even under skip,
		// which would leave a client choosing it unlimited.
		if (l.cfg.OnMissingKey == config.MissingKeyDeny || h.info.Ambiguous) && !shadow {
			return arena, rejectWith(h.missingKey(l))
		}
		return arena, allow
	}
	cost, bad, ok := p.requestCost(l, &h.info, h.wait.delay.active)
	if !ok {
		// A malformed cost is the client's fault, not the limit's:
		// only a configured shadow lets it pass, a rollout does not.
		if l.cfg.Shadow {
			return arena, allow
		}
		return arena, rejectWith(bad)
	}
	if h.trace != nil {
		h.trace.Limits[i].OverrideValue, h.trace.Limits[i].Rate, h.trace.Limits[i].Cost = k.overrideValue, k.rate, cost
	}
	if l.cfg.CostFromResponse != nil {
		h.charges.note(l, k.table, k.rate, k.overrideValue, key)
	}
	switch r := (limiter.Request{Table: k.table, Key: arenaString(key), Cost: cost}); {
	case l.remote != nil:
		h.fileRemote(i, l, k.rate, k.overrideValue, key, cost, shadow, now)
	case shadow:
		shadows.reqs, shadows.lims = append(shadows.reqs, r), append(shadows.lims, l)
	default:
		p.reqs, p.reqLim = append(p.reqs, r), append(p.reqLim, l)
	}
	return arena, allow
}

// limitKeyed is what limitKey found of a limit for the request.
type limitKeyed struct {
	table         *limiter.Table
	rate          config.Rate
	overrideValue string
	// ok is false for a missing key; settled is set when the limit needs
	// no decision (the service set no limit, an override action).
	ok, settled bool
}

// limitKey appends limit i's key for the request to arena and finds, into
// k, the table and rate that decide it, applying an unlimited or block
// override.
func (h *Stream) limitKey(i int, l *limitRuntime, arena []byte, shadow bool, k *limitKeyed) ([]byte, outcome) {
	p := h.plugin
	start := len(arena)
	*k = limitKeyed{}
	if l.ext != nil {
		switch {
		case h.info.LookupAmbiguous:
			// Refused as an ambiguous key is (Info.AppendKey).
			h.info.Ambiguous = true
		case h.ext.Skip:
			l.metrics.allowed.Increment(1) // the service set no limit
			k.settled = true
			return arena, allow
		default:
			arena, k.table, k.rate, k.ok = l.ext.appendBucketKey(arena, &h.ext, &h.info)
		}
		if h.trace != nil {
			h.trace.traceKey(i, shadow, arena[start:], k.ok, "")
		}
		return arena, allow
	}
	var overrideValue string
	arena, overrideValue, k.ok = h.info.AppendKey(arena, l.cfg.Key, &p.cfg.ClientIP, l.cfg.OverrideBy)
	if k.ok && l.cfg.OverrideCIDRs != nil {
		overrideValue = l.cfg.OverrideCIDRs.Resolve(overrideValue)
	}
	if h.trace != nil {
		h.trace.traceKey(i, shadow, arena[start:], k.ok, overrideValue)
	}
	if k.ok && l.cfg.OverrideActions != nil {
		// Unlimited and blocked values have no table of their own, so
		// they are settled before the value becomes a rate's.
		if o, done := overrideAction(p, l, overrideValue); done {
			if h.trace != nil {
				h.trace.Limits[i].Action = l.cfg.OverrideActions[overrideValue].String()
			}
			k.settled = true
			return arena, o
		}
	}
	// From here the override value is the configuration's own string (or
	// ""), never the request's bytes, which the host may reuse once the
	// callback returns.
	k.table, k.rate, k.overrideValue = l.table(overrideValue)
	return arena, allow
}

// decideLocal decides the enforcing local limits in p.reqs together at
// ns, and keeps the most restrictive admission for the headers.
func (h *Stream) decideLocal(ns int64) outcome {
	p := h.plugin
	results := p.results[:len(p.reqs)]
	admitted, err := limiter.AllowAll(ns, p.reqs, results)
	if err != nil {
		h.plugin.log.Warnf("sluice: limiter store: %v", err)
	}
	if h.trace != nil {
		h.trace.traceResults(p.reqLim, results)
	}
	for _, l := range p.reqLim {
		l.exportTableStats()
	}
	if !admitted {
		return p.firstDenial(p.reqs, p.reqLim, results)
	}
	best := -1
	for i, res := range results {
		p.reqLim[i].admitted(p.reqs[i].Table.Limit(), res)
		if best < 0 || res.Remaining < results[best].Remaining ||
			(res.Remaining == results[best].Remaining && res.Limit < results[best].Limit) {
			best = i
		}
	}
	h.quota = p.reqLim[best].quotaOf(results[best])
	return allow
}

// overrideAction applies an unlimited or block override of value. done
// reports that the limit is settled for this request: an unlimited value
// is allowed without consuming anything; a blocked one is rejected as an
// over-limit request (a shadow limit only counts it). Both are decided
// before any limit consumes, so a rejection consumes from none.
func overrideAction(p *Plugin, l *limitRuntime, value string) (o outcome, done bool) {
	switch l.cfg.OverrideActions[value] {
	case config.OverrideUnlimited:
		l.metrics.allowed.Increment(1)
		return allow, true
	case config.OverrideBlock:
		if l.cfg.Shadow {
			l.metrics.shadowLimited.Increment(1)
			return allow, true
		}
		// No capacity and no time after which it would pass: a delay
		// action cannot help, so the denial is answered at once.
		p.denial = denial{limit: l, blocked: true}
		return outcome{kind: outDeny}, true
	}
	return allow, false
}

// traceResults records the local decisions of limits lim, up to the
// first denial: limiter.AllowAll decides no further.
func (t *Trace) traceResults(lim []*limitRuntime, results []limiter.Result) {
	for i, l := range lim {
		lt := &t.Limits[l.index]
		lt.Decided, lt.Allowed, lt.Remaining = true, results[i].Allowed, results[i].Remaining
		if !lt.Allowed {
			return
		}
	}
}

// tellUpstream adds l's upstream_headers_when_limited to the request, which
// a shadow or not enforced evaluation of l would have rejected. Replacing
// keeps a re-evaluated request to one value and overrides a client's.
func (p *Plugin) tellUpstream(l *limitRuntime) {
	for _, kv := range l.cfg.UpstreamHeadersWhenLimited {
		if err := p.host.Stream.ReplaceRequestHeader(kv[0], kv[1]); err != nil {
			p.log.Warnf("sluice: adding request header %s: %v", kv[0], err)
		}
	}
}
