package e2e_test

import "testing"

// TestExternalDenyHeadersEndToEnd: with "*", the real limits service
// receives every request header except deny_headers and the sensitive
// defaults.
func TestExternalDenyHeadersEndToEnd(t *testing.T) {
	lf := startLimits(t, hourPlans())
	cfg := `{"external":{"cluster":"limits","timeout":"2s","forward_headers":["x-tenant-id","*"],"cache_key":["header:x-tenant-id"],` +
		`"deny_headers":["x-plan"],"fallback":{"limit":4,"window":"1h","key":["header:x-tenant-id"]}}}`
	e := startExternal(t, 1, cfg, map[string]string{"limits": lf.addr})
	if got := e.admitted(t, twoWorkers(t, e), "acme", 1); got != 1 {
		t.Fatalf("acme admitted %d of 1", got)
	}
	var h map[string]string
	for _, l := range lf.svc.Lookups() {
		if l.Headers["x-tenant-id"] == "acme" {
			h = l.Headers
		}
	}
	if h == nil {
		t.Fatalf("no lookup for acme in %+v", lf.svc.Lookups())
	}
	for _, denied := range []string{"x-plan", "authorization"} {
		if _, sent := h[denied]; sent {
			t.Errorf("lookup headers %v: %s was sent", h, denied)
		}
	}
	if len(h) < 2 {
		t.Errorf("lookup headers %v: the wildcard sent nothing but the named header", h)
	}
}
