package request

import (
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
)

// keyOf is the key of parts for a request with these headers, and
// whether it is present.
func keyOf(parts []config.KeyPart, headers ...[2]string) (string, bool) {
	r := &Info{src: &fakeHost{headers: headers}}
	key, _, ok := r.AppendKey(nil, parts, &config.ClientIP{}, -1)
	return string(key), ok
}

// sameKey checks that every spelling has the key of the first, and that
// none is missing.
func sameKey(t *testing.T, parts []config.KeyPart, name string, spellings [][][2]string) {
	t.Helper()
	want, ok := keyOf(parts, spellings[0]...)
	if !ok {
		t.Fatalf("%s: %v has no key", name, spellings[0])
	}
	for _, s := range spellings[1:] {
		if got, ok := keyOf(parts, s...); got != want || !ok {
			t.Errorf("%s: %v is key %q %v, want %q as %v", name, s, got, ok, want, spellings[0])
		}
	}
}

func path(p string) [][2]string { return [][2]string{{":path", p}} }

// TestKeysOfRespelledPaths: every spelling of /t/alice/x that an
// upstream serves as that path is one key, for path and path_segment.
func TestKeysOfRespelledPaths(t *testing.T) {
	spellings := [][][2]string{path("/t/alice/x"), path("/t/junk/../alice/x"), path("/t/./alice/x"),
		path("//t//alice/x"), path("/t/%61lice/x"), path("/t/junk/%2e%2e/alice/x"), path("/t%2Falice%2Fx"),
		path(`/t\alice\x`), path("/t/alice/x#junk"), path("/t/alice/x?q=/../y")}
	sameKey(t, []config.KeyPart{{Kind: config.KeyPathSegment, Segment: 2}}, "path_segment:2", spellings)
	sameKey(t, []config.KeyPart{{Kind: config.KeyPath}}, "path", spellings)
	if a, b := keyOf([]config.KeyPart{{Kind: config.KeyPath}}, path("/t/Alice/x")...); a == "/t/alice/x" || !b {
		t.Errorf("paths are case-sensitive: /t/Alice/x is %q", a)
	}
}

// TestPathMatchesReadTheNormalPath: path and path_prefix see the path as
// keys do.
func TestPathMatchesReadTheNormalPath(t *testing.T) {
	m := config.Match{PathPrefix: "/t/alice/"}
	for _, p := range []string{"/t/junk/../alice/x", "/t/./alice/x", "//t/alice/x", "/t/%61lice/x"} {
		r := &Info{src: &fakeHost{headers: path(p)}}
		if !Matches(&m, r.View(NeedPath)) {
			t.Errorf("%q does not match path_prefix /t/alice/", p)
		}
	}
}

func TestKeysOfRespelledHosts(t *testing.T) {
	host := func(h string) [][2]string { return [][2]string{{":authority", h}} }
	sameKey(t, []config.KeyPart{{Kind: config.KeyHost}}, "host", [][][2]string{host("api.example"),
		host("api.example:80"), host("api.example:080"), host("api.example."), host("API.Example.:443"),
		host("api.example:"), host("api.example:80:80"), host("api.example:1:2"), host("api.example::"),
		host("api.example:80:")})
	if k, ok := keyOf([]config.KeyPart{{Kind: config.KeyHost}}, host("[::1]:80")...); k != "[::1]" || !ok {
		t.Errorf("[::1]:80 is %q %v", k, ok)
	}
	if _, ok := keyOf([]config.KeyPart{{Kind: config.KeyHost}}, host(":80")...); ok {
		t.Error("an authority of only a port has a host")
	}
}

// TestRepeatedKeyValues: a repeated query parameter or header is its one
// value when every repeat agrees, and ambiguous (missing, flagged)
// otherwise: never a bucket per junk value.
func TestRepeatedKeyValues(t *testing.T) {
	q := []config.KeyPart{{Kind: config.KeyQuery, Name: "api_key"}}
	sameKey(t, q, "query", [][][2]string{path("/?api_key=alice"), path("/?api_key=alice&api_key=alice"),
		path("/?api_key=alice&x=1&api_key=%61lice")})
	h := []config.KeyPart{{Kind: config.KeyHeader, Header: "x-api-key"}}
	sameKey(t, h, "header", [][][2]string{{{"x-api-key", "alice"}}, {{"x-api-key", "alice"}, {"x-api-key", "alice"}},
		{{"x_api_key", "alice"}}, {{"x-api_key", "alice"}, {"x-api-key", "alice"}}})
	ambiguousKey(t, q, path("/?api_key=alice&api_key=junk1"), path("/?api_key=junk1&api_key=alice"),
		path("/?api_key=&api_key=alice"))
	ambiguousKey(t, h, [][2]string{{"x-api-key", "alice"}, {"x-api-key", "junk1"}},
		[][2]string{{"x-api-key", ""}, {"x-api-key", "alice"}}, [][2]string{{"x-api-key", "junk1"}, {"x_api_key", "alice"}})
}

// TestKeysOfEscapedPathBytes: an escape of a byte that leaves the path's
// structure as it is reads as that byte, as Go's ServeMux reads it, for
// keys and path matches alike.
func TestKeysOfEscapedPathBytes(t *testing.T) {
	seg := []config.KeyPart{{Kind: config.KeyPathSegment, Segment: 2}}
	sameKey(t, seg, "path_segment:2", [][][2]string{path("/users/bob@x.com/o"), path("/users/bob%40x.com/o")})
	p := []config.KeyPart{{Kind: config.KeyPath}}
	for _, pair := range [][2]string{{"/t/café/x", "/t/caf%C3%A9/x"}, {"/t/!", "/t/%21"}, {"/t/a+b", "/t/a%2Bb"},
		{"/t/a:b", "/t/a%3Ab"}, {"/t/%3F", "/t/%3f"}, {"/t/%0A", "/t/\n"}} {
		sameKey(t, p, "path", [][][2]string{path(pair[0]), path(pair[1])})
	}
	m := config.Match{PathPrefix: "/@me/"}
	r := &Info{src: &fakeHost{headers: path("/%40me/settings")}}
	if !Matches(&m, r.View(NeedPath)) {
		t.Error("/%40me/settings does not match path_prefix /@me/")
	}
}

// TestKeysOfEscapedCookies: a cookie value is read decoded, as PHP and
// Rack read it.
func TestKeysOfEscapedCookies(t *testing.T) {
	c := []config.KeyPart{{Kind: config.KeyCookie, Name: "sid"}}
	sameKey(t, c, "cookie", [][][2]string{{{"cookie", "sid=alice"}}, {{"cookie", "sid=al%69ce"}},
		{{"cookie", `sid="%61lice"`}}, {{"cookie", "x=1; sid=%61%6c%69%63%65"}}})
	sameKey(t, c, "cookie", [][][2]string{{{"cookie", "sid=a b"}}, {{"cookie", "sid=a+b"}}, {{"cookie", "sid=a%20b"}}})
	// Repeats agree when they decode alike, and are ambiguous otherwise.
	sameKey(t, c, "cookie", [][][2]string{{{"cookie", "sid=alice"}}, {{"cookie", "sid=alice; sid=al%69ce"}}})
	ambiguousKey(t, c, [][2]string{{"cookie", "sid=alice; sid=al%69cf"}})
}

// ambiguousKey checks that each request's key is refused as ambiguous.
func ambiguousKey(t *testing.T, parts []config.KeyPart, requests ...[][2]string) {
	t.Helper()
	for _, headers := range requests {
		r := &Info{src: &fakeHost{headers: headers}}
		if key, _, ok := r.AppendKey(nil, parts, &config.ClientIP{}, -1); ok || !r.Ambiguous {
			t.Errorf("%v: key %q %v, ambiguous %v; want refused as ambiguous", headers, key, ok, r.Ambiguous)
		}
	}
}

// TestQueryKeySemicolons: a query holding ';' is read with and without
// it as a separator; where the readings differ the key is ambiguous.
func TestQueryKeySemicolons(t *testing.T) {
	q := []config.KeyPart{{Kind: config.KeyQuery, Name: "api_key"}}
	sameKey(t, q, "query", [][][2]string{path("/?api_key=alice"), path("/?api_key=alice&x=1;y=2"),
		path("/?x=1;y=2&api_key=alice")})
	ambiguousKey(t, q, path("/?api_key=alice;junk=1"), path("/?api_key=alice;junk=2"), path("/?junk=1;api_key=alice"),
		path("/?api_key=alice&junk=1;api_key=bob"))
	if _, ok := keyOf(q, path("/?x=1;y=2")...); ok {
		t.Error("a query without api_key under either reading has a key")
	}
}

// TestQueryKeyPHPNames: names PHP registers as api_key are api_key.
func TestQueryKeyPHPNames(t *testing.T) {
	q := []config.KeyPart{{Kind: config.KeyQuery, Name: "api_key"}}
	sameKey(t, q, "query", [][][2]string{path("/?api_key=bob"), path("/?api.key=bob"), path("/?api%20key=bob"),
		path("/?api+key=bob"), path("/?api[key=bob"), path("/?api%5Bkey=bob"), path("/?%20api_key=bob"),
		path("/?api_key%00junk=bob"), path("/?api.key=bob&api_key=bob")})
	ambiguousKey(t, q, path("/?api_key=alice&api.key=bob"), path("/?api[key=junk&api_key=alice"))
	for _, p := range []string{"/?api[key]=bob", "/?apikey=bob", "/?api__key=bob", "/?api[k.y=bob"} {
		if k, ok := keyOf(q, path(p)...); ok {
			t.Errorf("%s is api_key %q", p, k)
		}
	}
	dotted := []config.KeyPart{{Kind: config.KeyQuery, Name: "api.key"}}
	sameKey(t, dotted, "query api.key", [][][2]string{path("/?api.key=bob"), path("/?api_key=bob")})
}

// BenchmarkQueryKeyPHPName is what a parameter whose name PHP rewrites
// costs a key's scan.
func BenchmarkQueryKeyPHPName(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		appendQueryKey(buf[:0], "a.b=1&api%20key=bob", "api_key")
	}
}

// TestHeaderMatchesReadUnderscoreSpellings: a header match reads a name
// spelled with '_' as keys do, each spelling one more repeat.
func TestHeaderMatchesReadUnderscoreSpellings(t *testing.T) {
	m := config.Match{Headers: []config.HeaderMatch{{Name: "x-plan", ValueCondition: config.ValueCondition{Value: "free", HasValue: true, Op: config.OpExact}}}}
	for _, tc := range []struct {
		headers [][2]string
		want    bool
	}{
		{[][2]string{{"x-plan", "free"}}, true},
		{[][2]string{{"x_plan", "free"}}, true},
		{[][2]string{{"x-plan", "pro"}}, false},
		{[][2]string{{"x_plan", "pro"}}, false},
		{[][2]string{{"x-plan", "pro"}, {"x_plan", "free"}}, true}, // both spellings: free to a WSGI upstream
	} {
		r := &Info{src: &fakeHost{headers: tc.headers}}
		if got := Matches(&m, r.View(0)); got != tc.want {
			t.Errorf("%v: matched %v, want %v", tc.headers, got, tc.want)
		}
	}
}
