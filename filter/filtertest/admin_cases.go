package filtertest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

func init() { Cases = append(Cases, adminCases...) }

// AdminToken is the bearer token of the admin cases; their configuration
// holds only its SHA-256, AdminTokenSHA256.
const (
	AdminToken       = "s3cret-admin-token"
	AdminTokenSHA256 = "757224ba37701e155c211a2dc2ed5debaf36faba66aa0cde42587cfc27fa1c30"
)

// adminConfig has one local limit keyed on a tenant header (3 per hour,
// so nothing refills during a case), reply_headers that a failed admin
// check must not show, and the admin route for 10.9.0.0/16 with the
// default client_ip (the peer).
const adminConfig = `{"limits":[{"name":"per-tenant","key":["header:x-tenant"],"limit":3,"window":"1h"}],
 "response":{"reply_headers":{"x-served-by":"sluice"}},
 "admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"` + AdminTokenSHA256 + `"}}`

// acmeQuota is the admin route's query for tenant acme's local key.
const acmeQuota = "?limit=per-tenant&key=acme"

// adminPeer is an address client_cidrs allows; the default peer
// (10.0.0.1) is not.
const adminPeer = "10.9.1.1:50000"

// wantAdminCalls checks how many requests the admin route served and how
// many it refused.
func wantAdminCalls(t *testing.T, h Harness, calls, denied uint64) {
	t.Helper()
	wantCounter(t, h, "sluice.admin.calls", calls)
	wantCounter(t, h, "sluice.admin.denied", denied)
}

func adminCall(method, path, peer, token string) Request {
	r := Request{Method: method, Path: path, Host: "example.com", Peer: peer}
	if token != "" {
		r = r.with("authorization", "Bearer "+token)
	}
	return r
}

func tenant(name string) Request { return get("/api").with("x-tenant", name) }

// adminState decodes an admin reply, failing unless the filter answered
// it with 200.
func adminState(t *testing.T, resp Response) map[string]any {
	t.Helper()
	if resp.Status != 200 || !resp.Local || resp.UpstreamHeaders != nil {
		t.Fatalf("admin call: status %d local %v upstream %v body %s", resp.Status, resp.Local, resp.UpstreamHeaders != nil, resp.Body)
	}
	var m map[string]any
	if err := json.Unmarshal(resp.Body, &m); err != nil {
		t.Fatalf("admin reply %q: %v", resp.Body, err)
	}
	return m
}

// wantHidden checks the answer to a request that failed an admin check:
// the filter's own empty 404, with none of its headers (no limit of the
// cases using it applies to such a request, so no rate-limit header
// either), and nothing sent upstream.
func wantHidden(t *testing.T, what string, resp Response) {
	t.Helper()
	if resp.Status != 404 || !resp.Local || resp.UpstreamHeaders != nil || len(resp.Body) != 0 {
		t.Fatalf("%s: status %d local %v reached upstream %v body %q, want the filter's empty 404",
			what, resp.Status, resp.Local, resp.UpstreamHeaders != nil, resp.Body)
	}
	for _, name := range []string{"x-served-by", "content-type", "x-ratelimit-limit", "ratelimit-policy"} {
		if v := resp.Headers.Get(name); v != "" {
			t.Fatalf("%s: the 404 carries %s: %q", what, name, v)
		}
	}
}

// wantInvalid checks the answer to a request carrying more than one
// bearer credential: the filter's 400 invalid_request (RFC 6750), nothing
// sent upstream.
func wantInvalid(t *testing.T, what string, resp Response) {
	t.Helper()
	if resp.Status != 400 || !resp.Local || resp.UpstreamHeaders != nil ||
		!strings.Contains(resp.Headers.Get("www-authenticate"), `error="invalid_request"`) {
		t.Fatalf("%s: status %d local %v reached upstream %v www-authenticate %q, want the filter's 400 invalid_request",
			what, resp.Status, resp.Local, resp.UpstreamHeaders != nil, resp.Headers.Get("www-authenticate"))
	}
}

var adminCases = []Case{
	{
		Name:    "admin route reads and resets one local key",
		Config:  adminConfig,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			for _, name := range []string{"acme", "beta"} {
				if got := admitted(t, h, 4, func(i int) Request { return tenant(name).on(i % 2) }); got != 3 {
					t.Fatalf("%s admitted %d of 4, want 3", name, got)
				}
			}
			st := adminState(t, h.Do(t, adminCall("GET", "/.sluice/quota"+acmeQuota, adminPeer, AdminToken)))
			if st["remaining"] != 0.0 || st["capacity"] != 3.0 || st["mode"] != "local" || st["limit"] != "per-tenant" {
				t.Fatalf("get: %v", st)
			}
			st = adminState(t, h.Do(t, adminCall("POST", "/.sluice/quota/reset"+acmeQuota, adminPeer, AdminToken).on(1)))
			if st["reset"] != true || st["remaining"] != 3.0 || st["reset_after_ms"] != 0.0 {
				t.Fatalf("reset: %v", st)
			}
			if got := admitted(t, h, 4, func(i int) Request { return tenant("acme").on(i % 2) }); got != 3 {
				t.Fatalf("acme admitted %d of 4 after the reset, want 3", got)
			}
			if got := admitted(t, h, 1, func(int) Request { return tenant("beta") }); got != 0 {
				t.Fatal("the reset of acme refilled beta")
			}
			wantAdminCalls(t, h, 2, 0)
		},
	},
	{
		Name:    "admin route cannot be reached without both checks, however the path is spelled",
		Config:  adminConfig,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			denied := []struct {
				what string
				req  Request
			}{
				{"no token", adminCall("GET", "/.sluice/quota"+acmeQuota, adminPeer, "")},
				{"wrong token", adminCall("GET", "/.sluice/quota"+acmeQuota, adminPeer, AdminToken+"x")},
				{"the hash as the token", adminCall("GET", "/.sluice/quota"+acmeQuota, adminPeer, AdminTokenSHA256)},
				{"right token, disallowed address", adminCall("GET", "/.sluice/quota"+acmeQuota, "10.0.0.1:40000", AdminToken)},
				{"right token, allowed address spoofed in X-Forwarded-For", adminCall("GET", "/.sluice/quota"+acmeQuota, "10.0.0.1:40000", AdminToken).
					with("x-forwarded-for", "10.9.1.1")},
				{"reset, right token, disallowed address", adminCall("POST", "/.sluice/quota/reset"+acmeQuota, "10.0.0.1:40000", AdminToken)},
				{"encoded dot", adminCall("GET", "/%2esluice/quota"+acmeQuota, adminPeer, "wrong")},
				{"encoded slash", adminCall("GET", "/.sluice%2Fquota"+acmeQuota, "10.0.0.1:40000", AdminToken)},
				{"double slash", adminCall("GET", "//.sluice/quota"+acmeQuota, adminPeer, "wrong")},
				{"case change", adminCall("GET", "/.SLUICE/Quota"+acmeQuota, "10.0.0.1:40000", AdminToken)},
				{"dot segments", adminCall("GET", "/api/../.sluice/./quota"+acmeQuota, adminPeer, "wrong")},
				{"backslash", adminCall("GET", `/.sluice\quota`+acmeQuota, adminPeer, "wrong")},
				{"prefix without its slash, then the query", adminCall("GET", "/.sluice?limit=per-tenant&key=acme", adminPeer, "wrong")},
				{"unknown admin path", adminCall("GET", "/.sluice/counters", "10.0.0.1:40000", "")},
			}
			for _, d := range denied {
				wantHidden(t, d.what, h.Do(t, d.req))
			}
			wantCounter(t, h, "sluice.admin.denied", uint64(len(denied)))
			wantCounter(t, h, "sluice.admin.calls", 0)
			// The same spellings with both checks passed are admin calls:
			// the normalisation decides what is admin, not the spelling.
			for _, path := range []string{"/%2esluice/quota", "//.sluice//quota/", "/.SLUICE/QUOTA", "/x/../.sluice/quota"} {
				adminState(t, h.Do(t, adminCall("GET", path+acmeQuota, adminPeer, AdminToken)))
			}
			// The admin path in the query is not the path: without the
			// token an ordinary request, never answered by the admin route.
			resp := h.Do(t, adminCall("GET", "/?/.sluice/quota"+acmeQuota, adminPeer, ""))
			if resp.Status != 200 || resp.Local {
				t.Fatalf("query-only admin path: status %d local %v body %s, want the upstream's 200", resp.Status, resp.Local, resp.Body)
			}
			wantAdminCalls(t, h, 4, uint64(len(denied)))
		},
	},
	{
		Name:    "a request carrying the admin token never leaves the filter, whatever its path",
		Config:  adminConfig,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			// Spellings an upstream may read as the admin path that no
			// normalisation of ours resolves, and paths that are not the
			// admin's at all: the token alone makes them admin requests.
			paths := []string{
				"/.sluice;v=1/quota" + acmeQuota,     // a path parameter
				"/.sluice%00/quota" + acmeQuota,      // an escaped NUL
				"/%c0%aesluice/quota" + acmeQuota,    // an overlong UTF-8 '.'
				"/.sluice./quota" + acmeQuota,        // a trailing dot
				"/%EF%BC%8Esluice/quota" + acmeQuota, // a fullwidth '.'
				"/%252esluice/quota" + acmeQuota,     // a double escape
				"/?/.sluice/quota" + acmeQuota,       // the admin path in the query
				"/api/anything",
			}
			for _, path := range paths {
				// From an allowed address: the call is the operator's, and
				// there is no such call.
				resp := h.Do(t, adminCall("GET", path, adminPeer, AdminToken))
				if resp.Status != 404 || !resp.Local || resp.UpstreamHeaders != nil || !strings.Contains(string(resp.Body), "no such admin call") {
					t.Fatalf("%q with the token: status %d local %v reached upstream %v body %q, want the filter's 404 naming the calls",
						path, resp.Status, resp.Local, resp.UpstreamHeaders != nil, resp.Body)
				}
				// From anywhere else: the empty 404 of a failed check.
				wantHidden(t, path+" with the token from a disallowed address", h.Do(t, adminCall("GET", path, "10.0.0.1:40000", AdminToken)))
			}
			// The token beside another credential, in a second
			// Authorization field or folded after it: refused for the two.
			wantInvalid(t, "the token beside Basic", h.Do(t,
				get("/api").with("authorization", "Basic dXNlcjpwYXNz").with("authorization", "Bearer "+AdminToken)))
			wantInvalid(t, "the token after another", h.Do(t, get("/api").with("authorization", "Bearer other, Bearer "+AdminToken)))
			// In any case of the scheme, with a tab.
			for i, r := range []Request{
				get("/api").with("authorization", "bEaReR\t"+AdminToken),
				// Other credential syntaxes a lenient upstream may accept,
				// and RFC 6750's query parameter.
				get("/api").with("authorization", "Bearer:"+AdminToken),
				get("/api").with("authorization", AdminToken),
				get("/api").with("authorization", "Token "+AdminToken),
				get("/api?x=1&access_token=" + AdminToken),
			} {
				wantHidden(t, fmt.Sprintf("hidden token %d", i), h.Do(t, r))
			}
			wantAdminCalls(t, h, uint64(len(paths)), uint64(len(paths)+5))
			// Other bearer tokens are the application's: they pass.
			if resp := h.Do(t, get("/api").with("authorization", "Bearer "+AdminToken+"x")); resp.Status != 200 || resp.Local {
				t.Fatalf("another bearer token: status %d local %v", resp.Status, resp.Local)
			}
		},
	},
	{
		Name: "admin key values are composed as the request path composes them, masking included",
		Config: `{"limits":[{"name":"per-subnet","key":["client_ip/24/56"],"limit":2,"window":"1h"}],
		  "admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"` + AdminTokenSHA256 + `"}}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			from := func(peer string) Request { r := get("/api"); r.Peer = peer; return r }
			if got := admitted(t, h, 3, func(int) Request { return from("127.0.5.200:4000") }); got != 2 {
				t.Fatalf("admitted %d of 3 from 127.0.5.0/24, want 2", got)
			}
			// Any address of the /24 names its bucket.
			const q = "?limit=per-subnet&key=127.0.5.9"
			st := adminState(t, h.Do(t, adminCall("GET", "/.sluice/quota"+q, adminPeer, AdminToken)))
			if st["remaining"] != 0.0 {
				t.Fatalf("get: %v, want the spent bucket", st)
			}
			st = adminState(t, h.Do(t, adminCall("POST", "/.sluice/quota/reset"+q, adminPeer, AdminToken)))
			if st["reset"] != true || st["remaining"] != 2.0 {
				t.Fatalf("reset: %v", st)
			}
			if got := admitted(t, h, 1, func(int) Request { return from("127.0.5.1:4000") }); got != 1 {
				t.Fatal("the /24 is still limited after its reset")
			}
			// The masked form is not an address a request can come from.
			resp := h.Do(t, adminCall("GET", "/.sluice/quota?limit=per-subnet&key=127.0.5.0/24", adminPeer, AdminToken))
			if resp.Status != 400 || !strings.Contains(string(resp.Body), "not a value a request can carry") {
				t.Fatalf("the masked form: %d %s", resp.Status, resp.Body)
			}
		},
	},
	{
		Name:    "wrong admin tokens are rate-limited per source address",
		Config:  adminConfig,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			const path = "/.sluice/quota" + acmeQuota
			// Ten wrong tokens from one allowed address, across workers:
			// refused for the token.
			for i := range 10 {
				wantHidden(t, "wrong token", h.Do(t, adminCall("GET", path, adminPeer, "guess"+strconv.Itoa(i)).on(i%2)))
			}
			wantCounter(t, h, "sluice.admin.throttled", 0)
			// The eleventh attempt is refused before its token counts,
			// even the right one.
			wantHidden(t, "right token after ten wrong ones", h.Do(t, adminCall("GET", path, adminPeer, AdminToken)))
			wantCounter(t, h, "sluice.admin.throttled", 1)
			// Another allowed address is not affected.
			adminState(t, h.Do(t, adminCall("GET", path, "10.9.7.7:50000", AdminToken)))
			// One wrong token refills every 6 seconds.
			h.Advance(t, 6*time.Second)
			adminState(t, h.Do(t, adminCall("GET", path, adminPeer, AdminToken).on(1)))
			wantAdminCalls(t, h, 2, 11)
		},
	},
	{
		Name:    "an access_token an upstream may read, however its name or value is spelled, never leaves the filter",
		Config:  adminConfig,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			for _, q := range []string{
				"access%5Ftoken=" + AdminToken,      // an escaped '_'
				"%61ccess_token=" + AdminToken,      // an escaped letter
				"Access_Token=" + AdminToken,        // ASP.NET reads names without case
				"access.token=" + AdminToken,        // PHP reads '.' and ' ' as '_'
				"access+token=" + AdminToken,        //
				"access_token[]=" + AdminToken,      // PHP's and Rack's arrays
				"access_token=+" + AdminToken + "+", // spaces a parser may trim
				"access_token=%20" + AdminToken,     //
				"x=1;access_token=" + AdminToken,    // Rack and parse_qs split on ';'
				"x;access_token=" + AdminToken,      //
				";access_token=" + AdminToken,       //
				"[access_token]=" + AdminToken,      // Rails' normalize_params, Node's qs
				"%5Baccess_token%5D=" + AdminToken,  //
				"access_token]=" + AdminToken,       //
				"]access_token=" + AdminToken,       //
				"[]access_token=" + AdminToken,      //
				"[[access_token=" + AdminToken,      //
				"access_token]]=" + AdminToken,      //
			} {
				wantHidden(t, q, h.Do(t, get("/api?"+q)))
			}
			wantCounter(t, h, "sluice.admin.denied", 18)
			// A value of two words (a scheme before the token) or a second
			// value is more than one token: refused, compared with nothing.
			for _, q := range []string{"access_token=Bearer+" + AdminToken, "x=1&access_token=a&access_token=" + AdminToken} {
				wantInvalid(t, q, h.Do(t, get("/api?"+q)))
			}
			// Other names and other tokens are the application's.
			for _, q := range []string{"access_tokens=" + AdminToken, "xaccess_token=" + AdminToken, "access_token=" + AdminToken + "x"} {
				if resp := h.Do(t, get("/api?"+q)); resp.Status != 200 || resp.Local {
					t.Fatalf("%s: status %d local %v, want the upstream's 200", q, resp.Status, resp.Local)
				}
			}
		},
	},
	{
		// Issue 23: a request carrying the admin token is answered here,
		// one without it forwarded; were every credential of a request
		// compared, one request would test many guesses, from anywhere.
		Name:    "a request carrying more than one bearer credential is refused before any is compared, on any path",
		Config:  adminConfig,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			batch := func(path string, withToken bool) Request {
				q := ""
				for i := range 15 {
					q += "&access_token=G" + strconv.Itoa(i)
				}
				r := get(path + "?x=1" + q)
				r.Peer = "192.0.2.9:40000"
				for i := range 15 {
					r = r.with("authorization", "Bearer H"+strconv.Itoa(i))
				}
				if withToken {
					r = r.with("authorization", "Bearer "+AdminToken)
				}
				return r
			}
			for _, path := range []string{"/api", "/.sluice/quota"} {
				// The batch with the token and the one without are
				// answered alike: the answer tells nothing of either.
				wantInvalid(t, path+" without the token", h.Do(t, batch(path, false)))
				wantInvalid(t, path+" with the token", h.Do(t, batch(path, true)))
			}
			// One credential in each place is two.
			wantInvalid(t, "header and query", h.Do(t, get("/api?access_token=a").with("authorization", "Bearer b")))
			wantCounter(t, h, "sluice.admin.invalid_credentials", 5)
			wantCounter(t, h, "sluice.admin.denied", 0)
			// The route itself still answers its one token.
			adminState(t, h.Do(t, adminCall("GET", "/.sluice/quota"+acmeQuota, adminPeer, AdminToken)))
			// One bearer credential, and other schemes' many words, are
			// the application's.
			for _, r := range []Request{
				get("/api").with("authorization", "Bearer app-token"),
				get("/api?access_token=app-token"),
				get("/api").with("authorization", `Digest username="u", realm="r", response="`+AdminToken+`"`),
			} {
				if resp := h.Do(t, r); resp.Status != 200 || resp.Local {
					t.Fatalf("%v: status %d local %v, want the upstream's 200", r, resp.Status, resp.Local)
				}
			}
		},
	},
	{
		// Issue 23: a denied admin request admitted in half-open took the
		// probe slot and never reported, so an attacker's requests kept a
		// healthy upstream's breaker open.
		Name: "a request failing the admin checks is refused by an open breaker as any request, but never takes a probe",
		Config: `{"breakers":[{"name":"up","failure_threshold":2,"success_threshold":1,"open_timeout":"4s","half_open_max_requests":1}],
		  "admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"` + AdminTokenSHA256 + `"}}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			denied := func(w int) Request { return adminCall("GET", "/.sluice/quota", "192.0.2.9:40000", "").on(w) }
			for i := range 2 {
				upstreamAnswers(t, h, "failure", get("/").status(503).on(i%2))
			}
			wantBreakerState(t, h, "up", 1)
			circuitOpen(t, h, "denied admin request, open", denied(0), "4")
			h.Advance(t, 4*time.Second)
			// Half-open with its probe slot free: the hidden 404, and the
			// slot is still free for the next request, on either worker.
			for w := range 2 {
				wantHidden(t, "denied admin request, half-open", h.Do(t, denied(w)))
			}
			probe := open(t, h, get("/").on(1))
			// With the probe out, refused as a second probe would be.
			circuitOpen(t, h, "denied admin request, probe out", denied(0), "1")
			finish(t, probe)
			wantBreakerState(t, h, "up", 0)
			wantCounter(t, h, "sluice.breaker.up.closes", 1)
			wantHidden(t, "denied admin request, closed", h.Do(t, denied(1)))
			wantCounter(t, h, "sluice.admin.denied", 5)
		},
	},
	{
		// Issue 23: the hidden 404 was charged 1 where an upstream 404
		// without usage is charged the default.
		Name: "a request failing the admin checks is charged as an upstream 404 without usage",
		Config: `{"limits":[{"name":"tokens","key":[],"limit":100,"window":"10s",
			"cost_from_response":{"header":"x-tokens-used","default":30}},
		  {"name":"body","key":[],"limit":100,"window":"10s",
			"cost_from_response":{"json":"usage.total_tokens","default":20}}],
		  "response":{"headers_on_allowed":true},
		  "admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"` + AdminTokenSHA256 + `"}}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			up := h.Do(t, get("/missing").status(404))
			if up.Status != 404 || up.Local {
				t.Fatalf("upstream 404: %d local %v", up.Status, up.Local)
			}
			hidden := h.Do(t, adminCall("GET", "/.sluice/quota", "192.0.2.9:40000", ""))
			if hidden.Status != 404 || !hidden.Local || len(hidden.Body) != 0 {
				t.Fatalf("denied admin request: %d local %v body %q", hidden.Status, hidden.Local, hidden.Body)
			}
			// Each took its limit's default, 30 and 20, both times.
			wantCounter(t, h, "sluice.limit.tokens.response_cost", 60)
			wantCounter(t, h, "sluice.limit.body.response_cost", 40)
		},
	},
	{
		// Issue 23: a denied admin request held past its deadline got the
		// empty 404 where any held request gets the 504.
		Name: "a request failing the admin checks held past its deadline is answered 504, or DEADLINE_EXCEEDED, as any",
		Config: `{"limits":[{"name":"shaped","key":[],"requests_per_second":1,"on_limit":{"action":"delay","max_delay":"2s"}}],
		  "admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"` + AdminTokenSHA256 + `"}}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			denied := func() Request { return adminCall("GET", "/.sluice/quota", "192.0.2.9:40000", "") }
			resp := held(t, h, denied().with("x-envoy-upstream-rq-timeout-ms", "200"))
			if resp.Status != 504 || !resp.Local {
				t.Fatalf("status %d local %v, want a local 504", resp.Status, resp.Local)
			}
			h.Advance(t, 2*time.Second)
			resp = held(t, h, denied().with("content-type", "application/grpc").with("grpc-timeout", "100m"))
			if resp.Status != 200 || !resp.Local || resp.Headers.Get("grpc-status") != "4" {
				t.Fatalf("gRPC: status %d local %v grpc-status %q, want DEADLINE_EXCEEDED (4)",
					resp.Status, resp.Local, resp.Headers.Get("grpc-status"))
			}
			// Held within its deadline: the hidden 404.
			h.Advance(t, 2*time.Second)
			if resp := held(t, h, denied().with("x-envoy-upstream-rq-timeout-ms", "5000")); resp.Status != 404 || !resp.Local || len(resp.Body) != 0 {
				t.Fatalf("held within its deadline: status %d local %v body %q, want the empty 404", resp.Status, resp.Local, resp.Body)
			}
			wantCounter(t, h, "sluice.deadline.exceeded", 2)
			wantCounter(t, h, "sluice.admin.denied", 3)
		},
	},
	{
		Name: "an admin key value no request carries in its part is a 400, and an empty query value is its own bucket",
		Config: `{"limits":[
		  {"name":"seg","key":["path_segment:1"],"limit":2,"window":"1h"},
		  {"name":"qry","key":["query:user"],"limit":2,"window":"1h"},
		  {"name":"hdr","key":["header:x-t"],"limit":2,"window":"1h"},
		  {"name":"mth","key":["method"],"limit":1000,"window":"1h"},
		  {"name":"hst","key":["host"],"limit":1000,"window":"1h"}],
		  "admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"` + AdminTokenSHA256 + `"}}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			call := func(method, q string) Response {
				route := "/.sluice/quota"
				if method == "POST" {
					route += "/reset"
				}
				return h.Do(t, adminCall(method, route+"?"+q, adminPeer, AdminToken))
			}
			if got := admitted(t, h, 3, func(int) Request { return get("/victim") }); got != 2 {
				t.Fatalf("/victim admitted %d of 3, want 2", got)
			}
			// "victim?x" names no segment a request carries: refused, and
			// victim's bucket stays spent.
			for _, q := range []string{"limit=seg&key=victim%3Fnot-victim", "limit=seg&key=victim%23x", "limit=seg&key=victim%00",
				"limit=hdr&key=%20%20spc%20%20", "limit=hdr&key=acme%00", "limit=hdr&key=a%0D%0Ab",
				// Issue 23: bytes no request carries there.
				"limit=hdr&key=a%01b", "limit=hdr&key=a%7Fb", "limit=mth&key=G+T", "limit=mth&key=GET%01", "limit=hst&key=a+b"} {
				for _, method := range []string{"GET", "POST"} {
					if resp := call(method, q); resp.Status != 400 || !strings.Contains(string(resp.Body), "key part 1") {
						t.Fatalf("%s %s: %d %s, want a 400 naming the part", method, q, resp.Status, resp.Body)
					}
				}
			}
			if st := adminState(t, call("GET", "limit=seg&key=victim")); st["remaining"] != 0.0 {
				t.Fatalf("victim after the refused resets: %v", st)
			}
			// ?user= is a bucket of its own, and the route reaches it. (Each
			// request has a first segment of its own, which seg counts.)
			if got := admitted(t, h, 3, func(i int) Request { return get("/u" + strconv.Itoa(i) + "?user=") }); got != 2 {
				t.Fatalf("?user= admitted %d of 3, want 2", got)
			}
			if st := adminState(t, call("GET", "limit=qry&key=")); st["remaining"] != 0.0 {
				t.Fatalf("the empty user's bucket: %v", st)
			}
			if st := adminState(t, call("POST", "limit=qry&key=")); st["reset"] != true || st["remaining"] != 2.0 {
				t.Fatalf("the empty user's reset: %v", st)
			}
			if got := admitted(t, h, 1, func(int) Request { return get("/u9?user=") }); got != 1 {
				t.Fatal("?user= is still limited after its reset")
			}
			// An empty header value is a missing key: no bucket.
			if resp := call("GET", "limit=hdr&key="); resp.Status != 400 || !strings.Contains(string(resp.Body), "is empty") {
				t.Fatalf("an empty header value: %d %s", resp.Status, resp.Body)
			}
		},
	},
	{
		Name: "key values holding the separator byte: (k1\\0y, z) and (k1, y\\0z) are two buckets, on requests and on the admin route",
		Config: `{"limits":[{"name":"qq","key":["query:a","query:b"],"limit":3,"window":"1h"}],
		  "admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"` + AdminTokenSHA256 + `"}}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			const pairA, pairB = "a=k1%00y&b=z", "a=k1&b=y%00z"
			quota := func(method, pair string) map[string]any {
				route := "/.sluice/quota"
				if method == "POST" {
					route += "/reset"
				}
				// The admin route takes the part values as repeated key=.
				a, b, _ := strings.Cut(pair, "&")
				q := "limit=qq&key=" + strings.TrimPrefix(a, "a=") + "&key=" + strings.TrimPrefix(b, "b=")
				return adminState(t, h.Do(t, adminCall(method, route+"?"+q, adminPeer, AdminToken)))
			}
			if got := admitted(t, h, 4, func(int) Request { return get("/d?" + pairA) }); got != 3 {
				t.Fatalf("(k1\\0y, z) admitted %d of 4, want 3", got)
			}
			if st := quota("GET", pairB); st["remaining"] != 3.0 {
				t.Fatalf("the admin route reads (k1, y\\0z) as %v, want its own full bucket", st)
			}
			if got := admitted(t, h, 1, func(int) Request { return get("/d?" + pairB) }); got != 1 {
				t.Fatal("(k1, y\\0z) is limited by the bucket (k1\\0y, z) spent")
			}
			if st := quota("POST", pairA); st["reset"] != true || st["remaining"] != 3.0 {
				t.Fatalf("resetting (k1\\0y, z): %v", st)
			}
			if st := quota("GET", pairB); st["remaining"] != 2.0 {
				t.Fatalf("resetting (k1\\0y, z) reset (k1, y\\0z) too: %v", st)
			}
		},
	},
	{
		Name: "a request failing the admin checks is limited as any request and answered as an upstream 404",
		Config: `{"limits":[{"name":"all","key":["client_ip"],"limit":3,"window":"1h"}],
		  "response":{"reply_headers":{"x-served-by":"sluice"}},
		  "admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"` + AdminTokenSHA256 + `"}}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			rateHeaders := func(resp Response) map[string]string {
				m := map[string]string{}
				for name := range resp.Headers {
					if n := strings.ToLower(name); strings.HasPrefix(n, "x-ratelimit") || strings.HasPrefix(n, "ratelimit") || n == "retry-after" {
						m[n] = resp.Headers.Get(name)
					}
				}
				return m
			}
			up := h.Do(t, get("/api"))
			if up.Status != 200 || up.Local || up.Headers.Get("x-ratelimit-remaining") != "2" {
				t.Fatalf("the first request: %d local %v headers %v", up.Status, up.Local, up.Headers)
			}
			// The admin path without the token takes its unit and carries
			// the headers an allowed response carries, nothing else of ours.
			hidden := h.Do(t, adminCall("GET", "/.sluice/x", "10.0.0.1:40000", ""))
			if hidden.Status != 404 || !hidden.Local || hidden.UpstreamHeaders != nil || len(hidden.Body) != 0 {
				t.Fatalf("the admin path: status %d local %v upstream %v body %q", hidden.Status, hidden.Local, hidden.UpstreamHeaders != nil, hidden.Body)
			}
			got, want := rateHeaders(hidden), rateHeaders(up)
			if len(got) == 0 || len(got) != len(want) || got["x-ratelimit-remaining"] != "1" || got["x-ratelimit-limit"] != want["x-ratelimit-limit"] {
				t.Fatalf("the admin 404's rate-limit headers %v; an upstream response's %v", got, want)
			}
			for _, name := range []string{"x-served-by", "content-type"} {
				if v := hidden.Headers.Get(name); v != "" {
					t.Fatalf("the admin 404 carries %s: %q", name, v)
				}
			}
			// The right token from a disallowed address is the same.
			h.Do(t, adminCall("GET", "/.sluice/quota?limit=all&key=10.0.0.1", "10.0.0.1:40000", AdminToken))
			// Over the limit, the admin path is refused as every path is.
			want = rateHeaders(h.Do(t, get("/api")))
			over := h.Do(t, adminCall("GET", "/.sluice/x", "10.0.0.1:40000", ""))
			if over.Status != 429 || !over.Local || over.UpstreamHeaders != nil || len(rateHeaders(over)) != len(want) || over.Headers.Get("x-served-by") != "sluice" {
				t.Fatalf("the admin path over the limit: %d %v, want the limit's 429 as /api gets (%v)", over.Status, over.Headers, want)
			}
			wantCounter(t, h, "sluice.admin.denied", 3)
			// An allowed operator's call is not limited.
			adminState(t, h.Do(t, adminCall("GET", "/.sluice/quota?limit=all&key=10.0.0.1", adminPeer, AdminToken)))
		},
	},
}
