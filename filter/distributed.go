package filter

// Distributed limits: mode global decides every request with one atomic
// Redis script call, reached over HTTP (Webdis or Upstash) through
// proxy_http_call; mode hybrid serves requests from token leases kept in
// shared data (lease.go).
//
// Guarantees when a request has several applying limits, some local and
// some global or hybrid ("denied by any limit consumes from none"):
//   - local limits are checked first without consuming (Table.Peek); a
//     local denial rejects before any Redis call, and nothing is consumed;
//   - a key in the negative cache (known over its global limit until its
//     retry time) rejects before any call, and nothing is consumed;
//   - hybrid limits are decided before any global call is made: their
//     decisions come from shared data, so a hybrid denial stops the
//     request without a call;
//   - hybrid tokens taken from a lease are returned to the lease when the
//     request is then denied by any other limit;
//   - global decisions cannot be undone: when one global limit admits and
//     another global limit (or a local limit that a concurrent request
//     drained between the peek and the final commit) denies, the admitting
//     global limit keeps the units consumed. Under-admission by at most the
//     cost of that request per such race, never over-admission.
//   - the local limits are committed with limiter.AllowAll only after every
//     remote limit admitted, so a remote denial consumes nothing locally.

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/limiter"
	"github.com/sluice-proxy/sluice/limiter/store"
)

// errBreakerOpen is the failure reported while the backend breaker rejects.
var errBreakerOpen = errors.New("backend breaker open")

// watchdogSlack is how long past its timeout a call may stay unanswered
// before the tick declares it timed out itself; Envoy normally reports the
// timeout first, so this only matters when a reply is lost.
const watchdogSlack = 10 * time.Millisecond

// backoff is the wait before retry number attempt+1: 10ms, 20ms, 40ms …
// capped at 100ms, short because the request is waiting.
func backoff(attempt int) time.Duration {
	d := 10 * time.Millisecond << uint(attempt)
	if d > 100*time.Millisecond || d <= 0 {
		d = 100 * time.Millisecond
	}
	return d
}

// callBudget is the most a request waits for one remote decision:
// timeout × (retries + 1) plus the backoffs between them, plus per attempt
// the watchdog's slack and one tick of timer granularity.
func callBudget(cfg *config.Backend) time.Duration {
	d := (cfg.Timeout + watchdogSlack + delayTick) * time.Duration(cfg.Retries+1)
	for a := 0; a < cfg.Retries; a++ {
		d += backoff(a)
	}
	return d
}

// maxBackendThreshold keeps 2 × threshold within the breaker's counters
// (1<<20).
const maxBackendThreshold = 1 << 18

type backendRuntime struct {
	p        *pluginContext
	cfg      *config.Backend
	endpoint backend.Endpoint
	caller   host.Caller
	store    store.Store
	log      host.Log
	breaker  *breaker.Breaker
	metrics  backendMetrics
	budget   time.Duration

	inflight map[*remoteCall]struct{}
	// retries wait for their backoff; queued wait for the tick so that they
	// are sent from the root context, whose calls outlive any stream.
	retries []*remoteCall
	queued  []*remoteCall
	// leaseWaiters are streams waiting for a lease another call will fill.
	leaseWaiters map[uint32]*httpContext
}

func newBackendRuntime(p *pluginContext, cfg *config.Backend) (*backendRuntime, error) {
	b := &backendRuntime{
		p:   p,
		cfg: cfg,
		endpoint: backend.Endpoint{
			Authority:  cfg.Authority,
			PathPrefix: cfg.PathPrefix,
			BasicAuth:  cfg.BasicAuth,
			Token:      cfg.Token,
		},
		caller:       p.host.Caller,
		store:        p.host.Store,
		log:          p.host.Log,
		metrics:      defineBackendMetrics(p.host.Metrics),
		budget:       callBudget(cfg),
		inflight:     map[*remoteCall]struct{}{},
		leaseWaiters: map[uint32]*httpContext{},
	}
	if cfg.Protocol == config.ProtocolUpstash {
		b.endpoint.Protocol = backend.Upstash
	}
	// The config accepts values beyond what the breaker's packed counters
	// hold; such thresholds mean "practically never" either way.
	threshold := min(cfg.Breaker.FailureThreshold, maxBackendThreshold)
	window := max(cfg.Breaker.Window, breaker.TimeWindowBuckets*time.Millisecond)
	set := breaker.Settings{
		// Consecutive failures trip it at once; the failure rate over the
		// time window catches a backend that fails often but not always.
		FailureThreshold:    uint32(threshold),
		FailureRatePercent:  50,
		Window:              breaker.Window{Type: breaker.WindowTime, Duration: window, MinimumCalls: uint32(2 * threshold)},
		SuccessThreshold:    uint32(min(cfg.Breaker.HalfOpenMaxRequests, maxBackendThreshold)),
		OpenTimeout:         cfg.Breaker.OpenTimeout,
		HalfOpenMaxRequests: uint32(min(cfg.Breaker.HalfOpenMaxRequests, maxBackendThreshold)),
		// A probe whose reply never comes must not wedge half-open for
		// longer than one request's budget.
		ProbeTimeout: callBudget(cfg) + time.Second,
	}
	m, err := breaker.NewMachine(set)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", config.FieldPath("backend", "breaker"), err)
	}
	b.breaker = breaker.NewBreaker(m, b.store, "sluice.backend.cb")
	if err := b.breaker.Init(); err != nil {
		b.log.Warnf("sluice: backend breaker: %v", err)
	}
	return b, nil
}

func (b *backendRuntime) recordTransition(tr breaker.Transition) {
	switch tr {
	case breaker.Opened, breaker.Reopened:
		b.metrics.breakerOpens.Increment(1)
		b.metrics.setBreakerState(breaker.Open)
		b.log.Warn(`{"sluice":"backend_breaker_open"}`)
	case breaker.Recovered:
		b.metrics.breakerCloses.Increment(1)
		b.metrics.setBreakerState(breaker.Closed)
		b.log.Info(`{"sluice":"backend_breaker_closed"}`)
	case breaker.HalfOpened:
		b.metrics.setBreakerState(breaker.HalfOpen)
	}
}

// remoteCall is one script invocation with its retries.
type remoteCall struct {
	cmd      backend.Command
	lease    bool
	deadline time.Time
	attempt  int
	// seq tells a reply to the current attempt from a late one.
	seq      uint32
	sentAt   time.Time
	retryAt  time.Time
	loading  bool
	reloads  int
	ticket   breaker.Ticket
	finished bool
	onDone   func(now time.Time, r backend.Reply, err error)
}

func (b *backendRuntime) newCall(cmd backend.Command, now time.Time, onDone func(time.Time, backend.Reply, error)) *remoteCall {
	return &remoteCall{cmd: cmd, deadline: now.Add(b.budget), onDone: onDone}
}

// cancel forgets a call whose stream ended. Envoy runs every
// proxy_http_call on the root context, so the reply still comes, but the
// SDK drops it because the calling stream is gone; the call is therefore
// neither retried nor reported to the breaker (a client going away says
// nothing about Redis), and an unreported probe frees its slot by
// ProbeTimeout.
func (b *backendRuntime) cancel(c *remoteCall) {
	delete(b.inflight, c)
	c.finished = true
}

// enqueue sends c from the next tick, in the root context.
func (b *backendRuntime) enqueue(c *remoteCall) {
	b.queued = append(b.queued, c)
	b.p.ensureTick()
}

func (b *backendRuntime) finish(c *remoteCall, now time.Time, r backend.Reply, err error) {
	if c.finished {
		return
	}
	c.finished = true
	c.onDone(now, r, err)
}

// send dispatches c now from the current context.
func (b *backendRuntime) send(c *remoteCall, now time.Time) {
	if c.finished {
		return // cancelled while waiting for a retry
	}
	t, d, err := b.breaker.Check(now)
	if err != nil {
		b.log.Warnf("sluice: backend breaker: %v", err)
	}
	b.recordTransition(d.Transition)
	if !d.Allowed {
		b.metrics.breakerRejected.Increment(1)
		b.finish(c, now, backend.Reply{}, errBreakerOpen)
		return
	}
	c.ticket = t
	var req backend.Request
	if c.loading {
		req = b.endpoint.LoadScript(c.cmd.Script)
	} else {
		req, err = b.endpoint.EvalSHA(c.cmd)
		if err != nil {
			b.report(c, now, true)
			b.finish(c, now, backend.Reply{}, err)
			return
		}
	}
	c.seq++
	seq := c.seq
	c.sentAt = now
	b.inflight[c] = struct{}{}
	b.metrics.calls.Increment(1)
	if c.lease {
		b.metrics.leaseCalls.Increment(1)
	}
	err = b.caller.Call(b.cfg.Cluster, req.Headers, req.Body, b.cfg.Timeout, func(status int, body []byte, err error) {
		b.onReply(c, seq, status, body, err)
	})
	if err != nil {
		delete(b.inflight, c)
		c.seq++
		b.failed(c, now, &backend.Error{Kind: backend.KindUnavailable, Detail: "proxy_http_call: " + err.Error()})
		return
	}
	b.p.ensureTick()
}

func (b *backendRuntime) report(c *remoteCall, now time.Time, failure bool) {
	if !c.ticket.Tracked() {
		return
	}
	dur := now.Sub(c.sentAt)
	tr, err := b.breaker.Report(c.ticket, breaker.Outcome{Failure: failure, Duration: dur}, now)
	c.ticket = breaker.Ticket{}
	if err != nil {
		b.log.Warnf("sluice: backend breaker: %v", err)
	}
	b.recordTransition(tr)
}

func (b *backendRuntime) onReply(c *remoteCall, seq uint32, status int, body []byte, err error) {
	if _, live := b.inflight[c]; !live || seq != c.seq || c.finished {
		return // answered after the watchdog gave up on it
	}
	delete(b.inflight, c)
	now := b.p.host.Clock()
	lat := now.Sub(c.sentAt)
	if lat < 0 {
		lat = 0
	}
	b.metrics.latency.Record(uint64(lat / time.Millisecond))
	if err != nil {
		b.failed(c, now, err)
		return
	}
	proto := b.endpoint.Protocol
	if c.loading {
		if err := backend.ParseScriptLoad(proto, status, body, c.cmd.Script); err != nil {
			b.failed(c, now, err)
			return
		}
		b.report(c, now, false)
		c.loading = false
		b.send(c, now)
		return
	}
	parse := backend.ParseReply
	if c.lease {
		parse = backend.ParseLeaseReply
	}
	reply, err := parse(proto, status, body)
	if backend.KindOf(err) == backend.KindNoScript && c.reloads < 2 {
		// Redis restarted or was flushed: it is healthy, only the script
		// cache is empty.
		b.metrics.errorOf(backend.KindNoScript).Increment(1)
		b.report(c, now, false)
		c.reloads++
		c.loading = true
		b.send(c, now)
		return
	}
	if err != nil {
		b.failed(c, now, err)
		return
	}
	if c.lease && reply.Granted > c.cmd.Args[3] {
		// A lease reply granting more than asked is not what our script
		// returns; trusting it could over-admit.
		b.failed(c, now, &backend.Error{Kind: backend.KindMalformed, Status: status, Detail: "lease granted more than requested"})
		return
	}
	b.report(c, now, false)
	b.finish(c, now, reply, nil)
}

// failed ends attempt c with err. A failure that says the backend is
// unavailable or broken counts against the breaker and may be retried; a
// call the HTTP front refused for its own data (backend.KindRequest) is
// that request's error alone: the front answered, so the breaker sees a
// success, and repeating the same call would be refused again.
func (b *backendRuntime) failed(c *remoteCall, now time.Time, err error) {
	kind := backend.KindOf(err)
	b.metrics.errorOf(kind).Increment(1)
	b.report(c, now, kind.CountsAgainstBreaker())
	if kind == backend.KindRequest {
		// Debug only: whoever sends such requests must not fill the log.
		b.log.Debugf("sluice: backend refused a call: %v", err)
	}
	if kind.Retryable() && c.attempt < b.cfg.Retries {
		wait := backoff(c.attempt)
		if !now.Add(wait).Add(b.cfg.Timeout).After(c.deadline) {
			c.attempt++
			c.retryAt = now.Add(wait)
			b.retries = append(b.retries, c)
			b.p.ensureTick()
			return
		}
	}
	b.finish(c, now, backend.Reply{}, err)
}

// tick sends due retries and queued calls and times out lost replies.
func (b *backendRuntime) tick(now time.Time) {
	for c := range b.inflight {
		if now.Sub(c.sentAt) >= b.cfg.Timeout+watchdogSlack {
			delete(b.inflight, c)
			c.seq++
			b.failed(c, now, backend.Timeout())
		}
	}
	if len(b.retries) > 0 {
		due := b.retries
		b.retries = nil
		for _, c := range due {
			if now.Before(c.retryAt) {
				b.retries = append(b.retries, c)
				continue
			}
			b.send(c, now)
		}
	}
	if len(b.queued) > 0 {
		q := b.queued
		b.queued = nil
		for _, c := range q {
			b.send(c, now)
		}
	}
	if len(b.leaseWaiters) > 0 {
		b.pollLeaseWaiters(now)
	}
}

func (b *backendRuntime) busy() bool {
	return len(b.inflight) > 0 || len(b.retries) > 0 || len(b.queued) > 0 || len(b.leaseWaiters) > 0
}

// remoteLimit is what a global or hybrid limit adds to its limitRuntime.
type remoteLimit struct {
	mode   config.Mode
	policy config.FailurePolicy
	// slots names the shared-data slots holding negative-cache and lease
	// state ("sluice.dl.<name>.<i>"), bounded like the limiter's tables.
	slots *store.SlotNames
	// fallback tables for failure_policy local, created on first use.
	fallbackDef       *limiter.Table
	fallbackOverrides map[string]*limiter.Table
}

// remoteSlots bounds the shared-data keys of one remote limit; keys that
// collide share a slot and the later one evicts the earlier one's lease,
// which can only under-admit.
const remoteSlots = 4096

func newRemoteLimit(cfg *config.Limit, ratePath string) (*remoteLimit, error) {
	check := func(r config.Rate, path string) error {
		lim := r.Limiter(cfg.Algorithm)
		var err error
		if cfg.Mode == config.ModeHybrid {
			_, err = backend.Lease(lim, "k", 1, leaseAhead)
		} else {
			_, err = backend.Decide(lim, "k", 1)
		}
		if err != nil {
			return fmt.Errorf("%s: mode %s: %v", path, cfg.Mode, err)
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
	return &remoteLimit{mode: cfg.Mode, policy: cfg.FailurePolicy, slots: store.NewSlotNames("sluice.dl."+cfg.Name+".", remoteSlots)}, nil
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
	n := int64(l.cfg.Instances)
	if n < 1 {
		n = 1
	}
	rate.Limit /= n
	if rate.Limit < 1 {
		rate.Limit = 1
	}
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

// redisKey is the key of a limit's bucket in Redis, the one place every
// global, hybrid, charge and shadow call gets its key from.
func redisKey(name, key string) string { return backend.Key(name, key) }

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

// remoteReq is one global or hybrid limit applying to a request.
type remoteReq struct {
	l             *limitRuntime
	key           string // the limit key, as the local tables see it
	overrideValue string
	rkey          string // the Redis key
	fp            uint64
	slot          string
	cost          int64
	lim           limiter.Limit
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

func (h *httpContext) resetRemote() {
	if b := h.plugin.backend; b != nil {
		for _, c := range h.calls {
			if !c.finished {
				b.cancel(c)
			}
		}
	}
	h.calls = h.calls[:0]
	h.remote = h.remote[:0]
	h.localReqs = h.localReqs[:0]
	h.localLim = h.localLim[:0]
	h.pending = 0
}

// startRemote decides a request with remote limits. The local limits are
// in p.reqs; they are copied because the request may outlive this call.
func (h *httpContext) startRemote(now time.Time) verdict {
	p := h.plugin
	b := p.backend
	ns := now.UnixNano()
	h.localReqs = append(h.localReqs[:0], p.reqs...)
	h.localLim = append(h.localLim[:0], p.reqLim...)
	// The local keys view the worker's key arena, which the next request's
	// evaluation overwrites while this one waits for Redis: give them
	// bytes of this stream's own.
	h.localKeys = h.localKeys[:0]
	for i := range h.localReqs {
		h.localKeys = append(h.localKeys, h.localReqs[i].Key...)
	}
	at := 0
	for i := range h.localReqs {
		n := len(h.localReqs[i].Key)
		h.localReqs[i].Key = arenaString(h.localKeys[at : at+n])
		at += n
	}
	for i, r := range h.localReqs {
		res, err := r.Table.Peek(r.Key, ns, r.Cost)
		if err != nil {
			h.plugin.log.Warnf("sluice: limiter store: %v", err)
			continue
		}
		if !res.Allowed {
			return h.onLimited(h.localLim[i], res, now)
		}
	}
	for i := range h.remote {
		rr := &h.remote[i]
		if rr.l.remote.mode == config.ModeHybrid {
			continue // tryLease checks its negative cache, counting the demand
		}
		rec := b.loadSlot(rr)
		if rec.deniedUntil > ns {
			b.metrics.negativeHits.Increment(1)
			return h.onLimited(rr.l, rr.cachedDenial(ns, rec.deniedUntil), now)
		}
	}
	h.starting = true
	h.pending = len(h.remote)
	// Hybrid limits first: they decide from shared data, so one denying
	// stops the request before any global call is made.
	denied := false
	for _, hybrid := range [2]bool{true, false} {
		for i := range h.remote {
			rr := &h.remote[i]
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
	h.starting = false
	if h.pending == 0 {
		return h.finishRemote(now)
	}
	if h.anyDenied() {
		// Decided without waiting for the calls still out: their replies
		// still reach the breaker, but must not decide this stream again.
		v := h.finishRemote(now)
		h.gen++
		delete(b.leaseWaiters, h.id)
		return v
	}
	return verdictPending
}

func (h *httpContext) anyDenied() bool {
	for i := range h.remote {
		if s := h.remote[i].state; s == remoteDenied || s == remoteFailDeny {
			return true
		}
	}
	return false
}

func (rr *remoteReq) cachedDenial(ns, until int64) limiter.Result {
	return limiter.Result{Limit: rr.lim.Rate, RetryAfter: time.Duration(until - ns), Reason: limiter.ReasonLimited}
}

func (h *httpContext) startGlobal(i int, now time.Time) {
	p := h.plugin
	b := p.backend
	rr := &h.remote[i]
	cmd, err := backend.Decide(rr.lim, rr.rkey, rr.cost)
	if err != nil {
		h.resolve(i, now, backend.Reply{}, err)
		return
	}
	gen := h.gen
	c := b.newCall(cmd, now, func(at time.Time, r backend.Reply, err error) {
		if h.gen != gen {
			return // the stream ended or was re-evaluated
		}
		h.resolve(i, at, r, err)
	})
	h.calls = append(h.calls, c)
	b.send(c, now)
}

// resolve records the outcome of remote limit i and, once every remote
// limit of the request is known, finishes the request.
func (h *httpContext) resolve(i int, now time.Time, r backend.Reply, err error) {
	rr := &h.remote[i]
	if rr.state != remotePending && rr.state != remoteWaitLease {
		return
	}
	b := h.plugin.backend
	if err != nil {
		h.applyFailure(rr, err)
	} else {
		rr.res = r.Result(rr.lim.Rate)
		rr.res.Period = rr.lim.Period
		if rr.res.Allowed {
			rr.state = remoteAllowed
		} else {
			rr.state = remoteDenied
			if rr.res.RetryAfter > 0 {
				b.setDenied(rr, now.UnixNano()+int64(rr.res.RetryAfter))
			}
		}
	}
	h.pending--
	if h.pending > 0 || h.starting {
		return
	}
	h.resumeAfterRemote(now)
}

func (h *httpContext) applyFailure(rr *remoteReq, err error) {
	m := &h.plugin.backend.metrics
	switch rr.policy {
	case config.FailDeny:
		rr.state = remoteFailDeny
		m.fallbackDeny.Increment(1)
	case config.FailLocal:
		rr.state = remoteFailLocal
		m.fallbackLocal.Increment(1)
	default:
		rr.state = remoteFailAllow
		m.fallbackAllow.Increment(1)
	}
	if !errors.Is(err, errBreakerOpen) {
		h.plugin.log.Debugf("sluice: limit %s: backend failed (%v), failure_policy %s", rr.l.cfg.Name, err, rr.policy)
	}
}

// resumeAfterRemote finishes a paused request from a callback of another
// context.
func (h *httpContext) resumeAfterRemote(now time.Time) {
	if h.done {
		return
	}
	if err := h.plugin.host.Stream.Select(h.id); err != nil {
		h.refund()
		return
	}
	switch h.finishRemote(now) {
	case verdictAllow:
		if !h.admitAfterLimits(now) {
			return
		}
		if err := h.plugin.host.Stream.Resume(); err != nil {
			h.plugin.log.Warnf("sluice: resuming a request: %v", err)
		}
	}
}

// finishRemote decides once every remote limit is known.
func (h *httpContext) finishRemote(now time.Time) verdict {
	p := h.plugin
	for i := range h.remote {
		rr := &h.remote[i]
		switch rr.state {
		case remoteDenied:
			h.refund()
			return h.onLimited(rr.l, rr.res, now)
		case remoteFailDeny:
			h.refund()
			return h.rejectBackendFailure(rr)
		}
	}
	reqs := h.localReqs
	lims := h.localLim
	for i := range h.remote {
		rr := &h.remote[i]
		if rr.state != remoteFailLocal {
			continue
		}
		t, err := h.localFallback(rr)
		if err != nil {
			h.plugin.log.Warnf("sluice: limit %s fallback: %v", rr.l.cfg.Name, err)
			continue
		}
		reqs = append(reqs, limiter.Request{Table: t, Key: rr.key, Cost: rr.cost})
		lims = append(lims, rr.l)
	}
	h.localReqs, h.localLim = reqs, lims
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
			for i, res := range results {
				if !res.Allowed {
					return h.onLimited(lims[i], res, now)
				}
			}
			return h.onLimited(lims[0], results[0], now)
		}
	}
	best, bestLim := limiter.Result{}, (*limitRuntime)(nil)
	consider := func(l *limitRuntime, res limiter.Result) {
		l.metrics.allowed.Increment(1)
		if bestLim == nil || res.Remaining < best.Remaining || (res.Remaining == best.Remaining && res.Limit < best.Limit) {
			best, bestLim = res, l
		}
	}
	for i, res := range results {
		consider(lims[i], res)
	}
	for i := range h.remote {
		rr := &h.remote[i]
		switch rr.state {
		case remoteAllowed:
			consider(rr.l, rr.res)
		case remoteFailAllow:
			rr.l.metrics.allowed.Increment(1)
		}
		rr.taken = 0 // kept: the request is admitted
	}
	if bestLim != nil {
		h.quota = quotaOf(bestLim, best)
		h.hasQuota = true
	}
	return verdictAllow
}

func (h *httpContext) rejectBackendFailure(rr *remoteReq) verdict {
	p := h.plugin
	status := p.cfg.Backend.FailureStatus
	rr.l.metrics.limited.Increment(1)
	h.logRejection("backend_unavailable", rr.l, limiter.Result{Limit: rr.lim.Rate})
	ct, body := rateLimitedBody(p.cfg.Response.Body, rr.l.cfg.Name, status, 0)
	h.sendLocal(status, nil, ct, body)
	return verdictReject
}

// refund returns lease tokens held by a request that will not pass.
func (h *httpContext) refund() {
	b := h.plugin.backend
	if b == nil {
		return
	}
	for i := range h.remote {
		rr := &h.remote[i]
		if rr.taken > 0 {
			b.returnTokens(rr, rr.taken)
			rr.taken = 0
		}
	}
}

// startShadowRemote decides a shadow global or hybrid limit in the
// background: the reply only counts.
func (h *httpContext) startShadowRemote(l *limitRuntime, lim limiter.Limit, rkey string, cost int64, now time.Time) {
	b := h.plugin.backend
	cmd, err := backend.Decide(lim, rkey, cost)
	if err != nil {
		return
	}
	b.enqueue(b.newCall(cmd, now, func(_ time.Time, r backend.Reply, err error) {
		switch {
		case err != nil:
		case r.Allowed():
			l.metrics.allowed.Increment(1)
		default:
			l.metrics.shadowLimited.Increment(1)
		}
	}))
}

type backendMetrics struct {
	calls, leaseCalls, negativeHits, breakerRejected host.Counter
	// leaseExpired counts leased tokens voided unused: the under-admission
	// hybrid mode pays.
	leaseExpired                               host.Counter
	breakerOpens, breakerCloses                host.Counter
	fallbackAllow, fallbackDeny, fallbackLocal host.Counter
	errors                                     [8]host.Counter
	latency                                    host.Histogram
	breakerState                               host.Gauge
}

const metricPrefixBackend = "sluice.backend."

func defineBackendMetrics(hm host.Metrics) backendMetrics {
	p := metricPrefixBackend
	m := backendMetrics{
		calls:           hm.Counter(p + "calls"),
		leaseCalls:      hm.Counter(p + "lease_calls"),
		leaseExpired:    hm.Counter(p + "lease_expired_tokens"),
		negativeHits:    hm.Counter(p + "negative_cache_hits"),
		breakerRejected: hm.Counter(p + "breaker.rejected"),
		breakerOpens:    hm.Counter(p + "breaker.opens"),
		breakerCloses:   hm.Counter(p + "breaker.closes"),
		fallbackAllow:   hm.Counter(p + "fallback.allow"),
		fallbackDeny:    hm.Counter(p + "fallback.deny"),
		fallbackLocal:   hm.Counter(p + "fallback.local"),
		latency:         hm.Histogram(p + "latency_ms"),
		breakerState:    hm.Gauge(p + "breaker.state"),
	}
	for k := backend.KindTimeout; k <= backend.LastKind; k++ {
		m.errors[k] = hm.Counter(p + "errors." + k.String())
	}
	m.errors[0] = hm.Counter(p + "errors.other")
	return m
}

func (m *backendMetrics) errorOf(k backend.Kind) host.Counter {
	if int(k) < len(m.errors) && k <= backend.LastKind {
		return m.errors[k]
	}
	return m.errors[0]
}

// setBreakerState records 0 closed, 1 open, 2 half-open (see
// breakerMetrics.setState for why it goes through the histogram type).
func (m *backendMetrics) setBreakerState(s breaker.State) {
	m.breakerState.Set(uint64(s))
}
