package engine

// The request path, in order. Each phase reads top to bottom here; what a
// phase needs of a mechanism (a key, a cost, a lease, a lookup, a breaker,
// a bulkhead) is in the file named after it.
//
//  0. the admin route, when configured: a request under its prefix that
//     passes its checks is answered here and goes no further; one that
//     fails them goes on as any request and, where it would be
//     forwarded, is answered 404 (admin.go);
//  1. external lookup: when the external limit applies, which bucket it is
//     (external.go, package external); the request may wait for it;
//  2. limits: match once, drop the replaced ones, build keys and costs,
//     decide the enforcing limits together and the shadow ones alone;
//  3. remote wait: global and hybrid limits are decided in Redis or from
//     their leases (remote.go, package distributed); the request waits;
//  4. breakers guarding the request's cluster or route (breakers.go);
//  5. concurrency limits (concurrency.go);
//  6. then the response headers, the end of the stream, and the tick.
//
// Work that waits (a delay, a lookup, a lease, a Redis call) parks the
// stream in one registry (waiting.go) and comes back with an outcome; only
// resume, here, decides to answer or to let a paused stream continue.

import (
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/distributed"
	"github.com/sluice-proxy/sluice/filter/external"
	"github.com/sluice-proxy/sluice/limiter"
)

// Verdict is what the adapter does with the stream after a callback.
type Verdict uint8

const (
	// Continue lets the request go on to the upstream.
	Continue Verdict = iota
	// Pause holds it: the engine has answered it, or resumes it later.
	// From a body callback it asks the host to buffer the body and call
	// again with everything so far (StopIterationAndBuffer).
	Pause
)

// Stream is one request: what the engine read of it and decided for it.
// The adapter keeps one per HTTP context and reuses it (Plugin.Begin).
type Stream struct {
	plugin *Plugin
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
	// held is set while the request is paused for the engine to decide
	// or resume it (a delay, a lookup, a remote decision).
	held bool
	// adminDenied marks an admin request that failed the admin checks:
	// limited as any request, then answered 404 where it would go on.
	adminDenied bool

	// trace, when set, receives an account of the request's decisions
	// (trace.go); nil on every stream the filter serves.
	trace *Trace

	// waitingFor is what the paused stream waits for in the plugin's
	// registry of waiting streams; waitNone when it is not there.
	waitingFor waitKind

	// Delay (shaping) state: the request waits until delayUntil, and never
	// past delayDeadline.
	delayed       bool
	delayUntil    time.Time
	delayDeadline time.Time

	tickets []breakerTicket
	// ticketBuf backs tickets for the usual one or two breakers, so a
	// request's tickets cost no allocation of their own.
	ticketBuf [2]breakerTicket
	// responded is when the response arrived, read only when a breaker's
	// outcome can depend on it (outcomeNeedsTime); gotResponse says that
	// a response reached the filter at all.
	responded   time.Time
	gotResponse bool
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
	// charged from the response headers (cost.go), or at the end of the
	// body (body.go).
	charges []pendingCharge
	// body is the scan of a response body some charge reads usage from.
	body bodyScan
	// ext is this request's lookup of the external limit (external.go).
	ext external.Request
	// extAmbiguous says a cache_key part of the request is ambiguous, so
	// no lookup is made and the external limit refuses it.
	extAmbiguous bool
	// roll are the request's rollout draws by limit index, drawn once
	// (rollout.go); empty when no limit has a partial rollout.
	roll []rollFlags
}

// RequestHeaders is the request phase.
func (h *Stream) RequestHeaders() Verdict {
	p := h.plugin
	p.requests.Increment(1)
	h.start = p.host.Clock()
	if p.admin != nil {
		// Before anything else: an admin request that passes the checks
		// is answered here, never limited, and so is any request carrying
		// the admin token, whatever its path. One that fails them goes
		// through the limits as any request and is never forwarded
		// (admin.go, admitAfterLimits).
		carries, invalid := h.adminCredential()
		if invalid {
			h.refuseCredentials()
			return Pause
		}
		if rest, ok := p.admin.route(h.info.pseudo(needPath)); ok || carries {
			if h.serveAdmin(rest, ok, h.start) {
				return Pause
			}
		}
	}
	if p.routeHeader != "" {
		h.dropClientRoute()
	}
	if p.idle && !h.adminDenied {
		return Continue // nothing configured applies to any request
	}
	if p.rollouts {
		h.drawRollout()
	}
	return h.pause(h.evaluate(h.start))
}

// pause passes v on, and makes a stream v pauses without answering it
// keep what it read of the request, which it needs again in the callback
// that resumes it.
func (h *Stream) pause(v Verdict) Verdict {
	h.held = v == Pause && !h.localReply && !h.done
	if h.held {
		h.info.retain()
	}
	return v
}

// AfterRequestHeaders is a request body or trailers callback. A request
// the engine holds keeps its body and trailers buffered in the proxy: as
// in Envoy, a Continue from either callback would resume a stream its
// headers callback paused, and send the request upstream before its
// limits had decided it.
func (h *Stream) AfterRequestHeaders() Verdict {
	if h.held {
		return Pause
	}
	return Continue
}

// evaluate runs the request path at now. It runs again after a delay or a
// lookup; everything it reads from the request is cached in h.info, so a
// re-run costs no header hostcalls.
func (h *Stream) evaluate(now time.Time) Verdict {
	p := h.plugin
	if len(p.limits) > 0 {
		h.matchLimits()
		// 1. External lookup.
		if x := p.external; x != nil && p.applied[x.index] {
			if !h.resolveExternal(now) {
				return Pause
			}
			h.routeTenant()
		}
		// 2. Limits; 3. remote wait (pending).
		if h.decideLimits(now) != verdictAllow {
			return Pause
		}
	}
	if !h.admitAfterLimits(now) {
		return Pause
	}
	return Continue
}

// admitAfterLimits runs what follows the rate limits: 4. the breakers,
// then 5. the concurrency limits. False means the request was answered.
func (h *Stream) admitAfterLimits(now time.Time) bool {
	p := h.plugin
	if len(p.breakers) > 0 && !h.passBreakers(now) {
		return false
	}
	if len(p.concurrency) > 0 && !h.acquireConcurrency(now) {
		return false
	}
	if h.adminDenied {
		h.hideAdmin(now) // admitted, but never forwarded: a 404 as from the upstream
		return false
	}
	return true
}

// continueAfterRemote goes on with a request whose remote decisions are
// all known: it commits its local limits, then 4. and 5.
func (h *Stream) continueAfterRemote(now time.Time) Verdict {
	if h.finishRemote(now) != verdictAllow || !h.admitAfterLimits(now) {
		return Pause
	}
	return Continue
}

// matchLimits marks the limits that apply to the request: every limit
// whose match holds, minus the limits named in the replaces of another
// (the most specific wins). The request is matched once, here.
func (h *Stream) matchLimits() {
	p := h.plugin
	info := &h.info
	match := info.matchRequest(p.matchNeeds)
	for i, l := range p.limits {
		p.matched[i] = !l.disabled && l.cfg.Match.Matches(match) && !h.skipped(i)
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
	if h.trace != nil {
		h.trace.traceMatch(p, match)
	}
}

// decideLimits decides the applying limits at now: keys and costs, then
// the enforcing limits together (limiter.AllowAll: denied by any, charged
// by none), then the shadow limits on their own. Remote limits start
// their decisions here and leave the request pending.
func (h *Stream) decideLimits(now time.Time) verdict {
	p := h.plugin
	info := &h.info
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
		// A limit not enforced for this request is a shadow for it.
		shadow := l.cfg.Shadow || h.unenforced(i)
		start := len(arena)
		var overrideValue string
		var ok bool
		var t *limiter.Table
		var rate config.Rate
		if l.ext != nil {
			switch {
			case h.extAmbiguous:
				// Refused below as an ambiguous key is (appendKey).
				ok, info.ambiguous = false, true
			case h.ext.Skip:
				l.metrics.allowed.Increment(1) // the service set no limit
				continue
			default:
				arena, t, rate, ok = h.appendExternal(arena)
			}
			if h.trace != nil {
				h.trace.traceKey(i, shadow, arena[start:], ok, "")
			}
		} else {
			arena, overrideValue, ok = info.appendKey(arena, l.cfg.Key, &p.cfg.ClientIP, l.cfg.OverrideBy)
			if ok && l.cfg.OverrideCIDRs != nil {
				overrideValue = l.cfg.OverrideCIDRs.Resolve(overrideValue)
			}
			if h.trace != nil {
				h.trace.traceKey(i, shadow, arena[start:], ok, overrideValue)
			}
			if ok && l.cfg.OverrideActions != nil {
				// Unlimited and blocked values have no table of their own,
				// so they are settled before the value becomes a rate's.
				if v, done := h.overrideAction(l, overrideValue, now); done {
					if h.trace != nil {
						h.trace.Limits[i].Action = l.cfg.OverrideActions[overrideValue].String()
					}
					arena = arena[:start]
					if v != verdictAllow {
						return v
					}
					continue
				}
			}
			// From here the override value is the configuration's own
			// string (or ""), never the request's bytes, which the host
			// may reuse once the callback returns.
			t, rate, overrideValue = l.table(overrideValue)
		}
		key := arena[start:]
		if !ok {
			if h.delayed {
				continue // counted on the first evaluation
			}
			l.metrics.missingKey.Increment(1)
			// An ambiguous key (appendKey) is refused even under skip,
			// which would leave a client choosing it unlimited.
			if (l.cfg.OnMissingKey == config.MissingKeyDeny || info.ambiguous) && !shadow {
				h.rejectMissingKey(l)
				return verdictReject
			}
			continue
		}
		cost, ok := h.requestCost(l)
		if !ok {
			// A malformed cost is the client's fault, not the limit's:
			// only a configured shadow lets it pass, a rollout does not.
			if l.cfg.Shadow {
				continue
			}
			return verdictReject
		}
		if h.trace != nil {
			h.trace.Limits[i].OverrideValue, h.trace.Limits[i].Rate, h.trace.Limits[i].Cost = overrideValue, rate, cost
		}
		if l.cfg.CostFromResponse != nil {
			h.noteCharge(l, t, rate, overrideValue, key)
		}
		if l.remote != nil {
			lim := rate.Limiter(l.cfg.Algorithm)
			// Key only hashes the value, so the arena's bytes need no copy.
			k := l.remote.dl.Key(arenaString(key), lim)
			if h.trace != nil {
				h.trace.Limits[i].RedisKey = k.RKey
			}
			if shadow {
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
		if shadow {
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
		if h.trace != nil {
			h.trace.traceResults(p.reqLim, results)
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
			p.reqLim[i].admitted(p.reqs[i].Table.Limit(), res)
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

// resume continues a paused stream from another context (the tick, a call
// reply): after a delay or a lookup it is evaluated again, after its remote
// decisions it goes on from them. Only here does the engine let a paused
// stream continue.
func (p *Plugin) resume(h *Stream, now time.Time, afterRemote bool) {
	if h.done {
		return
	}
	if err := p.host.Stream.Select(h.id); err != nil {
		// The stream is gone.
		if afterRemote {
			h.refund()
		}
		return
	}
	v := Continue
	if afterRemote {
		v = h.continueAfterRemote(now)
	} else {
		v = h.evaluate(now)
	}
	h.pause(v)
	if v == Continue && h.applyDeadline(now) {
		h.held = false
		if err := p.host.Stream.Resume(); err != nil {
			p.log.Warnf("sluice: resuming a request: %v", err)
		}
	}
}

// ResponseHeaders is the response phase: charge the costs the response
// reports, note the status for the breakers, and decorate an allowed
// response with its rate-limit headers.
//
// The common case, a stream with nothing to charge, report or decorate,
// costs the adapter no call: this is small enough to inline.
func (h *Stream) ResponseHeaders() {
	if !h.localReply && (len(h.charges) > 0 || len(h.tickets) > 0 || h.hasQuota) {
		h.respond()
	}
}

func (h *Stream) respond() {
	p := h.plugin
	// A charge reads the whole header map; a breaker then takes :status
	// from it rather than asking the host again.
	var headers [][2]string
	if len(h.charges) > 0 {
		headers = p.host.Stream.ResponseHeaders()
		h.chargeResponse(headers)
	}
	if len(h.tickets) > 0 {
		// The breaker outcome needs the status and, unless it is a quiet
		// success, the time the upstream answered; read both only when it
		// is tracked, and the time only when it is needed.
		status, ok := firstValue(headers, ":status")
		if headers == nil {
			status, ok = p.host.Stream.ResponseHeader(":status")
		}
		if ok {
			h.status = StatusCode(status)
		}
		h.gotResponse = true
		if h.outcomeNeedsTime() {
			h.responded = p.host.Clock()
		}
	}
	if h.hasQuota && p.cfg.Response.HeadersOnAllowed {
		// Reset times are relative to the decision, made at h.start.
		p.respHeaders, p.respBuf = appendRateLimitHeaders(p.respHeaders[:0], p.respBuf, p.cfg.Response.Headers, h.quota, h.start, false)
		for _, kv := range p.respHeaders {
			_ = p.host.Stream.ReplaceResponseHeader(kv[0], kv[1])
		}
	}
}

// Done is the end of the stream: whatever it waits for or holds is given
// back, and an admitted request's outcome goes to its breakers, and a
// body still owed a charge is charged. A stream that holds nothing costs
// only the checks. (It is over the compiler's inlining budget, as it was
// before the body check: cost 96 and 90 of 80.)
func (h *Stream) Done() {
	if h.waitingFor != waitNone || len(h.remote) > 0 || len(h.cc) > 0 || len(h.tickets) > 0 || h.body.mode != bodyOff {
		h.release()
	}
	// Replies to calls of this stream still to come are ignored from now.
	h.gen++
	h.done = true
}

// release gives back what an ending stream holds, and reports its
// outcome to the breakers that admitted it.
func (h *Stream) release() {
	p := h.plugin
	p.unpark(h)
	if len(h.remote) > 0 {
		if h.pending > 0 {
			h.refund()
		}
		h.resetRemote()
	}
	if len(h.cc) > 0 {
		h.releaseConcurrency(p.host.Clock())
	}
	if len(h.tickets) > 0 {
		h.reportBreakers()
	}
	if h.body.mode != bodyOff {
		// The stream ended before its body did (a reset, or no body at
		// all): charge what it reported so far, or default.
		h.chargeBody(p.host.Clock())
	}
}

// Tick runs the plugin's timer: the concurrency heartbeat, the waiting
// streams, the backend's and the lookups' calls; the fast tick stops when
// nothing is left for it.
func (p *Plugin) Tick() {
	if p.tickRunning {
		return
	}
	p.tickRunning = true
	defer func() { p.tickRunning = false }()
	now := p.host.Clock()
	p.concurrencyTick(now)
	if p.backend != nil {
		p.backend.Tick(now)
	}
	if p.external != nil {
		p.external.cache.Tick(now)
	}
	p.poll(waitAny, now)
	if len(p.waiting) == 0 && (p.backend == nil || !p.backend.Busy()) && (p.external == nil || !p.external.cache.Busy()) && p.ticking {
		p.ticking = false
		_ = p.host.Ticker.SetTick(p.idleTick())
	}
}
