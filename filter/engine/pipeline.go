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
//     decide the enforcing limits together and the shadow ones alone
//     (limits.go);
//  3. remote wait: global and hybrid limits are decided in Redis or from
//     their leases (remote.go, package distributed); the request waits;
//  4. breakers guarding the request's cluster or route (breakers.go);
//  5. concurrency limits (concurrency.go);
//  6. then the response headers, the end of the stream, and the tick.
//
// Every stage returns an outcome (outcome.go): allow, deny, reject or
// wait. Only settle, here, turns one into a reply or a wait in the one
// registry of paused streams (waiting.go), and only resume, here, lets a
// paused stream continue.

import (
	"time"

	"github.com/sluice-proxy/sluice/filter/request"
)

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
		if rest, ok := p.admin.route(h.info.Path()); ok || carries {
			if h.serveAdmin(rest, ok, h.start) {
				return Pause
			}
		}
	}
	if p.routeHeader != "" {
		p.dropClientRoute()
	}
	if p.idle && h.phase != phaseAdminDenied {
		return Continue // nothing configured applies to any request
	}
	if p.rollouts {
		h.roll = h.roll[:0]
		for _, l := range p.limits {
			h.roll.add(l.rollout, p.host.Rand)
		}
	}
	return h.pause(h.evaluate(h.start))
}

// pause passes v on, and makes a stream v pauses without answering it
// keep what it read of the request, which it needs again in the callback
// that resumes it.
func (h *Stream) pause(v Verdict) Verdict {
	if v == Pause && h.held() {
		h.info.Retain()
	}
	return v
}

// held reports whether the request is paused for the engine to decide or
// resume it (a delay, a lookup, a remote decision): then it waits in the
// registry, and a stream the engine answered or that ended does not.
func (h *Stream) held() bool { return h.wait.kind != waitNone }

// AfterRequestHeaders is a request body or trailers callback. A request
// the engine holds keeps its body and trailers buffered in the proxy: as
// in Envoy, a Continue from either callback would resume a stream its
// headers callback paused, and send the request upstream before its
// limits had decided it.
func (h *Stream) AfterRequestHeaders() Verdict {
	if h.held() {
		return Pause
	}
	return Continue
}

// evaluate runs the request path at now. It runs again after a delay or a
// lookup; everything it reads from the request is cached in h.info, so a
// re-run costs no header hostcalls.
func (h *Stream) evaluate(now time.Time) Verdict {
	o := h.stages(now)
	return h.settle(o, now)
}

// stages runs stages 1 to 5 at now and returns the first outcome that is
// not allow, or allow.
func (h *Stream) stages(now time.Time) outcome {
	p := h.plugin
	if len(p.limits) > 0 {
		h.matchLimits()
		// 1. External lookup.
		if x := p.external; x != nil && p.applied[x.index] {
			if o := x.resolve(&h.ext, &h.info, now); o.kind != outAllow {
				return o
			}
			x.routeTenant(&h.ext)
		}
		// 2. Limits; 3. remote wait.
		if o := h.decideLimits(now); o.kind != outAllow {
			return o
		}
	}
	return h.admitAfterLimits(now)
}

// admitAfterLimits runs what follows the rate limits: 4. the breakers,
// then 5. the concurrency limits.
func (h *Stream) admitAfterLimits(now time.Time) outcome {
	p := h.plugin
	if len(p.breakers) > 0 {
		if o := h.breakers.check(p, &h.info, h.trace, h.phase == phaseAdminDenied, now); o.kind != outAllow {
			return o
		}
	}
	if len(p.concurrency) > 0 {
		if o := h.cc.acquire(p, &h.info, h.trace, now); o.kind != outAllow {
			// Breakers passed before have no outcome to report now.
			h.breakers.releaseTickets()
			return o
		}
	}
	return allow
}

// continueAfterRemote goes on with a request whose remote decisions are
// all known: it commits its local limits, then 4. and 5.
func (h *Stream) continueAfterRemote(now time.Time) Verdict {
	o := h.finishRemote(now)
	if o.kind == outAllow {
		o = h.admitAfterLimits(now)
	}
	return h.settle(o, now)
}

// settle turns a stage's outcome into what the adapter does: an allowed
// request continues; a denied one waits for its limit (on_limit delay) or
// is answered; a rejected one is answered; a waiting one is parked.
func (h *Stream) settle(o outcome, now time.Time) Verdict {
	switch o.kind {
	case outAllow:
		if h.phase == phaseAdminDenied {
			// Admitted, but never forwarded: answered as an upstream's
			// 404 (admin.go), or, held past its deadline, as any held
			// request then is.
			if h.plugin.deadline.lower(h.plugin.host.Stream, &h.info, now.Sub(h.start)) {
				h.hideAdmin(now)
			} else {
				h.rejectDeadline()
			}
			return Pause
		}
		return Continue
	case outDeny:
		d := &h.plugin.denial
		if h.wait.delay.shape(d.limit, d.res, h.start, now) {
			attribute(h.plugin.host.Stream, h.plugin.log, "delayed", d.limit.cfg.Name, d.rule())
			h.plugin.park(h, waitDelay)
			return Pause
		}
		r := h.rateLimited(d.limit, d.res, d.rule(), now)
		h.reject(r)
	case outReject:
		h.reject(o.reply)
	case outWait:
		h.plugin.park(h, o.wait)
	}
	return Pause
}

// matchLimits marks the limits that apply to the request: every limit
// whose match holds, minus the limits named in the replaces of another
// (the most specific wins). The request is matched once, here.
func (h *Stream) matchLimits() {
	p := h.plugin
	info := &h.info
	match := info.View(p.matchNeeds)
	for i, l := range p.limits {
		p.matched[i] = !l.disabled && request.Matches(&l.cfg.Match, match) && !h.roll.skipped(i)
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

// resume continues a paused stream from another context (the tick, a call
// reply): after a delay or a lookup it is evaluated again, once its remote
// decisions are ready it goes on from them. Only here does the engine let
// a paused stream continue.
func (p *Plugin) resume(h *Stream, now time.Time) {
	afterRemote := h.wait.kind == waitReady
	p.unpark(h)
	if h.phase == phaseDone {
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
	if h.pause(v) != Continue {
		return
	}
	// A request held past its deadline is answered rather than resumed.
	if !p.deadline.lower(p.host.Stream, &h.info, now.Sub(h.start)) {
		h.rejectDeadline()
		return
	}
	if err := p.host.Stream.Resume(); err != nil {
		p.log.Warnf("sluice: resuming a request: %v", err)
	}
}

// ResponseBody is a response body callback: size bytes of body are
// there, the last ones when end is set. It returns Pause to have the host
// buffer the body, Continue to let it go on (cost.go).
func (h *Stream) ResponseBody(size int, end bool) Verdict {
	if h.charges.body.mode == bodyOff {
		return Continue
	}
	return h.charges.scanBody(h.plugin, size, end)
}

// ResponseHeaders is the response phase: charge the costs the response
// reports, note the status for the breakers, and decorate an allowed
// response with its rate-limit headers.
//
// The common case, a stream with nothing to charge, report or decorate,
// costs the adapter no call: this is small enough to inline (cost 80 of
// 80; the two lengths are or-ed to stay within it).
func (h *Stream) ResponseHeaders() {
	if (len(h.charges.pending)|len(h.breakers.tickets) != 0 || h.quota.applies) && h.phase != phaseAnswered {
		h.respond()
	}
}

func (h *Stream) respond() {
	p := h.plugin
	// A charge reads the whole header map; a breaker then takes :status
	// from it rather than asking the host again.
	var headers [][2]string
	if len(h.charges.pending) > 0 {
		headers = p.host.Stream.ResponseHeaders()
		h.charges.chargeResponse(p, headers, &h.quota, h.start)
	}
	if len(h.breakers.tickets) > 0 {
		// The breaker outcome needs the status and, unless it is a quiet
		// success, the time the upstream answered; read both only when it
		// is tracked, and the time only when it is needed.
		status, ok := firstValue(headers, ":status")
		if headers == nil {
			status, ok = p.host.Stream.ResponseHeader(":status")
		}
		if ok {
			h.breakers.status = StatusCode(status)
		}
		h.breakers.gotResponse = true
		if h.breakers.outcomeNeedsTime() {
			h.breakers.responded = p.host.Clock()
		}
	}
	if h.quota.applies && p.cfg.Response.HeadersOnAllowed {
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
	if h.wait.kind != waitNone || len(h.remote.reqs) > 0 || len(h.cc.held) > 0 || len(h.breakers.tickets) > 0 || h.charges.body.mode != bodyOff {
		h.release()
	}
	// Replies to calls of this stream still to come are ignored from now.
	h.gen++
	h.phase = phaseDone
}

// release gives back what an ending stream holds, and reports its
// outcome to the breakers that admitted it.
func (h *Stream) release() {
	p := h.plugin
	p.unpark(h)
	if len(h.remote.reqs) > 0 {
		if h.remote.pending > 0 {
			h.refund()
		}
		h.resetRemote()
	}
	if len(h.cc.held) > 0 {
		h.cc.release(p, p.host.Clock())
	}
	if len(h.breakers.tickets) > 0 && h.phase != phaseAnswered {
		h.breakers.report(&h.info, h.start, p.log)
	}
	if h.charges.body.mode != bodyOff {
		// The stream ended before its body did (a reset, or no body at
		// all): charge what it reported so far, or default.
		h.charges.chargeBody(p, p.host.Clock())
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

// TraceInto makes the pipeline account for the stream's request in t.
// Call it after Begin, which clears it.
func (h *Stream) TraceInto(t *Trace) { h.trace = t }

// traceMatch records what matchLimits decided, re-checking each
// condition alone with the same Matches on the same request.
func (t *Trace) traceMatch(p *Plugin, match request.View) {
	t.Limits = make([]LimitTrace, len(p.limits))
	for i, l := range p.limits {
		lt := &t.Limits[i]
		lt.Name, lt.Disabled = l.cfg.Name, l.disabled
		lt.Matched, lt.Applied = p.matched[i], p.applied[i]
		lt.Mode = l.cfg.Mode
		for _, c := range l.cfg.Match.Conditions() {
			lt.Conditions = append(lt.Conditions, ConditionTrace{Path: c.Path, JSON: c.JSON, Held: request.Matches(&c.Only, match)})
		}
		if !p.matched[i] {
			continue
		}
		for _, j := range l.cfg.Replaces {
			t.Limits[j].ReplacedBy = append(t.Limits[j].ReplacedBy, i)
		}
	}
}
