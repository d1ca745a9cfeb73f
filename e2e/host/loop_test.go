package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// goroutineID reads the running goroutine's id from its stack header
// ("goroutine 123 [running]:"). Tests only.
func goroutineID() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	f := strings.Fields(string(buf[:n]))
	id, _ := strconv.ParseUint(f[1], 10, 64)
	return id
}

// watBytes spells b as a WAT string literal.
func watBytes(b []byte) string {
	var s strings.Builder
	s.WriteByte('"')
	for _, c := range b {
		fmt.Fprintf(&s, "\\%02x", c)
	}
	s.WriteByte('"')
	return s.String()
}

// loopGuest marks every callback it gets with a log line: a tag byte and
// the VM's identity (the CAS its proxy_on_vm_start got for a shared-data
// write, unique per VM). Each request makes an http call and enqueues on
// queue "q", whose owner is the VM that registered it last; each VM ticks
// once.
//
// Tags: H request headers, R response headers, L log, T tick, C http-call
// reply, Q queue ready.
func loopGuest(t *testing.T) []byte {
	callHeaders := EncodePairs([][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "svc"}})
	return watModule{
		imports: `
  (import "env" "proxy_http_call" (func $call (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_set_tick_period_milliseconds" (func $tick (param i32) (result i32)))
  (import "env" "proxy_register_shared_queue" (func $regq (param i32 i32 i32) (result i32)))
  (import "env" "proxy_resolve_shared_queue" (func $resq (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_enqueue_shared_queue" (func $enq (param i32 i32 i32) (result i32)))`,
		extra: `(global $me (mut i32) (i32.const 0))
  (data (i32.const 6000) ` + watBytes(callHeaders) + `)
  (func $mark (param $tag i32)
    (i32.store8 (i32.const 7000) (local.get $tag))
    (i32.store (i32.const 7001) (global.get $me))
    (call $say (i32.const 7000) (i32.const 5)))
  (func (export "proxy_on_tick") (param $root i32)
    (call $mark (i32.const 84))
    (drop (call $tick (i32.const 0))))
  (func (export "proxy_on_http_call_response") (param $root i32) (param $token i32) (param $nh i32) (param $nb i32) (param $nt i32)
    (call $mark (i32.const 67)))
  (func (export "proxy_on_queue_ready") (param $root i32) (param $token i32)
    (call $mark (i32.const 81)))`,
		vmStart: `(drop (call $set {{"id"}} (i32.const 0) (i32.const 0) (i32.const 0)))
    (drop (call $get {{"id"}} (i32.const 7100) (i32.const 7104) (i32.const 7108)))
    (global.set $me (i32.load (i32.const 7108)))`,
		config: `(drop (call $regq {{"q"}} (i32.const 7200)))
    (drop (call $tick (i32.const 1)))`,
		reqHdrs: fmt.Sprintf(`(call $mark (i32.const 72))
    (drop (call $call {{"svc"}} (i32.const 6000) (i32.const %d) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 5000) (i32.const 7300)))
    (drop (call $resq {{"wat-vm"}} {{"q"}} (i32.const 7204)))
    (drop (call $enq (i32.load (i32.const 7204)) {{"x"}}))`, len(callHeaders)),
		respHdrs: `(call $mark (i32.const 82))`,
		onLog:    `(call $mark (i32.const 76))`,
	}.build(t)
}

type loopEvent struct {
	tag byte
	vm  uint32 // the guest's identity of its VM
	gid uint64 // goroutine that ran the callback
}

// loopRecorder is the runtime's logger: it records which goroutine ran
// each marked callback, and can hold one VM's request-headers callback
// until released.
type loopRecorder struct {
	mu      sync.Mutex
	events  []loopEvent
	holdVM  uint32
	entered chan struct{}
	release chan struct{}
	// meet[vm] is closed when vm's request-headers callback has started;
	// while meet is set, each such callback waits for the other VM's.
	meet map[uint32]chan struct{}
}

func (l *loopRecorder) log(_ LogLevel, _ string, msg string) {
	if len(msg) != 5 || !strings.ContainsRune("HRLTCQ", rune(msg[0])) {
		return
	}
	e := loopEvent{tag: msg[0], vm: binary.LittleEndian.Uint32([]byte(msg[1:])), gid: goroutineID()}
	l.mu.Lock()
	l.events = append(l.events, e)
	hold := e.tag == 'H' && l.holdVM != 0 && e.vm == l.holdVM
	if hold {
		l.holdVM = 0
	}
	var mine chan struct{}
	var others []chan struct{}
	if e.tag == 'H' && l.meet[e.vm] != nil {
		mine = l.meet[e.vm]
		for vm, c := range l.meet {
			if vm != e.vm {
				others = append(others, c)
			}
		}
		delete(l.meet, e.vm)
	}
	l.mu.Unlock()
	if hold {
		close(l.entered)
		<-l.release
	}
	if mine != nil {
		close(mine)
		for _, c := range others {
			<-c
		}
	}
}

func (l *loopRecorder) count(tag byte, vm uint32) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.tag == tag && e.vm == vm {
			n++
		}
	}
	return n
}

func (l *loopRecorder) snapshot() []loopEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]loopEvent(nil), l.events...)
}

// TestWorkerLoopsOwnTheirVMs checks the Envoy worker model: every callback
// of a worker's VM (stream callbacks of any caller goroutine, the real tick
// timer, http-call replies, queue notifications posted from the other
// worker) runs on that worker's loop goroutine, and nothing else does; a
// worker stuck inside a callback holds up neither the other worker nor the
// admin reads; and the two workers run guest code at the same time, which
// is what lets a CPU-bound filter use two cores.
func TestWorkerLoopsOwnTheirVMs(t *testing.T) {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer svc.Close()
	rec := &loopRecorder{}
	r := NewRuntime(RuntimeOptions{Logger: rec.log})
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	p, err := loadPlugin(t, r, loopGuest(t), func(c *PluginConfig) {
		c.Concurrency = 2
		c.Caller = &testCaller{clusters: map[string]string{"svc": svc.URL}}
	})
	if err != nil {
		t.Fatal(err)
	}
	var loopG [2]uint64
	for i, w := range p.workers {
		if err := w.loop.do(func() { loopG[i] = goroutineID() }); err != nil {
			t.Fatal(err)
		}
	}
	if loopG[0] == loopG[1] {
		t.Fatalf("both workers run on goroutine %d", loopG[0])
	}

	// Several caller goroutines per worker, as several connections.
	const perWorker = 4
	var wg sync.WaitGroup
	for w := range 2 {
		for range perWorker {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := p.Serve(context.Background(), getReq(w, "/"), okUpstream(200, "up"))
				if err != nil || resp.Status != 200 {
					t.Errorf("worker %d: %+v %v", w, resp, err)
				}
			}()
		}
	}
	wg.Wait()

	// The worker VMs' identities, from the request callbacks.
	var id [2]uint32
	for _, e := range rec.snapshot() {
		if e.tag != 'H' {
			continue
		}
		for i := range 2 {
			if e.gid == loopG[i] && id[i] == 0 {
				id[i] = e.vm
			}
		}
	}
	if id[0] == 0 || id[1] == 0 || id[0] == id[1] {
		t.Fatalf("request callbacks did not run on the worker loops: ids %v, events %+v", id, rec.snapshot())
	}
	// Queue "q" belongs to the VM that registered it last: worker 1's.
	eventually(t, "ticks, http-call replies and queue notifications", func() bool {
		return rec.count('T', id[0]) == 1 && rec.count('T', id[1]) == 1 &&
			rec.count('C', id[0]) == perWorker && rec.count('C', id[1]) == perWorker &&
			rec.count('Q', id[1]) == 2*perWorker
	})
	counts := map[byte]int{}
	for _, e := range rec.snapshot() {
		w := -1
		for i := range 2 {
			if e.vm == id[i] {
				w = i
			}
		}
		switch {
		case w < 0:
			t.Errorf("callback %c ran in VM %d, not a worker's", e.tag, e.vm)
		case e.gid != loopG[w]:
			t.Errorf("callback %c of worker %d ran on goroutine %d, not on its loop %d", e.tag, w, e.gid, loopG[w])
		}
		counts[e.tag]++
	}
	want := map[byte]int{'H': 2 * perWorker, 'R': 2 * perWorker, 'L': 2 * perWorker, 'T': 2, 'C': 2 * perWorker, 'Q': 2 * perWorker}
	for tag, n := range want {
		if counts[tag] != n {
			t.Errorf("%d %c callbacks, want %d", counts[tag], tag, n)
		}
	}

	// Hold worker 1 inside a request callback.
	rec.mu.Lock()
	rec.holdVM, rec.entered, rec.release = id[1], make(chan struct{}), make(chan struct{})
	rec.mu.Unlock()
	held := make(chan error, 1)
	go func() {
		_, err := p.Serve(context.Background(), getReq(1, "/"), okUpstream(200, "up"))
		held <- err
	}()
	<-rec.entered
	// Admin reads do not wait for the busy worker.
	_ = r.Stats().Snapshot()
	if p.MemoryPages(1) == 0 || p.Failed(1) || p.ParkedStreams(1) != 0 {
		t.Errorf("worker 1 while busy: pages %d failed %v parked %d", p.MemoryPages(1), p.Failed(1), p.ParkedStreams(1))
	}
	// Worker 0 serves a whole request, and gets its http-call reply, while
	// worker 1 is busy; the queue notification its enqueue posted to
	// worker 1 cannot have run yet, and did not hold worker 0 up.
	if resp, err := p.Serve(context.Background(), getReq(0, "/"), okUpstream(200, "up")); err != nil || resp.Status != 200 {
		t.Fatalf("worker 0 while worker 1 is busy: %+v %v", resp, err)
	}
	eventually(t, "worker 0's http-call reply", func() bool { return rec.count('C', id[0]) == perWorker+1 })
	if n := rec.count('Q', id[1]); n != 2*perWorker {
		t.Errorf("%d queue notifications ran on worker 1 while it was inside a callback, want %d", n, 2*perWorker)
	}
	close(rec.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	eventually(t, "queue notifications after worker 1 is free", func() bool { return rec.count('Q', id[1]) == 2*perWorker+2 })

	// Each worker's request callback waits until the other worker's has
	// started: both are inside guest code at once. A host that ran the
	// workers one at a time would never get here.
	meet := map[uint32]chan struct{}{id[0]: make(chan struct{}), id[1]: make(chan struct{})}
	rec.mu.Lock()
	rec.meet = meet
	rec.mu.Unlock()
	var both sync.WaitGroup
	for w := range 2 {
		both.Add(1)
		go func() {
			defer both.Done()
			if resp, err := p.Serve(context.Background(), getReq(w, "/"), okUpstream(200, "up")); err != nil || resp.Status != 200 {
				t.Errorf("worker %d meeting the other: %+v %v", w, resp, err)
			}
		}()
	}
	both.Wait()
}

// TestOnWorkerServesStreamsOnTheLoop checks Runtime.OnWorker, which the
// lifecycle benchmarks drive streams with: Serve with its context runs
// the whole stream on the worker's loop goroutine (callbacks and the
// upstream), with the same outcome as Serve from a connection's
// goroutine; a stream parked there lets the loop run other tasks, one of
// which resumes it; and the context serves no other worker.
func TestOnWorkerServesStreamsOnTheLoop(t *testing.T) {
	sink := &logSink{}
	r := NewRuntime(RuntimeOptions{ManualTicks: true, Logger: sink.log})
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("tick=5"), Concurrency: 2})
	var loopG uint64
	if err := r.OnWorker(context.Background(), 0, func(context.Context) { loopG = goroutineID() }); err != nil {
		t.Fatal(err)
	}
	if err := p.workers[0].loop.do(func() {
		if g := goroutineID(); g != loopG {
			t.Errorf("OnWorker ran on goroutine %d, worker 0's loop is %d", loopG, g)
		}
	}); err != nil {
		t.Fatal(err)
	}

	// The same requests from a connection's goroutine and from the loop.
	reqs := func() []*Request {
		body := probeReq(0, "body")
		body.Headers = append(body.Headers, [2]string{":method", "POST"})
		body.Body = []byte("abc")
		return []*Request{probeReq(0, "x"), probeReq(0, "local", [2]string{"x-status", "429"}),
			probeReq(0, "rewrite", [2]string{"x-remove-me", "1"}), body, probeReq(0, "local-resp"), probeReq(0, "props")}
	}
	type outcome struct {
		resp     *Response
		upstream *Request // nil: the upstream was not called
		upG      uint64   // the goroutine the upstream ran on
	}
	serveAll := func(ctx context.Context) []outcome {
		var out []outcome
		for _, req := range reqs() {
			var o outcome
			up := func(ctx context.Context, r *Request) (*Response, error) {
				o.upstream, o.upG = r, goroutineID()
				return &Response{Status: 200, Headers: [][2]string{{"content-type", "text/plain"}}, Body: []byte("upstream")}, nil
			}
			resp, err := p.Serve(ctx, req, up)
			if err != nil {
				t.Errorf("%s: %v", hv(req.Headers, "x-probe"), err)
			}
			o.resp = resp
			out = append(out, o)
		}
		return out
	}
	off := serveAll(context.Background())
	var on []outcome
	if err := r.OnWorker(context.Background(), 0, func(ctx context.Context) { on = serveAll(ctx) }); err != nil {
		t.Fatal(err)
	}
	for i := range off {
		probe := hv(reqs()[i].Headers, "x-probe")
		a, b := off[i], on[i]
		if fmt.Sprint(a.resp) != fmt.Sprint(b.resp) {
			t.Errorf("%s: on the loop %+v, off it %+v", probe, b.resp, a.resp)
		}
		if (a.upstream == nil) != (b.upstream == nil) || a.upstream != nil && fmt.Sprint(a.upstream.Headers, string(a.upstream.Body)) != fmt.Sprint(b.upstream.Headers, string(b.upstream.Body)) {
			t.Errorf("%s: upstream got %+v on the loop, %+v off it", probe, b.upstream, a.upstream)
		}
		if b.upstream != nil && b.upG != loopG {
			t.Errorf("%s: upstream ran on goroutine %d, not on the loop %d", probe, b.upG, loopG)
		}
		if a.upstream != nil && a.upG == loopG {
			t.Errorf("%s: off the loop, the upstream ran on the loop", probe)
		}
	}
	if want := len(reqs()); strings.Count(strings.Join(sink.messages(), "\n"), "probe: done ") != 2*want {
		t.Errorf("want %d streams done, logs %q", 2*want, sink.messages())
	}

	// A stream parked on the loop: the tick another goroutine posts runs
	// while it waits, and resumes it.
	parked := make(chan struct{})
	ticked := make(chan bool, 1)
	go func() {
		<-parked
		ticked <- p.Tick(0)
	}()
	rc := &recorder{}
	var resp *Response
	var err error
	if werr := r.OnWorker(context.Background(), 0, func(ctx context.Context) {
		req := probeReq(0, "tick-pause")
		req.OnPark = func() { close(parked) }
		resp, err = p.Serve(ctx, req, rc.up)
	}); werr != nil {
		t.Fatal(werr)
	}
	if err != nil || resp.Status != 200 || hv(rc.last().Headers, "x-resumed-by") != "tick" || !<-ticked {
		t.Errorf("parked stream on the loop: %+v %v, upstream got %+v", resp, err, rc.last())
	}

	// Cancelled while parked on the loop: the stream ends, and the loop
	// serves on.
	ctx, cancel := context.WithCancel(context.Background())
	if werr := r.OnWorker(ctx, 0, func(ctx context.Context) {
		req := probeReq(0, "tick-pause")
		req.OnPark = cancel
		_, err = p.Serve(ctx, req, rc.up)
	}); werr != nil {
		t.Fatal(werr)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled parked stream on the loop: %v", err)
	}
	if resp, err := p.Serve(context.Background(), probeReq(0, "x"), rc.up); err != nil || resp.Status != 200 {
		t.Errorf("worker 0 after a cancelled stream on its loop: %+v %v", resp, err)
	}

	// Worker 0's loop does not wait for worker 1.
	if werr := r.OnWorker(context.Background(), 0, func(ctx context.Context) {
		_, err = p.Serve(ctx, probeReq(1, "x"), rc.up)
	}); werr != nil {
		t.Fatal(werr)
	}
	if err == nil {
		t.Error("worker 1 served from worker 0's loop")
	}
}
