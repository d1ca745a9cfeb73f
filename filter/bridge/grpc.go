//go:build sluice_bridge

package internal

import "runtime"

// gRPC callouts, which the SDK does not have: the unary call
// (proxy_grpc_call), the status of its close, and the two
// callbacks a unary call gets, proxy_on_grpc_receive (the reply, in
// buffer 5) and proxy_on_grpc_close (any failure, with the status that
// proxy_get_status reads). Streams, and with them the metadata
// callbacks, and cancels are not used by the filter and are left out: a
// lookup the filter gave up on is ignored when its reply comes, as an
// HTTP one is. The public side is filter/bridge/proxywasm/grpc.go, which
// make build drops into the SDK's proxywasm package.

//go:wasmimport env proxy_grpc_call
func hostGrpcCall(service *byte, serviceSize uint32, serviceName *byte, serviceNameSize uint32,
	method *byte, methodSize uint32, metadata *byte, metadataSize uint32,
	msg *byte, msgSize uint32, timeoutMillis uint32, retToken *uint32) uint32

//go:wasmimport env proxy_get_status
func hostGetStatus(retCode *uint32, retMsg *uint32, retSize *uint32) uint32

// grpcCallout is a unary call's two callbacks and the context it was made
// from, made effective again for them, as for HTTP calls.
type grpcCallout struct {
	receive func(size int)
	close   func(code uint32)
	caller  uint32
}

// grpcCallouts are the calls in flight, by token. Tokens are the VM's
// (Envoy numbers them per Wasm), so one map serves every plugin context.
var grpcCallouts = map[uint32]grpcCallout{}

// ProxyGrpcCall sends a unary call and files its callbacks under the
// token the host gave it.
func ProxyGrpcCall(service []byte, serviceName, method string, metadata []byte, msg []byte, timeoutMillis uint32,
	receive func(size int), onClose func(code uint32)) (uint32, Status) {
	outU32 = 0
	st := Status(hostGrpcCall(bytesPtr(service), uint32(len(service)),
		StringBytePtr(serviceName), uint32(len(serviceName)), StringBytePtr(method), uint32(len(method)),
		bytesPtr(metadata), uint32(len(metadata)), bytesPtr(msg), uint32(len(msg)), timeoutMillis, &outU32))
	runtime.KeepAlive(service)
	runtime.KeepAlive(serviceName)
	runtime.KeepAlive(method)
	runtime.KeepAlive(metadata)
	runtime.KeepAlive(msg)
	token := outU32
	if st != StatusOK {
		return 0, st
	}
	grpcCallouts[token] = grpcCallout{receive: receive, close: onClose, caller: activeContextID}
	return token, StatusOK
}

// ProxyGetStatus reads the status of the call being closed; the message
// lives until the callback returns, as every host-returned value.
func ProxyGetStatus(returnCode *uint32, returnMsg **byte, returnSize *int) Status {
	outU32 = 0
	st := Status(hostGetStatus(&outU32, &outPtr, &outSize))
	*returnCode = outU32
	return takeReturned(st, returnMsg, returnSize)
}

func bytesPtr(b []byte) *byte {
	if len(b) == 0 {
		return nil
	}
	return &b[0]
}

// takeGrpcCallout removes a finished call and makes its caller the active
// context; ok is false when the call is unknown or its caller is gone,
// and the callback is then dropped, as for HTTP calls.
func takeGrpcCallout(token uint32) (grpcCallout, bool) {
	c, known := grpcCallouts[token]
	if !known {
		return c, false
	}
	delete(grpcCallouts, token)
	activeContextID = c.caller
	if contexts.get(c.caller) == nil {
		return c, false
	}
	ProxySetEffectiveContext(c.caller)
	return c, true
}

//go:wasmexport proxy_on_grpc_receive
func exportOnGrpcReceive(rootContextID, token, size uint32) {
	beginCallback()
	if c, ok := takeGrpcCallout(token); ok {
		c.receive(int(size))
	}
	endCallback()
}

//go:wasmexport proxy_on_grpc_close
func exportOnGrpcClose(rootContextID, token, code uint32) {
	beginCallback()
	if c, ok := takeGrpcCallout(token); ok {
		c.close(code)
	}
	endCallback()
}
