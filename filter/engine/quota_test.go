package engine

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/request"
)

// ResolveQuotaKey names the bucket the request path fills: the key
// request.Info.AppendKey composes from a request with those part values,
// and the override decideLimits picks for it.
func TestResolveQuotaKeyIsTheRequestPathsKey(t *testing.T) {
	p, f := newNativePlugin(t, `{"limits":[{"name":"t","key":["header:x-tenant","host","client_ip"],
		"requests_per_second":5,"override_by":"header:x-tenant","overrides":{"gold":{"requests_per_second":50},"free":{"unlimited":true}}}]}`)
	l := p.limits[0]
	s := begin(p, f, 1)
	f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/x"}, {":authority", "API.Example"}, {"x-tenant", "gold"}}
	f.Stream.Properties = map[string]string{"source.address": "10.1.2.3:5000"}
	key, override, ok := s.info.AppendKey(nil, l.cfg.Key, &p.cfg.ClientIP, l.cfg.OverrideBy)
	if !ok {
		t.Fatal("the request has no key")
	}
	q, err := ResolveQuotaKey(l.cfg, []string{"gold", "API.Example", "10.1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	if q.Key != string(key) || q.Override != override || q.Rate.Limit != 50 {
		t.Fatalf("resolved %q override %q rate %+v; the request path has %q override %q", q.Key, q.Override, q.Rate, key, override)
	}
	if q, err := ResolveQuotaKey(l.cfg, []string{"silver", "h", "10.0.0.1"}); err != nil || q.Override != "" || q.Rate.Limit != 5 {
		t.Fatalf("a value without an override: %+v %v", q, err)
	}
	for _, tc := range []struct {
		parts []string
		want  string
	}{
		{[]string{"gold", "h"}, "has 3 key parts (header:x-tenant+host+client_ip), got 2"},
		{[]string{"gold", "", "10.0.0.1"}, "key part 2 (host) is empty"},
		{[]string{"free", "h", "10.0.0.1"}, `override "free" is unlimited`},
	} {
		if _, err := ResolveQuotaKey(l.cfg, tc.parts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.parts, err, tc.want)
		}
	}
}

// Every kind of key part: the values an operator gives compose the key
// a request carrying them gets, masking and decoding included.
func TestResolveQuotaKeyComposesEveryPartAsTheRequestPath(t *testing.T) {
	for _, tc := range []struct {
		key    string
		values []string
		// headers and props are the request carrying the values.
		headers [][2]string
		peer    string
	}{
		{`["client_ip/24/56"]`, []string{"127.0.5.9"}, nil, "127.0.5.200:4000"},
		{`["client_ip/24/56"]`, []string{"2001:db8:0:1::9"}, nil, "[2001:db8:0:1:ffff::1]:4000"},
		{`["client_ip"]`, []string{"::ffff:10.1.2.3"}, nil, "10.1.2.3:4000"},
		{`["client_ip","client_ip/16/48"]`, []string{"10.1.2.3", "10.1.2.3"}, nil, "10.1.2.3:1"},
		{`["query:q","query:r"]`, []string{"a b&c=%", "x"}, [][2]string{{":path", "/p?r=x&q=a+b%26c%3D%25"}}, ""},
		{`["cookie:sid","header:x-t"]`, []string{"abc", "t1"}, [][2]string{{"cookie", "o=1; sid=abc"}, {"x-t", "t1"}}, ""},
		{`["path_segment:2","method"]`, []string{"v2", "POST"}, [][2]string{{":path", "/api/v2/users"}, {":method", "POST"}}, ""},
		{`["path","path_segment:1","query:q"]`, []string{"/api/x", "api", "1"}, [][2]string{{":path", "/api/x?q=1"}}, ""},
		{`["host"]`, []string{"API.Example"}, [][2]string{{":authority", "api.example"}}, ""},
		// A present, empty query value is a bucket of its own.
		{`["query:q","header:x-t"]`, []string{"", "t1"}, [][2]string{{":path", "/p?q="}, {"x-t", "t1"}}, ""},
		{`["path_segment:1"]`, []string{"a b"}, [][2]string{{":path", "/a%20b"}}, ""},
		{`["path","path_segment:2"]`, []string{"/caf\u00e9/a%3Fb", "a%3Fb"}, [][2]string{{":path", "/caf%C3%A9/a%3Fb"}}, ""},
	} {
		p, f := newNativePlugin(t, `{"limits":[{"name":"t","key":`+tc.key+`,"requests_per_second":5}]}`)
		l := p.limits[0]
		s := begin(p, f, 1)
		// The case's own pseudo-headers come first: the first value wins.
		f.Stream.Headers = append(append([][2]string(nil), tc.headers...), [2]string{":method", "GET"}, [2]string{":path", "/"}, [2]string{":authority", "h"})
		f.Stream.Properties = map[string]string{"source.address": tc.peer}
		want, _, ok := s.info.AppendKey(nil, l.cfg.Key, &p.cfg.ClientIP, -1)
		if !ok {
			t.Fatalf("%s: the request has no key", tc.key)
		}
		q, err := ResolveQuotaKey(l.cfg, tc.values)
		if err != nil || q.Key != string(want) {
			t.Errorf("%s %q: %q %v, the request path composes %q", tc.key, tc.values, q.Key, err, want)
		}
	}
	for _, tc := range []struct {
		key    string
		values []string
		want   string
	}{
		{`["client_ip/24/56"]`, []string{"127.0.5.0/24"}, `key part 1 (client_ip/24/56): "127.0.5.0/24" is not a value a request can carry`},
		{`["client_ip"]`, []string{"example.com"}, "is not a value a request can carry"},
		{`["client_ip","client_ip/24/56"]`, []string{"10.0.0.1", "10.0.0.2"}, "two client addresses"},
		{`["path_segment:1"]`, []string{"a/b"}, "cannot hold '/'"},
		{`["cookie:sid"]`, []string{"a;b"}, "cannot hold ';'"},
		{`["path"]`, []string{"/a?b"}, "no '?' or '#'"},
		{`["path","path_segment:1"]`, []string{"/a/b", "b"}, `has "a", not "b", as its segment 1`},
		// Values no request carries where the part reads: refused, never
		// read back as another bucket.
		{`["path_segment:1"]`, []string{"victim?not-victim"}, "key part 1 (path_segment:1): a path segment cannot hold '/', '?' or '#'"},
		{`["path_segment:1"]`, []string{"zz#x"}, "cannot hold '/', '?' or '#'"},
		{`["path_segment:1"]`, []string{"a;v=1"}, `key part path_segment:1: path "/a;v=1" has "a", not "a;v=1"`},
		{`["path_segment:1"]`, []string{"%41"}, `has "A", not "%41"`},
		{`["path_segment:2"]`, []string{".."}, `has "", not ".."`},
		{`["path_segment:1"]`, []string{"a\x00"}, "key part 1 (path_segment:1): a path key holds no control character"},
		{`["path_segment:1"]`, []string{"a\x01b"}, "no control character"},
		{`["path"]`, []string{"/a\x00b"}, "key part 1 (path): a path key holds no control character"},
		{`["path"]`, []string{"/a\r\n"}, "no control character"},
		{`["header:x-t"]`, []string{"  spc  "}, "key part 1 (header:x-t): a header value has no spaces or tabs around it"},
		{`["header:x-t"]`, []string{"spc\t"}, "no spaces or tabs around it"},
		{`["header:x-t"]`, []string{"acme\x00"}, "key part 1 (header:x-t): a header value holds no control character but tab"},
		{`["header:x-t"]`, []string{"a\r\nb"}, "no control character but tab"},
		// Issue 23: control bytes a request cannot carry, a method or a
		// host with a space.
		{`["header:x-t"]`, []string{"a\x01b"}, "key part 1 (header:x-t): a header value holds no control character but tab"},
		{`["header:x-t"]`, []string{"a\x7fb"}, "no control character but tab"},
		{`["cookie:sid"]`, []string{"a\x01b"}, "key part 1 (cookie:sid): a header value holds no control character but tab"},
		{`["cookie:sid"]`, []string{" a"}, "no spaces or tabs around it"},
		{`["method"]`, []string{"GET\n"}, "key part 1 (method): a method is an HTTP token"},
		{`["method"]`, []string{"G T"}, "key part 1 (method): a method is an HTTP token"},
		{`["method"]`, []string{"GET\x7f"}, "a method is an HTTP token"},
		{`["host"]`, []string{"api example"}, "key part 1 (host): a host holds no space or control character"},
		{`["host"]`, []string{"api\x01"}, "a host holds no space or control character"},
		{`["header:x-t"]`, []string{""}, "key part 1 (header:x-t) is empty, which the filter treats as a missing key"},
		{`["path_segment:1"]`, []string{""}, "key part 1 (path_segment:1) is empty"},
	} {
		p, _ := newNativePlugin(t, `{"limits":[{"name":"t","key":`+tc.key+`,"requests_per_second":5}]}`)
		if _, err := ResolveQuotaKey(p.limits[0].cfg, tc.values); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want %q", tc.key, tc.values, err, tc.want)
		}
	}
}

// FuzzResolveQuotaKey gives any values to limits of every part kind:
// nothing panics, and a query or header value comes back in the key
// exactly as given, through the encoding quotaRequest puts it in.
func FuzzResolveQuotaKey(f *testing.F) {
	f.Add("a b&c=%", "t1", "127.0.5.9", "/api/v2")
	f.Add("%zz+", "", "::ffff:1.2.3.4", "/a?b")
	f.Add("\x00\xff", "x,y", "[::1]:80", "v2")
	f.Add("", " t ", "10.0.0.1", "a?b")
	f.Add("x", "a\r\nb", "10.0.0.1", "%41")
	f.Add("x", "a\x01b", "10.0.0.1", "G T")
	f.Add("x", "a\x7fb", "10.0.0.1", "a b")
	cfg, err := config.Parse([]byte(`{"limits":[
		{"name":"qh","key":["query:q","header:x-h"],"requests_per_second":1},
		{"name":"ip","key":["client_ip/24/56","path_segment:2"],"requests_per_second":1},
		{"name":"path","key":["path","path_segment:1","cookie:c"],"requests_per_second":1},
		{"name":"mh","key":["method","host"],"requests_per_second":1}]}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, q, h, ip, path string) {
		// Every query value, the empty one too, is a bucket; a header
		// value is one unless Envoy would refuse or trim it, or it is
		// empty (missing).
		carriable := h != "" && strings.Trim(h, " \t") == h &&
			!strings.ContainsFunc(h, func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f })
		if k, err := ResolveQuotaKey(&cfg.Limits[0], []string{q, h}); err == nil && !slices.Equal(request.SplitKey(k.Key), []string{q, h}) {
			t.Fatalf("%q %q composed %q", q, h, k.Key)
		} else if (err == nil) != carriable {
			t.Fatalf("%q %q: %v; the header value is carriable: %v", q, h, err, carriable)
		}
		// A method or host is one a request line carries, or refused.
		if _, err := ResolveQuotaKey(&cfg.Limits[3], []string{path, path}); err == nil &&
			(!IsHTTPToken(path) || strings.ContainsFunc(path, func(c rune) bool { return c <= ' ' || c == 0x7f })) {
			t.Fatalf("method and host %q accepted", path)
		}
		_, _ = ResolveQuotaKey(&cfg.Limits[1], []string{ip, path})
		_, _ = ResolveQuotaKey(&cfg.Limits[2], []string{path, h, q})
	})
}
