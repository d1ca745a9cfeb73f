package host

import (
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// GrpcCaller is implemented by a Caller that also sends unary gRPC
// callouts (proxy_grpc_call), as Envoy's async gRPC client does.
//
// service is a serialized envoy.config.core.v3.GrpcService (see
// AppendGrpcService); the call goes to /serviceName/method with metadata
// as initial metadata and msg as the serialized request, and fails with
// DEADLINE_EXCEEDED after timeout. done runs once per accepted call, from
// the host's callback: with the reply message, or with err set: a
// *GrpcStatus for a call that closed with a status other than OK (a
// timeout, a reset and no healthy host included), backend.TooLarge for
// a reply over MaxReplyBody. The reply is a copy the callee may keep.
type GrpcCaller interface {
	GrpcCall(service []byte, serviceName, method string, metadata [][2]string, msg []byte,
		timeout time.Duration, done func(reply []byte, err error)) error
}

// gRPC status codes the filter tells apart.
const (
	GrpcOK               = 0
	GrpcDeadlineExceeded = 4
	GrpcUnavailable      = 14
)

// GrpcStatus is how a gRPC call closed other than with OK.
type GrpcStatus struct {
	Code    int
	Message string
}

func (s *GrpcStatus) Error() string {
	if s.Message == "" {
		return "grpc status " + strconv.Itoa(s.Code)
	}
	return "grpc status " + strconv.Itoa(s.Code) + ": " + s.Message
}

// AppendGrpcService appends the serialized GrpcService that names an
// Envoy cluster and the :authority of its calls: envoy_grpc (field 1)
// holding cluster_name (1) and authority (2, omitted when empty). Envoy
// would also take the bare cluster name, but only when those bytes do
// not happen to parse as a GrpcService; the message is never ambiguous.
func AppendGrpcService(dst []byte, cluster, authority string) []byte {
	var inner []byte
	inner = protowire.AppendTag(inner, 1, protowire.BytesType)
	inner = protowire.AppendString(inner, cluster)
	if authority != "" {
		inner = protowire.AppendTag(inner, 2, protowire.BytesType)
		inner = protowire.AppendString(inner, authority)
	}
	dst = protowire.AppendTag(dst, 1, protowire.BytesType)
	return protowire.AppendBytes(dst, inner)
}
