//go:build sluice_bridge

package filter

import (
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/host"
)

// GrpcCall implements host.GrpcCaller over the bridge's gRPC callouts
// (filter/bridge/grpc.go), which only the wasm build has: natively the
// SDK has none, proxyCaller is no GrpcCaller, and a configuration that
// needs one is refused. It is the one hostcall outside hostcalls.go, in a
// file of its own for that build tag.
func (proxyCaller) GrpcCall(service []byte, serviceName, method string, metadata [][2]string, msg []byte,
	timeout time.Duration, done func(reply []byte, err error)) error {
	ms := uint32(timeout / time.Millisecond)
	if ms == 0 {
		ms = 1
	}
	_, err := proxywasm.DispatchGrpcCall(service, serviceName, method, metadata, msg, ms,
		func(size int) {
			if size > host.MaxReplyBody {
				done(nil, backend.TooLarge(200, size, host.MaxReplyBody))
				return
			}
			var b []byte
			if size > 0 {
				// A copy, as for HTTP replies: the host's lives only until
				// this callback returns.
				if hb, err := proxywasm.GetGrpcReceiveBuffer(0, size); err == nil {
					b = append([]byte(nil), hb...)
				}
			}
			done(b, nil)
		},
		func(code uint32) {
			// Envoy reports every failure here, its own included (a
			// timeout is DEADLINE_EXCEEDED, no healthy host UNAVAILABLE);
			// a close with OK and no message would be a host bug, and is
			// no answer either.
			_, msg, _ := proxywasm.GetGrpcStatus()
			done(nil, &host.GrpcStatus{Code: int(code), Message: msg})
		})
	return err
}

var _ host.GrpcCaller = proxyCaller{}
