package config

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/sluice-proxy/sluice/internal/enum"
)

// GrpcService reaches the limits service over gRPC (external.grpc), as
// Envoy's GrpcService does: a cluster, the :authority, initial metadata;
// the lookup's timeout is external.timeout.
type GrpcService struct {
	// InitialMetadata is sent with every lookup: lower-case keys, sorted.
	InitialMetadata [][2]string
	// Codec is how the messages are encoded.
	Codec GrpcCodec
}

// GrpcCodec is external.grpc.codec.
type GrpcCodec uint8

const (
	// CodecProto: protobuf messages, what a gRPC server reads by default.
	CodecProto GrpcCodec = iota
	// CodecJSON: the HTTP form's JSON as the messages, for services built
	// on a JSON codec.
	CodecJSON
)

var grpcCodecNames = enum.New[GrpcCodec]("GrpcCodec", "proto", "json")

func (c GrpcCodec) String() string { return grpcCodecNames.Name(c) }

var grpcFields = fieldsOf[wireGrpc]()

// grpcReserved are metadata keys Envoy's gRPC client sets itself, or that
// would make the call something other than a gRPC call.
var grpcReserved = []string{"content-type", "te", "user-agent", "host", "content-length",
	"transfer-encoding", "connection", "upgrade", "keep-alive", "proxy-connection"}

// externalTransport reads how the service is reached: over HTTP
// (cluster, authority and path of the external block) or over gRPC
// (grpc); exactly one of them.
func (p *parser) externalTransport(o *object, e *External) {
	if !o.has("grpc") {
		e.Cluster, e.Authority = o.clusterAuthority()
		return
	}
	for _, f := range [...]string{"cluster", "authority", "path"} {
		if o.has(f) {
			o.errorf(f, "the HTTP service's; external.grpc is given, and a service is reached one way, HTTP or gRPC")
		}
	}
	g := o.child("grpc", grpcFields...)
	if g == nil {
		return
	}
	e.Grpc = &GrpcService{}
	e.Cluster, e.Authority = g.clusterAuthority()
	if c, ok := readEnum(g, "codec", grpcCodecNames); ok {
		e.Grpc.Codec = c
	}
	v, ok := g.fields["initial_metadata"]
	if !ok {
		return
	}
	path := g.path1("initial_metadata")
	e.Grpc.InitialMetadata = p.headerMap(path, v)
	if !v.IsObject() {
		return
	}
	// Reported where each name is, so they sort with headerMap's errors.
	v.ForEach(func(key, _ gjson.Result) bool {
		k := strings.ToLower(key.String())
		switch {
		case strings.HasPrefix(k, "grpc-") || contains(grpcReserved, k):
			p.errorf(FieldPath(path, key.String()), key.Index, "is set by the gRPC client itself")
		case strings.HasSuffix(k, "-bin"):
			p.errorf(FieldPath(path, key.String()), key.Index, "binary metadata (-bin) is not supported: values are text")
		}
		return true
	})
}
