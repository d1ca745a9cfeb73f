package backend

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter"
)

func TestKey(t *testing.T) {
	long := strings.Repeat("!/%+. ", 7<<10) // 42 KiB that Webdis percent-encodes
	for _, v := range []string{"", "alice", "\xff\xfe", "h:11cde7ce472e39c1", long} {
		got := Key("api", limiter.TokenBucket, v)
		sum := sha256.Sum256([]byte(v))
		if want := "sluice:api:" + hex.EncodeToString(sum[:16]); got != want {
			t.Fatalf("Key(api, %.20q) = %q, want %q", v, got, want)
		}
		if len(got) != len("sluice:api:")+KeyDigestLen {
			t.Fatalf("Key(api, %.20q) has length %d", v, len(got))
		}
		if string(AppendKey([]byte("x"), "api", limiter.TokenBucket, v)) != "x"+got {
			t.Fatal("AppendKey differs from Key")
		}
	}
	if Key("api", limiter.TokenBucket, "\xff\xfe") == Key("api", limiter.TokenBucket, "h:"+Key("api", limiter.TokenBucket, "\xff\xfe")[len("sluice:api:"):]) {
		t.Fatal("a plain text spelling a digest shares its bucket")
	}
	if Key("a", limiter.TokenBucket, "b:c") == Key("a:b", limiter.TokenBucket, "c") {
		t.Fatal("limit name and key value run together")
	}
	// A sliding log's sorted set never shares a key with a hash bucket of
	// the same limit and value, whichever hash algorithm it had.
	sum := sha256.Sum256([]byte("alice"))
	if got, want := Key("api", limiter.SlidingLog, "alice"), "sluice:api.log:"+hex.EncodeToString(sum[:16]); got != want {
		t.Fatalf("sliding_log key %q, want %q", got, want)
	}
	for _, alg := range []limiter.Algorithm{limiter.TokenBucket, limiter.FixedWindow, limiter.SlidingWindow} {
		if got := Key("api", alg, "alice"); got != "sluice:api:"+hex.EncodeToString(sum[:16]) {
			t.Fatalf("%v key %q", alg, got)
		}
	}
}

// TestKeyAllocs: building a key costs the one string it returns, however
// long the key value, as the concatenation it replaced did.
func TestKeyAllocs(t *testing.T) {
	v := strings.Repeat("\x80", 40<<10)
	name := strings.Repeat("n", 64) // the longest name the config accepts
	if n := testing.AllocsPerRun(100, func() { _ = Key(name, limiter.SlidingLog, v) }); n > 1 {
		t.Fatalf("Key allocates %v times, want 1", n)
	}
	buf := make([]byte, 0, 128)
	if n := testing.AllocsPerRun(100, func() { buf = AppendKey(buf[:0], name, limiter.SlidingLog, v) }); n != 0 {
		t.Fatalf("AppendKey into a large enough buffer allocates %v times", n)
	}
}

// TestWebdisURLIsBounded: whatever the key value, a call's URL is the
// same length, far below what Webdis accepts (~80 KiB).
func TestWebdisURLIsBounded(t *testing.T) {
	e := Endpoint{}
	var want int
	for i, v := range []string{"a", strings.Repeat("\x00/%", 20<<10)} {
		cmd, err := Decide(limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 10, Period: time.Second}, Key(strings.Repeat("n", 64), limiter.SlidingLog, v), 1)
		if err != nil {
			t.Fatal(err)
		}
		req, err := e.EvalSHA(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			want = len(req.Path)
		}
		if len(req.Path) != want || len(req.Path) > 512 {
			t.Fatalf("URL of %d bytes for a %d-byte key value", len(req.Path), len(v))
		}
	}
}

// TestStatusClassification is the classification table of the backend
// section of filter/config/README.md, status by status through the
// parser: the Kind, whether it counts against backend.breaker, and
// whether the call is retried.
func TestStatusClassification(t *testing.T) {
	for _, c := range []struct {
		statuses       []int
		kind           Kind
		breaker, retry bool
	}{
		{[]int{400, 413, 414, 431}, KindRequest, false, false},
		{[]int{401, 403, 404, 405, 429, 204, 302}, KindHTTPStatus, true, false},
		// 503 is also Envoy's overflow and no-healthy-host reply.
		{[]int{500, 502, 503, 504}, KindUnavailable, true, true},
	} {
		for _, status := range c.statuses {
			for _, p := range []Protocol{Webdis, Upstash} {
				_, err := ParseReply(p, status, []byte("<html>nope</html>"))
				k := KindOf(err)
				if k != c.kind || k.CountsAgainstBreaker() != c.breaker || k.Retryable() != c.retry {
					t.Errorf("%v HTTP %d: kind %v (breaker %v, retry %v), want %v (breaker %v, retry %v)",
						p, status, k, k.CountsAgainstBreaker(), k.Retryable(), c.kind, c.breaker, c.retry)
				}
			}
		}
	}
	// The other kinds: every failure but a refused request is the
	// backend's.
	for _, c := range []struct {
		kind         Kind
		breaker, try bool
	}{
		{KindTimeout, true, true}, {KindNoScript, true, true}, {KindMalformed, true, false}, {KindRedis, true, false},
	} {
		if c.kind.CountsAgainstBreaker() != c.breaker || c.kind.Retryable() != c.try {
			t.Errorf("%v: breaker %v retry %v", c.kind, c.kind.CountsAgainstBreaker(), c.kind.Retryable())
		}
	}
	// Upstash's 400 with an error body is a Redis error, as before.
	if _, err := ParseReply(Upstash, 400, []byte(`{"error":"ERR x"}`)); KindOf(err) != KindRedis {
		t.Errorf("upstash 400 error reply: %v", err)
	}
	if err := TooLarge(200, 70000, 65536); KindOf(err) != KindMalformed || !KindOf(err).CountsAgainstBreaker() {
		t.Errorf("TooLarge: %v", err)
	}
}
