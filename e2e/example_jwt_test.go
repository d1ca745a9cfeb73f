package e2e_test

import (
	"net/http"
	"sync/atomic"
	"testing"
)

// TestExampleJWTClaims serves examples/jwt-claims: header_to_metadata
// copies x-jwt-sub into dynamic metadata before the wasm, and the limit is
// per user wherever the user connects from, through our host's metadata
// property.
func TestExampleJWTClaims(t *testing.T) {
	var sawClaim atomic.Bool
	env := startExampleWith(t, "jwt-claims", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-jwt-sub") != "" {
			sawClaim.Store(true)
		}
	}), nil)
	a, b, c := clientFrom("127.0.0.1"), clientFrom("127.0.0.2"), clientFrom("127.0.0.3")
	alice := map[string]string{"x-jwt-sub": "alice"}
	got, el := env.burst(t, a, 20, "GET", "/", alice)
	wantWithinBucket(t, "alice", got, 5, 2, el)
	r := env.send(t, a, "GET", "/", alice)
	for r.status == 200 { // drain what refilled meanwhile
		r = env.send(t, a, "GET", "/", alice)
	}
	if r.status != 429 {
		t.Fatalf("alice: status %d", r.status)
	}
	// Her bucket follows her to another address.
	if r := env.send(t, b, "GET", "/", alice); r.status != 429 {
		t.Fatalf("alice from another address: status %d, want her exhausted bucket's 429", r.status)
	}
	// Bob, from alice's address, has his own.
	if got, el := env.burst(t, a, 3, "GET", "/", map[string]string{"x-jwt-sub": "bob"}); got != 3 {
		t.Fatalf("bob got %d of 3 in %v; his bucket is his own", got, el)
	}
	// Without the claim the per-IP anonymous limit applies, per address.
	got, el = env.burst(t, c, 10, "GET", "/", nil)
	wantWithinBucket(t, "anonymous 127.0.0.3", got, 2, 1, el)
	if got, el := env.burst(t, b, 2, "GET", "/", nil); got != 2 {
		t.Fatalf("anonymous 127.0.0.2 got %d of 2 in %v; its bucket is its own", got, el)
	}
	if sawClaim.Load() {
		t.Fatal("x-jwt-sub reached the upstream; remove: true should drop it")
	}
	prom := env.prometheus(t)
	if metric(t, prom, `sluice_limit_limited{sluice_limit="per-user"}`) < 2 || metric(t, prom, `sluice_limit_limited{sluice_limit="anonymous"}`) < 1 {
		t.Fatal("limited counters did not move")
	}
}
