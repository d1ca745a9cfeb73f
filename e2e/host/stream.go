package host

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	RequestID                         string
	// OnPark, if set, is called each time the stream pauses to wait for
	// the plugin, before the worker is released; it must not block. Tests
	// use it to know when to drive ticks.
	OnPark func()
}

// Response is what goes back downstream (or what an upstream returned).
type Response struct {
	Status   int
	Headers  [][2]string // without :status
	Body     []byte
	Trailers [][2]string
	// Details is response.code_details ("via_upstream",
	// "upstream_response_timeout", "wasm_fail_stream", …).
	Details string
	// Local is true for a local reply: the filter's send_local_response, the
	// router's error reply or a wasm failure.
	Local bool
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

func (s *stream) signal() {
	select {
	case s.resume <- struct{}{}:
	default:
	}
}

// Serve runs one HTTP stream through the plugin on req.Worker the way Envoy's
// filter chain does. See the package documentation of the API in the issue
// for the order of callbacks.
func (p *Plugin) Serve(ctx context.Context, req *Request, next Upstream) (*Response, error) {
	if req.Worker < 0 || req.Worker >= len(p.workers) {
		return nil, fmt.Errorf("worker %d out of range [0,%d)", req.Worker, len(p.workers))
	}
	if p.closed.Load() {
		return nil, errors.New("plugin is closed")
	}
	w := p.workers[req.Worker]
	w.mu.Lock()
	v := w.vm
	if v.failed {
		switch p.policy {
		case failOpen:
			w.mu.Unlock()
			return p.passThrough(ctx, req, next)
		case failReload:
			nv, err := p.newVM(p.ctx, req.Worker)
			if err != nil {
				p.rt.log(LogError, p.cfg.Name, "FAIL_RELOAD: "+err.Error())
				w.mu.Unlock()
				return failStreamResponse(), nil
			}
			v.close()
			w.vm = nv
			v = nv
			p.reloads.Add(1)
		default:
			w.mu.Unlock()
			return failStreamResponse(), nil
		}
	}
	st := &stream{req: req, resume: make(chan struct{}, 1), vmCtx: v.ctx}
	st.reqHeaders = requestHeaderMap(req)
	st.reqBody = req.Body
	st.reqTrailers = lowerPairs(req.Trailers)
	st.id = v.nextID
	v.nextID++
	v.streams[st.id] = st
	resp, err := p.runStream(ctx, w, v, st, next)
	if w.vm == v && !v.failed && !v.closed {
		v.call(st.id, v.fnLog, uint64(st.id))
		v.call(st.id, v.fnDone, uint64(st.id))
		v.call(st.id, v.fnDelete, uint64(st.id))
	}
	delete(v.streams, st.id)
	st.phase = phaseDone
	w.mu.Unlock()
	return resp, err
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

// failed handles a VM failure in the middle of a stream: fail closed gives
// Envoy's 503, fail open lets the request through without the plugin.
func (p *Plugin) failedMidStream(ctx context.Context, w *worker, st *stream, next Upstream) (*Response, error) {
	if p.policy == failOpen && st.phase == phaseRequest {
		r := *st.req
		r.Headers = st.reqHeaders
		r.Body = st.reqBody
		w.mu.Unlock()
		resp, err := p.passThrough(ctx, &r, next)
		w.mu.Lock()
		return resp, err
	}
	if p.policy == failOpen && st.hasResponse {
		return st.buildResponse(), nil
	}
	return failStreamResponse(), nil
}

// wait parks the stream until proxy_continue_stream (or a local reply)
// arrives, with the worker unlocked so the VM keeps serving.
func (st *stream) wait(ctx context.Context, w *worker, ph phase) error {
	if st.pendingResume || st.local != nil {
		st.pendingResume = false
		return nil
	}
	st.paused = ph
	vmDone := st.vmCtx.Done()
	if st.req.OnPark != nil {
		st.req.OnPark()
	}
	w.mu.Unlock()
	select {
	case <-st.resume:
		w.mu.Lock()
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		st.paused = phaseNone
		return ctx.Err()
	case <-vmDone:
		// The plugin was closed under a parked stream.
		w.mu.Lock()
		st.paused = phaseNone
		return ErrPluginClosed
	}
}

// ErrPluginClosed ends streams that were paused when the plugin closed.
var ErrPluginClosed = errors.New("wasm plugin closed")

const actionPause = 1

func (p *Plugin) runStream(ctx context.Context, w *worker, v *vm, st *stream, next Upstream) (*Response, error) {
	v.call(st.id, v.fnContextCreate, uint64(st.id), rootContextID)
	if v.failed {
		return p.failedMidStream(ctx, w, st, next)
	}
	st.phase = phaseRequest
	req := st.req
	endAfterHeaders := len(req.Body) == 0 && len(req.Trailers) == 0
	act := v.call(st.id, v.fnReqHeaders, uint64(st.id), uint64(len(st.reqHeaders)), b2u(endAfterHeaders))
	if r, err, done := p.afterRequestCallback(ctx, w, v, st, next, act, !endAfterHeaders); done {
		return r, err
	}
	if len(req.Body) > 0 {
		st.reqBodyReadable = true
		act = v.call(st.id, v.fnReqBody, uint64(st.id), uint64(len(st.reqBody)), b2u(len(req.Trailers) == 0))
		st.reqBodyReadable = false
		if r, err, done := p.afterRequestCallback(ctx, w, v, st, next, act, len(req.Trailers) > 0); done {
			return r, err
		}
	}
	if len(req.Trailers) > 0 {
		act = v.call(st.id, v.fnReqTrailers, uint64(st.id), uint64(len(st.reqTrailers)))
		if r, err, done := p.afterRequestCallback(ctx, w, v, st, next, act, false); done {
			return r, err
		}
	}

	up := &Request{
		Worker: req.Worker, Headers: st.reqHeaders, Body: st.reqBody, Trailers: st.reqTrailers,
		SourceAddress: req.SourceAddress, DestinationAddress: req.DestinationAddress,
		RouteName: req.RouteName, ClusterName: req.ClusterName, RequestID: req.RequestID,
	}
	w.mu.Unlock()
	resp, err := next(ctx, up)
	w.mu.Lock()
	if err != nil {
		var ue *UpstreamError
		switch {
		case errors.As(err, &ue):
			resp = routerReply(ue)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		default:
			resp = routerReply(&UpstreamError{Status: 503, Details: "upstream_reset_before_response_started{connection_failure}"})
		}
	} else if resp.Details == "" {
		resp.Details = "via_upstream"
	}
	if w.vm != v || v.failed {
		return p.failedMidStream(ctx, w, st, next)
	}
	return p.respond(ctx, w, v, st, next, resp)
}

// afterRequestCallback applies what a request-path callback asked for:
// a deferred local reply, a pause, a reset. done means the stream is over.
// more says another callback of the same direction follows (body after
// headers, trailers after body): as in Envoy, a Pause then does not park the
// stream, because the next callback still runs and its Continue resumes
// iteration (FilterDataStatus::Continue after StopIteration).
func (p *Plugin) afterRequestCallback(ctx context.Context, w *worker, v *vm, st *stream, next Upstream, act uint64, more bool) (*Response, error, bool) {
	for {
		if v.failed || w.vm != v {
			r, err := p.failedMidStream(ctx, w, st, next)
			return r, err, true
		}
		if st.reset {
			return nil, ErrStreamReset, true
		}
		if st.local != nil {
			r, err := p.sendLocal(ctx, w, v, st, next)
			return r, err, true
		}
		if uint32(act) != actionPause || more {
			return nil, nil, false
		}
		if err := st.wait(ctx, w, phaseRequest); err != nil {
			return nil, err, true
		}
		act = 0 // resumed: continue unless a local reply or reset arrived
	}
}

// sendLocal turns a deferred proxy_send_local_response into the reply,
// which then passes through proxy_on_response_headers like in Envoy.
func (p *Plugin) sendLocal(ctx context.Context, w *worker, v *vm, st *stream, next Upstream) (*Response, error) {
	lr := st.local
	st.local = nil
	st.localSent = true
	resp := &Response{Status: lr.status, Body: lr.body, Details: lr.details, Local: true}
	hasContentType := false
	for _, h := range lr.headers {
		k := lower(h[0])
		hasContentType = hasContentType || k == "content-type"
		resp.Headers = append(resp.Headers, [2]string{k, h[1]})
	}
	// As Envoy's local reply preparation does: the plugin's headers are
	// added first, and text/plain only fills in a missing content-type.
	if len(lr.body) > 0 {
		resp.Headers = append(resp.Headers, [2]string{"content-length", itoa(len(lr.body))})
		if !hasContentType {
			resp.Headers = append(resp.Headers, [2]string{"content-type", "text/plain"})
		}
	}
	return p.respond(ctx, w, v, st, next, resp)
}

func (p *Plugin) respond(ctx context.Context, w *worker, v *vm, st *stream, next Upstream, resp *Response) (*Response, error) {
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
	local := resp.Local

	steps := 0
	run := func(more bool, fn func() uint64) (*Response, error, bool) {
		act := fn()
		for {
			if v.failed || w.vm != v {
				r, err := p.failedMidStream(ctx, w, st, next)
				return r, err, true
			}
			if st.reset {
				return nil, ErrStreamReset, true
			}
			if st.local != nil {
				// A local reply after response headers replaces the response;
				// it does not run the response callbacks again.
				lr := st.local
				st.local = nil
				r := &Response{Status: lr.status, Body: lr.body, Details: lr.details, Local: true}
				for _, h := range lr.headers {
					r.Headers = append(r.Headers, [2]string{lower(h[0]), h[1]})
				}
				return r, nil, true
			}
			if uint32(act) != actionPause || more {
				return nil, nil, false
			}
			if err := st.wait(ctx, w, phaseResponse); err != nil {
				return nil, err, true
			}
			act = 0
		}
	}
	steps++
	eos := len(st.respBody) == 0 && len(st.respTrailers) == 0
	if r, err, done := run(!eos, func() uint64 {
		return v.call(st.id, v.fnRespHeaders, uint64(st.id), uint64(len(st.respHeaders)), b2u(eos))
	}); done {
		return r, err
	}
	if len(st.respBody) > 0 {
		if r, err, done := run(len(st.respTrailers) > 0, func() uint64 {
			st.respBodyReadable = true
			defer func() { st.respBodyReadable = false }()
			return v.call(st.id, v.fnRespBody, uint64(st.id), uint64(len(st.respBody)), b2u(len(st.respTrailers) == 0))
		}); done {
			return r, err
		}
	}
	if len(st.respTrailers) > 0 {
		if r, err, done := run(false, func() uint64 {
			return v.call(st.id, v.fnRespTrailers, uint64(st.id), uint64(len(st.respTrailers)))
		}); done {
			return r, err
		}
	}
	out := st.buildResponse()
	out.Local = local
	return out, nil
}

func (st *stream) buildResponse() *Response {
	out := &Response{Details: st.details, Body: st.respBody, Trailers: st.respTrailers}
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
