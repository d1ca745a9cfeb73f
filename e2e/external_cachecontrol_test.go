package e2e_test

import (
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/limits"
)

// TestExternalCacheControlEndToEnd: the limits service's Cache-Control
// header decides how long its answer is cached (cache_ttl is 60s here).
func TestExternalCacheControlEndToEnd(t *testing.T) {
	lf := startLimits(t, limits.New(map[string]limits.Plan{
		"big":     {Limit: 100, Window: "1h"},
		"nostore": {Limit: 100, Window: "1h", CacheControl: "no-store"},
		"brief":   {Limit: 100, Window: "1h", CacheControl: "max-age=1"},
		"body":    {Limit: 100, Window: "1h", MaxAgeSeconds: 300, CacheControl: "max-age=1"},
	}, map[string]string{"warm-up": "big", "a": "nostore", "b": "brief", "c": "body"}, ""))
	e := startExternal(t, 1, externalJSON(""), map[string]string{"limits": lf.addr})
	clients := twoWorkers(t, e)
	e.admitted(t, clients, "a", 3)
	e.admitted(t, clients, "b", 3)
	e.admitted(t, clients, "c", 3)
	if a, b, c := lf.svc.Count("a"), lf.svc.Count("b"), lf.svc.Count("c"); a != 3 || b != 1 || c != 1 {
		t.Fatalf("lookups a %d, b %d, c %d; want 3 (no-store), 1 and 1", a, b, c)
	}
	e.advance(2 * time.Second)
	e.admitted(t, clients, "b", 1)
	e.admitted(t, clients, "c", 1)
	if b, c := lf.svc.Count("b"), lf.svc.Count("c"); b != 2 || c != 1 {
		t.Fatalf("after 2s: lookups b %d, c %d; want 2 (max-age=1 passed) and 1 (the body's 300s wins)", b, c)
	}
}
