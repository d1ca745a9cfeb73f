package engine

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/limiter"
)

// TestRedisKeysAreDigests: every key value, valid UTF-8 or not, reaches
// Redis as backend.Key, so a plain text spelling the digest another value
// used to get ("h:" and its hash) has a bucket of its own.
func TestRedisKeysAreDigests(t *testing.T) {
	oneToken := limiter.Limit{Algorithm: limiter.TokenBucket, Rate: 1, Period: 3600e9}
	fake := newFakeRedis(oneToken, backend.Webdis)
	d := newDistHarness(t, distConfig("global", "deny", "webdis", ""), fake)
	binary := "\xff\xfe"
	// What the filter used to name binary's bucket: "h:" + hexHash.
	plain := "h:" + leftPad16(limiter.Hash(0, binary))
	for _, k := range []string{binary, plain} {
		if o := d.do(k); o.status != 200 {
			t.Fatalf("first request of %q: %d, want its own bucket's token", k, o.status)
		}
	}
	for _, k := range []string{binary, plain} {
		if _, ok := fake.state[backend.Key("api", limiter.TokenBucket, k)]; !ok {
			t.Fatalf("no Redis bucket %s for %q; buckets %v", backend.Key("api", limiter.TokenBucket, k), k, fake.state)
		}
	}
}

func leftPad16(v uint64) string {
	s := strconv.FormatUint(v, 16)
	return strings.Repeat("0", 16-len(s)) + s
}
