package engine

import (
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/limiter"
	"time"
)

// What a stage of the request path decided. The stages (the external
// lookup, the limits, the remote decisions, the breakers, the concurrency
// limits) each return one; only pipeline.go turns it into a reply or a
// wait (Stream.settle), so no stage answers, parks or resumes a request.

// outcomeKind is what a stage decided for the request.
type outcomeKind uint8

const (
	// outAllow: the stage lets the request go on.
	outAllow outcomeKind = iota
	// outDeny: a rate limit denied it; the limit's on_limit says whether
	// it waits (delay) or is answered.
	outDeny
	// outReject: the stage answers it with reply.
	outReject
	// outWait: the request waits for wait (a lookup, a lease, a Redis
	// decision).
	outWait
)

// outcome is a stage's decision. The zero outcome allows.
type outcome struct {
	kind outcomeKind
	wait waitKind
	// reply is the answer of an outReject. The refusal of an outDeny is
	// the plugin's denial, which the pipeline reads before another stage
	// runs: an outcome stays 16 bytes, which every stage returns by value
	// (and Go on wasm copies anything larger with a bulk memory call).
	reply *reply
}

// denial is a rate limit's refusal: the limit, its result, and the rate
// that decided (the limit's own, an override's, or a service's answer),
// which the access log shows as the rule.
type denial struct {
	limit *limitRuntime
	res   limiter.Result
	lim   limiter.Limit
	// blocked is a refusal of a value an override blocks: no rate decided.
	blocked bool
}

// rule is the denial's rule as the access log shows it.
func (d *denial) rule() string {
	if d.blocked {
		return "block"
	}
	return d.limit.ruleOf(d.lim)
}

// allow lets the request go on.
var allow = outcome{}

// deny is a denial by limit l with result res at the rate lim, kept as
// the plugin's one denial.
func (p *Plugin) deny(l *limitRuntime, res limiter.Result, lim limiter.Limit) outcome {
	p.denial = denial{limit: l, res: res, lim: lim}
	return outcome{kind: outDeny}
}

// rejectWith answers the request with r.
func rejectWith(r *reply) outcome { return outcome{kind: outReject, reply: r} }

// waitFor pauses the request until kind is over.
func waitFor(kind waitKind) outcome { return outcome{kind: outWait, wait: kind} }

// reply is a local reply a stage decided on: its kind, the values its
// template may insert, the status, headers and built-in body.
type reply struct {
	kind        config.ReplyKind
	values      replyValues
	status      int
	headers     [][2]string
	contentType string
	body        []byte
	// event, by and rule are what the access log learns (accesslog.go):
	// the outcome (the kind's name when empty), the limit, breaker or
	// bulkhead that decided (values.limit when empty), and its rule.
	event, by, rule string
}

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

// firstDenial is the denial of requests reqs of limits lims, decided
// together with results.
func (p *Plugin) firstDenial(reqs []limiter.Request, lims []*limitRuntime, results []limiter.Result) outcome {
	for i, res := range results {
		if !res.Allowed {
			return p.deny(lims[i], res, reqs[i].Table.Limit())
		}
	}
	// AllowAll denies only through a result; be safe regardless.
	return p.deny(lims[0], results[0], reqs[0].Table.Limit())
}

// replyValues are what a reply's placeholders may insert.
type replyValues struct {
	limit, upstream string
	limitValue      int64
	window          time.Duration
	retryAfter      time.Duration
	maxInFlight     int64
}
