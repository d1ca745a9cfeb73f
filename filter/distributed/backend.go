package distributed

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/limiter/store"
)

// TickPeriod is how often the plugin's fast tick runs while something
// waits: paused requests are re-examined, retries and queued calls sent
// and lost replies timed out. Every wait's budget allows one period of
// timer granularity.
const TickPeriod = 5 * time.Millisecond

// ErrBreakerOpen is the failure reported while the backend breaker rejects.
var ErrBreakerOpen = errors.New("backend breaker open")

// Backoff is the wait before retry number attempt+1: 10ms, 20ms, 40ms …
// capped at 100ms, short because the request is waiting.
func Backoff(attempt int) time.Duration {
	d := 10 * time.Millisecond << uint(attempt)
	if d > 100*time.Millisecond || d <= 0 {
		d = 100 * time.Millisecond
	}
	return d
}

// CallBudget is the most a request waits for one remote decision:
// timeout × (retries + 1) plus the backoffs between them, plus per attempt
// the watchdog's slack and one tick of timer granularity.
func CallBudget(cfg *config.Backend) time.Duration {
	d := (cfg.Timeout + host.WatchdogSlack + TickPeriod) * time.Duration(cfg.Retries+1)
	for a := 0; a < cfg.Retries; a++ {
		d += Backoff(a)
	}
	return d
}

// maxBackendThreshold keeps 2 × threshold within the breaker's counters
// (1<<20).
const maxBackendThreshold = 1 << 18

type Backend struct {
	cfg      *config.Backend
	endpoint backend.Endpoint
	caller   host.Caller
	store    store.Store
	log      host.Log
	clock    host.Clock
	breaker  *breaker.Breaker
	// Metrics are the backend's metrics, counted by its users too.
	Metrics Metrics
	// Budget is the most a request waits for one remote decision.
	Budget time.Duration
	// random is the source of the jitter of retries and of the breaker's
	// open timeouts (math/rand/v2; tests seed their own).
	random func() uint64
	// wake asks for the tick: something waits for it.
	wake func()
	// onLease runs after a lease reply was written, for the streams
	// waiting for one.
	onLease func(now time.Time)

	inflight map[*Call]struct{}
	// retries wait for their backoff; queued wait for the tick so that they
	// are sent from the root context, whose calls outlive any stream.
	retries []*Call
	queued  []*Call
}

// New is the backend of cfg over hc. wake asks the host for the tick,
// which must then call Tick; onLease runs whenever a lease reply has been
// written to shared data, so that streams waiting for a lease try again.
func New(hc *host.Host, cfg *config.Backend, wake func(), onLease func(now time.Time)) (*Backend, error) {
	b := &Backend{
		cfg: cfg,
		endpoint: backend.Endpoint{
			Authority:  cfg.Authority,
			PathPrefix: cfg.PathPrefix,
			BasicAuth:  cfg.BasicAuth,
			Token:      cfg.Token,
		},
		caller:   hc.Caller,
		store:    hc.Store,
		log:      hc.Log,
		clock:    hc.Clock,
		Metrics:  defineMetrics(hc.Metrics),
		Budget:   CallBudget(cfg),
		random:   rand.Uint64,
		wake:     wake,
		onLease:  onLease,
		inflight: map[*Call]struct{}{},
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
		FailureThreshold:   uint32(threshold),
		FailureRatePercent: 50,
		Window:             breaker.Window{Type: breaker.WindowTime, Duration: window, MinimumCalls: uint32(2 * threshold)},
		SuccessThreshold:   uint32(min(cfg.Breaker.HalfOpenMaxRequests, maxBackendThreshold)),
		OpenTimeout:        cfg.Breaker.OpenTimeout,
		// While probes keep failing, each open lasts longer; every open is
		// jittered so that Envoys that opened together probe apart.
		OpenTimeoutMultiplier: cfg.Breaker.OpenTimeoutMultiplier,
		MaxOpenTimeout:        cfg.Breaker.OpenTimeoutMax,
		JitterPercent:         uint8(cfg.Breaker.JitterPercent),
		Random:                func() uint64 { return b.random() },
		HalfOpenMaxRequests:   uint32(min(cfg.Breaker.HalfOpenMaxRequests, maxBackendThreshold)),
		// A probe whose reply never comes must not wedge half-open for
		// longer than one request's budget.
		ProbeTimeout: CallBudget(cfg) + time.Second,
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

func (b *Backend) recordTransition(tr breaker.Transition) {
	switch tr {
	case breaker.Opened, breaker.Reopened:
		b.Metrics.breakerOpens.Increment(1)
		b.Metrics.setBreakerState(breaker.Open)
		b.log.Warn(`{"sluice":"backend_breaker_open"}`)
	case breaker.Recovered:
		b.Metrics.breakerCloses.Increment(1)
		b.Metrics.setBreakerState(breaker.Closed)
		b.log.Info(`{"sluice":"backend_breaker_closed"}`)
	case breaker.HalfOpened:
		b.Metrics.setBreakerState(breaker.HalfOpen)
	}
}

// Call is one script invocation with its retries.
type Call struct {
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

// NewCall is a call of cmd within the budget from now; onDone runs once,
// with the reply or the error that ended it, unless it is cancelled.
func (b *Backend) NewCall(cmd backend.Command, now time.Time, onDone func(time.Time, backend.Reply, error)) *Call {
	return &Call{cmd: cmd, deadline: now.Add(b.Budget), onDone: onDone}
}

// Cancel forgets a call whose stream ended. Envoy runs every
// proxy_http_call on the root context, so the reply still comes, but the
// SDK drops it because the calling stream is gone; the call is therefore
// neither retried nor reported to the breaker (a client going away says
// nothing about Redis), and an unreported probe frees its slot by
// ProbeTimeout.
func (b *Backend) Cancel(c *Call) {
	delete(b.inflight, c)
	c.finished = true
}

// Enqueue sends c from the next tick, in the root context.
func (b *Backend) Enqueue(c *Call) {
	b.queued = append(b.queued, c)
	b.wake()
}

func (b *Backend) finish(c *Call, now time.Time, r backend.Reply, err error) {
	if c.finished {
		return
	}
	c.finished = true
	c.onDone(now, r, err)
}

// Send dispatches c now from the current context.
func (b *Backend) Send(c *Call, now time.Time) {
	if c.finished {
		return // cancelled while waiting for a retry
	}
	t, d, err := b.breaker.Check(now)
	if err != nil {
		b.log.Warnf("sluice: backend breaker: %v", err)
	}
	b.recordTransition(d.Transition)
	if !d.Allowed {
		b.Metrics.breakerRejected.Increment(1)
		b.finish(c, now, backend.Reply{}, ErrBreakerOpen)
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
	b.Metrics.calls.Increment(1)
	if c.lease {
		b.Metrics.leaseCalls.Increment(1)
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
	b.wake()
}

func (b *Backend) report(c *Call, now time.Time, failure bool) {
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

func (b *Backend) onReply(c *Call, seq uint32, status int, body []byte, err error) {
	if _, live := b.inflight[c]; !live || seq != c.seq || c.finished {
		return // answered after the watchdog gave up on it
	}
	delete(b.inflight, c)
	now := b.clock()
	lat := now.Sub(c.sentAt)
	if lat < 0 {
		lat = 0
	}
	b.Metrics.latency.Record(uint64(lat / time.Millisecond))
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
		b.Send(c, now)
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
		b.Metrics.errorOf(backend.KindNoScript).Increment(1)
		b.report(c, now, false)
		c.reloads++
		c.loading = true
		b.Send(c, now)
		return
	}
	if err != nil {
		b.failed(c, now, err)
		return
	}
	if c.lease && reply.Granted > c.cmd.Want() {
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
func (b *Backend) failed(c *Call, now time.Time, err error) {
	kind := backend.KindOf(err)
	b.Metrics.errorOf(kind).Increment(1)
	b.report(c, now, kind.CountsAgainstBreaker())
	if kind == backend.KindRequest {
		// Debug only: whoever sends such requests must not fill the log.
		b.log.Debugf("sluice: backend refused a call: %v", err)
	}
	if kind.Retryable() && c.attempt < b.cfg.Retries {
		// Jitter only shortens the wait, so CallBudget still bounds it.
		wait := breaker.Jitter(Backoff(c.attempt), uint8(b.cfg.Breaker.JitterPercent), b.random())
		if !now.Add(wait).Add(b.cfg.Timeout).After(c.deadline) {
			c.attempt++
			c.retryAt = now.Add(wait)
			b.retries = append(b.retries, c)
			b.wake()
			return
		}
	}
	b.finish(c, now, backend.Reply{}, err)
}

// Tick sends due retries and queued calls and times out lost replies.
func (b *Backend) Tick(now time.Time) {
	for c := range b.inflight {
		if now.Sub(c.sentAt) >= b.cfg.Timeout+host.WatchdogSlack {
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
			b.Send(c, now)
		}
	}
	if len(b.queued) > 0 {
		q := b.queued
		b.queued = nil
		for _, c := range q {
			b.Send(c, now)
		}
	}
}

// Busy reports whether calls are out or waiting: the tick must go on.
func (b *Backend) Busy() bool {
	return len(b.inflight) > 0 || len(b.retries) > 0 || len(b.queued) > 0
}

// Metrics are the backend's metrics (sluice.backend.*).
type Metrics struct {
	calls, leaseCalls, NegativeHits, breakerRejected host.Counter
	// leaseExpired counts leased tokens voided unused: the under-admission
	// hybrid mode pays.
	leaseExpired                               host.Counter
	breakerOpens, breakerCloses                host.Counter
	FallbackAllow, FallbackDeny, FallbackLocal host.Counter
	errors                                     [8]host.Counter
	latency                                    host.Histogram
	breakerState                               host.Gauge
}

const metricPrefix = "sluice.backend."

func defineMetrics(hm host.Metrics) Metrics {
	p := metricPrefix
	m := Metrics{
		calls:           hm.Counter(p + "calls"),
		leaseCalls:      hm.Counter(p + "lease_calls"),
		leaseExpired:    hm.Counter(p + "lease_expired_tokens"),
		NegativeHits:    hm.Counter(p + "negative_cache_hits"),
		breakerRejected: hm.Counter(p + "breaker.rejected"),
		breakerOpens:    hm.Counter(p + "breaker.opens"),
		breakerCloses:   hm.Counter(p + "breaker.closes"),
		FallbackAllow:   hm.Counter(p + "fallback.allow"),
		FallbackDeny:    hm.Counter(p + "fallback.deny"),
		FallbackLocal:   hm.Counter(p + "fallback.local"),
		latency:         hm.Histogram(p + "latency_ms"),
		breakerState:    hm.Gauge(p + "breaker.state"),
	}
	for k := backend.KindTimeout; k <= backend.LastKind; k++ {
		m.errors[k] = hm.Counter(p + "errors." + k.String())
	}
	m.errors[0] = hm.Counter(p + "errors.other")
	return m
}

func (m *Metrics) errorOf(k backend.Kind) host.Counter {
	if int(k) < len(m.errors) && k <= backend.LastKind {
		return m.errors[k]
	}
	return m.errors[0]
}

// setBreakerState records 0 closed, 1 open, 2 half-open.
func (m *Metrics) setBreakerState(s breaker.State) {
	m.breakerState.Set(uint64(s))
}
