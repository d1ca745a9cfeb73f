package engine

import (
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/host/hosttest"
)

// These tests drive the pipeline natively over the host fakes, the test
// playing the adapter: it begins streams, calls their phases, and runs
// the tick the engine asked for.

// drain admits the five requests the bucket holds.
func drain(t *testing.T, p *Plugin, f *hosttest.Fakes) {
	t.Helper()
	for id := uint32(1); id <= 5; id++ {
		if v := begin(p, f, id).RequestHeaders(); v != Continue {
			t.Fatalf("request %d: %v", id, v)
		}
	}
}

// drainedShaper is a plugin whose one limit, shaped, allows 5 requests a
// second and delays the rest up to maxDelay, with its first five requests
// (the burst) already admitted.
func drainedShaper(t *testing.T, maxDelay string) (*Plugin, *hosttest.Fakes) {
	t.Helper()
	p, f := newNativePlugin(t, `{"limits":[{"name":"shaped","key":[],"requests_per_second":5,
		"on_limit":{"action":"delay","max_delay":"`+maxDelay+`"}}]}`)
	drain(t, p, f)
	return p, f
}

func begin(p *Plugin, f *hosttest.Fakes, id uint32) *Stream {
	f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}
	f.Stream.Current = id
	s := &Stream{}
	p.Begin(s, id)
	return s
}

// A shaped request waits in the registry until its token is due: the tick
// before that leaves it paused, the tick after resumes that stream, once.
func TestDelayedRequestIsResumedFromTheRegistry(t *testing.T) {
	p, f := drainedShaper(t, "300ms")
	if v := begin(p, f, 6).RequestHeaders(); v != Pause {
		t.Fatalf("sixth request: %v, want it delayed", v)
	}
	if len(p.waiting) != 1 || f.Ticker.Period != delayTick || len(f.Stream.Replies) != 0 {
		t.Fatalf("%d waiting, tick %v, replies %v", len(p.waiting), f.Ticker.Period, f.Stream.Replies)
	}
	f.Clock.Advance(100 * time.Millisecond)
	p.Tick()
	if len(f.Stream.Resumed) != 0 {
		t.Fatalf("resumed %v before its token", f.Stream.Resumed)
	}
	f.Clock.Advance(100 * time.Millisecond)
	p.Tick()
	if len(f.Stream.Resumed) != 1 || f.Stream.Resumed[0] != 6 || len(p.waiting) != 0 {
		t.Fatalf("resumed %v, %d still waiting", f.Stream.Resumed, len(p.waiting))
	}
	p.Tick()
	if len(f.Stream.Resumed) != 1 || f.Ticker.Period != 0 {
		t.Fatalf("resumed %v; tick %v, want it stopped", f.Stream.Resumed, f.Ticker.Period)
	}
	if f.Metrics.Values["sluice.limit.shaped.delayed"] != 1 || f.Metrics.Values["sluice.limit.shaped.allowed"] != 6 {
		t.Fatalf("metrics %v", f.Metrics.Values)
	}
}

// A stream that ends while it waits leaves the registry: the tick never
// resumes it, and a reused Stream starts out of the registry.
func TestStreamEndingWhileDelayedIsForgotten(t *testing.T) {
	p, f := drainedShaper(t, "300ms")
	s := begin(p, f, 6)
	if s.RequestHeaders() != Pause {
		t.Fatal("not delayed")
	}
	s.Done()
	if len(p.waiting) != 0 {
		t.Fatalf("%d waiting after Done", len(p.waiting))
	}
	p.Begin(s, 7)
	if s.wait.kind != waitNone {
		t.Fatal("a reused stream starts waiting")
	}
	f.Clock.Advance(time.Second)
	p.Tick()
	if len(f.Stream.Resumed) != 0 {
		t.Fatalf("an ended stream was resumed: %v", f.Stream.Resumed)
	}
}

// Past its max_delay a request is answered, not parked.
func TestDelayPastMaxDelayIsRejected(t *testing.T) {
	p, f := drainedShaper(t, "100ms")
	if v := begin(p, f, 6).RequestHeaders(); v != Pause {
		t.Fatalf("sixth request: %v", v)
	}
	if len(p.waiting) != 0 || len(f.Stream.Replies) != 1 || f.Stream.Replies[0].Status != 429 || f.Stream.Replies[0].Stream != 6 {
		t.Fatalf("%d waiting, replies %+v", len(p.waiting), f.Stream.Replies)
	}
}

// A request waits for its external lookup and is resumed by the engine
// when the reply has been written, without a tick.
func TestLookupReplyResumesTheWaitingStream(t *testing.T) {
	p, f := newNativePlugin(t, `{"external":{"cluster":"limits","timeout":"100ms","cache_ttl":"60s",
		"fallback":{"limit":4,"window":"1h","key":[]}}}`)
	if v := begin(p, f, 7).RequestHeaders(); v != Pause {
		t.Fatalf("request: %v, want it waiting for its lookup", v)
	}
	if len(p.waiting) != 1 || p.waiting[7].wait.kind != waitLookup {
		t.Fatalf("registry %v", p.waiting)
	}
	p.Tick() // sends the lookup
	calls := f.Caller.Pending()
	if len(calls) != 1 {
		t.Fatalf("%d lookups", len(calls))
	}
	f.Stream.Current = 0 // the reply comes in the root context
	calls[0].Answer(200, []byte(`{"limit":3,"window":"1h","tenant_key":"acme"}`), nil)
	if len(f.Stream.Resumed) != 1 || f.Stream.Resumed[0] != 7 || len(p.waiting) != 0 {
		t.Fatalf("resumed %v, %d waiting", f.Stream.Resumed, len(p.waiting))
	}
	if f.Metrics.Values["sluice.limit.external.allowed"] != 1 {
		t.Fatalf("metrics %v", f.Metrics.Values)
	}
}

// A request the engine holds keeps its body in the proxy until it is
// decided: a Continue from the body callback would send it upstream.
func TestRequestBodyIsHeldWhileTheRequestWaits(t *testing.T) {
	p, fakes := newNativePlugin(t, `{"limits":[{"name":"shaped","key":[],"requests_per_second":1,
		"on_limit":{"action":"delay","max_delay":"2s"}}]}`)
	fakes.Stream.Headers = [][2]string{{":method", "POST"}, {":path", "/"}, {":authority", "a"}}
	first, second := &Stream{}, &Stream{}
	p.Begin(first, 2)
	if v := first.RequestHeaders(); v != Continue || first.AfterRequestHeaders() != Continue {
		t.Fatal("an admitted request's body is held")
	}
	p.Begin(second, 3)
	if v := second.RequestHeaders(); v != Pause {
		t.Fatalf("second request: %v, want it delayed", v)
	}
	if v := second.AfterRequestHeaders(); v != Pause {
		t.Fatal("the body of a delayed request continued it")
	}
	fakes.Clock.Advance(time.Second)
	p.Tick()
	if len(fakes.Stream.Resumed) != 1 || second.AfterRequestHeaders() != Continue {
		t.Fatalf("resumed %v; the body is still held after the request was let go", fakes.Stream.Resumed)
	}
}

// A stage only decides: the limits stage returns the denial, by which
// limit, without answering the request or parking it; settle then turns
// the same denial into the on_limit delay's wait, and a denial past
// max_delay into the reply.
func TestLimitsStageReturnsTheDenialAndSettleActsOnIt(t *testing.T) {
	p, f := drainedShaper(t, "300ms")
	s := begin(p, f, 6)
	now := p.host.Clock()
	s.start = now
	s.matchLimits()
	o := s.decideLimits(now)
	if d := p.denial; o.kind != outDeny || d.limit == nil || d.limit.cfg.Name != "shaped" || d.res.Allowed || d.res.RetryAfter <= 0 {
		t.Fatalf("outcome %+v, want a denial by shaped with a retry time", o)
	}
	if len(p.waiting) != 0 || len(f.Stream.Replies) != 0 || s.held() {
		t.Fatalf("the stage acted: %d waiting, replies %v", len(p.waiting), f.Stream.Replies)
	}
	if v := s.settle(o, now); v != Pause || len(p.waiting) != 1 || s.wait.kind != waitDelay || len(f.Stream.Replies) != 0 {
		t.Fatalf("settle: %v, %d waiting (%v), replies %v; want the delay's wait", v, len(p.waiting), s.wait.kind, f.Stream.Replies)
	}
	s.Done()
	// Past max_delay the same denial is answered.
	s = begin(p, f, 7)
	s.start = now.Add(-time.Second)
	s.matchLimits()
	o = s.decideLimits(now)
	if v := s.settle(o, now); v != Pause || len(f.Stream.Replies) != 1 || f.Stream.Replies[0].Status != 429 || s.held() {
		t.Fatalf("settle: %v, replies %v, held %v; want one 429", v, f.Stream.Replies, s.held())
	}
}
