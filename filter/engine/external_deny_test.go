package engine

import (
	"strings"
	"testing"
)

// TestExternalDenyHeaders: the wildcard sends every header but the
// configured deny list and the sensitive defaults, which stay denied.
func TestExternalDenyHeaders(t *testing.T) {
	hs := [][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "shop.example.com"},
		{"x-tenant-id", "acme"}, {"x-internal-token", "t0k"}, {"X-Forwarded-Client-Cert", "cert"},
		{"authorization", "Bearer abc"}, {"user-agent", "curl/8"}}
	cfg := strings.Replace(extConfig(`,"cache_key":["header:x-tenant-id"],"deny_headers":["x-internal-token","x-forwarded-client-cert"]`),
		`"forward_headers":["x-tenant-id"]`, `"forward_headers":["x-tenant-id","*"]`, 1)
	d, f := newExtHarness(t, cfg, tenantQuotas)
	if o := d.doHeaders(hs); o.status != 200 {
		t.Fatalf("status %d", o.status)
	}
	want := lookupRequest{Method: "GET", Path: "/api", Headers: map[string]string{"x-tenant-id": "acme", "user-agent": "curl/8"}}
	if !equalLookup(f.last, want) {
		t.Fatalf("lookup %+v, want %+v (neither the denied nor the sensitive headers)", f.last, want)
	}
}
