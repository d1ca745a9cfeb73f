package filtertest

import (
	"strings"
	"testing"
)

func init() { Cases = append(Cases, keyCases...) }

// expect sends each request once and checks whether it reached the
// upstream; a rejection must be the filter's own 429.
func expect(t *testing.T, h Harness, steps []step) {
	t.Helper()
	for i, s := range steps {
		resp := h.Do(t, s.req)
		switch {
		case s.admit && (resp.Status != 200 || resp.Local):
			t.Fatalf("step %d (%s): status %d local %v, want admitted", i, s.what, resp.Status, resp.Local)
		case !s.admit && (resp.Status != 429 || !resp.Local):
			t.Fatalf("step %d (%s): status %d local %v, want limited", i, s.what, resp.Status, resp.Local)
		}
	}
}

type step struct {
	what  string
	req   Request
	admit bool
}

func from(peer string, r Request) Request { r.Peer = peer; return r }

var keyCases = []Case{
	{
		Name:    "query key: one bucket per decoded value, conflicting repeats refused, absent is missing",
		Config:  `{"limits":[{"name":"q","key":["query:user"],"requests_per_second":1,"burst":0,"on_missing_key":"deny"}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"first bob", get("/a?user=bob"), true},
				{"bob percent-encoded", get("/a?x=1&user=b%6Fb"), false},
				{"bob after 2000 other parameters", get("/a?" + strings.Repeat("p=1&", 2000) + "user=bob"), false},
				{"the name percent-encoded", get("/a?u%73er=bob"), false},
				{"alice", get("/a?user=alice"), true},
				{"bob then alice is ambiguous: refused", get("/a?user=bob&user=alice"), false},
				{"alice then bob too", get("/a?user=alice&user=bob"), false},
				{"empty value", get("/a?user="), true},
				{"no '=' is the same empty value", get("/a?user"), false},
				{"a broken escape is kept literally", get("/a?user=%zz"), true},
				{"which is the value %zz decodes from %25zz", get("/a?user=%25zz"), false},
				{"plus is a space", get("/a?user=a+b"), true},
				{"%20 is the same space", get("/a?user=a%20b"), false},
				{"absent", get("/a"), false},
				{"another parameter", get("/a?users=bob"), false},
			})
			// Repeating one value is that value, however often.
			rep := "/a?" + strings.TrimSuffix(strings.Repeat("user=x&", 10000), "&")
			expect(t, h, []step{{"x 10,000 times", get(rep), true}, {"again", get(rep), false},
				{"x once", get("/a?user=x"), false}})
			wantCounter(t, h, "sluice.limit.q.missing_key", 4)
		},
	},
	{
		Name:    "cookie key: over every Cookie header, broken pairs skipped, different copies refused",
		Config:  `{"limits":[{"name":"c","key":["cookie:sid"],"requests_per_second":1,"burst":0,"on_missing_key":"deny"}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			var many strings.Builder
			for i := range 1000 {
				many.WriteString("c")
				many.WriteString(strings.Repeat("x", i%7))
				many.WriteString("=1; ")
			}
			expect(t, h, []step{
				{"s1", get("/").with("cookie", "sid=s1"), true},
				{"s1 among others", get("/").with("cookie", "a=1; sid=s1; b=2"), false},
				{"s1 quoted", get("/").with("cookie", `sid="s1"`), false},
				{"s1 after 1,000 cookies", get("/").with("cookie", many.String()+"sid=s1"), false},
				{"s1 in a second Cookie header", get("/").with("cookie", "a=1").with("cookie", "sid=s1"), false},
				{"s1 after broken syntax", get("/").with("cookie", ";;= ; sid ;=;sid=s1"), false},
				// Upstreams disagree on which copy counts (Go the first,
				// Django the last): neither is the key.
				{"s3 then s4: ambiguous, refused", get("/").with("cookie", "sid=s3; sid=s4"), false},
				{"s4 then s3 in two headers: refused", get("/").with("cookie", "sid=s4").with("cookie", "sid=s3"), false},
				{"s3 twice, once quoted, is s3", get("/").with("cookie", "sid=s3").with("cookie", `sid="s3"`), true},
				{"s2", get("/").with("cookie", "sid=s2"), true},
				{"names are case-sensitive", get("/").with("cookie", "SID=s1"), false},
				{"empty value is missing", get("/").with("cookie", "sid="), false},
				{"no cookie", get("/"), false},
			})
			wantCounter(t, h, "sluice.limit.c.missing_key", 5)
		},
	},
	{
		Name:    "path_segment with a header: EdgeQuota's tenant and first segment",
		Config:  `{"limits":[{"name":"seg","key":["header:x-tenant","path_segment:1"],"requests_per_second":1,"burst":0,"on_missing_key":"deny"}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"a /api", get("/api/v1/users").with("x-tenant", "a"), true},
				{"a /api again", get("/api/v2?x=1").with("x-tenant", "a"), false},
				{"doubled slashes", get("//api//v3").with("x-tenant", "a"), false},
				{"a /web", get("/web").with("x-tenant", "a"), true},
				{"b /api", get("/api").with("x-tenant", "b"), true},
				{"no segment", get("/").with("x-tenant", "a"), false},
				{"only slashes", get("///?q=/api").with("x-tenant", "a"), false},
			})
			wantCounter(t, h, "sluice.limit.seg.missing_key", 2)
		},
	},
	{
		Name:    "client_ip/24/56 shares one bucket per prefix, mapped and zoned addresses included",
		Config:  `{"client_ip":{"source":"xff","trusted_hops":1},"limits":[{"name":"net","key":["client_ip/24/56"],"requests_per_second":1,"burst":0}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"192.0.2.1", from("192.0.2.1:1000", get("/")), true},
				{"192.0.2.200 same /24", from("192.0.2.200:2000", get("/")), false},
				{"IPv4-mapped in the /24", get("/").with("x-forwarded-for", "::ffff:192.0.2.9"), false},
				{"with a port in the /24", get("/").with("x-forwarded-for", "192.0.2.10:443"), false},
				{"192.0.3.1", from("192.0.3.1:1000", get("/")), true},
				{"2001:db8:0:1::1", from("[2001:db8:0:1::1]:1000", get("/")), true},
				{"same /56", from("[2001:db8:0:ff:ffff::2]:3000", get("/")), false},
				{"zoned, same /56", get("/").with("x-forwarded-for", "[2001:db8:0:1::9%eth0]:80"), false},
				{"next /56", from("[2001:db8:0:100::1]:1000", get("/")), true},
			})
		},
	},
}

func init() {
	Cases = append(Cases, Case{
		Name: "client_ip.sources: X-Forwarded-For, then X-Real-IP, then the peer",
		Config: `{"client_ip":{"sources":["xff","header:x-real-ip","peer"],"trusted_hops":2},
			"limits":[{"name":"ip","key":["client_ip"],"requests_per_second":1,"burst":0,"on_missing_key":"deny"}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"xff entry 2 from the right", from("10.9.9.9:1", get("/").with("x-forwarded-for", "192.0.2.1, 10.0.0.7")), true},
				{"same client by xff", from("10.9.9.8:1", get("/").with("x-forwarded-for", "192.0.2.1, 10.0.0.8")), false},
				{"short xff: x-real-ip wins over the peer", from("10.9.9.9:1", get("/").with("x-forwarded-for", "10.0.0.7").with("x-real-ip", "192.0.2.1")), false},
				{"x-real-ip alone", from("10.9.9.9:1", get("/").with("x-real-ip", "192.0.2.2")), true},
				{"bad xff entry and bad x-real-ip: the peer", from("192.0.2.2:5", get("/").with("x-forwarded-for", "junk, 10.0.0.1").with("x-real-ip", "unknown")), false},
				{"peer alone", from("192.0.2.3:5", get("/")), true},
				{"nothing valid anywhere", from("unix:/s", get("/").with("x-real-ip", "192.0.2.9").with("x-real-ip", "192.0.2.8")), false},
			})
			wantCounter(t, h, "sluice.limit.ip.missing_key", 1)
		},
	})
}

func init() {
	Cases = append(Cases, Case{
		Name: "client_ip overrides: CIDR keys by longest prefix, unlimited and block",
		Config: `{"limits":[{"name":"ip","requests_per_second":1,"burst":0,"overrides":{
			"10.0.0.0/8":{"requests_per_second":3,"burst":0},
			"10.1.0.0/16":{"unlimited":true},
			"10.1.2.3":{"block":true},
			"2001:db8::/32":{"block":true}}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			in8 := func(int) Request { return from("10.9.0.1:1", get("/")) }
			if got := admitted(t, h, 5, in8); got != 3 {
				t.Fatalf("a client in 10/8 admitted %d of 5, want its override's 3", got)
			}
			if got := admitted(t, h, 5, func(int) Request { return from("10.9.0.2:1", get("/")) }); got != 3 {
				t.Fatalf("another client in 10/8 admitted %d of 5, want its own bucket of 3", got)
			}
			if got := admitted(t, h, 50, func(int) Request { return from("10.1.9.9:1", get("/")) }); got != 50 {
				t.Fatalf("unlimited /16 admitted %d of 50", got)
			}
			if got := admitted(t, h, 3, func(int) Request { return from("192.0.2.1:1", get("/")) }); got != 1 {
				t.Fatalf("a client outside every prefix admitted %d of 3, want the default 1", got)
			}
			for _, peer := range []string{"10.1.2.3:1", "[::ffff:10.1.2.3]:1", "[2001:db8:5::1]:1"} {
				resp := h.Do(t, from(peer, get("/")))
				if resp.Status != 429 || !resp.Local || resp.Headers.Get("Retry-After") == "" {
					t.Fatalf("blocked %s: status %d local %v headers %v", peer, resp.Status, resp.Local, resp.Headers)
				}
			}
			wantCounter(t, h, "sluice.limit.ip.limited", 2+2+2+3)
		},
	})
}
