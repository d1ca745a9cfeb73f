package engine

// The request side of global and hybrid limits: a request's remote
// decisions, in the order and with the guarantees package distributed
// states, which holds the backend, the leases and the negative cache.

import (
	"errors"
	"fmt"
	"github.com/sluice-proxy/sluice/filter/external"
	"github.com/sluice-proxy/sluice/filter/limitsvc"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/distributed"
	"github.com/sluice-proxy/sluice/limiter"
	"github.com/sluice-proxy/sluice/limiter/store"
)

// remoteLimit is what a global or hybrid limit adds to its limitRuntime.
type remoteLimit struct {
	mode   config.Mode
	policy config.FailurePolicy
	// dl holds its keys' negative cache and leases in shared data.
	dl *distributed.Limit
	// fallback tables for failure_policy local, created on first use.
	fallbackDef       *limiter.Table
	fallbackOverrides map[string]*limiter.Table
}

func newRemoteLimit(cfg *config.Limit, ratePath string) (*remoteLimit, error) {
	check := func(r config.Rate, path string) error {
		if err := distributed.CheckRate(cfg.Mode, r.Limiter(cfg.Algorithm)); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		return nil
	}
	if err := check(cfg.Rate, ratePath); err != nil {
		return nil, err
	}
	for v, r := range cfg.Overrides {
		if err := check(r, overridePath(ratePath, v)); err != nil {
			return nil, err
		}
	}
	return &remoteLimit{mode: cfg.Mode, policy: cfg.FailurePolicy, dl: distributed.NewLimit(cfg.Name)}, nil
}

// fallbackTable is the local table used under failure_policy local: the
// limit divided by the instances hint, so that N Envoys falling back at
// once together admit about what the global limit would.
func (l *limitRuntime) fallbackTable(s store.Store, overrideValue string) (*limiter.Table, error) {
	rl := l.remote
	rate := l.cfg.Rate
	_, isOverride := l.cfg.Overrides[overrideValue]
	if isOverride {
		if t := rl.fallbackOverrides[overrideValue]; t != nil {
			return t, nil
		}
		rate = l.cfg.Overrides[overrideValue]
	} else if rl.fallbackDef != nil {
		return rl.fallbackDef, nil
	}
	// As localFallback divides an external answer's rate.
	n := int64(max(l.cfg.Instances, 1))
	rate.Limit = max(rate.Limit/n, 1)
	rate.Burst /= n
	prefix := "sluice.rlf." + l.cfg.Name + "."
	seed := l.cfg.Name + "\x00fallback"
	if isOverride {
		id := hexHash(overrideValue)
		prefix += "o" + id + "."
		seed += "\x00" + overrideValue
	}
	t, err := newTable(s, l.cfg, rate, prefix, seed)
	if err != nil {
		return nil, err
	}
	if isOverride {
		if rl.fallbackOverrides == nil {
			rl.fallbackOverrides = map[string]*limiter.Table{}
		}
		rl.fallbackOverrides[overrideValue] = t
	} else {
		rl.fallbackDef = t
	}
	return t, nil
}

type remoteState uint8

const (
	remotePending remoteState = iota
	remoteWaitLease
	remoteAllowed
	remoteDenied
	remoteFailAllow
	remoteFailDeny
	remoteFailLocal
)

// remoteWait is a request's remote (global and hybrid) decisions in
// progress: the request waits until pending reaches 0. localReqs/localLim
// are its local limits, committed only once every remote limit admitted.
type remoteWait struct {
	reqs      []remoteReq
	calls     []*distributed.Call
	localReqs []limiter.Request
	// localKeys backs the keys of localReqs while the request waits.
	localKeys []byte
	localLim  []*limitRuntime
	pending   int
	// starting is set while the decisions start: a reply arriving then
	// is finished by startRemote, not resumed.
	starting bool
}

// remoteReq is one global or hybrid limit applying to a request.
type remoteReq struct {
	l             *limitRuntime
	key           string // the limit key, as the local tables see it
	overrideValue string
	k             distributed.Key
	cost          int64
	// policy is the limit's failure_policy, or the one an external
	// answer named.
	policy config.FailurePolicy
	state  remoteState
	res    limiter.Result
	// taken is the lease tokens this request holds, returned if it is
	// denied after all.
	taken int64
	// waitSince is when the request started waiting for a lease.
	waitSince int64
}

func (h *Stream) resetRemote() {
	if b := h.plugin.backend; b != nil {
		for _, c := range h.remote.calls {
			b.Cancel(c) // a no-op for a call that has finished
		}
	}
	h.remote.calls = h.remote.calls[:0]
	h.remote.reqs = h.remote.reqs[:0]
	h.remote.localReqs = h.remote.localReqs[:0]
	h.remote.localLim = h.remote.localLim[:0]
	h.remote.pending = 0
}

// startRemote decides a request with remote limits. The local limits are
// in p.reqs; they are copied because the request may outlive this call.
func (h *Stream) startRemote(now time.Time) outcome {
	p := h.plugin
	b := p.backend
	ns := now.UnixNano()
	h.remote.localReqs = append(h.remote.localReqs[:0], p.reqs...)
	h.remote.localLim = append(h.remote.localLim[:0], p.reqLim...)
	// The local keys view the worker's key arena, which the next request's
	// evaluation overwrites while this one waits for Redis: give them
	// bytes of this stream's own.
	h.remote.localKeys = h.remote.localKeys[:0]
	for i := range h.remote.localReqs {
		h.remote.localKeys = append(h.remote.localKeys, h.remote.localReqs[i].Key...)
	}
	at := 0
	for i := range h.remote.localReqs {
		n := len(h.remote.localReqs[i].Key)
		h.remote.localReqs[i].Key = arenaString(h.remote.localKeys[at : at+n])
		at += n
	}
	for i, r := range h.remote.localReqs {
		res, err := r.Table.Peek(r.Key, ns, r.Cost)
		if err != nil {
			h.plugin.log.Warnf("sluice: limiter store: %v", err)
			continue
		}
		if !res.Allowed {
			return h.plugin.deny(h.remote.localLim[i], res, r.Table.Limit())
		}
	}
	for i := range h.remote.reqs {
		rr := &h.remote.reqs[i]
		if rr.l.remote.mode == config.ModeHybrid {
			continue // tryLease checks its negative cache, counting the demand
		}
		if until := b.DeniedUntil(&rr.k); until > ns {
			b.Metrics.NegativeHits.Increment(1)
			return h.plugin.deny(rr.l, rr.k.CachedDenial(ns, until), rr.k.Lim)
		}
	}
	h.remote.starting = true
	h.remote.pending = len(h.remote.reqs)
	// Hybrid limits first: they decide from shared data, so one denying
	// stops the request before any global call is made.
	denied := false
	for _, hybrid := range [2]bool{true, false} {
		for i := range h.remote.reqs {
			rr := &h.remote.reqs[i]
			if denied || (rr.l.remote.mode == config.ModeHybrid) != hybrid {
				continue
			}
			if hybrid {
				h.tryLease(i, now, true)
			} else {
				h.startGlobal(i, now)
			}
			denied = rr.state == remoteDenied // no need to ask the others
		}
	}
	h.remote.starting = false
	if h.remote.pending == 0 {
		return h.finishRemote(now)
	}
	if h.anyDenied() {
		// Decided without waiting for the calls still out: their replies
		// still reach the breaker, but must not decide this stream again.
		o := h.finishRemote(now)
		h.gen++
		return o
	}
	if h.waitingForLease(-1) {
		return waitFor(waitLease)
	}
	return waitFor(waitRemote)
}

func (h *Stream) anyDenied() bool {
	for i := range h.remote.reqs {
		if s := h.remote.reqs[i].state; s == remoteDenied || s == remoteFailDeny {
			return true
		}
	}
	return false
}

func (h *Stream) startGlobal(i int, now time.Time) {
	p := h.plugin
	b := p.backend
	rr := &h.remote.reqs[i]
	gen := h.gen
	c, err := b.Decide(&rr.k, rr.cost, now, func(at time.Time, res limiter.Result, err error) {
		if h.gen != gen {
			return // the stream ended or was re-evaluated
		}
		h.resolve(i, at, res, err)
	})
	if err != nil {
		h.resolve(i, now, limiter.Result{}, err)
		return
	}
	h.remote.calls = append(h.remote.calls, c)
}

// resolve records the outcome of remote limit i and, once every remote
// limit of the request is known, finishes the request.
func (h *Stream) resolve(i int, now time.Time, res limiter.Result, err error) {
	rr := &h.remote.reqs[i]
	if rr.state != remotePending && rr.state != remoteWaitLease {
		return
	}
	if err != nil {
		h.applyFailure(rr, err)
	} else {
		rr.res = res
		h.plugin.leaveFallback()
		if res.Allowed {
			rr.state = remoteAllowed
		} else {
			rr.state = remoteDenied
			h.plugin.backend.Denied(&rr.k, res, now)
		}
	}
	h.remote.pending--
	if h.remote.pending > 0 || h.remote.starting {
		return
	}
	h.plugin.ready(h, now)
}

func (h *Stream) applyFailure(rr *remoteReq, err error) {
	m := &h.plugin.backend.Metrics
	switch rr.policy {
	case config.FailDeny:
		rr.state = remoteFailDeny
		m.FallbackDeny.Increment(1)
	case config.FailLocal:
		rr.state = remoteFailLocal
		m.FallbackLocal.Increment(1)
	default:
		rr.state = remoteFailAllow
		m.FallbackAllow.Increment(1)
	}
	h.plugin.enterFallback(rr, err)
	if !errors.Is(err, distributed.ErrBreakerOpen) {
		h.plugin.log.Debugf("sluice: limit %s: backend failed (%v), failure_policy %s", rr.l.cfg.Name, err, rr.policy)
	}
}

// finishRemote decides once every remote limit is known.
func (h *Stream) finishRemote(now time.Time) outcome {
	p := h.plugin
	for i := range h.remote.reqs {
		rr := &h.remote.reqs[i]
		switch rr.state {
		case remoteDenied:
			h.refund()
			return h.plugin.deny(rr.l, rr.res, rr.k.Lim)
		case remoteFailDeny:
			h.refund()
			return rejectWith(h.backendFailure(rr))
		}
	}
	reqs := h.remote.localReqs
	lims := h.remote.localLim
	for i := range h.remote.reqs {
		rr := &h.remote.reqs[i]
		if rr.state != remoteFailLocal {
			continue
		}
		t, err := h.plugin.localFallback(rr)
		if err != nil {
			h.plugin.log.Warnf("sluice: limit %s fallback: %v", rr.l.cfg.Name, err)
			continue
		}
		reqs = append(reqs, limiter.Request{Table: t, Key: rr.key, Cost: rr.cost})
		lims = append(lims, rr.l)
	}
	h.remote.localReqs, h.remote.localLim = reqs, lims
	var results []limiter.Result
	if len(reqs) > 0 {
		if cap(p.results) < len(reqs) {
			p.results = make([]limiter.Result, len(reqs))
		}
		results = p.results[:len(reqs)]
		admitted, err := limiter.AllowAll(now.UnixNano(), reqs, results)
		if err != nil {
			h.plugin.log.Warnf("sluice: limiter store: %v", err)
		}
		if !admitted {
			h.refund()
			return p.firstDenial(reqs, lims, results)
		}
	}
	best, bestLim := limiter.Result{}, (*limitRuntime)(nil)
	consider := func(l *limitRuntime, lim limiter.Limit, res limiter.Result) {
		l.admitted(lim, res)
		if bestLim == nil || res.Remaining < best.Remaining || (res.Remaining == best.Remaining && res.Limit < best.Limit) {
			best, bestLim = res, l
		}
	}
	for i, res := range results {
		consider(lims[i], reqs[i].Table.Limit(), res)
	}
	for i := range h.remote.reqs {
		rr := &h.remote.reqs[i]
		switch rr.state {
		case remoteAllowed:
			consider(rr.l, rr.k.Lim, rr.res)
		case remoteFailAllow:
			rr.l.metrics.allowed.Increment(1)
		}
		rr.taken = 0 // kept: the request is admitted
	}
	if bestLim != nil {
		h.quota = bestLim.quotaOf(best)
	}
	return allow
}

// backendFailure is the answer to a request a failed remote decision
// denies (failure_policy deny).
func (h *Stream) backendFailure(rr *remoteReq) *reply {
	p := h.plugin
	status := p.cfg.Backend.FailureStatus
	if rr.l.ext != nil && h.ext.FailureCode != 0 {
		status = h.ext.FailureCode // the tenant's answer chose it
	}
	rr.l.metrics.limited.Increment(1)
	rr.l.logRejection(h.plugin.log, "backend_unavailable", limiter.Result{Limit: rr.k.Lim.Rate})
	ct, body := rateLimitedBody(p.cfg.Response.Body, rr.l.cfg.Name, status, 0)
	return &reply{kind: config.ReplyRateLimited, values: replyValues{limit: rr.l.cfg.Name, limitValue: rr.k.Lim.Rate, window: rr.l.cfg.Rate.Window},
		status: status, contentType: ct, body: body, event: "backend_unavailable", rule: rr.l.ruleOf(rr.k.Lim)}
}

// refund returns lease tokens held by a request that will not pass.
func (h *Stream) refund() {
	b := h.plugin.backend
	if b == nil {
		return
	}
	for i := range h.remote.reqs {
		rr := &h.remote.reqs[i]
		if rr.taken > 0 {
			b.ReturnTokens(&rr.k, rr.taken)
			rr.taken = 0
		}
	}
}

// startShadowRemote decides a shadow global or hybrid limit in the
// background: the reply only counts.
func (h *Stream) startShadowRemote(l *limitRuntime, lim limiter.Limit, rkey string, cost int64, now time.Time) {
	h.plugin.backend.Shadow(lim, rkey, cost, now, func(allowed bool) {
		if allowed {
			l.metrics.allowed.Increment(1)
		} else {
			l.metrics.shadowLimited.Increment(1)
		}
	})
}

// tryLease serves remote limit i from the lease, or arranges for one.
func (h *Stream) tryLease(i int, now time.Time, first bool) {
	p := h.plugin
	rr := &h.remote.reqs[i]
	if first {
		rr.waitSince = now.UnixNano()
	}
	out, res, err := p.backend.TryLease(&rr.k, rr.cost, rr.waitSince, first, now)
	if out == distributed.LeaseWait {
		rr.state = remoteWaitLease
		return
	}
	switch out {
	case distributed.LeaseTaken:
		rr.taken = rr.cost
		h.resolveLease(i, now, res)
	case distributed.LeaseDenied:
		h.resolveLease(i, now, res)
	case distributed.LeaseFailed:
		h.resolve(i, now, limiter.Result{}, err)
	}
}

// waitingForLease reports whether a remote limit other than i still waits
// for a lease (i -1: any).
func (h *Stream) waitingForLease(i int) bool {
	for j := range h.remote.reqs {
		if j != i && h.remote.reqs[j].state == remoteWaitLease {
			return true
		}
	}
	return false
}

func (h *Stream) resolveLease(i int, now time.Time, res limiter.Result) {
	rr := &h.remote.reqs[i]
	if rr.state != remotePending && rr.state != remoteWaitLease {
		return
	}
	rr.res = res
	if res.Allowed {
		rr.state = remoteAllowed
	} else {
		rr.state = remoteDenied
	}
	h.remote.pending--
	if h.remote.pending > 0 || h.remote.starting {
		return
	}
	h.plugin.ready(h, now)
}

// pollLease tries the remote limits of h that wait for a lease again:
// from the tick, and whenever a lease reply has been written. True when
// some limit still waits for its lease.
func (h *Stream) pollLease(now time.Time) bool {
	for i := range h.remote.reqs {
		if h.remote.reqs[i].state == remoteWaitLease {
			h.tryLease(i, now, false)
		}
	}
	return h.waitingForLease(-1)
}

// fileRemote files global or hybrid limit i, with its key and cost, for
// the request's remote decisions; a shadow one is decided in the
// background at now.
func (h *Stream) fileRemote(i int, l *limitRuntime, rate config.Rate, overrideValue string, key []byte, cost int64, shadow bool, now time.Time) {
	lim := rate.Limiter(l.cfg.Algorithm)
	// Key only hashes the value, so the arena's bytes need no copy.
	dk := l.remote.dl.Key(arenaString(key), lim)
	if h.trace != nil {
		h.trace.Limits[i].RedisKey = dk.RKey
	}
	if shadow {
		h.startShadowRemote(l, lim, dk.RKey, cost, now)
		return
	}
	h.remote.reqs = append(h.remote.reqs, remoteReq{
		l: l, key: string(key), overrideValue: overrideValue, k: dk, cost: cost,
		policy: remotePolicy(l, &h.ext),
	})
}

// enterFallback logs, once per transition, that this worker's remote
// limits fell back to their failure_policy: one WARN when the first
// request falls back after the backend answered, not one per request.
func (p *Plugin) enterFallback(rr *remoteReq, err error) {
	if p.inFallback {
		return
	}
	p.inFallback = true
	cause := "backend_error"
	if errors.Is(err, distributed.ErrBreakerOpen) {
		cause = "backend_breaker_open"
	}
	b := make([]byte, 0, 128)
	b = append(b, `{"sluice":"backend_fallback","limit":`...)
	b = appendJSONString(b, rr.l.cfg.Name)
	b = append(b, `,"failure_policy":`...)
	b = appendJSONString(b, rr.policy.String())
	b = append(b, `,"cause":`...)
	b = appendJSONString(b, cause)
	p.log.Warn(string(append(b, '}')))
}

// leaveFallback logs the backend answering again after a fallback.
func (p *Plugin) leaveFallback() {
	if p.inFallback {
		p.inFallback = false
		p.log.Info(`{"sluice":"backend_fallback_ended"}`)
	}
}

// localFallback is the table of failure_policy local for a global or
// hybrid decision: the limit divided by instances, as for limits.
func (p *Plugin) localFallback(rr *remoteReq) (*limiter.Table, error) {
	x := rr.l.ext
	if x == nil {
		return rr.l.fallbackTable(p.host.Store, rr.overrideValue)
	}
	lim := rr.k.Lim
	n := int64(max(rr.l.cfg.Instances, 1))
	lim.Rate = max(lim.Rate/n, 1)
	lim.Burst /= n
	return tableWithLimit(x.fallbacks, x.fallbackBase, lim)
}

// remotePolicy is the failure policy of a global or hybrid decision of
// limit l: the answer's to lookup r, when it names one.
func remotePolicy(l *limitRuntime, r *external.Request) config.FailurePolicy {
	if l.ext != nil {
		switch r.Policy {
		case limitsvc.PolicyAllow:
			return config.FailAllow
		case limitsvc.PolicyDeny:
			return config.FailDeny
		case limitsvc.PolicyLocal:
			return config.FailLocal
		}
	}
	return l.remote.policy
}
