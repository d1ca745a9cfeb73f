package filtertest

import (
	"math"
	"testing"
)

func init() { Cases = append(Cases, respellCases...) }

// respellCases are issue 23's re-spellings: a client writing its path,
// host, query parameter, header or metadata another way that its
// upstream reads as the same resource or caller must land in the same
// bucket (or be refused), never in a fresh one. Every limit here keeps
// the default on_missing_key "skip", under which a spelling that made
// the key missing would go unlimited.
var respellCases = []Case{
	{
		Name:    "path_segment key: dot segments, merged and escaped slashes, escaped letters are one path",
		Config:  `{"limits":[{"name":"seg","key":["path_segment:2"],"requests_per_second":1,"burst":0}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"alice", get("/t/alice/x"), true},
				{"through a junk segment", get("/t/junk1/../alice/x"), false},
				{"through another", get("/t/junk2/../alice/x"), false},
				{"a dot segment", get("/t/./alice/x"), false},
				{"merged slashes", get("//t///alice/x"), false},
				{"an escaped letter", get("/t/%61lice/x"), false},
				{"escaped dots", get("/t/junk/%2e%2E/alice/x"), false},
				{"escaped slashes", get("/t%2Falice%2Fx"), false},
				{"backslashes", get(`/t\alice\x`), false},
				{"a fragment", get("/t/alice#junk"), false},
				{"a servlet path parameter", get("/t/alice;jsessionid=9/x"), false},
				{"Tomcat's ..;", get("/t/junk/..;/alice/x"), false},
				{".. above the root", get("/../../t/alice"), false},
				{"case is kept: Alice is another caller", get("/t/Alice/x"), true},
				{"bob", get("/t/bob/x"), true},
			})
			wantCounter(t, h, "sluice.limit.seg.missing_key", 0)
		},
	},
	{
		Name: "path key and path matches read the normal path",
		Config: `{"limits":[{"name":"p","key":["path"],"requests_per_second":1,"burst":0},
			{"name":"m","match":{"path_prefix":"/private/"},"requests_per_second":1,"burst":0}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"/a/b", get("/a/b?q=1"), true},
				{"/a/junk/../b", get("/a/junk/../b"), false},
				{"/a/./b/", get("/a/./b/"), true}, // a trailing slash is another resource
				{"/private/x", get("/private/x"), true},
				{"/public/../private/y", get("/public/../private/y"), false},
				{"/private escaped", get("/%70rivate/z"), false},
			})
			wantCounter(t, h, "sluice.limit.m.limited", 2)
		},
	},
	{
		Name: "escaped bytes that keep the path's structure are those bytes, for keys and matches",
		Config: `{"limits":[{"name":"seg","match":{"path_prefix":"/users/"},"key":["path_segment:2"],"requests_per_second":1,"burst":1},
			{"name":"me","match":{"path_prefix":"/@me/"},"requests_per_second":1,"burst":0},
			{"name":"p","match":{"path_prefix":"/t/"},"key":["path"],"requests_per_second":1,"burst":0}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"bob@x.com", get("/users/bob@x.com/o"), true},
				{"bob@x.com again", get("/users/bob@x.com/o"), true},
				{"bob%40x.com", get("/users/bob%40x.com/o"), false},
				{"@me", get("/@me/settings"), true},
				{"%40me", get("/%40me/settings"), false},
				{"raw UTF-8 café", get("/t/caf\u00e9/x"), true},
				{"escaped café", get("/t/caf%C3%A9/x"), false},
				{"!", get("/t/a!b"), true},
				{"%21", get("/t/a%21b"), false},
				{"+", get("/t/a+b"), true},
				{"%2B", get("/t/a%2bb"), false},
				{":", get("/t/a:b"), true},
				{"%3A", get("/t/a%3Ab"), false},
				{"%3F stays a byte of the path", get("/t/a%3Fb"), true},
				{"%3f is the same", get("/t/a%3fb"), false},
			})
			wantCounter(t, h, "sluice.limit.me.limited", 1)
		},
	},
	{
		Name: "host key and hosts match: port, trailing dot and case are one host",
		Config: `{"limits":[{"name":"api","match":{"hosts":["api.example"]},"key":["path"],"requests_per_second":1,"burst":0},
			{"name":"h","key":["host"],"requests_per_second":1,"burst":0}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			on := func(host string) Request { r := get("/"); r.Host = host; return r }
			expect(t, h, []step{
				{"api.example", on("api.example"), true},
				{"with port 80", on("api.example:80"), false},
				{"with port 080", on("api.example:080"), false},
				{"with a trailing dot", on("api.example."), false},
				{"upper case, dot and port", on("API.Example.:8080"), false},
				{"extra colons: nginx reads the name before the first", on("api.example:80:80"), false},
				{"two empty ports", on("api.example::"), false},
				{"a trailing colon after the port", on("api.example:80:"), false},
				{"another host", on("other.example"), true},
			})
			wantCounter(t, h, "sluice.limit.api.limited", 7)
		},
	},
	{
		Name: "repeated query parameter and header keys: one value is that value, two are refused",
		Config: `{"limits":[{"name":"q","match":{"path_prefix":"/q"},"key":["query:api_key"],"requests_per_second":1,"burst":0},
			{"name":"hd","match":{"path_prefix":"/h"},"key":["header:x-api-key"],"requests_per_second":1,"burst":0},
			{"name":"c","match":{"path_prefix":"/c"},"key":["header:x-api-key"],"requests_per_second":100,"burst":100}],
			"concurrency":[{"name":"cc","match":{"path_prefix":"/c"},"key":["query:api_key"],"max_in_flight":100}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"alice", get("/q?api_key=alice"), true},
				{"alice then junk", get("/q?api_key=alice&api_key=junk1"), false},
				{"junk then alice", get("/q?api_key=junk2&api_key=alice"), false},
				{"empty then alice", get("/q?api_key=&api_key=alice"), false},
				{"alice twice is alice", get("/q?api_key=alice&api_key=%61lice"), false},
				{"bob", get("/q?api_key=bob"), true},
				{"header alice", get("/h").with("x-api-key", "alice"), true},
				{"header alice then junk", get("/h").with("x-api-key", "alice").with("x-api-key", "junk"), false},
				{"header junk then alice", get("/h").with("x-api-key", "junk").with("x-api-key", "alice"), false},
				{"header alice twice is alice", get("/h").with("x-api-key", "alice").with("x-api-key", "alice"), false},
				{"header x_api_key, as WSGI reads it, is alice", get("/h").with("x_api_key", "alice"), false},
				{"junk, then x_api_key alice", get("/h").with("x-api-key", "junk").with("x_api_key", "alice"), false},
				{"header bob", get("/h").with("x-api-key", "bob"), true},
			})
			// A concurrency limit refuses it too, with its own status.
			if resp := h.Do(t, get("/c?api_key=a&api_key=b").with("x-api-key", "k")); resp.Status != 503 || !resp.Local {
				t.Fatalf("ambiguous concurrency key: status %d local %v, want the filter's 503", resp.Status, resp.Local)
			}
			wantCounter(t, h, "sluice.concurrency.cc.missing_key", 1)
			wantCounter(t, h, "sluice.limit.q.missing_key", 3)
			wantCounter(t, h, "sluice.limit.hd.missing_key", 3)
		},
	},
	{
		Name:    "cookie key: escaped bytes are those bytes, as PHP and Rack read cookies",
		Config:  `{"limits":[{"name":"ck","key":["cookie:sid"],"requests_per_second":1,"burst":0}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"alice", get("/").with("cookie", "sid=alice"), true},
				{"al%69ce", get("/").with("cookie", "sid=al%69ce"), false},
				{"quoted and escaped", get("/").with("cookie", `sid="%61lice"`), false},
				{"bob", get("/").with("cookie", "sid=bob"), true},
			})
			wantCounter(t, h, "sluice.limit.ck.missing_key", 0)
		},
	},
	{
		Name:    "query key: a ';' read both ways, and names PHP reads as the parameter",
		Config:  `{"limits":[{"name":"q","key":["query:api_key"],"requests_per_second":1,"burst":0}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"alice", get("/?api_key=alice"), true},
				{"alice;junk=1 is ambiguous", get("/?api_key=alice;junk=1"), false},
				{"alice;junk=2 is ambiguous", get("/?api_key=alice;junk=2"), false},
				{"junk=1;api_key=alice is ambiguous", get("/?junk=1;api_key=alice"), false},
				{"a ';' elsewhere changes nothing", get("/?api_key=alice&x=1;y=2"), false},
				{"bob", get("/?api_key=bob"), true},
				{"api.key is PHP's api_key", get("/?api.key=bob"), false},
				{"api%20key", get("/?api%20key=bob"), false},
				{"api[key", get("/?api[key=bob"), false},
				{"api.key beside api_key is ambiguous", get("/?api_key=carol&api.key=junk"), false},
				{"carol", get("/?api_key=carol"), true},
			})
			wantCounter(t, h, "sluice.limit.q.missing_key", 4)
		},
	},
	{
		Name:    "header match: a name spelled with '_' is the header, as WSGI reads it",
		Config:  `{"limits":[{"name":"free","match":{"headers":[{"name":"x-plan","value":"free"}]},"requests_per_second":1,"burst":0}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"x-plan free", get("/").with("x-plan", "free"), true},
				{"x_plan free", get("/").with("x_plan", "free"), false},
				{"x_plan pro is another plan", get("/").with("x_plan", "pro"), true},
			})
			wantCounter(t, h, "sluice.limit.free.limited", 1)
		},
	},
	{
		Name:    "metadata key: NaN and infinities are buckets, non-UTF-8 strings are used as they are",
		Config:  `{"limits":[{"name":"m","key":["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"],"requests_per_second":1,"burst":0}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"NaN", withMetadata(get("/"), sub(math.NaN())), true},
				{"NaN again", withMetadata(get("/"), sub(math.NaN())), false},
				{"+Inf", withMetadata(get("/"), sub(math.Inf(1))), true},
				{"+Inf again", withMetadata(get("/"), sub(math.Inf(1))), false},
				{"-Inf", withMetadata(get("/"), sub(math.Inf(-1))), true},
				{"-Inf again", withMetadata(get("/"), sub(math.Inf(-1))), false},
				{"latin-1 zoë", withMetadata(get("/"), sub("zo\xeb")), true},
				{"latin-1 zoë again", withMetadata(get("/"), sub("zo\xeb")), false},
			})
			wantCounter(t, h, "sluice.limit.m.missing_key", 0)
		},
	},
}

func init() {
	Cases = append(Cases, Case{
		Name:    "a header key configured with '_' counts the header sent with '-' and with '_' in one bucket",
		Config:  `{"limits":[{"name":"a","key":["header:x_key"],"limit":2,"window":"1m","on_missing_key":"deny"}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			for i, name := range []string{"x-key", "x_key"} {
				if resp := h.Do(t, get("/").with(name, "alice")); resp.Status != 200 {
					t.Fatalf("request %d (%s): %d, want admitted", i, name, resp.Status)
				}
			}
			if resp := h.Do(t, get("/").with("X-Key", "alice")); resp.Status != 429 {
				t.Fatalf("third request of one key: %d, want 429", resp.Status)
			}
		},
	})
}

func init() {
	Cases = append(Cases, Case{
		Name:    "the method key is the method in upper case: delete and DELETE share a bucket, as the methods match and WSGI upstreams read them",
		Config:  `{"limits":[{"name":"m","key":["method"],"limit":2,"window":"1m"}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			for i, m := range []string{"DELETE", "delete"} {
				req := get("/items/1")
				req.Method = m
				if resp := h.Do(t, req); resp.Status != 200 {
					t.Fatalf("request %d (%s): %d, want admitted", i, m, resp.Status)
				}
			}
			req := get("/items/1")
			req.Method = "Delete"
			if resp := h.Do(t, req); resp.Status != 429 {
				t.Fatalf("third request of one method: %d, want 429", resp.Status)
			}
		},
	})
}
