package filter

import (
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/distributed"
	"github.com/sluice-proxy/sluice/filter/external"
	"github.com/sluice-proxy/sluice/limiter"
)

type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	id     uint32
	info   requestInfo

	start time.Time
	// quota is the most restrictive applied limit, for headers on the
	// allowed response; hasQuota is false when no enforcing limit applied.
	quota    quota
	hasQuota bool
	// localReply is set once this filter has answered the request itself,
	// so the response phase neither decorates nor reports it.
	localReply bool

	// Delay (shaping) state: the request waits until delayUntil, and never
	// past delayDeadline.
	delayed       bool
	delayUntil    time.Time
	delayDeadline time.Time

	tickets []breakerTicket
	// ticketBuf backs tickets for the usual one or two breakers, so a
	// request's tickets cost no allocation of their own.
	ticketBuf [2]breakerTicket
	responded time.Time
	// status is the response's :status, read when a breaker tracks it.
	status int

	// Remote (global and hybrid) decisions in progress: the request is
	// paused until pending reaches 0. localReqs/localLim are the local
	// limits, committed only once every remote limit admitted.
	remote    []remoteReq
	calls     []*distributed.Call
	localReqs []limiter.Request
	// localKeys backs the keys of localReqs while the request waits.
	localKeys []byte
	localLim  []*limitRuntime
	pending   int
	starting  bool
	// gen changes when the stream ends or is re-evaluated, so replies to
	// calls of an earlier evaluation are ignored.
	gen  uint32
	done bool

	// cc are the concurrency slots the request holds (ccBuf backs the
	// common case without an allocation).
	cc    []ccHold
	ccBuf [2]ccHold
	// charges are the cost_from_response limits that admitted the request,
	// charged from the response headers (cost.go).
	charges []pendingCharge
	// ext is this request's lookup of the external limit (external.go).
	ext external.Request
}

type breakerTicket struct {
	b      *breakerRuntime
	br     *breaker.Breaker
	ticket breaker.Ticket
}

func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	p := h.plugin
	p.requests.Increment(1)
	h.start = p.host.Clock()
	return h.evaluate(h.start)
}

// verdict is what evaluate decided.
type verdict uint8

const (
	verdictAllow verdict = iota
	verdictReject
	verdictDelay
	// verdictPending: waiting for Redis; a reply callback finishes it.
	verdictPending
)

// evaluate runs the limits and breakers at now. It is re-run from the tick
// for a delayed request; everything it reads from the request is cached in
// h.info, so a re-run costs no header hostcalls.
func (h *httpContext) evaluate(now time.Time) types.Action {
	p := h.plugin
	if len(p.limits) > 0 {
		switch h.evaluateLimits(now) {
		case verdictReject:
			return types.ActionPause
		case verdictDelay, verdictPending:
			return types.ActionPause
		}
	}
	if !h.admitAfterLimits(now) {
		return types.ActionPause
	}
	return types.ActionContinue
}

func (h *httpContext) evaluateLimits(now time.Time) verdict {
	p := h.plugin
	info := &h.info
	match := info.matchRequest(p.matchNeeds)
	for i, l := range p.limits {
		p.matched[i] = l.cfg.Match.Matches(match)
		p.applied[i] = p.matched[i]
	}
	// A matching limit disables its targets even when it is itself
	// replaced, so a chain general > specific > most specific leaves only
	// the most specific; hence the pass reads matched, not applied.
	for i, l := range p.limits {
		if !p.matched[i] {
			continue
		}
		for _, j := range l.cfg.Replaces {
			p.applied[j] = false
		}
	}

	if x := p.external; x != nil && p.applied[x.index] && !h.resolveExternal(now) {
		return verdictPending
	}
	p.reqs, p.reqLim = p.reqs[:0], p.reqLim[:0]
	h.gen++
	h.resetRemote()
	h.charges = h.charges[:0]
	var shadows []limiter.Request
	var shadowLim []*limitRuntime
	// Every key of this evaluation is appended to one arena that lives
	// until the next evaluation, so the keys handed to AllowAll need no
	// allocation of their own.
	arena := p.keyBuf[:0]
	for i, l := range p.limits {
		if !p.applied[i] {
			continue
		}
		start := len(arena)
		var overrideValue string
		var ok bool
		var t *limiter.Table
		var rate config.Rate
		if l.ext != nil {
			if h.ext.Skip {
				l.metrics.allowed.Increment(1) // the service set no limit
				continue
			}
			arena, t, rate, ok = h.appendExternal(arena)
		} else {
			arena, overrideValue, ok = info.appendKey(arena, l.cfg.Key, &p.cfg.ClientIP, l.cfg.OverrideBy)
			t, rate = l.table(overrideValue)
		}
		key := arena[start:]
		if !ok {
			if h.delayed {
				continue // counted on the first evaluation
			}
			l.metrics.missingKey.Increment(1)
			if l.cfg.OnMissingKey == config.MissingKeyDeny && !l.cfg.Shadow {
				h.rejectMissingKey(l)
				return verdictReject
			}
			continue
		}
		cost, ok := h.requestCost(l)
		if !ok {
			if l.cfg.Shadow {
				continue
			}
			return verdictReject
		}
		if l.cfg.CostFromResponse != nil {
			h.noteCharge(l, t, rate, overrideValue, key)
		}
		if l.remote != nil {
			lim := rate.Limiter(l.cfg.Algorithm)
			// Key only hashes the value, so the arena's bytes need no copy.
			k := l.remote.dl.Key(arenaString(key), lim)
			if l.cfg.Shadow {
				h.startShadowRemote(l, lim, k.RKey, cost, now)
				continue
			}
			h.remote = append(h.remote, remoteReq{
				l: l, key: string(key), overrideValue: overrideValue, k: k, cost: cost,
				policy: h.remotePolicy(l),
			})
			continue
		}
		r := limiter.Request{Table: t, Key: arenaString(key), Cost: cost}
		if l.cfg.Shadow {
			shadows, shadowLim = append(shadows, r), append(shadowLim, l)
			continue
		}
		p.reqs, p.reqLim = append(p.reqs, r), append(p.reqLim, l)
	}

	p.keyBuf = arena
	ns := now.UnixNano()
	if len(h.remote) > 0 {
		v := h.startRemote(now)
		h.evaluateShadows(shadows, shadowLim, ns)
		return v
	}
	if len(p.reqs) > 0 {
		results := p.results[:len(p.reqs)]
		admitted, err := limiter.AllowAll(ns, p.reqs, results)
		if err != nil {
			h.plugin.log.Warnf("sluice: limiter store: %v", err)
		}
		for _, l := range p.reqLim {
			l.exportTableStats()
		}
		if !admitted {
			for i, res := range results {
				if !res.Allowed {
					return h.onLimited(p.reqLim[i], res, now)
				}
			}
			// AllowAll denies only through a result; be safe regardless.
			return h.onLimited(p.reqLim[0], results[0], now)
		}
		best := -1
		for i, res := range results {
			p.reqLim[i].metrics.allowed.Increment(1)
			if best < 0 || res.Remaining < results[best].Remaining ||
				(res.Remaining == results[best].Remaining && res.Limit < results[best].Limit) {
				best = i
			}
		}
		h.quota = quotaOf(p.reqLim[best], results[best])
		h.hasQuota = true
	}
	h.evaluateShadows(shadows, shadowLim, ns)
	return verdictAllow
}

func (h *httpContext) evaluateShadows(shadows []limiter.Request, shadowLim []*limitRuntime, ns int64) {
	for i, r := range shadows {
		l := shadowLim[i]
		res, err := r.Table.AllowN(r.Key, ns, r.Cost)
		if err != nil {
			h.plugin.log.Warnf("sluice: limiter store: %v", err)
		}
		l.exportTableStats()
		if res.Allowed {
			l.metrics.allowed.Increment(1)
		} else {
			l.metrics.shadowLimited.Increment(1)
			h.logRejection("shadow_limited", l, res)
			h.dropCharge(l)
		}
	}
}

// quotaOf describes a decision for the rate-limit headers. The window comes
// from the result, so an override with its own window reports that one.
func quotaOf(l *limitRuntime, res limiter.Result) quota {
	window := res.Period
	if window == 0 {
		window = l.cfg.Rate.Window // a contention or store-error result
	}
	return quota{
		name:       l.cfg.Name,
		limit:      res.Limit,
		window:     window,
		remaining:  res.Remaining,
		retryAfter: res.RetryAfter,
		resetAfter: res.ResetAfter,
	}
}

// onLimited applies the denying limit's on_limit.
func (h *httpContext) onLimited(l *limitRuntime, res limiter.Result, now time.Time) verdict {
	p := h.plugin
	if l.cfg.OnLimit.Action == config.ActionDelay && res.RetryAfter > 0 {
		if !h.delayed {
			h.delayDeadline = h.start.Add(l.cfg.OnLimit.MaxDelay)
		}
		wakeAt := now.Add(res.RetryAfter)
		if !wakeAt.After(h.delayDeadline) {
			if !h.delayed {
				h.delayed = true
				l.metrics.delayed.Increment(1)
			}
			h.delayUntil = wakeAt
			p.addWaiter(h)
			return verdictDelay
		}
	}
	l.metrics.limited.Increment(1)
	h.logRejection("rate_limited", l, res)
	q := quotaOf(l, res)
	headers, _ := appendRateLimitHeaders(nil, nil, p.cfg.Response.Headers, q, now, true)
	ct, body := rateLimitedBody(p.cfg.Response.Body, l.cfg.Name, l.cfg.OnLimit.Status, res.RetryAfter)
	h.sendLocal(l.cfg.OnLimit.Status, headers, ct, body)
	return verdictReject
}

func (h *httpContext) rejectMissingKey(l *limitRuntime) {
	p := h.plugin
	h.logRejection("missing_key", l, limiter.Result{})
	ct, body := missingKeyBody(p.cfg.Response.Body, l.cfg.Name, l.cfg.OnLimit.Status)
	h.sendLocal(l.cfg.OnLimit.Status, nil, ct, body)
}

// sendLocal answers the request itself.
func (h *httpContext) sendLocal(status int, headers [][2]string, contentType string, body []byte) {
	if contentType != "" {
		headers = append(headers, [2]string{"content-type", contentType})
	}
	h.localReply = true
	if err := h.plugin.host.Stream.Reply(status, headers, body); err != nil {
		h.plugin.log.Errorf("sluice: sending local reply: %v", err)
	}
}

// logRejection writes one JSON line per rejection. It names the key's
// kinds, never its values: client addresses are personal data and do not
// belong in proxy logs by default.
func (h *httpContext) logRejection(event string, l *limitRuntime, res limiter.Result) {
	b := make([]byte, 0, 160)
	b = append(b, `{"sluice":`...)
	b = appendJSONString(b, event)
	b = append(b, `,"limit":`...)
	b = appendJSONString(b, l.cfg.Name)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, l.keyKinds)
	b = append(b, `,"limit_value":`...)
	b = strconv.AppendInt(b, res.Limit, 10)
	b = append(b, `,"retry_after":`...)
	b = strconv.AppendInt(b, retryAfterSeconds(res.RetryAfter), 10)
	b = append(b, '}')
	h.plugin.log.Info(string(b))
}

// checkBreakers admits the request through every breaker guarding it, or
// answers it. Tickets are kept for the outcome at stream end.
func (h *httpContext) checkBreakers(now time.Time) bool {
	p := h.plugin
	var match config.Request
	matched := false
	for _, b := range p.breakers {
		if !matched {
			match = h.info.matchRequest(p.matchNeeds)
			matched = true
		}
		if !b.cfg.Match.Matches(match) {
			continue
		}
		scope := h.info.clusterName()
		if b.cfg.Per == config.PerRoute {
			scope = h.info.routeName()
		}
		br := b.instance(scope)
		t, d, err := br.Check(now)
		if err != nil {
			h.plugin.log.Warnf("sluice: breaker %s: %v", b.cfg.Name, err)
		}
		b.recordTransition(d.Transition)
		if !d.Allowed {
			b.metrics.rejected.Increment(1)
			h.releaseTickets()
			h.rejectOpen(b, scope, d)
			return false
		}
		if t.Tracked() {
			h.tickets = append(h.tickets, breakerTicket{b: b, br: br, ticket: t})
		}
	}
	return true
}

// releaseTickets drops tickets of breakers passed before another breaker
// rejected; their requests never reach an upstream, so they have no
// outcome. A probe slot held this way is freed by the probe timeout.
func (h *httpContext) releaseTickets() { h.tickets = h.tickets[:0] }

func (h *httpContext) rejectOpen(b *breakerRuntime, scope string, d breaker.Decision) {
	p := h.plugin
	headers := [][2]string{{"retry-after", strconv.FormatInt(retryAfterSeconds(d.RetryAfter), 10)}}
	if !p.cfg.Response.Headers.Has(config.HeadersRetryAfter) {
		headers = nil
	}
	ct, body := circuitOpenBody(p.cfg.Response.Body, scope, b.cfg.Status, d.RetryAfter)
	b2 := make([]byte, 0, 128)
	b2 = append(b2, `{"sluice":"circuit_open","breaker":`...)
	b2 = appendJSONString(b2, b.cfg.Name)
	b2 = append(b2, `,"upstream":`...)
	b2 = appendJSONString(b2, scope)
	b2 = append(b2, `,"retry_after":`...)
	b2 = strconv.AppendInt(b2, retryAfterSeconds(d.RetryAfter), 10)
	h.plugin.log.Info(string(append(b2, '}')))
	h.sendLocal(b.cfg.Status, headers, ct, body)
}

func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	if h.localReply {
		return types.ActionContinue
	}
	p := h.plugin
	// A charge reads the whole header map; a breaker then takes :status
	// from it rather than asking the host again.
	var headers [][2]string
	if len(h.charges) > 0 {
		headers = p.host.Stream.ResponseHeaders()
		h.chargeResponse(headers)
	}
	if len(h.tickets) > 0 {
		// The breaker outcome needs the status and, for slow calls, the
		// time the upstream answered; read both only when it is tracked.
		h.responded = p.host.Clock()
		status, ok := firstValue(headers, ":status")
		if headers == nil {
			status, ok = p.host.Stream.ResponseHeader(":status")
		}
		if ok {
			h.status = atoiStatus(status)
		}
	}
	if h.hasQuota && p.cfg.Response.HeadersOnAllowed {
		// Reset times are relative to the decision, made at h.start.
		p.respHeaders, p.respBuf = appendRateLimitHeaders(p.respHeaders[:0], p.respBuf, p.cfg.Response.Headers, h.quota, h.start, false)
		for _, kv := range p.respHeaders {
			_ = p.host.Stream.ReplaceResponseHeader(kv[0], kv[1])
		}
	}
	return types.ActionContinue
}

func (h *httpContext) OnHttpStreamDone() {
	p := h.plugin
	defer p.recycle(h)
	if h.delayed {
		delete(p.waiters, h.id)
	}
	h.forgetExternal()
	delete(p.leaseWaiters, h.id)
	if len(h.remote) > 0 {
		if h.pending > 0 {
			h.refund()
		}
		h.resetRemote()
	}
	h.gen++
	h.done = true
	if len(h.cc) > 0 {
		h.releaseConcurrency(p.host.Clock())
	}
	if len(h.tickets) == 0 || h.localReply {
		return
	}
	if h.responded.IsZero() {
		// No response reached the filter (the client went away first):
		// nothing is known about the upstream. A probe's slot is freed by
		// the breaker's probe timeout.
		return
	}
	now, code := h.responded, h.status
	// A success from the upstream is the common case and needs no property
	// read; the details are fetched only when they can change the verdict:
	// a status that could be a failure or a router reply (timeouts and
	// resets come as 5xx), or a half-open probe, whose outcome closes the
	// breaker and so must come from the upstream.
	details := "via_upstream"
	for _, t := range h.tickets {
		if code >= 500 || code == 0 || t.ticket.Probe() || t.b.cfg.IsFailureStatus(code) {
			details = h.info.host.Property(propCodeDetails)
			break
		}
	}
	for _, t := range h.tickets {
		failure, known := t.b.classify(code, details)
		if !known {
			continue
		}
		dur := h.responded.Sub(h.start)
		slow := t.b.cfg.SlowCall != nil && dur > t.b.cfg.SlowCall.Duration
		if slow {
			t.b.metrics.slowCalls.Increment(1)
			if t.b.slowIsFailure {
				failure = true
			}
		}
		if failure {
			t.b.metrics.failures.Increment(1)
		} else {
			t.b.metrics.successes.Increment(1)
		}
		tr, err := t.br.Report(t.ticket, breaker.Outcome{Failure: failure, Duration: dur}, now)
		if err != nil {
			h.plugin.log.Warnf("sluice: breaker %s: %v", t.b.cfg.Name, err)
		}
		t.b.recordTransition(tr)
	}
}

// classify turns Envoy's response code and details into a breaker outcome.
// known is false for replies that say nothing about the upstream: local
// replies of other filters, or a client that went away first.
func (b *breakerRuntime) classify(code int, details string) (failure, known bool) {
	switch {
	case details == "via_upstream":
		return b.cfg.IsFailureStatus(code), true
	case strings.HasPrefix(details, "upstream_response_timeout"),
		strings.HasPrefix(details, "upstream_per_try_timeout"),
		strings.HasPrefix(details, "upstream_reset"),
		strings.HasPrefix(details, "upstream_max_stream_duration_reached"):
		return b.cfg.FailureOnTimeout, true
	case details == "" && code != 0:
		// Hosts that do not report details: judge by status alone.
		return b.cfg.IsFailureStatus(code), true
	}
	return false, false
}

// addWaiter parks a delayed stream until the tick resumes it.
func (p *pluginContext) addWaiter(h *httpContext) {
	p.waiters[h.id] = h
	p.ensureTick()
}

// ensureTick starts the tick that drives delayed requests, retries, lease
// calls and call timeouts; OnTick stops it when nothing is left.
func (p *pluginContext) ensureTick() {
	if !p.ticking {
		p.ticking = true
		if err := p.host.Ticker.SetTick(delayTick); err != nil {
			p.log.Errorf("sluice: starting the tick: %v", err)
		}
	}
}

func (p *pluginContext) OnTick() {
	if p.tickRunning {
		return
	}
	p.tickRunning = true
	defer func() { p.tickRunning = false }()
	now := p.host.Clock()
	p.concurrencyTick(now)
	for id, h := range p.waiters {
		if now.Before(h.delayUntil) {
			continue
		}
		delete(p.waiters, id)
		if err := p.host.Stream.Select(id); err != nil {
			continue // the stream is gone
		}
		if h.evaluate(now) == types.ActionContinue {
			if err := p.host.Stream.Resume(); err != nil {
				p.log.Warnf("sluice: resuming a delayed request: %v", err)
			}
		}
	}
	if p.backend != nil {
		p.backend.Tick(now)
		if len(p.leaseWaiters) > 0 {
			p.pollLeaseWaiters(now)
		}
	}
	if p.external != nil {
		p.external.cache.Tick(now)
		if len(p.external.waiters) > 0 {
			p.external.pollWaiters(now)
		}
	}
	if len(p.waiters) == 0 && (p.backend == nil || !p.backend.Busy()) && len(p.leaseWaiters) == 0 && (p.external == nil || !p.external.cache.Busy() && len(p.external.waiters) == 0) && p.ticking {
		p.ticking = false
		_ = p.host.Ticker.SetTick(p.idleTick())
	}
}

// arenaString views key bytes as a string without a copy. For the worker's
// key arena that is safe only until the next evaluation overwrites it:
// limiter tables hash keys and do not keep them, and a request that waits
// for Redis copies its local keys first (startRemote).
func arenaString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
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
