package engine

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/request"
	"github.com/sluice-proxy/sluice/limiter/store"
)

// breakerRuntime is one configured breaker; it keeps one breaker.Breaker
// per cluster (or route) it has seen, all sharing the same state machine.
type breakerRuntime struct {
	cfg       *config.Breaker
	machine   *breaker.Machine
	store     store.Store
	log       host.Log
	instances map[string]*breaker.Breaker
	// first indexes the first instances by scope in a slice, which a
	// request scans by comparing names rather than hashing its scope for
	// the map; instances stays the registry of them all.
	first   []indexedInstance
	metrics breakerMetrics
	hm      host.Metrics
	// states are the per-instance state gauges and names (stateGauge).
	states map[*breaker.Breaker]breakerInstance
	// slowIsFailure makes a slow call count toward the consecutive-failure
	// threshold when no failure rate is configured to weigh it against.
	slowIsFailure bool
}

// indexedInstance is one instance of a breaker and its scope.
type indexedInstance struct {
	scope string
	br    *breaker.Breaker
}

// indexedBreakerInstances is how many instances first holds: a breaker
// per cluster usually guards a handful of clusters.
const indexedBreakerInstances = 8

// maxBreakerInstances bounds the shared-data keys one breaker can create;
// cluster and route names come from configuration, so this is only hit by
// a misconfiguration, and then the overflow shares one instance.
const maxBreakerInstances = 1024

func newBreakerRuntime(hc *host.Host, cfg *config.Breaker, index int) (*breakerRuntime, error) {
	b := &breakerRuntime{cfg: cfg, store: hc.Store, log: hc.Log, instances: map[string]*breaker.Breaker{}, metrics: defineBreakerMetrics(hc.Metrics, cfg.Name),
		hm: hc.Metrics, states: map[*breaker.Breaker]breakerInstance{}}
	// Without a failure rate, a slow call counts as a failure of the
	// consecutive trip; with one, the core measures its own rate.
	b.slowIsFailure = cfg.FailureRate == nil && cfg.SlowCall != nil
	set := cfg.Settings()
	m, err := breaker.NewMachine(set)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", config.IndexPath("breakers", index), err)
	}
	b.machine = m
	if m.Mode() == breaker.ModeForcedOpen {
		b.metrics.setState(breaker.Open) // forced open makes no transition to record
	}
	return b, nil
}

func (b *breakerRuntime) instance(scope string) *breaker.Breaker {
	for i := range b.first {
		if b.first[i].scope == scope {
			return b.first[i].br
		}
	}
	if br, ok := b.instances[scope]; ok {
		return br
	}
	if len(b.instances) >= maxBreakerInstances {
		scope = "overflow"
		if br, ok := b.instances[scope]; ok {
			return br
		}
	}
	// Not Init: a missing record reads as the fresh closed breaker Init
	// would write, and a healthy breaker's checks write nothing, so while
	// it stays healthy its record stays missing and each check's read
	// returns no data. A read that returns data costs the host a call
	// into the guest's allocator, about as much again as the read.
	br := breaker.NewBreaker(b.machine, b.store, "sluice.cb."+b.cfg.Name+"."+scope)
	// The map keeps scope past this callback, and scope views host memory
	// (a property) that is only valid until the callback returns.
	scope = strings.Clone(scope)
	b.instances[scope] = br
	b.states[br] = breakerInstance{name: scope, state: b.stateGauge(b.hm, scope, br)}
	if len(b.first) < indexedBreakerInstances {
		b.first = append(b.first, indexedInstance{scope, br})
	}
	return br
}

// recordTransition keeps the shared and the instance's state gauges and
// the counters in step.
func (b *breakerRuntime) recordTransition(br *breaker.Breaker, tr breaker.Transition) {
	var s, from breaker.State
	switch tr {
	case breaker.Opened:
		b.metrics.opens.Increment(1)
		from, s = breaker.Closed, breaker.Open
	case breaker.Reopened:
		b.metrics.opens.Increment(1)
		from, s = breaker.HalfOpen, breaker.Open
	case breaker.Recovered:
		b.metrics.closes.Increment(1)
		from, s = breaker.HalfOpen, breaker.Closed
	case breaker.HalfOpened:
		from, s = breaker.Open, breaker.HalfOpen
	default:
		return
	}
	b.metrics.setState(s)
	in := b.states[br]
	if in.state != nil {
		in.state.Set(uint64(s))
	}
	b.logTransition(in.name, from, s, br.LastCause())
}

// breakerHold is a request's part with the breakers: the tickets of the
// breakers that admitted it, and what its response tells them.
type breakerHold struct {
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
}

type breakerTicket struct {
	b      *breakerRuntime
	br     *breaker.Breaker
	ticket breaker.Ticket
}

// check admits request info through every breaker of p guarding it, or
// rejects it. Tickets are kept for the outcome at stream end. With
// preview (an admin request that failed the checks) the breakers are
// only previewed (previewBreaker).
func (bh *breakerHold) check(p *Plugin, info *request.Info, tr *Trace, preview bool, now time.Time) outcome {
	var match request.View
	matched := false
	for _, b := range p.breakers {
		if !matched {
			match = info.View(p.matchNeeds)
			matched = true
		}
		if !request.Matches(&b.cfg.Match, match) {
			continue
		}
		scope := breakerScope(b, info)
		if preview {
			if o := previewBreaker(p, b, scope, now); o.kind != outAllow {
				bh.releaseTickets()
				return o
			}
			continue
		}
		br := b.instance(scope)
		t, d, err := br.Check(now)
		if err != nil {
			p.log.Warnf("sluice: breaker %s: %v", b.cfg.Name, err)
		}
		b.recordTransition(br, d.Transition)
		if tr != nil {
			tr.Breakers = append(tr.Breakers, BreakerTrace{Name: b.cfg.Name, Instance: scope, Allowed: d.Allowed})
		}
		if !d.Allowed {
			b.metrics.rejected.Increment(1)
			bh.releaseTickets()
			return rejectWith(p.circuitOpen(b, scope, d))
		}
		if t.Tracked() {
			bh.tickets = append(bh.tickets, breakerTicket{b: b, br: br, ticket: t})
		}
	}
	return allow
}

// breakerScope is the instance of b request info counts in: its
// cluster, or its route with per route.
func breakerScope(b *breakerRuntime, info *request.Info) string {
	if b.cfg.Per == config.PerRoute {
		return info.Route()
	}
	return info.Cluster()
}

// previewBreaker lets a request that never reaches the upstream (an admin
// request that failed the checks) through breaker b's instance scope
// without a ticket: it must neither take a half-open breaker's probe
// slot (which it would hold, unreported, until the probe timeout,
// keeping the breaker from closing: issue 23) nor report an outcome.
// Where the breaker would refuse a request (open, or half-open with its
// probes out) it is refused as the breaker refuses.
func previewBreaker(p *Plugin, b *breakerRuntime, scope string, now time.Time) outcome {
	d, err := b.instance(scope).Preview(now)
	if err != nil {
		p.log.Warnf("sluice: breaker %s: %v", b.cfg.Name, err)
	}
	if !d.Allowed {
		b.metrics.rejected.Increment(1)
		return rejectWith(p.circuitOpen(b, scope, d))
	}
	return allow
}

// releaseTickets drops tickets of breakers passed before another breaker
// rejected; their requests never reach an upstream, so they have no
// outcome. A probe slot held this way is freed by the probe timeout.
func (bh *breakerHold) releaseTickets() { bh.tickets = bh.tickets[:0] }

// circuitOpen is the answer to a request breaker b rejects.
func (p *Plugin) circuitOpen(b *breakerRuntime, scope string, d breaker.Decision) *reply {
	var headers [][2]string
	if p.cfg.Response.Headers.Has(config.HeadersRetryAfter) {
		headers = [][2]string{{"retry-after", strconv.FormatInt(retryAfterSeconds(d.RetryAfter), 10)}}
	}
	ct, body := circuitOpenBody(p.cfg.Response.Body, scope, b.cfg.Status, d.RetryAfter)
	b2 := make([]byte, 0, 128)
	b2 = append(b2, `{"sluice":"circuit_open","breaker":`...)
	b2 = appendJSONString(b2, b.cfg.Name)
	b2 = append(b2, `,"upstream":`...)
	b2 = appendJSONString(b2, scope)
	b2 = append(b2, `,"retry_after":`...)
	b2 = strconv.AppendInt(b2, retryAfterSeconds(d.RetryAfter), 10)
	p.log.Info(string(append(b2, '}')))
	return &reply{kind: config.ReplyCircuitOpen, values: replyValues{upstream: scope, retryAfter: d.RetryAfter},
		status: b.cfg.Status, headers: headers, contentType: ct, body: body, by: b.cfg.Name}
}

// report reports the outcome of an admitted request (info, started at
// start) to the breakers that let it through; the caller leaves out a
// request the filter answered itself.
func (bh *breakerHold) report(info *request.Info, start time.Time, log host.Log) {
	if len(bh.tickets) == 0 {
		return
	}
	if !bh.gotResponse {
		// No response reached the filter (the client went away first):
		// nothing is known about the upstream. A probe's slot is freed by
		// the breaker's probe timeout.
		return
	}
	now, code := bh.responded, bh.status
	// A success from the upstream is the common case and needs no property
	// read; the details are fetched only when they can change the verdict:
	// a status that could be a failure or a router reply (timeouts and
	// resets come as 5xx), or a half-open probe, whose outcome closes the
	// breaker and so must come from the upstream.
	details := "via_upstream"
	for _, t := range bh.tickets {
		if code >= 500 || code == 0 || t.ticket.Probe() || t.b.cfg.IsFailureStatus(code) {
			details = info.Property(propCodeDetails)
			break
		}
	}
	for _, t := range bh.tickets {
		failure, known := t.b.classify(code, details)
		if !known {
			continue
		}
		var dur time.Duration // unread for a quiet success, which Report ignores
		if !bh.responded.IsZero() {
			dur = bh.responded.Sub(start)
		}
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
			log.Warnf("sluice: breaker %s: %v", t.b.cfg.Name, err)
		}
		t.b.recordTransition(t.br, tr)
	}
}

// outcomeNeedsTime reports whether reporting the response's status to
// the breakers can use the time it arrived. A quiet ticket's fast success
// is ignored by Report, and a status that is below 500 and no failure
// status is a success without asking for details (reportBreakers); only
// then is the clock left unread, so a request reads it once, at its start.
func (bh *breakerHold) outcomeNeedsTime() bool {
	code := bh.status
	for _, t := range bh.tickets {
		if !t.ticket.Quiet() || t.b.cfg.SlowCall != nil || code >= 500 || code == 0 || t.b.cfg.IsFailureStatus(code) {
			return true
		}
	}
	return false
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

// breakerInstance is one cluster or route a breaker guards.
type breakerInstance struct {
	name  string
	state host.Gauge
}

// logTransition writes one JSON line per committed transition: the worker
// whose compare-and-swap committed it is the only one that sees it. WARN
// when the breaker opens, INFO otherwise.
func (b *breakerRuntime) logTransition(instance string, from, to breaker.State, c breaker.Cause) {
	l := make([]byte, 0, 192)
	l = append(l, `{"sluice":"breaker_transition","breaker":`...)
	l = appendJSONString(l, b.cfg.Name)
	l = append(l, `,"instance":`...)
	l = appendJSONString(l, instance)
	l = append(l, `,"from":`...)
	l = appendJSONString(l, from.String())
	l = append(l, `,"to":`...)
	l = appendJSONString(l, to.String())
	l = append(l, `,"reason":`...)
	l = appendJSONString(l, c.Reason.String())
	l = append(l, `,"failures":`...)
	l = strconv.AppendUint(l, uint64(c.Failures), 10)
	l = append(l, `,"calls":`...)
	l = strconv.AppendUint(l, uint64(c.Calls), 10)
	l = append(l, '}')
	if to == breaker.Open {
		b.log.Warn(string(l))
	} else {
		b.log.Info(string(l))
	}
}

// stateGauge is the per-instance gauge sluice.breaker.<name>.<instance>.state,
// defined when the instance is first seen: instances are the clusters or
// routes the breaker guards, bounded by maxBreakerInstances. It starts at
// the state br holds (Peek), which is open for a breaker forced open:
// that breaker rejects every request without ever making a transition,
// and the SluiceBreakerOpen alert reads this gauge.
func (b *breakerRuntime) stateGauge(hm host.Metrics, scope string, br *breaker.Breaker) host.Gauge {
	g := hm.Gauge(metricPrefixBreaker + b.cfg.Name + "." + scope + ".state")
	s, _ := br.Peek() // closed when unreadable, as a fresh instance is
	g.Set(uint64(s))
	return g
}
