package engine

// Usage from the response body ("cost_from_response": {"json": path}).
// The charge waits for the end of the stream, and is made through the
// same charge as the header form (cost.go):
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

import (
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/filter/request"
)

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
