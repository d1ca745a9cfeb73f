package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/host/hosttest"
)

// BenchmarkEngineOneLimitOneBreaker is the lifecycle benchmark's "one
// limit + one breaker" request natively over the host fakes: the request
// phase, an allowed response decorated with its headers, and the end of
// the stream. Its profile shows where the guest's own time goes.
func BenchmarkEngineOneLimitOneBreaker(b *testing.B) {
	benchOneLimitOneBreaker(b, "", "/")
}

// BenchmarkEngineOneLimitOneBreakerAdmin is the same request with the
// admin route configured: what checking every path against its prefix
// costs a request that is not an admin one.
func BenchmarkEngineOneLimitOneBreakerAdmin(b *testing.B) {
	benchOneLimitOneBreaker(b, `,"admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"`+strings.Repeat("0", 64)+`"}`, "/api/v1/users/12345?fields=name,email")
}

// BenchmarkEngineOneLimitOneBreakerAdminBearer is the admin request of
// BenchmarkEngineOneLimitOneBreakerAdmin carrying an application's bearer
// token: its Authorization is hashed to tell it from the admin token.
func BenchmarkEngineOneLimitOneBreakerAdminBearer(b *testing.B) {
	benchOneLimitOneBreaker(b, `,"admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"`+strings.Repeat("0", 64)+`"}`, "/api/v1/users/12345?fields=name,email",
		[2]string{"authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl"}, [2]string{"accept", "*/*"}, [2]string{"user-agent", "curl/8"})
}

func benchOneLimitOneBreaker(b *testing.B, extra, path string, headers ...[2]string) {
	p, f := newNativePlugin(b, `{"limits":[{"name":"per-ip","key":["client_ip"],"requests_per_second":1000000000}],"breakers":[{"name":"backend"}]`+extra+`}`)
	f.Stream.Headers = append([][2]string{{":method", "GET"}, {":path", path}, {":authority", "a"}}, headers...)
	f.Stream.Properties = map[string]string{"source.address": "10.0.0.1:5000", "xds.cluster_name": "backend"}
	for _, h := range headers {
		// Envoy's request.headers attribute, which the admin route reads.
		f.Stream.Properties["request.headers."+h[0]] = h[1]
	}
	f.Stream.ResponseHeaderMap = [][2]string{{":status", "200"}}
	benchRequests(b, p, f, true)
}

// benchRequests sends b.N admitted requests through p, each ended after
// its request headers, or after its response headers with response.
func benchRequests(b *testing.B, p *Plugin, f *hosttest.Fakes, response bool) {
	s := &Stream{}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		f.Clock.Advance(time.Microsecond)
		p.Begin(s, uint32(i+1))
		if s.RequestHeaders() != Continue {
			b.Fatal("request not admitted")
		}
		if response {
			s.ResponseHeaders()
		}
		s.Done()
	}
}

// BenchmarkKeyParts is one allowed request through one limit keyed on
// each request-derived key part, with a value that is already in normal
// form: what reading and normalising the part costs the common request.
func BenchmarkKeyParts(b *testing.B) {
	headers := [][2]string{{":method", "GET"}, {":path", "/t/alice/x?api_key=alice&page=2"},
		{":authority", "api.example"}, {"x-api-key", "alice"}, {"cookie", "theme=dark; sid=alice; lang=en"}}
	for _, part := range []string{"path", "path_segment:2", "host", "query:api_key", "header:x-api-key",
		"cookie:sid", "metadata:jwt:sub"} {
		b.Run(part, func(b *testing.B) {
			p, f := newNativePlugin(b, `{"limits":[{"name":"l","key":["`+part+`"],"requests_per_second":1000000000}]}`)
			f.Stream.Headers = headers
			f.Stream.Properties = map[string]string{"source.address": "10.0.0.1:5000",
				"metadata.filter_metadata.jwt.sub": "alice"}
			benchRequests(b, p, f, false)
		})
	}
}

// BenchmarkMatchOneValue is one allowed request through one limit whose
// match tests a header and a query parameter, each given once, and a not
// over two more: what testing every reading of a value costs the common
// request, whose values have one reading each.
func BenchmarkMatchOneValue(b *testing.B) {
	p, f := newNativePlugin(b, `{"limits":[{"name":"l","key":[],"requests_per_second":1000000000,"match":{
		"headers":[{"name":"x-plan","prefix":"fr"}],"query":[{"name":"plan","value":"free"}],
		"not":{"headers":[{"name":"x-tier","value":"internal"}],"query":[{"name":"u","regex":"a.*"}]}}}]}`)
	f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/x?plan=fr%65e&u=b"}, {":authority", "a"},
		{"x-plan", "free"}, {"x-tier", "pro"}}
	f.Stream.Properties = map[string]string{"source.address": "10.0.0.1:5000"}
	benchRequests(b, p, f, false)
}
