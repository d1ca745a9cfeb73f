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
	r := uint32(proxyOnNewConnection(contextID))
	endCallback()
	return r
}

//go:wasmexport proxy_on_downstream_data
func exportOnDownstreamData(contextID, dataSize, endOfStream uint32) uint32 {
	beginCallback()
	r := uint32(proxyOnDownstreamData(contextID, int(dataSize), endOfStream != 0))
	endCallback()
	return r
}

//go:wasmexport proxy_on_downstream_connection_close
func exportOnDownstreamConnectionClose(contextID, peerType uint32) {
	beginCallback()
	proxyOnDownstreamConnectionClose(contextID, types.PeerType(peerType))
	endCallback()
}

//go:wasmexport proxy_on_upstream_data
func exportOnUpstreamData(contextID, dataSize, endOfStream uint32) uint32 {
	beginCallback()
	r := uint32(proxyOnUpstreamData(contextID, int(dataSize), endOfStream != 0))
	endCallback()
	return r
}

//go:wasmexport proxy_on_upstream_connection_close
func exportOnUpstreamConnectionClose(contextID, peerType uint32) {
	beginCallback()
	proxyOnUpstreamConnectionClose(contextID, types.PeerType(peerType))
	endCallback()
}

//go:wasmexport proxy_on_request_headers
func exportOnRequestHeaders(contextID, numHeaders, endOfStream uint32) uint32 {
	beginCallback()
	r := uint32(proxyOnRequestHeaders(contextID, int(numHeaders), endOfStream != 0))
	endCallback()
	return r
}

//go:wasmexport proxy_on_request_body
func exportOnRequestBody(contextID, bodySize, endOfStream uint32) uint32 {
	beginCallback()
	r := uint32(proxyOnRequestBody(contextID, int(bodySize), endOfStream != 0))
	endCallback()
	return r
}

//go:wasmexport proxy_on_request_trailers
func exportOnRequestTrailers(contextID, numTrailers uint32) uint32 {
	beginCallback()
	r := uint32(proxyOnRequestTrailers(contextID, int(numTrailers)))
	endCallback()
	return r
}

//go:wasmexport proxy_on_response_headers
func exportOnResponseHeaders(contextID, numHeaders, endOfStream uint32) uint32 {
	beginCallback()
	r := uint32(proxyOnResponseHeaders(contextID, int(numHeaders), endOfStream != 0))
	endCallback()
	return r
}

//go:wasmexport proxy_on_response_body
func exportOnResponseBody(contextID, bodySize, endOfStream uint32) uint32 {
	beginCallback()
	r := uint32(proxyOnResponseBody(contextID, int(bodySize), endOfStream != 0))
	endCallback()
	return r
}

//go:wasmexport proxy_on_response_trailers
func exportOnResponseTrailers(contextID, numTrailers uint32) uint32 {
	beginCallback()
	r := uint32(proxyOnResponseTrailers(contextID, int(numTrailers)))
	endCallback()
	return r
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
