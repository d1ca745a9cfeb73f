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
func (h *Stream) startBodyScan(headers [][2]string) {
	h.charges.body.mode = bodyJSON
	if ct, _ := combinedHeader(headers, "content-type"); isEventStream(ct) {
		h.charges.body.mode = bodySSE
		h.charges.body.sse.reset()
	}
}

// ResponseBody is a response body callback: size bytes of body are
// there, the last ones when end is set. It returns Pause to have the host
// buffer the body, Continue to let it go on.
func (h *Stream) ResponseBody(size int, end bool) Verdict {
	if h.charges.body.mode == bodyOff {
		return Continue
	}
	return h.scanBody(size, end)
}

func (h *Stream) scanBody(size int, end bool) Verdict {
	p := h.plugin
	switch h.charges.body.mode {
	case bodySSE:
		h.charges.body.sse.feed(p.host.Stream.ResponseBody(size), h.sseEvent)
	case bodyJSON:
		buffering := false
		for i := range h.charges.pending {
			c := &h.charges.pending[i]
			if !c.tooLarge && int64(size) > c.l.cfg.CostFromResponse.MaxBodyBytes {
				c.tooLarge = true
			}
			buffering = buffering || !c.tooLarge
		}
		if !buffering {
			h.charges.body.mode = bodyPassing
			break
		}
		if !end {
			return Pause
		}
		doc := p.host.Stream.ResponseBody(size)
		for i := range h.charges.pending {
			if c := &h.charges.pending[i]; !c.tooLarge {
				c.usage, c.fault = jsonUsage(doc, c.l.cfg.CostFromResponse.JSON)
				c.seen = c.fault != usageMissing
			}
		}
	}
	if end {
		h.chargeBody(p.host.Clock())
	}
	return Continue
}

// sseEvent takes one event's data: it replaces the usage of every charge
// whose path it has.
func (h *Stream) sseEvent(data []byte) {
	for i := range h.charges.pending {
		c := &h.charges.pending[i]
		if n, fault := jsonUsage(data, c.l.cfg.CostFromResponse.JSON); fault != usageMissing {
			c.usage, c.fault, c.seen = n, fault, true
		}
	}
}

// chargeBody charges what the body reported, or default, and ends the
// scan. Done calls it too, for a stream that ended before its body did.
func (h *Stream) chargeBody(now time.Time) {
	p := h.plugin
	for i := range h.charges.pending {
		c := &h.charges.pending[i]
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
		if h.charges.body.mode == bodySSE && h.charges.body.sse.dropped > 0 {
			m.sseEventTooLarge.Increment(uint64(h.charges.body.sse.dropped))
		}
		h.charge(c, total, now, false)
	}
	h.charges.pending = h.charges.pending[:0]
	h.charges.body.mode = bodyOff
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
