package filter_test

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/filtertest"
)

// TestOversizeReplyIsMalformed: a reply body over the 64 KiB read limit
// is a backend malfunction, even when its first 64 KiB are a valid
// decision followed by whitespace: under failure_policy deny the request
// is rejected, never admitted by the part that parses. The limit is the
// adapter's (hostcalls.go), so the reply goes through proxytest.
func TestOversizeReplyIsMalformed(t *testing.T) {
	const limit = 64 << 10
	for _, proto := range []struct{ name, token, granted string }{
		{"webdis", "", `{"EVALSHA":[1,9,0,100,0,1]}`},
		{"upstash", `,"token":"secret"`, `{"result":[1,9,0,100,0,1]}`},
	} {
		cfg := `{"limits":[{"name":"api","key":["header:x-key"],"requests_per_second":10,"mode":"global","failure_policy":"deny","instances":2}],` +
			`"backend":{"cluster":"redis","protocol":"` + proto.name + `"` + proto.token + `,"timeout":"50ms","retries":1,"failure_status":503,` +
			`"breaker":{"failure_threshold":3,"window":"30s","open_timeout":"1s","half_open_max_requests":1}}}`
		pad := func(n int) []byte { return []byte(proto.granted + strings.Repeat(" ", n-len(proto.granted))) }
		for _, c := range []struct {
			name   string
			body   []byte
			status int
		}{
			{"exactly the limit", pad(limit), 200},
			{"one byte over", pad(limit + 1), 503},
			{"garbage past the limit", append(pad(limit), "garbage"...), 503},
		} {
			t.Run(proto.name+"/"+c.name, func(t *testing.T) {
				h := newNativeHarness(t, cfg)
				h.answer = func(cluster string, _ [][2]string, _ []byte) (int, []byte, bool) {
					if cluster != "redis" {
						t.Fatalf("callout to %q, want the backend cluster", cluster)
					}
					return 200, c.body, true
				}
				resp := h.Do(t, filtertest.Request{Method: "GET", Path: "/api", Host: "example.com", Headers: [][2]string{{"x-key", "alice"}}})
				if resp.Status != c.status {
					t.Fatalf("%d-byte reply: status %d, want %d", len(c.body), resp.Status, c.status)
				}
				if got := h.Counter(t, "sluice.backend.errors.malformed"); c.status == 503 && got != 1 {
					t.Fatalf("errors.malformed = %d, want 1", got)
				}
			})
		}
	}
}
