package external

import (
	"testing"
	"time"
)

// answerWith looks key up and answers with body and Cache-Control cc;
// it reports whether a lookup went out.
func (r *rig) answerWith(t *testing.T, key, body, cc string) bool {
	t.Helper()
	var req Request
	if r.resolve(&req, key) {
		return false // served from the cache
	}
	r.tick(0)
	calls := r.f.Caller.Pending()
	if len(calls) != 1 {
		t.Fatalf("%d lookups out, want 1", len(calls))
	}
	var hs [][2]string
	if cc != "" {
		hs = [][2]string{{"cache-control", cc}}
	}
	calls[0].AnswerWithHeaders(200, hs, []byte(body))
	if !r.x.Settle(&req, r.f.Clock.Now) || req.Fallback {
		t.Fatalf("request %+v", req)
	}
	return true
}

// TestCacheControlIsHonoured: the reply's Cache-Control sets how long an
// answer is fresh (cache_ttl is 60s here), no-store and no-cache are
// obeyed, and the body's fields win over the header.
func TestCacheControlIsHonoured(t *testing.T) {
	const plain = `{"limit":3,"window":"1h"}`
	r := newRig(t)
	if !r.answerWith(t, "short", plain, "max-age=5") || r.answerWith(t, "short", plain, "") {
		t.Fatal("max-age=5: want one lookup, then a cache hit")
	}
	r.f.Clock.Advance(6 * time.Second)
	if !r.answerWith(t, "short", plain, "max-age=5") {
		t.Fatal("max-age=5: still fresh after 6s")
	}
	for _, cc := range []string{"no-store", "no-cache", "max-age=0"} {
		if !r.answerWith(t, cc, plain, cc) || !r.answerWith(t, cc, plain, cc) {
			t.Fatalf("%s: an answer was served from the cache", cc)
		}
	}
	// The body says 300s: the header's max-age=1 and no-store lose.
	if !r.answerWith(t, "body", `{"limit":3,"window":"1h","cache_max_age_seconds":300,"cache_no_store":false}`, "max-age=1, no-store") {
		t.Fatal("first lookup")
	}
	r.f.Clock.Advance(2 * time.Second)
	if r.answerWith(t, "body", plain, "") {
		t.Fatal("the body's cache_max_age_seconds lost to the header")
	}
	// Garbage is counted and ignored: cache_ttl applies.
	if !r.answerWith(t, "garbage", plain, `max-age=soon, "`) || r.answerWith(t, "garbage", plain, "") {
		t.Fatal("garbage Cache-Control: want one lookup, then cache_ttl")
	}
	if got := r.metric("invalid_cache_control"); got != 1 {
		t.Fatalf("invalid_cache_control = %d, want 1", got)
	}
}

// TestNoCacheAnswerStillServesStale: no-cache is never fresh, but stands
// in when the next lookup fails.
func TestNoCacheAnswerStillServesStale(t *testing.T) {
	r := newRig(t)
	r.answerWith(t, "acme", `{"limit":3,"window":"1h","tenant_key":"acme"}`, "no-cache")
	var b Request
	if r.resolve(&b, "acme") {
		t.Fatal("a no-cache answer was served fresh")
	}
	r.tick(0)
	r.f.Caller.Pending()[0].Answer(503, nil, nil)
	if !r.x.Settle(&b, r.f.Clock.Now) || b.Fallback || b.Bucket != "acme" {
		t.Fatalf("after a failed lookup: %+v, want the stale no-cache answer", b)
	}
}
