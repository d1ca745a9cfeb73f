package filter_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/limiter"
)

// TestRequestRefusalIsThatRequestsError: a backend that refuses the calls
// of one key (a front with a smaller URL or body limit) applies the
// failure policy to that key's requests alone. Those refusals are not
// retried and do not count against backend.breaker, so another client's
// limit keeps being decided by Redis. A 401 is a deployment error and
// still opens the breaker.
func TestRequestRefusalIsThatRequestsError(t *testing.T) {
	for _, proto := range []backend.Protocol{backend.Webdis, backend.Upstash} {
		for _, status := range []int{400, 413, 414, 431} {
			t.Run(proto.String()+"/"+strconv.Itoa(status), func(t *testing.T) {
				fake := newFakeRedis(tenPerSecond, proto)
				d := newDistHarness(t, distConfig("global", "allow", proto.String(), ""), fake)
				refused := backend.Key("api", limiter.TokenBucket, "mallory")
				d.reply = func(c proxytest.HttpCalloutAttribute) (int, []byte, bool) {
					if args := fake.command(t, c); len(args) > 3 && args[3] == refused {
						return status, []byte("<html>refused</html>"), true
					}
					st, body := fake.answer(t, c, d.now)
					return st, body, true
				}
				for i := range 10 {
					if o := d.do("mallory"); o.status != 200 || o.calls != 1 {
						t.Fatalf("mallory's request %d: status %d after %d calls, want 200 (failure_policy allow) after 1", i, o.status, o.calls)
					}
				}
				if got := d.counter("sluice.backend.breaker.opens"); got != 0 {
					t.Fatalf("one client's refused calls opened the backend breaker %d times", got)
				}
				if ok := d.admitted("bob", 15); ok != 10 {
					t.Fatalf("bob admitted %d of 15, want his limit's 10", ok)
				}
				if got := d.counter("sluice.backend.errors.request"); got != 10 {
					t.Fatalf("errors.request = %d, want 10", got)
				}
			})
		}
		t.Run(proto.String()+"/401", func(t *testing.T) {
			d := newDistHarness(t, distConfig("global", "allow", proto.String(), ""), nil)
			d.reply = func(proxytest.HttpCalloutAttribute) (int, []byte, bool) { return 401, nil, true }
			for range 3 {
				d.do("alice")
			}
			if got := d.counter("sluice.backend.breaker.opens"); got != 1 {
				t.Fatalf("breaker opens %d after 3 × 401, want 1: credentials fail every call", got)
			}
		})
	}
}

// TestOversizeReplyIsMalformed: a reply body over the 64 KiB read limit
// is a backend malfunction, even when its first 64 KiB are a valid
// decision followed by whitespace: under failure_policy deny the request
// is rejected, never admitted by the part that parses.
func TestOversizeReplyIsMalformed(t *testing.T) {
	const limit = 64 << 10
	for _, proto := range []backend.Protocol{backend.Webdis, backend.Upstash} {
		fake := newFakeRedis(tenPerSecond, proto)
		granted := fake.envelope("EVALSHA", "[1,9,0,100,0,1]")
		pad := func(n int) []byte { return append(granted, strings.Repeat(" ", n-len(granted))...) }
		for _, c := range []struct {
			name   string
			body   []byte
			status int
		}{
			{"exactly the limit", pad(limit), 200},
			{"one byte over", pad(limit + 1), 503},
			{"garbage past the limit", append(pad(limit), "garbage"...), 503},
		} {
			t.Run(proto.String()+"/"+c.name, func(t *testing.T) {
				d := newDistHarness(t, distConfig("global", "deny", proto.String(), ""), fake)
				d.reply = func(proxytest.HttpCalloutAttribute) (int, []byte, bool) { return 200, c.body, true }
				o := d.do("alice")
				if o.status != c.status {
					t.Fatalf("%d-byte reply: status %d, want %d", len(c.body), o.status, c.status)
				}
				if c.status == 503 && d.counter("sluice.backend.errors.malformed") != 1 {
					t.Fatalf("errors.malformed = %d, want 1", d.counter("sluice.backend.errors.malformed"))
				}
			})
		}
	}
}
