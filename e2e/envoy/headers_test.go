package envoy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// sluiceResponse is an upstream's 200 as Sluice's default response
// leaves it: the upstream's own header and the five rate-limit headers a
// filter adds, in the lower case proxy-wasm gives them.
var sluiceResponse = &host.Response{Status: 200, Body: []byte("ok"), Headers: [][2]string{
	{"content-type", "text/plain"},
	{"x-ratelimit-limit", "1000"}, {"x-ratelimit-remaining", "999"}, {"x-ratelimit-reset", "1795000000"},
	{"ratelimit-policy", `"per-ip";q=1000;w=1`}, {"ratelimit", `"per-ip";r=999;t=1`},
}}

// discardWriter is an http.ResponseWriter that keeps its header map
// across responses, as net/http's server reuses none but allocates one
// per request outside writeResponse.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

func writeAllocs(resp *host.Response) float64 {
	w := &discardWriter{h: http.Header{}}
	r := &http.Request{Method: http.MethodGet}
	writeResponse(w, r, resp) // the map's buckets, once
	return testing.AllocsPerRun(100, func() {
		clear(w.h)
		writeResponse(w, r, resp)
	})
}

// TestWriteResponseHeaderAllocations: a header a filter adds costs the
// host one allocation (its value slice in net/http's header map), not a
// fresh canonical name on every response.
func TestWriteResponseHeaderAllocations(t *testing.T) {
	plain := &host.Response{Status: 200, Body: []byte("ok"), Headers: sluiceResponse.Headers[:1]}
	added := len(sluiceResponse.Headers) - len(plain.Headers)
	base, with := writeAllocs(plain), writeAllocs(sluiceResponse)
	if perHeader := (with - base) / float64(added); perHeader > 1 {
		t.Errorf("%.1f allocations per added response header (%.0f with %d added, %.0f without), want at most 1", perHeader, with, added, base)
	}
}

// TestCanonicalKey: canonicalKey is http.CanonicalHeaderKey, for names
// it has cached, names it has not, and names net/http leaves as they are.
func TestCanonicalKey(t *testing.T) {
	names := []string{"x-ratelimit-limit", "X-RateLimit-Limit", "content-type", "Content-Type", "ratelimit",
		"x-a", "x_b", "bad name", "", "ümlaut", strings.Repeat("a-", 40)}
	for range 2 { // the second pass reads the cache
		for _, n := range names {
			if got, want := canonicalKey(n), http.CanonicalHeaderKey(n); got != want {
				t.Errorf("canonicalKey(%q) = %q, want %q", n, got, want)
			}
		}
	}
}

// BenchmarkWriteResponse is what writing Sluice's default response costs
// the host, past the filter.
func BenchmarkWriteResponse(b *testing.B) {
	w := &discardWriter{h: http.Header{}}
	r := &http.Request{Method: http.MethodGet}
	b.ReportAllocs()
	for range b.N {
		clear(w.h)
		writeResponse(w, r, sluiceResponse)
	}
}

// trailerBody is a streamed body of one chunk followed by trailers.
type trailerBody struct {
	sent     bool
	trailers [][2]string
}

func (b *trailerBody) Next(context.Context) ([]byte, error) {
	if b.sent {
		return nil, io.EOF
	}
	b.sent = true
	return []byte("streamed"), nil
}

func (b *trailerBody) Trailers() [][2]string { return b.trailers }

// TestWriteResponseTrailers: trailers reach a real HTTP/1.1 client after
// the body, whether the filters held the whole body or let it stream;
// hop-by-hop names and pseudo-headers do not.
func TestWriteResponseTrailers(t *testing.T) {
	trailers := [][2]string{{"grpc-status", "0"}, {"X-Usage", "7"}, {"connection", "close"}, {":status", "200"}}
	for _, c := range []struct {
		name string
		resp func() *host.Response
		body string
	}{
		{"whole body", func() *host.Response {
			return &host.Response{Status: 200, Body: []byte("whole"), Trailers: trailers}
		}, "whole"},
		{"streamed body", func() *host.Response {
			return &host.Response{Status: 200, BodyStream: &trailerBody{trailers: trailers}}
		}, "streamed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeResponse(w, r, c.resp()) }))
			defer srv.Close()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || string(b) != c.body {
				t.Fatalf("body %q %v", b, err)
			}
			want := http.Header{"Grpc-Status": {"0"}, "X-Usage": {"7"}}
			if fmt.Sprint(resp.Trailer) != fmt.Sprint(want) {
				t.Errorf("trailers %v, want %v", resp.Trailer, want)
			}
		})
	}
}
