package config

import (
	"strings"

	"github.com/tidwall/gjson"
)

// GrpcService reaches the limits service over gRPC (external.grpc), as
// Envoy's GrpcService does: a cluster, the :authority, initial metadata;
// the lookup's timeout is external.timeout.
type GrpcService struct {
	// InitialMetadata is sent with every lookup: lower-case keys, sorted.
	InitialMetadata [][2]string
	// JSON sends and reads the messages as JSON (codec "json"), for
	// services built on a JSON codec; protobuf otherwise.
	JSON bool
}

var grpcFields = []string{"cluster", "authority", "initial_metadata", "codec"}

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
	if i, ok := g.enum("codec", "proto", "json"); ok {
		e.Grpc.JSON = i == 1
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
