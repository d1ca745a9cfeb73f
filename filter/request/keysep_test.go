package request

import (
	"net/url"
	"slices"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
)

// queryPair is the key of limit parts query:a, query:b for a path.
func queryPair(p string) (string, bool) {
	return keyOf([]config.KeyPart{{Kind: config.KeyQuery, Name: "a"}, {Kind: config.KeyQuery, Name: "b"}}, path(p)...)
}

// TestKeySeparatorInAValueIsNotASeparator: a decoded value holding the
// separator (or the escape byte) cannot compose another tuple's key, for
// query values, cookies and metadata strings; a value holding neither
// has the key it had before the escaping.
func TestKeySeparatorInAValueIsNotASeparator(t *testing.T) {
	a, okA := queryPair("/d?a=k1%00y&b=z")
	b, okB := queryPair("/d?a=k1&b=y%00z")
	if !okA || !okB || a == b {
		t.Errorf("query pairs (k1\\0y, z) and (k1, y\\0z): keys %q %v and %q %v", a, okA, b, okB)
	}
	a, _ = queryPair("/d?a=k1%01&b=0z")
	b, _ = queryPair("/d?a=k1%00&b=z")
	if a == b {
		t.Errorf("an escape byte in a value composes the escape of a separator: %q", a)
	}
	if k, ok := queryPair("/d?a=k1&b=y"); k != "k1\x00y" || !ok {
		t.Errorf("plain values compose %q %v, want the unescaped k1\\0y", k, ok)
	}

	cookies := []config.KeyPart{{Kind: config.KeyCookie, Name: "s"}, {Kind: config.KeyCookie, Name: "t"}}
	a, okA = keyOf(cookies, [2]string{"cookie", "s=k1%00y; t=z"})
	b, okB = keyOf(cookies, [2]string{"cookie", "s=k1; t=y%00z"})
	if !okA || !okB || a == b {
		t.Errorf("cookie pairs: keys %q %v and %q %v", a, okA, b, okB)
	}

	// A metadata string holding a NUL is missing (appendMetadata); one
	// holding the escape byte is escaped like any value.
	const meta = "metadata.filter_metadata.ns.a.b" // as fakeHost joins the property path
	parts := []config.KeyPart{{Kind: config.KeyMetadata, Name: "ns", MetaPath: "a.b", Property: config.MetadataProperty("ns", "a.b")}, {Kind: config.KeyQuery, Name: "b"}}
	metaKey := func(m, p string) (string, bool) {
		r := &Info{src: &fakeHost{headers: path(p), props: map[string]string{meta: m}}}
		k, _, ok := r.AppendKey(nil, parts, &config.ClientIP{}, -1)
		return string(k), ok
	}
	a, okA = metaKey("k1", "/d?b=y%00z")
	b, okB = metaKey("k1\x00y", "/d?b=z")
	if !okA || okB {
		t.Errorf("metadata pairs: (k1, y\\0z) is %q %v, (k1\\0y, z) is %q %v", a, okA, b, okB)
	}
	a, okA = metaKey("k1\x01", "/d?b=0z")
	b, okB = metaKey("k1", "/d?b=%010z")
	if !okA || !okB || a == b {
		t.Errorf("metadata pairs with the escape byte: %q %v and %q %v", a, okA, b, okB)
	}
	if got := SplitKey(a); !slices.Equal(got, []string{"k1\x01", "0z"}) {
		t.Errorf("SplitKey(%q) = %q", a, got)
	}
}

// FuzzKeyInjective: distinct tuples of query values never compose one
// key, and SplitKey gives each tuple back.
func FuzzKeyInjective(f *testing.F) {
	f.Add("k1\x00y", "z", "", "k1", "y\x00z", "")
	f.Add("k1\x01", "0z", "x", "k1", "\x010z", "x")
	f.Add("a\x010", "", "\x00", "a\x00", "", "\x011")
	f.Add("", "", "", "\x00", "", "")
	parts := []config.KeyPart{{Kind: config.KeyQuery, Name: "a"}, {Kind: config.KeyQuery, Name: "b"}, {Kind: config.KeyQuery, Name: "c"}}
	compose := func(t *testing.T, vs []string) string {
		q := url.Values{"a": {vs[0]}, "b": {vs[1]}, "c": {vs[2]}}
		r := &Info{src: &fakeHost{headers: path("/?" + q.Encode())}}
		k, _, ok := r.AppendKey(nil, parts, &config.ClientIP{}, -1)
		if !ok {
			t.Fatalf("%q: no key", vs)
		}
		if got := SplitKey(string(k)); !slices.Equal(got, vs) {
			t.Fatalf("%q composes %q, which splits into %q", vs, k, got)
		}
		return string(k)
	}
	f.Fuzz(func(t *testing.T, a1, b1, c1, a2, b2, c2 string) {
		x, y := []string{a1, b1, c1}, []string{a2, b2, c2}
		if kx, ky := compose(t, x), compose(t, y); kx == ky && !slices.Equal(x, y) {
			t.Fatalf("%q and %q compose one key %q", x, y, kx)
		}
	})
}
