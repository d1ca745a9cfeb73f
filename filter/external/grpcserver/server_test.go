package grpcserver_test

import (
	"context"
	"errors"
	"net"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sluice-proxy/sluice/filter/external/grpcserver"
	"github.com/sluice-proxy/sluice/filter/limitsvc"
)

// rawCodec sends and receives messages as the bytes given, as Envoy's
// gRPC client does for a proxy-wasm plugin.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

const fullMethod = "/edgequota.ratelimit.v1.RateLimitService/GetLimits"

// serve runs svc on 127.0.0.1 and returns a client connection to it.
func serve(t *testing.T, svc grpcserver.Service) *grpc.ClientConn {
	t.Helper()
	srv := grpcserver.New(svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func call(conn *grpc.ClientConn, msg []byte, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var reply []byte
	err := conn.Invoke(ctx, fullMethod, &msg, &reply)
	return reply, err
}

var acme = grpcserver.Func(func(_ context.Context, r *grpcserver.Request) (*grpcserver.Limits, error) {
	if r.Header("x-tenant-id") != "acme" || r.Method != "GET" || r.Path != "/api" {
		return nil, status.Error(codes.NotFound, "no such tenant")
	}
	return &grpcserver.Limits{Average: 10, Burst: 20, Period: "1m", TenantKey: "acme", FailurePolicy: "deny",
		FailureCode: 451, BackendURL: "gold", CacheMaxAgeSeconds: 30, CacheNoStore: true}, nil
})

var acmeLookup = limitsvc.Lookup{Method: "GET", Path: "/api", Headers: [][2]string{{"x-tenant-id", "acme"}}}

// TestServesProtobuf: a GetLimitsRequest in protobuf is answered with a
// GetLimitsResponse the filter reads as the answer given.
func TestServesProtobuf(t *testing.T) {
	conn := serve(t, acme)
	reply, err := call(conn, acmeLookup.AppendProto(nil), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a, err := limitsvc.ParseGrpc(reply)
	if err != nil {
		t.Fatal(err)
	}
	want := limitsvc.Answer{Rate: 10, Burst: 20, Period: time.Minute, TenantKey: "acme", Policy: limitsvc.PolicyDeny,
		FailureCode: 451, BackendURL: "gold", MaxAge: 30 * time.Second, NoStore: true}
	if a != want {
		t.Fatalf("answer %+v, want %+v", a, want)
	}
}

// TestServesJSON: a JSON request (a JSON codec's client, or the filter
// with codec "json") is answered in JSON.
func TestServesJSON(t *testing.T) {
	conn := serve(t, acme)
	reply, err := call(conn, []byte(`{"method":"GET","path":"/api","headers":{"x-tenant-id":"acme"}}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a, err := limitsvc.Parse(200, reply)
	if err != nil || a.Rate != 10 || a.TenantKey != "acme" {
		t.Fatalf("JSON reply %s: %+v, %v", reply, a, err)
	}
}

// TestStatuses: the service's status reaches the caller; a plain error is
// UNKNOWN, the call's own deadline DEADLINE_EXCEEDED, and a request that
// is no GetLimitsRequest never reaches the service.
func TestStatuses(t *testing.T) {
	reached := false
	conn := serve(t, grpcserver.Func(func(ctx context.Context, r *grpcserver.Request) (*grpcserver.Limits, error) {
		reached = true
		switch r.Header("x-case") {
		case "status":
			return nil, status.Error(codes.PermissionDenied, "no")
		case "plain":
			return nil, errors.New("database down")
		case "nil":
			return nil, nil
		case "deadline":
			// What a store client returns when the call's context ends.
			return nil, context.DeadlineExceeded
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	for c, want := range map[string]codes.Code{
		"status": codes.PermissionDenied, "plain": codes.Unknown, "nil": codes.Internal, "hang": codes.DeadlineExceeded,
		"deadline": codes.DeadlineExceeded,
	} {
		l := limitsvc.Lookup{Headers: [][2]string{{"x-case", c}}}
		if _, err := call(conn, l.AppendProto(nil), 200*time.Millisecond); status.Code(err) != want {
			t.Errorf("%s: %v, want %v", c, err, want)
		}
	}
	reached = false
	if _, err := call(conn, []byte{0x0a, 0x05, 0x01}, 5*time.Second); status.Code(err) != codes.Internal || reached {
		t.Errorf("truncated request: %v (service reached: %v), want INTERNAL before the service", err, reached)
	}
}

// responseDescriptor is GetLimitsResponse and GetLimitsRequest as
// api/proto/ratelimit/v1/ratelimit.proto declares them, built with the
// protobuf runtime, so the hand-written encoding is checked against the
// real one.
func responseDescriptor(t *testing.T) (req, resp protoreflect.MessageDescriptor) {
	t.Helper()
	opt := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, oneof int32) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), JsonName: proto.String(name), Number: proto.Int32(num),
			Type: typ.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			OneofIndex: proto.Int32(oneof), Proto3Optional: proto.Bool(true)}
	}
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING
	i64 := descriptorpb.FieldDescriptorProto_TYPE_INT64
	fields := []*descriptorpb.FieldDescriptorProto{
		opt("average", 1, i64, 0), opt("burst", 2, i64, 1), opt("period", 3, str, 2), opt("tenant_key", 4, str, 3),
		opt("failure_policy", 5, str, 4), opt("failure_code", 6, descriptorpb.FieldDescriptorProto_TYPE_INT32, 5),
		opt("backend_url", 7, str, 6), opt("cache_max_age_seconds", 8, i64, 7),
		opt("cache_no_store", 9, descriptorpb.FieldDescriptorProto_TYPE_BOOL, 8),
	}
	var oneofs []*descriptorpb.OneofDescriptorProto
	for _, f := range fields {
		oneofs = append(oneofs, &descriptorpb.OneofDescriptorProto{Name: proto.String("_" + f.GetName())})
	}
	plain := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), JsonName: proto.String(name), Number: proto.Int32(num),
			Type: typ.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()}
	}
	entry := &descriptorpb.DescriptorProto{Name: proto.String("HeadersEntry"),
		Field:   []*descriptorpb.FieldDescriptorProto{plain("key", 1, str), plain("value", 2, str)},
		Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)}}
	headers := plain("headers", 1, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE)
	headers.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	headers.TypeName = proto.String(".edgequota.ratelimit.v1.GetLimitsRequest.HeadersEntry")
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("ratelimit.proto"), Package: proto.String("edgequota.ratelimit.v1"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("GetLimitsRequest"), Field: []*descriptorpb.FieldDescriptorProto{headers, plain("method", 2, str), plain("path", 3, str)},
				NestedType: []*descriptorpb.DescriptorProto{entry}},
			{Name: proto.String("GetLimitsResponse"), Field: fields, OneofDecl: oneofs},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0), fd.Messages().Get(1)
}

// TestWireMatchesProtobuf: what the codec writes, the protobuf runtime
// reads as the same fields, and what the runtime writes, the codec reads;
// and every field is in the .proto file with the number and type used.
func TestWireMatchesProtobuf(t *testing.T) {
	reqDesc, respDesc := responseDescriptor(t)
	l := grpcserver.Limits{Average: 7, Burst: 9, Period: "2s", TenantKey: "t", FailurePolicy: "local", FailureCode: 503,
		BackendURL: "b", CacheMaxAgeSeconds: 4, CacheNoStore: true}
	m := dynamicpb.NewMessage(respDesc)
	if err := proto.Unmarshal(l.AppendProto(nil), m); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		got[string(f.Name())] = v.Interface()
		return true
	})
	want := map[string]any{"average": int64(7), "burst": int64(9), "period": "2s", "tenant_key": "t", "failure_policy": "local",
		"failure_code": int32(503), "backend_url": "b", "cache_max_age_seconds": int64(4), "cache_no_store": true}
	if len(got) != len(want) {
		t.Fatalf("runtime read %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("runtime read %s = %v, want %v", k, got[k], v)
		}
	}
	// average 0 is sent, so that it means "no limit" rather than nothing.
	zero := dynamicpb.NewMessage(respDesc)
	if err := proto.Unmarshal((&grpcserver.Limits{Period: "1s"}).AppendProto(nil), zero); err != nil || !zero.Has(respDesc.Fields().ByName("average")) {
		t.Fatalf("average 0 not present: %v", err)
	}
	// The runtime's encoding of a request, read by the codec.
	req := dynamicpb.NewMessage(reqDesc)
	req.Set(reqDesc.Fields().ByName("method"), protoreflect.ValueOfString("POST"))
	req.Set(reqDesc.Fields().ByName("path"), protoreflect.ValueOfString("/x"))
	req.Mutable(reqDesc.Fields().ByName("headers")).Map().Set(protoreflect.ValueOfString("x-tenant-id").MapKey(), protoreflect.ValueOfString("acme"))
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := limitsvc.ParseLookupProto(b)
	if err != nil || lk.Method != "POST" || lk.Path != "/x" || len(lk.Headers) != 1 || lk.Headers[0] != [2]string{"x-tenant-id", "acme"} {
		t.Fatalf("codec read %+v, %v", lk, err)
	}
	// And the codec's request, read by the runtime.
	back := dynamicpb.NewMessage(reqDesc)
	if err := proto.Unmarshal(acmeLookup.AppendProto(nil), back); err != nil ||
		back.Get(reqDesc.Fields().ByName("headers")).Map().Get(protoreflect.ValueOfString("x-tenant-id").MapKey()).String() != "acme" {
		t.Fatalf("runtime read %v, %v", back, err)
	}
	src, err := os.ReadFile("../../../api/proto/ratelimit/v1/ratelimit.proto")
	if err != nil {
		t.Fatal(err)
	}
	for i := range respDesc.Fields().Len() {
		f := respDesc.Fields().Get(i)
		decl := `optional ` + f.Kind().String() + ` ` + string(f.Name()) + ` = ` + strconv.Itoa(int(f.Number())) + `;`
		if !regexp.MustCompile(regexp.QuoteMeta(decl)).Match(src) {
			t.Errorf("ratelimit.proto lacks %q", decl)
		}
	}
	for _, decl := range []string{"map<string, string> headers = 1;", "string method = 2;", "string path = 3;",
		"package edgequota.ratelimit.v1;", "rpc GetLimits(GetLimitsRequest) returns (GetLimitsResponse);"} {
		if !regexp.MustCompile(regexp.QuoteMeta(decl)).Match(src) {
			t.Errorf("ratelimit.proto lacks %q", decl)
		}
	}
}

// TestOtherServicesKeepProtobuf: a server made elsewhere with
// ServerOption serves its other services' messages as before.
func TestOtherServicesKeepProtobuf(t *testing.T) {
	s := grpc.NewServer(grpcserver.ServerOption())
	grpcserver.Register(s, acme)
	healthpb.RegisterHealthServer(s, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check: %v, %v", r, err)
	}
}
