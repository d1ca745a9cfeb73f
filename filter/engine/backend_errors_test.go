package engine

import (
	"strconv"
	"testing"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
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
				d.reply = func(c *hosttest.Call) (int, []byte, bool) {
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
			d.reply = func(*hosttest.Call) (int, []byte, bool) { return 401, nil, true }
			for range 3 {
				d.do("alice")
			}
			if got := d.counter("sluice.backend.breaker.opens"); got != 1 {
				t.Fatalf("breaker opens %d after 3 × 401, want 1: credentials fail every call", got)
			}
		})
	}
}
