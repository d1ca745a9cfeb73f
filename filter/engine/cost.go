package engine

// Weighted cost. A limit's cost per request is fixed ("cost": 3), sent by
// the client in a request header ("cost": {"header", "default", "max"}),
// or reported by the upstream after the fact ("cost_from_response"):
//
//   - Request header: absent or empty costs default. Anything but a whole
//     number from 1 to max (sent once, or repeated with the same value) is
//     answered with 400 invalid_cost before any limit consumes, because a
//     cost the client cannot state is not one to guess; a shadow limit only
//     counts it and skips the request.
//   - Response header or body: the request takes one unit at admission, so
//     it is admitted only while its bucket has at least one unit, and the
//     rest of the reported cost is charged in on_response_headers, or at
//     the end of the body, through the same limiter
//     (limiter.Table.Charge locally, the token_bucket_charge script for
//     global and hybrid limits), which may leave the bucket up to one
//     full bucket in debt: later requests wait until it is repaid. The
//     overshoot this allows is at most one response's cost (less the unit
//     taken) per request admitted while the bucket still had a unit; and
//     since each such request took a unit, no more requests can be in
//     flight uncharged than the bucket held. A response without a usable
//     value is charged default.

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/request"
	"github.com/sluice-proxy/sluice/limiter"
)

// costFault says why a cost header value is unusable.
type costFault uint8

const (
	costOK costFault = iota
	costNotNumber
	costTooSmall
	costTooLarge
	costConflict
)

func (f costFault) String() string {
	switch f {
	case costNotNumber:
		return "not_a_number"
	case costTooSmall:
		return "too_small"
	case costTooLarge:
		return "too_large"
	case costConflict:
		return "conflicting_values"
	}
	return "ok"
}

// parseCost reads a cost header: a decimal whole number from lo to hi with
// optional surrounding spaces or tabs. A header sent several times reaches
// the filter as one comma-separated list (HTTP field combination); its
// elements must then all be the same number. It does not allocate.
func parseCost(v string, lo, hi int64) (int64, costFault) {
	var first int64
	for i := 0; ; i++ {
		elem := v
		rest := ""
		for j := 0; j < len(v); j++ {
			if v[j] == ',' {
				elem, rest = v[:j], v[j+1:]
				break
			}
		}
		n, f := parseCostElem(trimOWS(elem), lo, hi)
		if f != costOK {
			return 0, f
		}
		if i > 0 && n != first {
			return 0, costConflict
		}
		first = n
		if len(elem) == len(v) {
			return first, costOK
		}
		v = rest
	}
}

func parseCostElem(s string, lo, hi int64) (int64, costFault) {
	neg := len(s) > 1 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if s == "" {
		return 0, costNotNumber
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, costNotNumber
		}
		if n > (math.MaxInt64-int64(c-'0'))/10 {
			if neg {
				return 0, costTooSmall
			}
			return 0, costTooLarge
		}
		n = n*10 + int64(c-'0')
	}
	switch {
	case neg && n > 0, n < lo:
		return 0, costTooSmall
	case n > hi:
		return 0, costTooLarge
	}
	return n, costOK
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// requestCost is what limit l takes from request info at admission. ok is
// false for an unusable cost header; bad is then its 400 answer, unless l
// is a shadow limit, which only counts and skips it. again is set for a
// request evaluated again (after a delay), counted the first time.
func (p *Plugin) requestCost(l *limitRuntime, info *request.Info, again bool) (cost int64, bad *reply, ok bool) {
	ch := l.cfg.CostHeader
	if ch == nil {
		return l.cfg.Cost, nil, true
	}
	v, present := info.Header(ch.Header)
	if !present || trimOWS(v) == "" {
		return ch.Default, nil, true
	}
	n, fault := parseCost(v, 1, ch.Max)
	if fault == costOK {
		return n, nil, true
	}
	if !again {
		l.metrics.cost.invalid.Increment(1)
		logCostFault(p.log, "invalid_cost", l, "header", ch.Header, fault.String())
	}
	if !l.cfg.Shadow {
		ct, body := invalidCostBody(p.cfg.Response.Body, l.cfg.Name, ch)
		bad = &reply{kind: config.ReplyInvalidCost, values: replyValues{limit: l.cfg.Name}, status: invalidCostStatus, contentType: ct, body: body, rule: l.baseRule()}
	}
	return 0, bad, false
}

// invalidCostStatus answers a cost header the filter cannot use: the
// request is malformed, not over a limit.
const invalidCostStatus = 400

// invalidCostBody states the rule rather than echoing the client's value,
// which may be anything.
func invalidCostBody(format config.Body, limitName string, ch *config.CostHeader) (contentType string, body []byte) {
	msg := make([]byte, 0, 96)
	msg = append(msg, ch.Header...)
	msg = append(msg, " must be a whole number from 1 to "...)
	msg = strconv.AppendInt(msg, ch.Max, 10)
	msg = append(msg, ", sent once"...)
	var b []byte
	switch format {
	case config.BodyNone:
		return "", nil
	case config.BodyProblemJSON:
		b = append(b, `{"type":"about:blank","title":"Invalid request cost","status":`...)
		b = strconv.AppendInt(b, invalidCostStatus, 10)
		b = append(b, `,"detail":`...)
		b = appendJSONString(b, string(msg))
		b = append(b, `,"limit":`...)
		b = appendJSONString(b, limitName)
		contentType = contentTypeProblemJSON
	default:
		b = append(b, `{"error":"invalid_cost","message":`...)
		b = appendJSONString(b, string(msg))
		b = append(b, `,"limit":`...)
		b = appendJSONString(b, limitName)
		contentType = contentTypeJSON
	}
	return contentType, append(b, '}')
}

// logCostFault writes one JSON line naming the limit, where the cost was
// read (field "header" or "json", and its name or path) and why its value
// was refused, never the value itself.
func logCostFault(log host.Log, event string, l *limitRuntime, field, source, reason string) {
	b := make([]byte, 0, 128)
	b = append(b, `{"sluice":`...)
	b = appendJSONString(b, event)
	b = append(b, `,"limit":`...)
	b = appendJSONString(b, l.cfg.Name)
	b = append(b, `,"`...)
	b = append(b, field...)
	b = append(b, `":`...)
	b = appendJSONString(b, source)
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, reason)
	log.Info(string(append(b, '}')))
}

// charges are a request's part with the cost_from_response limits that
// admitted it: what each is owed, charged from the response headers, or
// at the end of the body, which the body scan below reads for the usage.
type charges struct {
	pending []pendingCharge
	body    bodyScan
}

// pendingCharge is a cost_from_response limit that admitted the request
// and is owed the response's cost.
type pendingCharge struct {
	l             *limitRuntime
	table         *limiter.Table
	rate          config.Rate
	overrideValue string
	// key is copied: the evaluation's key arena is reused.
	key     string
	dropped bool
	// What the body said so far, for a limit reading usage from it:
	// usage and fault are the last value found at the path (seen), and
	// tooLarge is set once the body outgrew the limit's max_body_bytes.
	usage    int64
	fault    usageFault
	seen     bool
	tooLarge bool
}

// noteCharge remembers that limit l is to be charged from the response;
// key is l's key in this evaluation's arena.
func (ch *charges) note(l *limitRuntime, t *limiter.Table, rate config.Rate, overrideValue string, key []byte) {
	ch.pending = append(ch.pending, pendingCharge{l: l, table: t, rate: rate, overrideValue: overrideValue, key: string(key)})
}

// dropCharge forgets the charge of a shadow limit that would have refused
// the request: had it been enforcing, there would be no response to pay.
func (ch *charges) drop(l *limitRuntime) {
	for i := range ch.pending {
		if ch.pending[i].l == l {
			ch.pending[i].dropped = true
		}
	}
}

// chargeResponse charges every pending limit that reads its cost from a
// response header the cost the response reports, less the unit each took
// at admission. The limits that read it from the body stay pending, and
// the body is scanned for them (scanBody, below). q is the quota the response's
// headers report, of a request started at start.
func (ch *charges) chargeResponse(p *Plugin, headers [][2]string, q *quota, start time.Time) {
	now := p.host.Clock()
	pending := ch.pending[:0]
	for _, c := range ch.pending {
		if c.dropped {
			continue
		}
		l := c.l
		rc := l.cfg.CostFromResponse
		if rc.JSON != nil {
			pending = append(pending, c)
			continue
		}
		total := rc.Default
		if v, present := request.CombinedHeader(headers, rc.Header); present && trimOWS(v) != "" {
			n, fault := parseCost(v, 0, math.MaxInt64)
			if fault == costOK {
				total = n
			} else {
				l.metrics.cost.invalidResponse.Increment(1)
				logCostFault(p.log, "invalid_response_cost", l, "header", rc.Header, fault.String())
			}
		}
		p.charge(&c, total, now, q, start)
	}
	ch.pending = pending
	if len(pending) > 0 {
		ch.startBodyScan(headers)
	}
}

// charge is the one way a reported cost reaches a limit: the total is
// counted, and all of it but the unit taken at admission is charged,
// into debt if need be. A quota q (nil at the end of the body, too late
// for it) lets a local limit's charge show in the rate-limit headers of
// the response being answered, of a request started at start.
func (p *Plugin) charge(c *pendingCharge, total int64, now time.Time, q *quota, start time.Time) {
	l := c.l
	if total > 0 {
		// Envoy refuses a zero increment, and the SDK panics on it.
		l.metrics.cost.responseCost.Increment(uint64(total))
	}
	if total <= 1 {
		return // the unit taken at admission covers it
	}
	if l.remote != nil {
		p.chargeRemote(c, total-1, now)
		return
	}
	res, err := c.table.Charge(c.key, now.UnixNano(), total-1)
	if err != nil {
		p.log.Warnf("sluice: limiter store: %v", err)
	}
	l.exportTableStats()
	if q != nil && res.Allowed && !l.cfg.Shadow && q.applies && (q.name == l.cfg.Name || res.Remaining < q.remaining) {
		// The rate-limit headers of this response then report what is
		// left after it, not before; reset times count from start.
		*q = l.quotaOf(res)
		q.resetAfter += now.Sub(start)
	}
}

// chargeRemote sends a global or hybrid limit's charge to Redis, in the
// background from the tick. A key the charge leaves without a unit goes
// into the negative cache until one is back, so neither mode asks Redis
// meanwhile (hybrid still serves tokens this Envoy already leased). A
// charge Redis cannot take is charged to the local fallback table under
// failure_policy local and otherwise lost, counted in the backend's error
// metrics.
func (p *Plugin) chargeRemote(c *pendingCharge, n int64, now time.Time) {
	l := c.l
	k := l.remote.dl.Key(c.key, c.rate.Limiter(l.cfg.Algorithm))
	key, overrideValue := c.key, c.overrideValue
	err := p.backend.Charge(k, n, !l.cfg.Shadow, now, func(at time.Time) {
		if l.remote.policy != config.FailLocal {
			return
		}
		t, ferr := l.fallbackTable(p.host.Store, overrideValue)
		if ferr == nil {
			_, ferr = t.Charge(key, at.UnixNano(), n)
		}
		if ferr != nil {
			p.log.Warnf("sluice: limit %s fallback: %v", l.cfg.Name, ferr)
		}
	})
	if err != nil {
		p.log.Warnf("sluice: limit %s: charge: %v", l.cfg.Name, err)
	}
}

// Usage from the response body ("cost_from_response": {"json": path}).
// The charge waits for the end of the stream, and is made through the
// same charge as the header form (above):
//
//   - a text/event-stream body is scanned chunk by chunk as it passes,
//     never held back: each chunk is cut into events (sseFramer) and
//     every event whose data has the path replaces the usage found so
//     far, so the last one counts (OpenAI-style streams report usage in
//     their final event; "data: [DONE]" is not JSON and has no path);
//   - any other body is buffered by the host (the body callback returns
//     Pause, StopIterationAndBuffer) until the end of the stream or until
//     it outgrows every pending limit's max_body_bytes, and is then read
//     once, whole.
//
// A body without the path, over the bound, or ended before its end
// (a reset) is charged default and counted. When no limit reads its cost
// from the body, bodyScan stays off and the body callback returns before
// reading anything.

type bodyMode uint8

const (
	bodyOff bodyMode = iota
	bodyJSON
	bodySSE
	// bodyPassing: every JSON charge gave up on the body (too large); it
	// passes until the end of the stream, when they are charged default.
	bodyPassing
)

// bodyScan is a stream's scan of its response body.
type bodyScan struct {
	mode bodyMode
	sse  sseFramer
}

// startBodyScan starts the scan for the charges left pending after the
// response headers; headers are the response's.
func (ch *charges) startBodyScan(headers [][2]string) {
	ch.body.mode = bodyJSON
	if ct, _ := request.CombinedHeader(headers, "content-type"); isEventStream(ct) {
		ch.body.mode = bodySSE
		ch.body.sse.reset()
	}
}

// scanBody scans a response body callback's size bytes of body, the
// last ones when end is set: Pause has the host buffer the body,
// Continue lets it go on.
func (ch *charges) scanBody(p *Plugin, size int, end bool) Verdict {
	switch ch.body.mode {
	case bodySSE:
		ch.body.sse.feed(p.host.Stream.ResponseBody(size), ch.sseEvent)
	case bodyJSON:
		buffering := false
		for i := range ch.pending {
			c := &ch.pending[i]
			if !c.tooLarge && int64(size) > c.l.cfg.CostFromResponse.MaxBodyBytes {
				c.tooLarge = true
			}
			buffering = buffering || !c.tooLarge
		}
		if !buffering {
			ch.body.mode = bodyPassing
			break
		}
		if !end {
			return Pause
		}
		doc := p.host.Stream.ResponseBody(size)
		for i := range ch.pending {
			if c := &ch.pending[i]; !c.tooLarge {
				c.usage, c.fault = jsonUsage(doc, c.l.cfg.CostFromResponse.JSON)
				c.seen = c.fault != usageMissing
			}
		}
	}
	if end {
		ch.chargeBody(p, p.host.Clock())
	}
	return Continue
}

// sseEvent takes one event's data: it replaces the usage of every charge
// whose path it has.
func (ch *charges) sseEvent(data []byte) {
	for i := range ch.pending {
		c := &ch.pending[i]
		if n, fault := jsonUsage(data, c.l.cfg.CostFromResponse.JSON); fault != usageMissing {
			c.usage, c.fault, c.seen = n, fault, true
		}
	}
}

// chargeBody charges what the body reported, or default, and ends the
// scan. Done calls it too, for a stream that ended before its body did.
func (ch *charges) chargeBody(p *Plugin, now time.Time) {
	for i := range ch.pending {
		c := &ch.pending[i]
		l := c.l
		m := &l.metrics.cost
		rc := l.cfg.CostFromResponse
		total := rc.Default
		switch {
		case c.tooLarge:
			m.bodyTooLarge.Increment(1)
		case !c.seen:
			m.usageMissing.Increment(1)
		case c.fault != usageOK:
			m.invalidResponse.Increment(1)
			logCostFault(p.log, "invalid_response_cost", l, "json", strings.Join(rc.JSON, "."), c.fault.String())
		default:
			total = c.usage
		}
		if ch.body.mode == bodySSE && ch.body.sse.dropped > 0 {
			m.sseEventTooLarge.Increment(uint64(ch.body.sse.dropped))
		}
		p.charge(c, total, now, nil, time.Time{})
	}
	ch.pending = ch.pending[:0]
	ch.body.mode = bodyOff
}

// isEventStream tells whether a Content-Type is text/event-stream, with
// or without parameters, in any case.
func isEventStream(ct string) bool {
	const want = "text/event-stream"
	ct = trimOWS(ct)
	if len(ct) < len(want) {
		return false
	}
	for i := 0; i < len(want); i++ {
		c := ct[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	rest := trimOWS(ct[len(want):])
	return rest == "" || rest[0] == ';'
}
