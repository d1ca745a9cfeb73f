package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/internal/fixtures/redistest"
	"github.com/sluice-proxy/sluice/limiter"
)

// TestGlobalAgainstRealWebdis: the global flow the fake Redis checks
// exactly, against a real redis-server behind a real Webdis. Redis keeps
// its own clock, so the window is an hour and nothing refills while the
// test runs: a fresh Redis has no scripts (EVALSHA, SCRIPT LOAD, EVALSHA),
// the bucket admits exactly its 10, and Redis holds it under backend.Key.
func TestGlobalAgainstRealWebdis(t *testing.T) {
	r := redistest.StartRedis(t)
	w := redistest.StartWebdis(t, r.Addr())
	cfg := strings.Replace(distConfig("global", "deny", "webdis", ""), `"requests_per_second":10`, `"limit":10,"window":"1h"`, 1)
	d := newDistHarness(t, cfg, nil)
	d.reply = webdisReply(t, w.URL())
	if o := d.do("alice"); o.status != 200 || o.calls != 3 {
		t.Fatalf("first request: status %d after %d calls, want 200 after EVALSHA, SCRIPT LOAD, EVALSHA", o.status, o.calls)
	}
	if ok := d.admitted("alice", 14); ok != 9 {
		t.Fatalf("admitted %d more of 14, want the 9 left of 10", ok)
	}
	if got := d.counter("sluice.backend.breaker.opens"); got != 0 {
		t.Fatalf("breaker opens %d against a healthy Redis", got)
	}
	key := backend.Key("api", limiter.TokenBucket, "alice")
	if n, err := r.Client().Exists(context.Background(), key).Result(); err != nil || n != 1 {
		t.Fatalf("Redis bucket %s: exists %d, %v", key, n, err)
	}
	if o := d.do("bob"); o.status != 200 {
		t.Fatalf("bob: %d, want his own bucket", o.status)
	}
}
