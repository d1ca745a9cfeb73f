//go:build sluice_bridge

// This file is not compiled in place: make build copies it into the SDK's
// proxywasm package (build/sdk/proxywasm), which the published SDK
// lacks gRPC callouts in. See filter/bridge/grpc.go for the ABI side.
package proxywasm

import "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal"

// DispatchGrpcCall sends a unary gRPC call: service is a serialized
// envoy.config.core.v3.GrpcService (or a cluster name), serviceName and
// method make the path /serviceName/method, metadata is sent as initial
// metadata, msg is the serialized request. receive runs with the size of
// the reply (read it with GetGrpcReceiveBuffer), onClose with the status
// of a call that failed (read its message with GetGrpcStatus); exactly
// one of them runs per call, in the context that made it.
func DispatchGrpcCall(service []byte, serviceName, method string, metadata [][2]string, msg []byte,
	timeoutMillisecond uint32, receive func(size int), onClose func(code uint32)) (uint32, error) {
	var md []byte
	if len(metadata) > 0 {
		md = internal.SerializeMap(metadata)
	}
	token, st := internal.ProxyGrpcCall(service, serviceName, method, md, msg, timeoutMillisecond, receive, onClose)
	return token, internal.StatusToError(st)
}

// GetGrpcReceiveBuffer reads the reply inside a call's receive callback.
func GetGrpcReceiveBuffer(start, maxSize int) ([]byte, error) {
	return getBuffer(internal.BufferTypeGrpcReceiveBuffer, start, maxSize)
}

// GetGrpcStatus reads the status code and message inside a call's close
// callback.
func GetGrpcStatus() (code uint32, message string, err error) {
	var p *byte
	var n int
	if st := internal.ProxyGetStatus(&code, &p, &n); st != internal.StatusOK {
		return 0, "", internal.StatusToError(st)
	}
	if p == nil {
		return code, "", nil
	}
	return code, string(internal.RawBytePtrToByteSlice(p, n)), nil
}
