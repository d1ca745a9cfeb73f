package filter

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/filter/engine"
)

// The callbacks, in the order Envoy calls them. Each reads what Envoy
// hands it, asks the engine, and acts on its verdict; the engine reads
// the request and answers it through package host (hostcalls.go).

// OnPluginStart reads the configuration; the engine refuses a bad one,
// and Envoy then rejects the plugin.
func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	data, err := pluginConfiguration()
	if err != nil {
		proxyLog{}.Criticalf("sluice: reading plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	if !p.plugin.Start(data) {
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

// NewHttpContext reuses the contexts of ended streams. A context is by far
// the largest allocation a request makes, and allocation volume is what
// drives the guest's garbage collector, whose work the allocating request
// pays for. The SDK calls no stream callback on a context after
// OnHttpStreamDone, but replies to calls the stream made can still arrive
// (a retry sent from the tick belongs to the plugin); see Plugin.Begin for
// why reuse is safe.
func (p *pluginContext) NewHttpContext(contextID uint32) types.HttpContext {
	var h *httpContext
	if n := len(p.freeContexts); n > 0 {
		h = p.freeContexts[n-1]
		p.freeContexts[n-1] = nil
		p.freeContexts = p.freeContexts[:n-1]
	} else {
		h = &httpContext{plugin: p}
	}
	p.plugin.Begin(&h.Stream, contextID)
	return h
}

func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	return action(h.Stream.RequestHeaders())
}

// OnHttpRequestBody keeps the body of a request the engine holds
// buffered (Pause is StopIterationAndBuffer here): a Continue would let
// the request go upstream before it was decided.
func (h *httpContext) OnHttpRequestBody(int, bool) types.Action {
	return action(h.Stream.AfterRequestHeaders())
}

// OnHttpRequestTrailers holds the trailers of a held request likewise.
func (h *httpContext) OnHttpRequestTrailers(int) types.Action {
	return action(h.Stream.AfterRequestHeaders())
}

func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	h.Stream.ResponseHeaders()
	return types.ActionContinue
}

// OnHttpResponseBody is called per body chunk. The engine returns at
// once, reading nothing, unless a limit charges usage from the body; then
// it either scans the chunk and lets it go on (server-sent events), or
// has Envoy buffer the body up to the limit's bound (Pause here is
// StopIterationAndBuffer) and reads it whole at the end of the stream.
func (h *httpContext) OnHttpResponseBody(size int, endOfStream bool) types.Action {
	return action(h.Stream.ResponseBody(size, endOfStream))
}

func (h *httpContext) OnHttpStreamDone() {
	h.Stream.Done()
	if p := h.plugin; len(p.freeContexts) < maxFreeContexts {
		p.freeContexts = append(p.freeContexts, h)
	}
}

func (p *pluginContext) OnTick() { p.plugin.Tick() }

func action(v engine.Verdict) types.Action {
	if v == engine.Continue {
		return types.ActionContinue
	}
	return types.ActionPause
}
