package filter_test

import (
	"encoding/json"
	"testing"

	"github.com/sluice-proxy/sluice/filter/filtertest"
)

// TestExternalRouteThroughTheAdapter: the proxy-wasm adapter writes an
// allowed backend_url into route_header, removes a client's own value,
// and calls Envoy's clear_route_cache foreign function after each.
func TestExternalRouteThroughTheAdapter(t *testing.T) {
	cfg := `{"external":{"cluster":"limits","timeout":"100ms","forward_headers":["x-tenant-id"],"cache_ttl":"60s",` +
		`"stale_ttl":"10s","fallback":{"limit":4,"window":"1h","key":["header:x-tenant-id"]}` +
		`,"route_header":"x-sluice-backend","allowed_routes":["backend_a"]}}`
	quotas := map[string]string{
		"acme":  `{"limit":4,"window":"1h","tenant_key":"acme","backend_url":"backend_a"}`,
		"hooli": `{"limit":4,"window":"1h","tenant_key":"hooli"}`,
	}
	h := newNativeHarness(t, cfg)
	// The limits service answers each lookup with the plan of the tenant
	// it names.
	h.answer = func(cluster string, _ [][2]string, body []byte) (int, []byte, bool) {
		var lookup struct {
			Headers map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(body, &lookup); cluster != "limits" || err != nil {
			t.Fatalf("callout to %q with %q, want a lookup of the limits service", cluster, body)
		}
		return 200, []byte(quotas[lookup.Headers["x-tenant-id"]]), true
	}
	clears := 0
	h.host.RegisterForeignFunction("clear_route_cache", func([]byte) []byte { clears++; return []byte{0} })

	upstream := func(tenant string) []string {
		t.Helper()
		resp := h.Do(t, filtertest.Request{Method: "GET", Path: "/api", Host: "example.com",
			Headers: [][2]string{{"x-tenant-id", tenant}, {"x-sluice-backend", "evil"}}})
		if resp.Status != 200 {
			t.Fatalf("%s: %d", tenant, resp.Status)
		}
		return resp.UpstreamHeaders.Values("x-sluice-backend")
	}
	if got := upstream("acme"); len(got) != 1 || got[0] != "backend_a" {
		t.Fatalf("acme: upstream x-sluice-backend %q, want [backend_a]", got)
	}
	if clears != 2 { // the client's value removed, then the route written
		t.Fatalf("%d clear_route_cache calls for acme, want 2", clears)
	}
	if got := upstream("hooli"); len(got) != 0 {
		t.Fatalf("hooli: upstream x-sluice-backend %q, want none", got)
	}
	if clears != 3 {
		t.Fatalf("%d clear_route_cache calls after hooli, want 3", clears)
	}
}
