// Package grpcserver serves Sluice's external limits protocol over gRPC
// (api/proto/ratelimit/v1/ratelimit.proto,
// edgequota.ratelimit.v1.RateLimitService/GetLimits), so a team writes only
// the function that answers a lookup:
//
//	srv := grpcserver.New(grpcserver.Func(func(ctx context.Context, r *grpcserver.Request) (*grpcserver.Limits, error) {
//		return &grpcserver.Limits{Average: 100, Period: "1s", TenantKey: r.Header("x-tenant-id")}, nil
//	}))
//	lis, _ := net.Listen("tcp", ":50052")
//	srv.Serve(lis)
//
// The messages are read and written without generated code: a request in
// protobuf (what Sluice sends by default) or in JSON (what a client of a
// JSON codec sends, such as Sluice with codec "json") is answered in the
// same encoding. A server made elsewhere serves the protocol with
// Register, given ServerOption among its options; its other services'
// messages go through the protobuf codec as before.
package grpcserver

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/sluice-proxy/sluice/filter/limitsvc"
)

// Request is one lookup: the method, the path (without its query, in
// normal form) and the headers the filter forwards, lower-case.
type Request struct {
	limitsvc.Lookup
}

// Header returns the value of a forwarded header, "" when absent.
func (r *Request) Header(name string) string {
	for _, kv := range r.Headers {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

// Limits is the answer: see filter/config/README.md, "The service's
// protocol", for what each field means. Average 0 means no limit.
type Limits = limitsvc.Limits

// Service answers lookups. An error is sent as its gRPC status; a context
// error as DEADLINE_EXCEEDED or CANCELLED, any other as UNKNOWN. The
// filter then decides with the last answer or its fallback.
type Service interface {
	GetLimits(ctx context.Context, r *Request) (*Limits, error)
}

// Func is a function that is a Service.
type Func func(ctx context.Context, r *Request) (*Limits, error)

// GetLimits calls f.
func (f Func) GetLimits(ctx context.Context, r *Request) (*Limits, error) { return f(ctx, r) }

// New is a gRPC server with the protocol registered for svc.
func New(svc Service, opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append([]grpc.ServerOption{ServerOption()}, opts...)...)
	Register(s, svc)
	return s
}

// Register serves svc on s, which must have been made with ServerOption.
func Register(s *grpc.Server, svc Service) {
	s.RegisterService(&serviceDesc, svc)
}

// ServerOption is the codec the protocol's messages need: requests and
// answers are read and written as described above, and every other
// message by the protobuf codec.
func ServerOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2("proto")})
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: limitsvc.GrpcService,
	HandlerType: (*Service)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: limitsvc.GrpcMethod,
		Handler:    handle,
	}},
	Metadata: "api/proto/ratelimit/v1/ratelimit.proto",
}

// request and reply are the messages as the codec sees them: the reply is
// written in the encoding the request came in.
type request struct {
	Request
	json bool
}

type reply struct {
	*Limits
	json bool
}

func handle(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	req := &request{}
	if err := dec(req); err != nil {
		return nil, err
	}
	call := func(ctx context.Context, in any) (any, error) {
		r := in.(*request)
		l, err := srv.(Service).GetLimits(ctx, &r.Request)
		if err != nil {
			if _, ok := status.FromError(err); !ok {
				// A context error is the call's own deadline or cancel,
				// which the client must see as such, not as INTERNAL.
				err = status.FromContextError(err).Err()
			}
			return nil, err
		}
		if l == nil {
			return nil, status.Error(codes.Internal, "grpcserver: GetLimits returned no limits and no error")
		}
		return &reply{Limits: l, json: r.json}, nil
	}
	if interceptor == nil {
		return call(ctx, req)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + limitsvc.GrpcService + "/" + limitsvc.GrpcMethod}
	return interceptor(ctx, req, info, call)
}

// codec reads the protocol's messages in either encoding. A JSON message
// is an object, whose first byte, '{', would be the tag of a protobuf
// group numbered 15, which a GetLimitsRequest never holds.
type codec struct{ proto encoding.CodecV2 }

func (c codec) Name() string { return "proto" }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*reply)
	if !ok {
		return c.proto.Marshal(v)
	}
	var b []byte
	if r.json {
		var err error
		if b, err = json.Marshal(r.Limits); err != nil {
			return nil, err
		}
	} else {
		b = r.Limits.AppendProto(nil)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*request)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	b := data.Materialize()
	var err error
	if len(b) > 0 && b[0] == '{' {
		r.json = true
		r.Lookup, err = limitsvc.ParseLookupJSON(b)
	} else {
		r.Lookup, err = limitsvc.ParseLookupProto(b)
	}
	if err != nil {
		return fmt.Errorf("grpcserver: %v", err)
	}
	return nil
}
