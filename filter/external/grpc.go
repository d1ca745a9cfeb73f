package external

// Lookups over gRPC (external.grpc): the same lookup, sent as a unary
// call to edgequota.ratelimit.v1.RateLimitService/GetLimits through the
// host's gRPC callouts (proxy_grpc_call), with the same cache,
// singleflight, breaker and answer semantics as over HTTP. Only the
// encoding and the failures differ:
//
//   - Codec "proto" (the default) sends a GetLimitsRequest and reads a
//     GetLimitsResponse (limitsvc.ParseGrpc), which means the same as its
//     JSON form: Envoy's gRPC client sends content-type application/grpc,
//     which every gRPC server reads as protobuf. Codec "json" sends the
//     HTTP form's JSON body as the message and reads a JSON answer, for
//     services built on a JSON codec, as seed 003's is.
//   - A call that closes with a status other than OK is a failed lookup:
//     DEADLINE_EXCEEDED counts as a timeout, UNAVAILABLE (no healthy
//     host, a reset, a refused connection) as unavailable, any other
//     status under http_status, the kind of any other refusal by the
//     service. Cache directives come from the answer's fields only.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/limitsvc"
)

// grpcLookups is what a cache reaching its service over gRPC needs.
type grpcLookups struct {
	caller host.GrpcCaller
	// service is the serialized GrpcService naming the cluster.
	service  []byte
	metadata [][2]string
	json     bool
}

// configureGrpc sets up gRPC lookups when the configuration asks for
// them; a host without gRPC callouts cannot serve such a configuration.
func (x *Cache) configureGrpc(caller host.Caller) error {
	g := x.cfg.Grpc
	if g == nil {
		return nil
	}
	gc, ok := caller.(host.GrpcCaller)
	if !ok {
		return fmt.Errorf("external.grpc: this host has no gRPC callouts")
	}
	x.grpc = &grpcLookups{
		caller:   gc,
		service:  host.AppendGrpcService(nil, x.cfg.Cluster, x.cfg.Authority),
		metadata: g.InitialMetadata,
		json:     g.Codec == config.CodecJSON,
	}
	return nil
}

// message is the lookup as the service reads it: the HTTP form's JSON
// body, or for protobuf the GetLimitsRequest it describes.
func (g *grpcLookups) message(body []byte) []byte {
	if g.json {
		return body
	}
	l, err := limitsvc.ParseLookupJSON(body)
	if err != nil {
		// The engine renders the body; it is always such an object.
		return nil
	}
	return l.AppendProto(make([]byte, 0, len(body)))
}

func (x *Cache) sendGrpc(l *lookup, now time.Time) {
	err := x.grpc.caller.GrpcCall(x.grpc.service, limitsvc.GrpcService, limitsvc.GrpcMethod, x.grpc.metadata,
		l.body, x.cfg.Timeout, func(reply []byte, err error) {
			x.onGrpcReply(l, reply, err)
		})
	if err != nil {
		x.finish(l, now, limitsvc.Answer{}, &backend.Error{Kind: backend.KindUnavailable, Detail: "proxy_grpc_call: " + err.Error()})
	}
}

func (x *Cache) onGrpcReply(l *lookup, reply []byte, err error) {
	if l.done {
		return // the watchdog gave up on it
	}
	now := x.clock()
	x.recordLatency(l, now)
	if err != nil {
		x.finish(l, now, limitsvc.Answer{}, grpcError(err))
		return
	}
	var a limitsvc.Answer
	if x.grpc.json {
		a, err = limitsvc.Parse(200, reply)
	} else {
		a, err = limitsvc.ParseGrpc(reply)
	}
	x.answered(l, now, a, err)
}

// grpcError classifies a gRPC failure as the backend kinds HTTP failures
// are counted under.
func grpcError(err error) error {
	s, ok := err.(*host.GrpcStatus)
	if !ok {
		return err
	}
	kind := backend.KindHTTPStatus
	switch s.Code {
	case host.GrpcDeadlineExceeded:
		kind = backend.KindTimeout
	case host.GrpcUnavailable:
		kind = backend.KindUnavailable
	}
	detail := "grpc status " + strconv.Itoa(s.Code)
	if s.Message != "" {
		detail += ": " + s.Message
	}
	if len(detail) > 200 {
		detail = detail[:200]
	}
	return &backend.Error{Kind: kind, Detail: detail}
}
