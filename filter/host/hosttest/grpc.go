package hosttest

import (
	"slices"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/host"
)

// GrpcCall is one unary gRPC callout a Caller accepted, waiting for the
// test to answer it.
type GrpcCall struct {
	Service     []byte
	ServiceName string
	Method      string
	Metadata    [][2]string
	Msg         []byte
	Timeout     time.Duration
	// From is the stream that was current when the call was sent, as
	// Call.From.
	From     uint32
	done     func(reply []byte, err error)
	Answered bool
}

// Reply delivers the reply message as a proxy-wasm host does under the
// host.GrpcCaller contract: one over host.MaxReplyBody is not read and is
// reported as backend.TooLarge; what is read is a copy.
func (c *GrpcCall) Reply(msg []byte) {
	if len(msg) > host.MaxReplyBody {
		c.answer(nil, backend.TooLarge(200, len(msg), host.MaxReplyBody))
		return
	}
	c.answer(append([]byte(nil), msg...), nil)
}

// Close ends the call with a status other than OK, as the host's
// proxy_on_grpc_close does (a timeout is GrpcDeadlineExceeded).
func (c *GrpcCall) Close(code int, message string) {
	c.answer(nil, &host.GrpcStatus{Code: code, Message: message})
}

func (c *GrpcCall) answer(reply []byte, err error) {
	if c.Answered {
		panic("hosttest: a gRPC call answered twice")
	}
	c.Answered = true
	c.done(reply, err)
}

// GrpcCall implements host.GrpcCaller: it records the call, or refuses
// it with Fail.
func (c *Caller) GrpcCall(service []byte, serviceName, method string, metadata [][2]string, msg []byte,
	timeout time.Duration, done func(reply []byte, err error)) error {
	if c.Fail != nil {
		return c.Fail
	}
	call := &GrpcCall{
		Service: append([]byte(nil), service...), ServiceName: serviceName, Method: method,
		Metadata: append([][2]string(nil), metadata...), Msg: append([]byte(nil), msg...),
		Timeout: timeout, done: done,
	}
	if s := c.Stream; s != nil {
		call.From = s.Current
	}
	c.GrpcCalls = append(c.GrpcCalls, call)
	return nil
}

// PendingGrpc returns the gRPC calls not answered yet, oldest first.
func (c *Caller) PendingGrpc() []*GrpcCall {
	return slices.DeleteFunc(slices.Clone(c.GrpcCalls), func(call *GrpcCall) bool { return call.Answered })
}

var _ host.GrpcCaller = (*Caller)(nil)
