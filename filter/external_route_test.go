package filter_test

import (
	"testing"
)

// TestExternalRouteThroughTheAdapter: the proxy-wasm adapter writes an
// allowed backend_url into route_header, removes a client's own value,
// and calls Envoy's clear_route_cache foreign function after each.
func TestExternalRouteThroughTheAdapter(t *testing.T) {
	cfg := extConfig(`,"route_header":"x-sluice-backend","allowed_routes":["backend_a"]`)
	quotas := map[string]string{
		"acme":  `{"limit":4,"window":"1h","tenant_key":"acme","backend_url":"backend_a"}`,
		"hooli": `{"limit":4,"window":"1h","tenant_key":"hooli"}`,
	}
	d, _ := newExtHarness(t, cfg, quotas)
	clears := 0
	d.host.RegisterForeignFunction("clear_route_cache", func([]byte) []byte { clears++; return []byte{0} })

	upstream := func(tenant string) []string {
		t.Helper()
		if o := d.doHeaders(tenantHeaders(tenant, [2]string{"x-sluice-backend", "evil"})); o.status != 200 {
			t.Fatalf("%s: %d", tenant, o.status)
		}
		id := d.ctxs[len(d.ctxs)-1]
		var vs []string
		for _, kv := range d.host.GetCurrentRequestHeaders(id) {
			if kv[0] == "x-sluice-backend" {
				vs = append(vs, kv[1])
			}
		}
		return vs
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
