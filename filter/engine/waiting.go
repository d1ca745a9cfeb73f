package engine

import (
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/limiter"
)

// The one registry of paused streams. A stream waits for one thing at a
// time: a delay, its lookup, a lease another call will fill, or its Redis
// decisions (a stream waiting for those needs no entry: the call's reply
// finds it, and marks it ready). The tick polls every entry; a settled
// lease or lookup polls its kind at once. Whatever a wait ends with, the
// stream goes on through resume (pipeline.go).

// streamWait is a stream's place in the registry: what it waits for
// (waitNone when it is not there), and its on_limit delay.
type streamWait struct {
	kind  waitKind
	delay delay
}

// waitKind is what a paused stream waits for.
type waitKind uint8

const (
	waitNone waitKind = iota
	// waitDelay: on_limit delay, until delayUntil.
	waitDelay
	// waitLookup: the external lookup of its key.
	waitLookup
	// waitLease: a hybrid lease.
	waitLease
	// waitRemote: the replies of its Redis decisions.
	waitRemote
	// waitReady: its remote decisions are all known; it goes on from them.
	waitReady
	// waitAny polls every kind.
	waitAny
)

// park registers h as waiting for kind and makes sure the tick runs.
func (p *Plugin) park(h *Stream, kind waitKind) {
	h.wait.kind = kind
	if kind == waitRemote {
		return // the replies find it
	}
	p.waiting[h.id] = h
	p.ensureTick()
}

// ready marks h, whose remote decisions are all known, ready to go on
// from them, and has resume continue it at now.
func (p *Plugin) ready(h *Stream, now time.Time) {
	p.unpark(h)
	h.wait.kind = waitReady
	p.resume(h, now)
}

// unpark drops h from the registry.
func (p *Plugin) unpark(h *Stream) {
	if h.wait.kind == waitNone {
		return
	}
	h.wait.kind = waitNone
	if p.waiting[h.id] == h {
		delete(p.waiting, h.id)
	}
}

// poll moves on the waiting streams of kind (waitAny: all) whose wait is
// over.
func (p *Plugin) poll(kind waitKind, now time.Time) {
	for id, h := range p.waiting {
		if h.phase == phaseDone || h.id != id { // ended, or its context reused since
			delete(p.waiting, id)
			continue
		}
		if kind != waitAny && h.wait.kind != kind {
			continue
		}
		switch h.wait.kind {
		case waitDelay:
			if now.Before(h.wait.delay.until) {
				continue
			}
			p.resume(h, now)
		case waitLookup:
			if !p.external.cache.Settle(&h.ext, now) {
				continue
			}
			p.resume(h, now)
		case waitLease:
			if !h.pollLease(now) && h.wait.kind == waitLease {
				// Its leases are in; a Redis decision is still out.
				p.unpark(h)
				h.wait.kind = waitRemote
			}
		}
	}
}

// ensureTick starts the fast tick that drives waiting streams, retries,
// queued calls and call timeouts; Tick stops it when nothing is left.
func (p *Plugin) ensureTick() {
	if !p.ticking {
		p.ticking = true
		if err := p.host.Ticker.SetTick(delayTick); err != nil {
			p.log.Errorf("sluice: starting the tick: %v", err)
		}
	}
}

// delay is a shaped request's state (on_limit delay): it waits until
// until, and never past deadline.
type delay struct {
	active   bool
	until    time.Time
	deadline time.Time
}

// shape decides whether a request started at start and denied by l with
// res at now waits for the limit rather than being answered: true when it
// does, until d.until.
func (d *delay) shape(l *limitRuntime, res limiter.Result, start, now time.Time) bool {
	if l.cfg.OnLimit.Action != config.ActionDelay || res.RetryAfter <= 0 {
		return false
	}
	if !d.active {
		d.deadline = start.Add(l.cfg.OnLimit.MaxDelay)
	}
	wakeAt := now.Add(res.RetryAfter)
	if wakeAt.After(d.deadline) {
		return false
	}
	if !d.active {
		d.active = true
		l.metrics.delayed.Increment(1)
	}
	d.until = wakeAt
	return true
}
