//go:build sluice_bridge

package internal

import "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

// Exports. Results are u32 rather than Go bool so the wasm signatures match
// the proxy-wasm ABI exactly (i32 results, 1 for true).

//go:wasmexport proxy_abi_version_0_2_0
func exportABIVersion() {
	beginCallback()
	proxyABIVersion()
	endCallback()
}

//go:wasmexport proxy_on_memory_allocate
func exportOnMemoryAllocate(size uint32) uint32 { return allocate(size) }

//go:wasmexport proxy_on_context_create
func exportOnContextCreate(contextID, parentContextID uint32) {
	beginCallback()
	proxyOnContextCreate(contextID, parentContextID)
	endCallback()
}

//go:wasmexport proxy_on_vm_start
func exportOnVMStart(rootContextID, vmConfigurationSize uint32) uint32 {
	beginCallback()
	r := boolToU32(bool(proxyOnVMStart(rootContextID, int(vmConfigurationSize))))
	endCallback()
	return r
}

//go:wasmexport proxy_on_configure
func exportOnConfigure(rootContextID, pluginConfigurationSize uint32) uint32 {
	beginCallback()
	r := boolToU32(bool(proxyOnConfigure(rootContextID, int(pluginConfigurationSize))))
	endCallback()
	return r
}

//go:wasmexport proxy_on_new_connection
func exportOnNewConnection(contextID uint32) uint32 {
	beginCallback()
	r := enter(contextID, kindTcp).tcp.OnNewConnection()
	endCallback()
	return uint32(r)
}

//go:wasmexport proxy_on_downstream_data
func exportOnDownstreamData(contextID, dataSize, endOfStream uint32) uint32 {
	return onTcpData(contextID, dataSize, endOfStream, types.TcpContext.OnDownstreamData)
}

//go:wasmexport proxy_on_downstream_connection_close
func exportOnDownstreamConnectionClose(contextID, peerType uint32) {
	onTcpClose(contextID, peerType, types.TcpContext.OnDownstreamClose)
}

//go:wasmexport proxy_on_upstream_data
func exportOnUpstreamData(contextID, dataSize, endOfStream uint32) uint32 {
	return onTcpData(contextID, dataSize, endOfStream, types.TcpContext.OnUpstreamData)
}

//go:wasmexport proxy_on_upstream_connection_close
func exportOnUpstreamConnectionClose(contextID, peerType uint32) {
	onTcpClose(contextID, peerType, types.TcpContext.OnUpstreamClose)
}

//go:wasmexport proxy_on_request_headers
func exportOnRequestHeaders(contextID, numHeaders, endOfStream uint32) uint32 {
	return onHttp(contextID, numHeaders, endOfStream, types.HttpContext.OnHttpRequestHeaders)
}

//go:wasmexport proxy_on_request_body
func exportOnRequestBody(contextID, bodySize, endOfStream uint32) uint32 {
	return onHttp(contextID, bodySize, endOfStream, types.HttpContext.OnHttpRequestBody)
}

//go:wasmexport proxy_on_request_trailers
func exportOnRequestTrailers(contextID, numTrailers uint32) uint32 {
	return onHttpTrailers(contextID, numTrailers, types.HttpContext.OnHttpRequestTrailers)
}

//go:wasmexport proxy_on_response_headers
func exportOnResponseHeaders(contextID, numHeaders, endOfStream uint32) uint32 {
	return onHttp(contextID, numHeaders, endOfStream, types.HttpContext.OnHttpResponseHeaders)
}

//go:wasmexport proxy_on_response_body
func exportOnResponseBody(contextID, bodySize, endOfStream uint32) uint32 {
	return onHttp(contextID, bodySize, endOfStream, types.HttpContext.OnHttpResponseBody)
}

//go:wasmexport proxy_on_response_trailers
func exportOnResponseTrailers(contextID, numTrailers uint32) uint32 {
	return onHttpTrailers(contextID, numTrailers, types.HttpContext.OnHttpResponseTrailers)
}

// The stream callbacks differ only in the method they call on the stream's
// context, so each export passes that method (a method expression) to one
// of these, which bracket the callback, make the context active and convert
// the ABI's i32s.

// onHttp runs an HTTP callback given a size and end_of_stream (headers,
// bodies).
func onHttp(contextID, size, endOfStream uint32, on func(types.HttpContext, int, bool) types.Action) uint32 {
	beginCallback()
	r := on(enter(contextID, kindHttp).http, int(size), endOfStream != 0)
	endCallback()
	return uint32(r)
}

// onHttpTrailers runs an HTTP callback given a count of trailers.
func onHttpTrailers(contextID, numTrailers uint32, on func(types.HttpContext, int) types.Action) uint32 {
	beginCallback()
	r := on(enter(contextID, kindHttp).http, int(numTrailers))
	endCallback()
	return uint32(r)
}

// onTcpData runs a TCP callback given a size and end_of_stream.
func onTcpData(contextID, dataSize, endOfStream uint32, on func(types.TcpContext, int, bool) types.Action) uint32 {
	beginCallback()
	r := on(enter(contextID, kindTcp).tcp, int(dataSize), endOfStream != 0)
	endCallback()
	return uint32(r)
}

// onTcpClose runs a TCP callback given the peer that closed.
func onTcpClose(contextID, peerType uint32, on func(types.TcpContext, types.PeerType)) {
	beginCallback()
	on(enter(contextID, kindTcp).tcp, types.PeerType(peerType))
	endCallback()
}

//go:wasmexport proxy_on_http_call_response
func exportOnHttpCallResponse(rootContextID, calloutID, numHeaders, bodySize, numTrailers uint32) {
	beginCallback()
	proxyOnHttpCallResponse(rootContextID, calloutID, int(numHeaders), int(bodySize), int(numTrailers))
	endCallback()
}

//go:wasmexport proxy_on_queue_ready
func exportOnQueueReady(rootContextID, queueID uint32) {
	beginCallback()
	proxyOnQueueReady(rootContextID, queueID)
	endCallback()
}

//go:wasmexport proxy_on_tick
func exportOnTick(rootContextID uint32) {
	beginCallback()
	proxyOnTick(rootContextID)
	yieldOnTick()
	endCallback()
}

//go:wasmexport proxy_on_log
func exportOnLog(contextID uint32) {
	beginCallback()
	proxyOnLog(contextID)
	endCallback()
}

//go:wasmexport proxy_on_done
func exportOnDone(contextID uint32) uint32 {
	beginCallback()
	r := boolToU32(proxyOnDone(contextID))
	endCallback()
	return r
}

//go:wasmexport proxy_on_delete
func exportOnDelete(contextID uint32) {
	beginCallback()
	proxyOnDelete(contextID)
	yieldAfterContext()
	endCallback()
}

func boolToU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
