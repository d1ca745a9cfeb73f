package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/request"
)

func TestNormalPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/.sluice/quota", "/.sluice/quota/"},
		{"/.sluice/quota?limit=a/../b", "/.sluice/quota/"},
		{"/%2esluice/quota", "/.sluice/quota/"},
		{"/%2Esluice%2fquota", "/.sluice/quota/"},
		{"//.sluice///quota//", "/.sluice/quota/"},
		{"/.SLUICE/Quota", "/.sluice/quota/"},
		{`\.sluice\quota`, "/.sluice/quota/"},
		{"/a/b/../../.sluice/./quota", "/.sluice/quota/"},
		{"/../../.sluice/quota", "/.sluice/quota/"},
		{"/%2e%2e/.sluice", "/.sluice/"},
		{"/.sluice#frag", "/.sluice/"},
		{"?/.sluice/quota", "/"},
		{"", "/"},
		{"/%zz%4", "/%zz%4/"},
		{"/%252esluice/", "/%2esluice/"}, // one decoding, as Envoy and the upstream see it
		{"/...", "/.../"},
	} {
		if got := string(appendNormalPath(nil, tc.in)); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.in, got, tc.want)
		}
	}
}

// candidatesOf reads an Authorization value and a query as a request's.
func candidatesOf(auth, query string) tokenCandidates {
	var t tokenCandidates
	if auth != "" {
		t.readAuthorization(auth)
	}
	t.readQuery(query)
	return t
}

// Hashing is bounded per request, whatever the header holds.
func TestTokenCandidatesAreBounded(t *testing.T) {
	sum := sha256.Sum256([]byte("tok"))
	if n, ok := bearerCredentials(strings.Repeat("a,", maxTokenCandidates-1)+"Bearer tok", &sum); !ok || n != 1 {
		t.Fatalf("the token within the bound: %d bearer credentials, found %v", n, ok)
	}
	if n, ok := bearerCredentials(strings.Repeat("a,", maxTokenCandidates)+"Bearer tok", &sum); ok || n <= maxTokenCandidates {
		t.Fatalf("the token past the bound: %d bearer credentials, found %v", n, ok)
	}
	long := candidatesOf(strings.Repeat("a,", 10000)+"Bearer tok", "")
	if long.matches(&sum) || long.distinct > maxTokenCandidates+1 {
		t.Fatalf("10,000 credentials: %+v", long)
	}
}

// The guessing oracle (issue 23): no request compares more than one
// candidate with the admin token. A request of more than one bearer
// credential, however spread over Authorization and the query, is
// refused without comparing; one of many non-bearer words compares none.
func TestOneGuessPerRequest(t *testing.T) {
	sum := sha256.Sum256([]byte("tok"))
	for _, tc := range []struct {
		auth, query    string
		invalid, match bool
	}{
		{"Bearer tok", "", false, true},
		{"Bearer G1", "", false, false},
		{"", "access_token=tok", false, true},
		{"Token tok", "", false, true},
		{"tok", "", false, true},
		{"Bearer:tok", "", false, true},
		{"Bearer tok, Bearer tok", "", true, false},
		{"Bearer G1, Bearer tok", "", true, false},
		{"", "access_token=G1&access_token=tok", true, false},
		{"Bearer G17", "access_token=tok", true, false},
		{"Bearer tok", "access_token=tok", true, false},
		{"Bearer G1 tok", "", true, false},
		{"", "access_token=G1+tok", true, false},
		{"Bearer tok", "x=1;access_token=G2", true, false},
		{"Basic abc, Bearer tok", "", true, false},
		// Many words and no bearer credential: nothing is compared.
		{"Token G1, Token tok", "", false, false},
		{"G1 G2 tok", "", false, false},
		{`Digest username="u", realm="r", response="tok"`, "", false, false},
		{"AWS4-HMAC-SHA256 Credential=a/b, SignedHeaders=host, Signature=tok", "", false, false},
		{"", "page=2", false, false},
	} {
		c := candidatesOf(tc.auth, tc.query)
		if c.invalid() != tc.invalid || !c.invalid() && c.matches(&sum) != tc.match {
			t.Errorf("%q %q: invalid %v match %v, want %v %v", tc.auth, tc.query, c.invalid(), c.matches(&sum), tc.invalid, tc.match)
		}
	}
}

func TestTokenMatches(t *testing.T) {
	sum := sha256.Sum256([]byte("tok"))
	for auth, want := range map[string]bool{
		"Bearer tok":                           true,
		"bearer tok":                           true,
		"BEARER  tok ":                         true,
		"Bearer tok2":                          false,
		"Basic tok":                            false,
		"tok":                                  false,
		"Bearer ":                              false,
		"":                                     false,
		"Bearer " + hex.EncodeToString(sum[:]): false,
	} {
		if got, _ := tokenMatches(auth, &sum); got != want {
			t.Errorf("%q: %v, want %v", auth, got, want)
		}
	}
	empty := sha256.Sum256(nil)
	if m, _ := tokenMatches("Bearer ", &empty); m {
		t.Error("an empty token matched the hash of the empty string")
	}
	if m, _ := tokenMatches("", &empty); m {
		t.Error("an empty token matched the hash of the empty string")
	}
}

// An access_token query parameter is found under every name an upstream
// parser may read as access_token, with every separator one splits on,
// and its value in every spelling one may read as the token.
func TestAccessTokenIsFoundAsUpstreamsReadIt(t *testing.T) {
	sum := sha256.Sum256([]byte("tok"))
	for q, want := range map[string]bool{
		"access_token=tok":       true,
		"access%5Ftoken=tok":     true,
		"%61ccess_token=tok":     true,
		"ACCESS_TOKEN=tok":       true,
		"access.token=tok":       true,
		"access+token=tok":       true,
		"access%20token=tok":     true,
		"+access_token+=tok":     true,
		"access_token[]=tok":     true,
		"access_token[0]=tok":    true,
		"access_token=+tok+":     true,
		"access_token=%20tok":    true,
		"a=1&access_token=tok":   true,
		"x=1;access_token=tok":   true, // Rack, parse_qs(separator=';')
		"x;access_token=tok":     true,
		";access_token=tok":      true,
		"[access_token]=tok":     true, // Rails' normalize_params, Node's qs
		"%5Baccess_token%5D=tok": true,
		"access_token]=tok":      true,
		"]access_token=tok":      true,
		"[]access_token=tok":     true,
		"[[access_token=tok":     true,
		"access_token]]=tok":     true,
		"access_tokens=tok":      false,
		"xaccess_token=tok":      false,
		"access_token=tokx":      false,
		"access_token":           false,
		"tok=access_token":       false,
	} {
		c := candidatesOf("", q)
		if got := !c.invalid() && c.matches(&sum); got != want {
			t.Errorf("%q: %v, want %v", q, got, want)
		}
	}
}

// FuzzAdminRoute sends any path, Authorization and peer through the
// request path of a plugin with the admin route and one local limit:
// nothing panics; the normal form is a fixed point without '//' or dot
// segments; an admin request is always answered by the filter, and
// without the token always with the empty 404; the key's state changes
// only through an authorised reset.
func FuzzAdminRoute(f *testing.F) {
	f.Add("/.sluice/quota?limit=l&key=k", "Bearer tok", "10.9.0.1:1")
	f.Add("/.sluice/quota/reset?limit=l&key=k", "Bearer tok", "10.9.0.1:1")
	f.Add("/%2esluice/quota", "Bearer x", "10.0.0.1:1")
	f.Add("//.SLUICE/../.sluice/quota", "", "[::1]:80")
	f.Add("/api?access_token=tok", "Basic x", "10.9.0.1:1")
	f.Add("/api", "Bearer:tok", "10.9.0.1:0")
	f.Add("/api?Access%5Ftoken=+tok+", "", "10.9.0.1:1")
	f.Add("/.sluice/quota", "Bearer a, Bearer tok", "10.9.0.1:1")
	f.Add("/api?access_token=a&access_token=tok", "Bearer b", "192.0.2.1:1")
	f.Add("/api?x=1;access_token=tok", "", "192.0.2.1:1")
	f.Add("/api?[access_token]=tok", "", "192.0.2.1:1")
	f.Fuzz(func(t *testing.T, path, auth, peer string) {
		norm := appendNormalPath(nil, path)
		if norm[0] != '/' || norm[len(norm)-1] != '/' || bytes.Contains(norm, []byte("//")) ||
			bytes.Contains(norm, []byte("/./")) || bytes.Contains(norm, []byte("/../")) ||
			bytes.ContainsAny(norm, "\\ABCDEFGHIJKLMNOPQRSTUVWXYZ") ||
			// '?' and '#' end the path; only an escape (%3F, %23) can put
			// them in a segment, as the literal characters they encode.
			bytes.ContainsAny(norm, "?#") && !strings.Contains(path, "%") {
			t.Fatalf("%q normalised to %q", path, norm)
		}
		if !bytes.ContainsAny(norm, "%?#") {
			if again := appendNormalPath(nil, string(norm)); !bytes.Equal(again, norm) {
				t.Fatalf("%q: %q, then %q", path, norm, again)
			}
		}
		sum := sha256.Sum256([]byte("tok"))
		p, fk := newNativePlugin(t, `{"limits":[{"name":"l","key":["header:x-k"],"limit":2,"window":"1h"}],
			"admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"`+hex.EncodeToString(sum[:])+`"}}`)
		spend := func() bool {
			s := begin(p, fk, 1)
			fk.Stream.Headers = append(fk.Stream.Headers, [2]string{"x-k", "k"})
			return s.RequestHeaders() == Continue
		}
		spend()
		spend()
		s := begin(p, fk, 2)
		fk.Stream.Headers = [][2]string{{":method", "POST"}, {":path", path}, {":authority", "a"}, {"authorization", auth}}
		fk.Stream.Properties = map[string]string{"source.address": peer}
		// An admin request: under the prefix, or carrying the token
		// whatever its path.
		_, inPrefix := p.admin.route(path)
		// The token as the one candidate in Authorization or an
		// access_token makes an admin request; only the Bearer form
		// authorises. More than one bearer credential is refused first.
		q, _ := request.RawQuery(path)
		c := candidatesOf(auth, q)
		carried := c.matches(&sum)
		creds, authorised := bearerCredentials(auth, &sum)
		authorised = authorised && creds <= 10 // the wrong-token bucket's size
		admin := inPrefix || carried
		if c.invalid() {
			if v := s.RequestHeaders(); v != Pause || len(fk.Stream.Replies) != 1 || fk.Stream.Replies[0].Status != 400 {
				t.Fatalf("more than one bearer credential: %v %v", v, fk.Stream.Replies)
			}
			if spend() {
				t.Fatal("the key was refilled by a refused request")
			}
			return
		}
		v := s.RequestHeaders()
		replies := fk.Stream.Replies
		if admin != (v == Pause) || admin != (len(replies) == 1) {
			t.Fatalf("admin %v: verdict %v, %d replies", admin, v, len(replies))
		}
		// Only the token is judged here: the address check has cases of
		// its own (filtertest), and the fuzzer's peers are rarely allowed.
		if admin && !authorised && (replies[0].Status != 404 || len(replies[0].Body) != 0 || len(replies[0].Headers) != 0) {
			t.Fatalf("unauthorised admin request answered %d %q %v", replies[0].Status, replies[0].Body, replies[0].Headers)
		}
		refilled := spend()
		if refilled && !(admin && authorised) {
			t.Fatal("the key was refilled without an authorised reset")
		}
	})
}

// Every admin request is logged with its source, never with key values,
// and counted: refused ones at WARN with the failed check.
func TestAdminCallsAreLoggedAndCounted(t *testing.T) {
	sum := sha256.Sum256([]byte("tok"))
	p, f := newNativePlugin(t, `{"limits":[{"name":"l","key":["header:x-k"],"requests_per_second":1}],
		"admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"`+hex.EncodeToString(sum[:])+`"}}`)
	call := func(peer, auth string) {
		s := begin(p, f, 1)
		f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/.sluice/quota?limit=l&key=secret-tenant"}, {"authorization", auth}}
		f.Stream.Properties = map[string]string{"source.address": peer}
		if s.RequestHeaders() != Pause {
			t.Fatal("an admin request was let through")
		}
	}
	call("10.9.0.7:1000", "Bearer tok")
	call("10.9.0.8:1000", "Bearer nope")
	call("192.0.2.1:1000", "Bearer tok")
	want := []string{
		`info {"sluice":"admin","source":"10.9.0.7","action":"get","status":200}`,
		`warn {"sluice":"admin_denied","source":"10.9.0.8","reason":"token","status":404}`,
		`warn {"sluice":"admin_denied","source":"192.0.2.1","reason":"address","status":404}`,
	}
	if len(f.Log.Lines) != len(want) {
		t.Fatalf("log %q", f.Log.Lines)
	}
	for i, line := range f.Log.Lines {
		if line != want[i] {
			t.Errorf("log line %d: %s, want %s", i, line, want[i])
		}
	}
	if f.Metrics.Values[metricAdminCalls] != 1 || f.Metrics.Values[metricAdminDenied] != 2 || f.Metrics.Values[metricRequests] != 3 {
		t.Fatalf("metrics %v", f.Metrics.Values)
	}
}

// Wrong tokens are counted per IPv4 address and per IPv6 /64: another
// address of the same /64 is throttled too, another /64 is not.
func TestWrongTokensAreCountedPerV6Slash64(t *testing.T) {
	sum := sha256.Sum256([]byte("tok"))
	p, f := newNativePlugin(t, `{"admin":{"client_cidrs":["2001:db8::/32"],"token_sha256":"`+hex.EncodeToString(sum[:])+`"}}`)
	call := func(peer, auth string) int {
		s := begin(p, f, 1)
		f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/.sluice/quota?limit=x&key=y"}, {"authorization", auth}}
		f.Stream.Properties = map[string]string{"source.address": peer}
		f.Stream.Replies = nil
		s.RequestHeaders()
		return f.Stream.Replies[0].Status
	}
	for i := range 10 {
		call(fmt.Sprintf("[2001:db8:0:1::%x]:1000", i+1), "Bearer nope")
	}
	if f.Metrics.Values[metricAdminThrottled] != 0 {
		t.Fatal("throttled before the bucket was empty")
	}
	if st := call("[2001:db8:0:1::ffff]:1000", "Bearer tok"); st != 404 || f.Metrics.Values[metricAdminThrottled] != 1 {
		t.Fatalf("a fresh address of the same /64: %d, throttled %d", st, f.Metrics.Values[metricAdminThrottled])
	}
	// The right token from another /64 is answered (404: there is no
	// limit x, after the checks).
	if st := call("[2001:db8:0:2::1]:1000", "Bearer tok"); st != 404 || f.Metrics.Values[metricAdminCalls] != 1 {
		t.Fatalf("another /64: %d, calls %d", st, f.Metrics.Values[metricAdminCalls])
	}
}

// BenchmarkAdminRoute is what the admin route costs a request that is not
// an admin one: normalising its path into the reused buffer.
func BenchmarkAdminRoute(b *testing.B) {
	a := &adminRuntime{cfg: &config.Admin{PathPrefix: config.DefaultAdminPathPrefix}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, ok := a.route("/api/v1/users/12345?fields=name,email"); ok {
			b.Fatal("an admin request")
		}
	}
}

// A request failing the admin checks that a limit holds (shaping) is
// answered 404 when it is let go, from the registry as from the request
// callback: it is never resumed towards the upstream.
func TestDeniedAdminRequestIsNeverResumed(t *testing.T) {
	sum := sha256.Sum256([]byte("tok"))
	p, f := newNativePlugin(t, `{"limits":[{"name":"shaped","key":[],"requests_per_second":5,
		"on_limit":{"action":"delay","max_delay":"300ms"}}],
		"admin":{"client_cidrs":["10.9.0.0/16"],"token_sha256":"`+hex.EncodeToString(sum[:])+`"}}`)
	drain(t, p, f)
	s := begin(p, f, 6)
	f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/.sluice/quota"}, {":authority", "a"}}
	f.Stream.Properties = map[string]string{"source.address": "10.0.0.1:4000"}
	if v := s.RequestHeaders(); v != Pause || len(f.Stream.Replies) != 0 || len(p.waiting) != 1 {
		t.Fatalf("the denied admin request over the rate: %v, replies %v, %d waiting; want it delayed as any", v, f.Stream.Replies, len(p.waiting))
	}
	f.Clock.Advance(200 * time.Millisecond)
	p.Tick()
	if len(f.Stream.Resumed) != 0 || len(f.Stream.Replies) != 1 || f.Stream.Replies[0].Status != 404 || len(f.Stream.Replies[0].Body) != 0 {
		t.Fatalf("let go: resumed %v, replies %v; want the empty 404", f.Stream.Resumed, f.Stream.Replies)
	}
	if f.Metrics.Values["sluice.limit.shaped.delayed"] != 1 || f.Metrics.Values[metricAdminDenied] != 1 {
		t.Fatalf("metrics %v", f.Metrics.Values)
	}
}

// BenchmarkAccessTokenCandidates is what looking for an access_token costs a
// request with an ordinary query and none: no allocation, one pass.
func BenchmarkAccessTokenCandidates(b *testing.B) {
	sum := sha256.Sum256([]byte("tok"))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if c := candidatesOf("", "fields=name,email&page=2&sort=desc&include_archived=true"); c.matches(&sum) || c.invalid() {
			b.Fatal("found")
		}
	}
}
