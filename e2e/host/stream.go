package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/tetratelabs/wazero/api"
)

// Request is one downstream HTTP request.
type Request struct {
	// Worker selects the worker VM, in [0, Concurrency). Connection affinity
	// is the caller's job.
	Worker int
	// Headers include :method, :path, :authority and :scheme.
	Headers                           [][2]string
	Body                              []byte
	Trailers                          [][2]string
	SourceAddress, DestinationAddress string // "ip:port"
	RouteName, ClusterName            string // xds.route_name / xds.cluster_name
	// Route, if set, selects the route again from the request headers:
	// after the wasm changed them (any request header map write), the
	// route and cluster names are read through it, as Envoy's Wasm filter
	// clears the route cache on those writes. Nil keeps the names.
	Route func(headers [][2]string) (routeName, clusterName string)
	// DynamicMetadata is the stream's filter_metadata as filters before
	// the wasm left it: namespace → field → value, a value being a string,
	// a float64, a bool or a nested map[string]any (a Struct). The wasm
	// reads it as the property metadata.filter_metadata.<namespace>.<field>….
	DynamicMetadata map[string]map[string]any
	RequestID       string
	// OnPark, if set, is called on the worker's loop each time the stream
	// pauses to wait for the plugin, before the loop moves on; it must not
	// block, nor wait for the worker (Plugin.Tick). Tests use it to know
	// when to drive ticks.
	OnPark func()
}

// Response is what goes back downstream (or what an upstream returned).
type Response struct {
	Status  int
	Headers [][2]string // without :status
	Body    []byte
	// Trailers follow Body. A BodyStream's trailers come from the stream
	// itself, at its end (TrailingBody).
	Trailers [][2]string
	// Details is response.code_details ("via_upstream",
	// "upstream_response_timeout", "wasm_fail_stream", …).
	Details string
	// Local is true for a local reply: the filter's send_local_response, the
	// router's error reply or a wasm failure.
	Local bool
	// FilterState is what the filter set with proxy_set_property, under
	// the names Envoy gives it: "wasm." and the property's path, the
	// path's segments joined with ".". Envoy keeps these as filter state
	// objects, which access logs print (%FILTER_STATE(name:PLAIN)%).
	FilterState map[string]string
	// BodyStream, when not nil, is a body that arrives in chunks (Body is
	// then empty). An upstream sets it for a body it sends as it goes;
	// Serve then runs proxy_on_response_body once per chunk, as Envoy
	// runs it per data frame, and returns as soon as the response headers
	// go downstream, with a BodyStream (a TrailingBody) of what the
	// filter lets through.
	BodyStream BodyStream
}

// BodyStream is a response body that arrives in chunks. Next returns the
// next chunk; io.EOF, possibly with a last chunk, ends the body; any other
// error is a reset of the stream. An upstream's BodyStream that is also an
// io.Closer is closed when the stream ends before its body did (a local
// reply, a reset, a failed VM), as Envoy resets the upstream request.
type BodyStream interface {
	Next(ctx context.Context) ([]byte, error)
}

// TrailingBody is a BodyStream whose body may be followed by trailers, as
// a chunked HTTP/1.1 or an HTTP/2 body can be. Trailers is asked once Next
// returned io.EOF, and returns them (nil for none). Serve hands an
// upstream's trailers to proxy_on_response_trailers, as Envoy does after
// the last data frame, whose proxy_on_response_body then says
// end_of_stream false; the BodyStream Serve returns is a TrailingBody too,
// with the trailers as the filter left them.
type TrailingBody interface {
	BodyStream
	Trailers() [][2]string
}

// Upstream is the rest of the filter chain (next filter / router).
type Upstream func(ctx context.Context, req *Request) (*Response, error)

// UpstreamError is a transport failure; the host turns it into the router's
// local reply, which still flows through proxy_on_response_headers.
type UpstreamError struct {
	Status  int
	Details string
	// Body of the router's local reply. Zero value: Envoy's default text for
	// the status.
	Body []byte
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("upstream failure %d %s", e.Status, e.Details)
}

// ErrStreamReset is returned when the plugin resets the stream with
// proxy_close_stream.
var ErrStreamReset = errors.New("stream reset by the wasm plugin")

type phase int

const (
	phaseNone phase = iota
	phaseRequest
	phaseResponse
	phaseDone
)

type localReply struct {
	status  int
	details string
	body    []byte
	headers [][2]string
}

// stream is one HTTP stream's state inside a VM.
type stream struct {
	id  uint32
	req *Request

	reqHeaders, reqTrailers   [][2]string
	respHeaders, respTrailers [][2]string
	reqBody, respBody         []byte
	hasResponse               bool
	details                   string
	// respStreamed: the response body arrives in chunks (BodyStream).
	respStreamed bool

	// Which body is readable: bodies are only buffers during their callback.
	reqBodyReadable, respBodyReadable bool

	phase         phase
	paused        phase // phase the stream waits in, or phaseNone
	pendingResume bool
	resume        chan struct{}
	local         *localReply
	localSent     bool
	reset         bool
	props         map[string][]byte
	vmCtx         context.Context
	counted       bool // in vm.parked

	// routeName and clusterName are the selected route's, until a request
	// header write clears them (routeCleared) and the next read selects
	// the route again (route).
	routeName, clusterName string
	routeCleared           bool
}

// clearRouteCache is Envoy's clearRouteCache(), which its Wasm filter calls
// after a write to the request headers and from the clear_route_cache
// foreign function.
func (st *stream) clearRouteCache() { st.routeCleared = true }

// route is the stream's route and cluster name, selected again from the
// current request headers when a header write cleared the cache.
func (st *stream) route() (routeName, clusterName string) {
	if st.routeCleared && st.req.Route != nil {
		st.routeName, st.clusterName = st.req.Route(st.reqHeaders)
	}
	st.routeCleared = false
	return st.routeName, st.clusterName
}

func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

func lowerPairs(in [][2]string) [][2]string {
	if len(in) == 0 {
		return nil
	}
	out := make([][2]string, len(in))
	for i, p := range in {
		out[i] = [2]string{lower(p[0]), p[1]}
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

// signal wakes the stream's wait if it is parked (a stream that never
// parked has no channel yet: the send is skipped, and the turn that would
// park it sees what the signal was for first).
func (s *stream) signal() {
	select {
	case s.resume <- struct{}{}:
	default:
	}
}

// Serve runs one HTTP stream through the plugin on req.Worker the way Envoy's
// filter chain does. The callbacks run on the worker's loop; the calling
// goroutine (the connection's) only waits for them, and waits off the loop
// while the stream is parked or its request is upstream, so the worker keeps
// serving its other streams meanwhile. Called with the context of
// Runtime.OnWorker for that worker, Serve runs the same turns on the loop
// itself instead.
func (p *Plugin) Serve(ctx context.Context, req *Request, next Upstream) (*Response, error) {
	if req.Worker < 0 || req.Worker >= len(p.workers) {
		return nil, fmt.Errorf("worker %d out of range [0,%d)", req.Worker, len(p.workers))
	}
	if p.closed.Load() {
		return nil, errors.New("plugin is closed")
	}
	w := p.workers[req.Worker]
	sr := &streamRun{p: p, w: w, ctx: ctx, req: req, next: next}
	if on := loopOf(ctx); on == w.loop {
		sr.onLoop = true
	} else if on != nil {
		// The caller's loop would wait for another's: loops never do.
		return nil, fmt.Errorf("worker %d served from the loop of another worker", req.Worker)
	} else {
		sr.done = make(chan struct{}, 1)
	}
	for !sr.step() {
	}
	return sr.resp, sr.err
}

// step runs one turn of the stream on its worker's loop (posted there and
// waited for, or run in place when the caller is the loop), then gets what
// the turn said the stream needs next. It reports true when the stream is
// over (resp, err are the answer) or when its response headers went
// downstream ahead of a streamed body.
func (sr *streamRun) step() bool {
	if sr.onLoop {
		sr.run()
	} else if !sr.w.loop.post(sr) {
		sr.resp, sr.err, sr.need = nil, ErrPluginClosed, needNothing
		return true
	} else {
		<-sr.done
	}
	switch sr.need {
	case needNothing, needHeaders:
		return true
	case needResume:
		sr.parkErr = sr.waitResume()
		sr.resumed = sr.parkErr == nil
	case needUpstream:
		sr.upResp, sr.upErr = sr.next(sr.ctx, sr.up)
	case needChunk:
		if len(sr.fwd) > 0 {
			// The client takes what passed first; the next chunk is
			// fetched on its next read.
			return true
		}
		sr.fetchChunk()
	case needPassThrough:
		resp, err := sr.p.passThrough(sr.ctx, sr.up, sr.next)
		sr.resp, sr.err = resp, err
		if sr.st == nil {
			return true
		}
	}
	return false
}

// fetchChunk reads the upstream's next chunk, off the loop, for the next
// turn.
func (sr *streamRun) fetchChunk() {
	sr.chunk, sr.chunkErr = sr.upBody.Next(sr.ctx)
	sr.need = needTurn
}

// downstreamBody is the body of a streamed response as the filter lets it
// through: each Next runs the stream's turns until the filter forwards
// data or the stream ends.
type downstreamBody struct{ sr *streamRun }

// Trailers are the response trailers as the filter left them, once Next
// returned io.EOF.
func (d downstreamBody) Trailers() [][2]string {
	if sr := d.sr; sr.over && sr.err == nil {
		return sr.st.respTrailers
	}
	return nil
}

func (d downstreamBody) Next(context.Context) ([]byte, error) {
	sr := d.sr
	for {
		if len(sr.fwd) > 0 {
			b := sr.fwd
			sr.fwd = nil
			return b, nil
		}
		if sr.over {
			if sr.err != nil {
				return nil, sr.err
			}
			return nil, io.EOF
		}
		if sr.need == needHeaders || sr.need == needChunk {
			sr.fetchChunk()
		}
		if sr.step() && sr.need == needNothing {
			sr.over = true
		}
	}
}

// A streamRun drives one stream. Serve and the worker's loop take turns: a
// turn runs on the loop up to the next point where the stream needs
// something the VM cannot give (the plugin resuming it, the upstream's
// answer, a fail-open pass-through), says which in need, and Serve gets it
// off the loop before posting the next turn.
type streamRun struct {
	p    *Plugin
	w    *worker
	ctx  context.Context
	req  *Request
	next Upstream
	done chan struct{} // a turn ended (capacity 1, so the loop never waits)
	// onLoop: the caller is the worker's loop (Runtime.OnWorker), which
	// runs the turns in place; done is then nil.
	onLoop bool

	// Set by the first turn: the VM and the stream (nil when the stream
	// never reached a VM).
	v  *vm
	st *stream

	// Where st and the request sent upstream live: one allocation per
	// stream rather than three.
	stream stream
	upReq  Request

	at      stage
	idx     int  // next callback of the direction: headers, body, trailers
	resumed bool // the stream was parked and the plugin resumed it
	local   bool // the response in flight is a local reply

	// What Serve brings back between turns.
	parkErr error
	upResp  *Response
	upErr   error

	// A streamed response body: upBody is the upstream's, chunk and
	// chunkErr what its last Next returned; buffered is what the filter
	// had the host buffer (StopIterationAndBuffer), fwd what it let
	// through and the client has yet to read; headersSent says the
	// response headers went downstream; over that the stream ended.
	upBody      BodyStream
	chunk       []byte
	chunkErr    error
	buffered    []byte
	fwd         []byte
	headersSent bool
	over        bool
	upEnded     bool // upBody returned its end or an error

	// What a turn leaves for Serve.
	need streamNeed
	up   *Request // for needUpstream and needPassThrough
	resp *Response
	err  error
}

type stage int

const (
	stageBegin    stage = iota
	stageRequest        // request callbacks from idx
	stageUpstream       // the upstream answered with upResp, upErr
	stageResponse       // response callbacks from idx
	stageBody           // a chunk of a streamed response body arrived
	stageFinish         // resp, err are final; end the stream in the VM
)

type streamNeed int

const (
	needNothing     streamNeed = iota // resp, err are the answer
	needResume                        // parked: wait for the plugin
	needUpstream                      // send up to the next filter
	needPassThrough                   // fail open: send up without the plugin; its answer is final
	needChunk                         // the next chunk of the upstream's streamed body
	needHeaders                       // the response headers went downstream; the body streams
	needTurn                          // nothing: what the next turn needs is there
)

func (sr *streamRun) run() {
	switch sr.at {
	case stageBegin:
		sr.need = sr.begin()
	case stageRequest:
		sr.need = sr.request()
	case stageUpstream:
		sr.need = sr.upstream()
	case stageResponse:
		sr.need = sr.response()
	case stageBody:
		sr.need = sr.body()
	default:
		sr.need = sr.finish()
	}
	if sr.done != nil {
		sr.done <- struct{}{}
	}
}

func failStreamResponse() *Response {
	return &Response{Status: 503, Details: "wasm_fail_stream", Local: true}
}

func requestHeaderMap(req *Request) [][2]string {
	hs := make([][2]string, 0, len(req.Headers)+2)
	hasScheme, hasID := false, false
	for _, h := range req.Headers {
		k := lower(h[0])
		switch k {
		case ":scheme":
			hasScheme = true
		case "x-request-id":
			hasID = true
		}
		hs = append(hs, [2]string{k, h[1]})
	}
	if !hasScheme {
		hs = append(hs, [2]string{":scheme", "http"})
	}
	if !hasID && req.RequestID != "" {
		hs = append(hs, [2]string{"x-request-id", req.RequestID})
	}
	return hs
}

func (p *Plugin) passThrough(ctx context.Context, req *Request, next Upstream) (*Response, error) {
	resp, err := next(ctx, req)
	return routed(ctx, resp, err)
}

// routed is the upstream's answer as the router hands it back: a failure
// becomes the router's local reply, unless the stream itself was
// cancelled (ctx's error is then the answer).
func routed(ctx context.Context, resp *Response, err error) (*Response, error) {
	if err != nil {
		var ue *UpstreamError
		if errors.As(err, &ue) {
			return routerReply(ue), nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return routerReply(&UpstreamError{Status: 503, Details: "upstream_reset_before_response_started{connection_failure}"}), nil
	}
	if resp.Details == "" {
		resp.Details = "via_upstream"
	}
	return resp, nil
}

func routerReply(ue *UpstreamError) *Response {
	body := ue.Body
	if body == nil {
		switch ue.Status {
		case 504:
			body = []byte("upstream request timeout")
		case 503:
			body = []byte("upstream connect error or disconnect/reset before headers. reset reason: connection failure")
		}
	}
	r := &Response{Status: ue.Status, Body: body, Details: ue.Details, Local: true}
	if len(body) > 0 {
		r.Headers = [][2]string{{"content-length", itoa(len(body))}, {"content-type", "text/plain"}}
	}
	return r
}

func (sr *streamRun) begin() streamNeed {
	p, w, req := sr.p, sr.w, sr.req
	v := w.vm
	if v.failed {
		switch p.policy {
		case failOpen:
			sr.up = req
			return needPassThrough
		case failReload:
			nv, err := p.newVM(p.ctx, req.Worker)
			if err != nil {
				p.rt.log(LogError, p.cfg.Name, "FAIL_RELOAD: "+err.Error())
				sr.resp = failStreamResponse()
				return needNothing
			}
			v.close()
			w.setVM(nv)
			v = nv
			p.reloads.Add(1)
		default:
			sr.resp = failStreamResponse()
			return needNothing
		}
	}
	st := &sr.stream
	*st = stream{req: req, vmCtx: v.ctx, routeName: req.RouteName, clusterName: req.ClusterName}
	st.reqHeaders = requestHeaderMap(req)
	st.reqBody = req.Body
	st.reqTrailers = lowerPairs(req.Trailers)
	st.id = v.nextID
	v.nextID++
	v.streams[st.id] = st
	sr.v, sr.st = v, st
	v.call(st.id, v.fnContextCreate, uint64(st.id), rootContextID)
	if v.failed {
		return sr.failedMidStream()
	}
	st.phase = phaseRequest
	sr.at = stageRequest
	return sr.request()
}

// end makes resp, err the answer and ends the stream in the VM.
func (sr *streamRun) end(resp *Response, err error) streamNeed {
	sr.resp, sr.err = resp, err
	return sr.finish()
}

// finish runs the stream's last callbacks (Envoy's onLog, onDone,
// onDelete) and forgets it.
func (sr *streamRun) finish() streamNeed {
	w, v, st := sr.w, sr.v, sr.st
	if c, ok := sr.upBody.(io.Closer); ok && !sr.upEnded {
		_ = c.Close()
	}
	if w.vm == v && !v.failed && !v.closed {
		v.call(st.id, v.fnLog, uint64(st.id))
		v.call(st.id, v.fnDone, uint64(st.id))
		v.call(st.id, v.fnDelete, uint64(st.id))
	}
	if sr.resp != nil && sr.resp.FilterState == nil {
		sr.resp.FilterState = st.filterState()
	}
	delete(v.streams, st.id)
	st.phase = phaseDone
	v.syncParked(st)
	return needNothing
}

// failedMidStream handles a VM failure in the middle of a stream: fail
// closed gives Envoy's 503, fail open lets the request through without the
// plugin.
func (sr *streamRun) failedMidStream() streamNeed {
	p, st := sr.p, sr.st
	if p.policy == failOpen && st.phase == phaseRequest {
		r := *st.req
		r.Headers = st.reqHeaders
		r.Body = st.reqBody
		sr.up = &r
		sr.at = stageFinish
		return needPassThrough
	}
	if p.policy == failOpen && st.hasResponse {
		return sr.end(st.buildResponse(), nil)
	}
	return sr.end(failStreamResponse(), nil)
}

// park leaves the stream waiting in ph for proxy_continue_stream (or a local
// reply or reset); the next turn starts where this one stopped.
func (sr *streamRun) park(ph phase) streamNeed {
	st := sr.st
	if st.resume == nil {
		// Made on the first park: most streams never wait.
		st.resume = make(chan struct{}, 1)
	}
	st.paused = ph
	sr.v.syncParked(st)
	if st.req.OnPark != nil {
		st.req.OnPark()
	}
	return needResume
}

// waitResume is the parked stream's wait, for the plugin to resume it, the
// stream's context to end or the plugin to close. Off the loop it only
// waits. On the loop, only the loop's other tasks can resume the stream,
// so it runs them meanwhile, as a dispatcher goes on with other events
// while a filter holds a stream.
func (sr *streamRun) waitResume() error {
	st, l := sr.st, sr.w.loop
	for {
		var wake <-chan struct{} // nil off the loop: never ready
		if sr.onLoop {
			wake = l.wake
			if l.runNext() {
				// Look again without waiting: the task may have resumed
				// the stream, or more may be queued.
				wake = alwaysReady
			}
		}
		select {
		case <-st.resume:
			return nil
		case <-sr.ctx.Done():
			return sr.ctx.Err()
		case <-st.vmCtx.Done():
			// The plugin was closed under a parked stream.
			return ErrPluginClosed
		case <-wake:
		}
	}
}

// alwaysReady is a closed channel: a select case on it never waits.
var alwaysReady = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// unparkFailed ends the stream if its wait ended without the plugin
// resuming it.
func (sr *streamRun) unparkFailed() (streamNeed, bool) {
	if sr.parkErr == nil {
		return 0, false
	}
	err := sr.parkErr
	sr.parkErr = nil
	sr.st.paused = phaseNone
	sr.v.syncParked(sr.st)
	return sr.end(nil, err), true
}

// ErrPluginClosed ends streams that were paused when the plugin closed.
var ErrPluginClosed = errors.New("wasm plugin closed")

const actionPause = 1

// direction is what the request and the response callbacks differ in:
// the three exports, what the guest sees (whose lengths each callback is
// given), and where a pause parks the stream.
type direction struct {
	phase                         phase
	fnHeaders, fnBody, fnTrailers api.Function
	headers, trailers             *[][2]string
	body                          *[]byte
	bodyReadable                  *bool
	// arrived is the request as it came downstream, when which callbacks
	// run and end_of_stream follow it rather than what the guest sees.
	arrived *Request
	// streamed: the body arrives in chunks after the headers callback.
	streamed bool
}

// callbacks runs the callbacks of d from sr.idx on and applies what each
// asked for: a deferred local reply, a pause, a reset. When a callback is
// followed by another of the same direction (body after headers, trailers
// after body), a Pause does not park the stream: as in Envoy, the next
// callback still runs and its Continue resumes iteration
// (FilterDataStatus::Continue after StopIteration). It returns done once
// all three have run, else what the stream needs next.
func (sr *streamRun) callbacks(d *direction) (n streamNeed, done bool) {
	if n, over := sr.unparkFailed(); over {
		return n, false
	}
	w, v, st := sr.w, sr.v, sr.st
	for ; sr.idx < 3; sr.idx++ {
		var act uint64 // resumed: continue unless a local reply or reset arrived
		more := false
		if sr.resumed {
			sr.resumed = false
		} else {
			hasBody, hasTrailers := len(*d.body) > 0, len(*d.trailers) > 0
			if d.arrived != nil {
				hasBody, hasTrailers = len(d.arrived.Body) > 0, len(d.arrived.Trailers) > 0
			}
			switch sr.idx {
			case 0:
				eos := !hasBody && !hasTrailers && !d.streamed
				more = !eos
				act = v.call(st.id, d.fnHeaders, uint64(st.id), uint64(len(*d.headers)), b2u(eos))
			case 1:
				if !hasBody {
					continue
				}
				more = hasTrailers
				*d.bodyReadable = true
				act = v.call(st.id, d.fnBody, uint64(st.id), uint64(len(*d.body)), b2u(!hasTrailers))
				*d.bodyReadable = false
			case 2:
				if !hasTrailers {
					continue
				}
				act = v.call(st.id, d.fnTrailers, uint64(st.id), uint64(len(*d.trailers)))
			}
		}
		if v.failed || w.vm != v {
			return sr.failedMidStream(), false
		}
		if st.reset {
			return sr.end(nil, ErrStreamReset), false
		}
		if st.local != nil {
			if d.phase == phaseRequest {
				return sr.sendLocal(), false
			}
			return sr.replaceWithLocal(), false
		}
		if d.streamed {
			return sr.afterStreamedHeaders(act), false
		}
		if uint32(act) == actionPause && !more {
			if st.pendingResume {
				// The callback continued the stream before pausing it.
				st.pendingResume = false
				continue
			}
			return sr.park(d.phase), false
		}
	}
	return 0, true
}

// request runs the request callbacks, then hands the request upstream.
func (sr *streamRun) request() streamNeed {
	v, st, req := sr.v, sr.st, sr.req
	if n, done := sr.callbacks(&direction{
		phase:     phaseRequest,
		fnHeaders: v.fnReqHeaders, fnBody: v.fnReqBody, fnTrailers: v.fnReqTrailers,
		headers: &st.reqHeaders, body: &st.reqBody, trailers: &st.reqTrailers,
		bodyReadable: &st.reqBodyReadable,
		arrived:      req,
	}); !done {
		return n
	}
	routeName, clusterName := st.route()
	sr.upReq = Request{
		Worker: req.Worker, Headers: st.reqHeaders, Body: st.reqBody, Trailers: st.reqTrailers,
		SourceAddress: req.SourceAddress, DestinationAddress: req.DestinationAddress,
		RouteName: routeName, ClusterName: clusterName, Route: req.Route, RequestID: req.RequestID,
	}
	sr.up = &sr.upReq
	sr.at = stageUpstream
	return needUpstream
}

// upstream takes the upstream's answer (or failure, which the router turns
// into a local reply) into the response callbacks.
func (sr *streamRun) upstream() streamNeed {
	resp, err := routed(sr.ctx, sr.upResp, sr.upErr)
	sr.upResp, sr.upErr = nil, nil
	if err != nil {
		return sr.end(nil, err)
	}
	if sr.w.vm != sr.v || sr.v.failed {
		return sr.failedMidStream()
	}
	return sr.respond(resp)
}

// sendLocal turns a deferred proxy_send_local_response into the reply,
// which then passes through proxy_on_response_headers like in Envoy.
func (sr *streamRun) sendLocal() streamNeed {
	room := 0
	if len(sr.st.local.body) > 0 {
		room = 2 // content-length and content-type
	}
	resp, hasContentType := sr.st.takeLocal(room)
	sr.st.localSent = true
	// As Envoy's local reply preparation does: the plugin's headers are
	// added first, and text/plain only fills in a missing content-type.
	if len(resp.Body) > 0 {
		resp.Headers = append(resp.Headers, [2]string{"content-length", itoa(len(resp.Body))})
		if !hasContentType {
			resp.Headers = append(resp.Headers, [2]string{"content-type", "text/plain"})
		}
	}
	return sr.respond(resp)
}

// respond starts the response callbacks on resp.
func (sr *streamRun) respond(resp *Response) streamNeed {
	st := sr.st
	st.phase = phaseResponse
	st.hasResponse = true
	st.details = resp.Details
	st.respHeaders = make([][2]string, 0, len(resp.Headers)+1)
	st.respHeaders = append(st.respHeaders, [2]string{":status", itoa(resp.Status)})
	for _, h := range resp.Headers {
		if h[0] == ":status" {
			continue
		}
		st.respHeaders = append(st.respHeaders, [2]string{lower(h[0]), h[1]})
	}
	st.respBody = resp.Body
	st.respTrailers = lowerPairs(resp.Trailers)
	st.respStreamed = resp.BodyStream != nil
	sr.upBody = resp.BodyStream
	sr.local = resp.Local
	sr.idx = 0
	sr.at = stageResponse
	return sr.response()
}

// response runs the response callbacks, with the same rules as request,
// then ends the stream with the response they leave.
func (sr *streamRun) response() streamNeed {
	v, st := sr.v, sr.st
	if n, done := sr.callbacks(&direction{
		phase:     phaseResponse,
		fnHeaders: v.fnRespHeaders, fnBody: v.fnRespBody, fnTrailers: v.fnRespTrailers,
		headers: &st.respHeaders, body: &st.respBody, trailers: &st.respTrailers,
		bodyReadable: &st.respBodyReadable,
		streamed:     st.respStreamed,
	}); !done {
		return n
	}
	out := st.buildResponse()
	out.Local = sr.local
	return sr.end(out, nil)
}

// replaceWithLocal ends the stream with the local reply a response
// callback sent: it replaces the response, and does not run the response
// callbacks again.
func (sr *streamRun) replaceWithLocal() streamNeed {
	r, _ := sr.st.takeLocal(0)
	return sr.end(r, nil)
}

// takeLocal takes the local reply the plugin sent as a Response, with its
// header names in lower case and room for that many more headers, and says
// whether it set a content-type.
func (st *stream) takeLocal(room int) (resp *Response, hasContentType bool) {
	lr := st.local
	st.local = nil
	resp = &Response{Status: lr.status, Body: lr.body, Details: lr.details, Local: true}
	if n := len(lr.headers) + room; n > 0 {
		resp.Headers = make([][2]string, 0, n)
	}
	for _, h := range lr.headers {
		k := lower(h[0])
		hasContentType = hasContentType || k == "content-type"
		resp.Headers = append(resp.Headers, [2]string{k, h[1]})
	}
	return resp, hasContentType
}

// afterStreamedHeaders follows proxy_on_response_headers of a response
// whose body streams. Continue sends the headers downstream now; Pause
// holds them until a body callback continues (Envoy's StopIteration on
// headers with more data to come), so the first chunk is fetched first.
func (sr *streamRun) afterStreamedHeaders(act uint64) streamNeed {
	st := sr.st
	sr.at = stageBody
	if uint32(act) == actionPause && !st.pendingResume {
		return needChunk
	}
	st.pendingResume = false
	return sr.sendHeaders()
}

// sendHeaders hands the response headers downstream, with the body to
// stream behind them.
func (sr *streamRun) sendHeaders() streamNeed {
	sr.headersSent = true
	sr.resp = sr.st.buildResponse()
	sr.resp.Body = nil
	sr.resp.Local = sr.local
	sr.resp.BodyStream = downstreamBody{sr}
	sr.resp.FilterState = sr.st.filterState()
	return needHeaders
}

// filterState is what the filter set with proxy_set_property, as
// Response.FilterState names it; nil when it set nothing.
func (st *stream) filterState() map[string]string {
	if len(st.props) == 0 {
		return nil
	}
	fs := make(map[string]string, len(st.props))
	for k, v := range st.props {
		fs["wasm."+k] = string(v)
	}
	return fs
}

// body runs proxy_on_response_body on the chunk the upstream sent (sr.chunk),
// as Envoy runs it per data frame: the callback sees what the host buffered
// for it so far followed by the chunk, with end_of_stream on the last one
// unless trailers follow, which then go to proxy_on_response_trailers.
// Continue forwards all of it; Pause (StopIterationAndBuffer) keeps it
// buffered for the next callback. An upstream reset ends the stream.
func (sr *streamRun) body() streamNeed {
	if n, over := sr.unparkFailed(); over {
		return n
	}
	if sr.resumed {
		// proxy_continue_stream after a Pause at the end of the stream.
		sr.resumed = false
		return sr.endStreamedBody()
	}
	v, st := sr.v, sr.st
	chunk, err := sr.chunk, sr.chunkErr
	sr.chunk, sr.chunkErr = nil, nil
	ended := errors.Is(err, io.EOF)
	sr.upEnded = err != nil
	if err != nil && !ended {
		return sr.end(nil, err)
	}
	if tb, ok := sr.upBody.(TrailingBody); ok && ended {
		st.respTrailers = lowerPairs(tb.Trailers())
	}
	eos := ended && len(st.respTrailers) == 0
	// Envoy hands on no empty data frame ahead of trailers.
	if !ended || eos || len(chunk) > 0 {
		st.respBody = append(sr.buffered, chunk...)
		st.respBodyReadable = true
		act := v.call(st.id, v.fnRespBody, uint64(st.id), uint64(len(st.respBody)), b2u(eos))
		st.respBodyReadable = false
		if n, over := sr.streamedCallbackEnded(); over {
			return n
		}
		if uint32(act) == actionPause && !st.pendingResume {
			sr.buffered = st.respBody
			switch {
			case eos:
				return sr.park(phaseResponse)
			case !ended:
				return needChunk
			}
			// Trailers follow: they decide what the buffered body does.
		} else {
			st.pendingResume = false
			sr.fwd = append(sr.fwd, st.respBody...)
			sr.buffered = nil
		}
		st.respBody = nil
	}
	if !ended {
		if !sr.headersSent {
			return sr.sendHeaders()
		}
		return needChunk
	}
	if !eos {
		act := v.call(st.id, v.fnRespTrailers, uint64(st.id), uint64(len(st.respTrailers)))
		if n, over := sr.streamedCallbackEnded(); over {
			return n
		}
		if uint32(act) == actionPause && !st.pendingResume {
			return sr.park(phaseResponse)
		}
		st.pendingResume = false
	}
	return sr.endStreamedBody()
}

// streamedCallbackEnded ends the stream if a response body or trailers
// callback of a streamed response failed the VM, reset the stream or sent
// a local reply, and reports whether it did.
func (sr *streamRun) streamedCallbackEnded() (streamNeed, bool) {
	w, v, st := sr.w, sr.v, sr.st
	switch {
	case v.failed || w.vm != v:
		if sr.headersSent {
			return sr.end(nil, errFailedMidBody), true
		}
		return sr.failedMidStream(), true
	case st.reset || (st.local != nil && sr.headersSent):
		// A local reply after the headers went out can only reset.
		return sr.end(nil, ErrStreamReset), true
	case st.local != nil:
		return sr.replaceWithLocal(), true
	}
	return 0, false
}

// endStreamedBody ends a streamed response whose filter callbacks are
// done: what the filter still held goes downstream, then its trailers.
func (sr *streamRun) endStreamedBody() streamNeed {
	st := sr.st
	sr.fwd = append(sr.fwd, sr.buffered...)
	sr.buffered, st.respBody = nil, nil
	if !sr.headersSent {
		// The filter held everything: the client gets one whole response.
		out := st.buildResponse()
		out.Body, sr.fwd = sr.fwd, nil
		out.Local = sr.local
		return sr.end(out, nil)
	}
	return sr.end(nil, nil)
}

// errFailedMidBody resets a stream whose VM failed after its response
// headers went downstream: Envoy can no longer answer it with a 503.
var errFailedMidBody = errors.New("wasm VM failed in the middle of a streamed response body")

// syncParked keeps v.parked equal to the number of v's streams waiting for
// the plugin to continue or answer them. Loop only; called after st.paused,
// st.local, st.reset or st.phase change.
func (v *vm) syncParked(st *stream) {
	want := st.paused != phaseNone && st.local == nil && !st.reset && st.phase != phaseDone
	if want == st.counted {
		return
	}
	st.counted = want
	if want {
		v.parked.Add(1)
	} else {
		v.parked.Add(-1)
	}
}

func (st *stream) buildResponse() *Response {
	out := &Response{Details: st.details, Body: st.respBody, Trailers: st.respTrailers}
	if n := len(st.respHeaders) - 1; n > 0 {
		// Sized once: every header but :status is kept.
		out.Headers = make([][2]string, 0, n)
	}
	for _, h := range st.respHeaders {
		if h[0] == ":status" {
			if n, err := strconv.Atoi(h[1]); err == nil {
				out.Status = n
			}
			continue
		}
		out.Headers = append(out.Headers, h)
	}
	return out
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
