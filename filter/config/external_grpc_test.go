package config

import (
	"reflect"
	"testing"
)

func init() {
	addCases(externalGrpcGoodConfigs, externalGrpcBadCases)
}

var externalGrpcGoodConfigs = []string{
	`{"external": {"grpc": {"cluster": "limits-grpc"}, "fallback": {"requests_per_second": 1}}}`,
	`{"external": {"grpc": {"cluster": "limits-grpc", "authority": "limits.internal", "codec": "json",
	  "initial_metadata": {"x-api-key": "s3cret", "X-Team": "payments"}}, "timeout": "250ms",
	  "forward_headers": ["x-tenant-id"], "fallback": {"requests_per_second": 100}}}`,
}

func grpcExt(grpc, fields string) string {
	return `{"external": {"grpc": ` + grpc + `, "fallback": {"requests_per_second": 5}` + fields + `}}`
}

var externalGrpcBadCases = []badCase{
	{name: "external grpc and the HTTP fields", in: grpcExt(`{"cluster": "g"}`, `, "cluster": "limits", "path": "/limits", "authority": "a"`),
		want: []string{
			"external.cluster: the HTTP service's; external.grpc is given, and a service is reached one way, HTTP or gRPC",
			"external.path: the HTTP service's; external.grpc is given, and a service is reached one way, HTTP or gRPC",
			"external.authority: the HTTP service's; external.grpc is given, and a service is reached one way, HTTP or gRPC",
		}},
	{name: "external grpc not an object", in: grpcExt(`"limits-grpc"`, ""), want: []string{"external.grpc: must be an object"}},
	{name: "external grpc without cluster", in: grpcExt(`{"authority": "a"}`, ""), want: []string{"external.grpc.cluster: required"}},
	{name: "external grpc everything wrong at once", in: grpcExt(`{"cluster": "", "authority": "", "codec": "xml", "port": 1,
		"initial_metadata": {"content-type": "application/grpc+json", "grpc-timeout": "1S", "x-key-bin": "AAEC", "x bad": "v", "x-ok": 5}}`, ""),
		want: []string{
			"external.grpc.cluster: must not be empty",
			"external.grpc.authority: must not be empty; omit it to use the cluster name",
			`external.grpc.codec: unknown value "xml"; want one of proto, json`,
			"external.grpc.port: unknown field",
			"external.grpc.initial_metadata.content-type: is set by the gRPC client itself",
			"external.grpc.initial_metadata.grpc-timeout: is set by the gRPC client itself",
			"external.grpc.initial_metadata.x-key-bin: binary metadata (-bin) is not supported: values are text",
			`external.grpc.initial_metadata["x bad"]: must be a header name (an RFC 9110 token of at most 256 characters)`,
			"external.grpc.initial_metadata.x-ok: must be a string",
		}},
}

func TestParseExternalGrpc(t *testing.T) {
	c := mustParse(t, externalGrpcGoodConfigs[1])
	e := c.External
	want := &GrpcService{InitialMetadata: [][2]string{{"x-api-key", "s3cret"}, {"x-team", "payments"}}, Codec: CodecJSON}
	if e.Cluster != "limits-grpc" || e.Authority != "limits.internal" || !reflect.DeepEqual(e.Grpc, want) {
		t.Fatalf("cluster %q, authority %q, grpc %+v; want %+v", e.Cluster, e.Authority, e.Grpc, want)
	}
	roundTrip(t, c)
	c = mustParse(t, externalGrpcGoodConfigs[0])
	if e := c.External; e.Authority != "limits-grpc" || e.Grpc == nil || e.Grpc.Codec != CodecProto || e.Grpc.InitialMetadata != nil {
		t.Fatalf("defaults: authority %q, grpc %+v", e.Authority, e.Grpc)
	}
	roundTrip(t, c)
}
