package pathnorm

import (
	"fmt"
	"strings"
	"testing"
)

func TestNormalPathForKeys(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/t/alice/x", "/t/alice/x"},
		{"/t/junk/../alice/x", "/t/alice/x"},
		{"/t/./alice/x", "/t/alice/x"},
		{"//t///alice//x", "/t/alice/x"},
		{"/t/%61lice/x", "/t/alice/x"},
		{"/t/junk/%2e%2E/alice/x", "/t/alice/x"},
		{"/t%2Falice%2fx", "/t/alice/x"},
		{`/t\alice%5Cx`, "/t/alice/x"},
		{"/t/alice#frag", "/t/alice"},
		{"/t/alice;jsessionid=1/x;y", "/t/alice/x"}, // servlet path parameters
		{"/t/junk/..;/alice", "/t/alice"},           // Tomcat's ..;
		{"/t/;x/alice%3Bx", "/t/alice%3Bx"},         // an escaped ';' is not one
		{"/t/alice?q=/../x", "/t/alice"},
		{"/../../t/alice", "/t/alice"},
		{"/t/Alice", "/t/Alice"},            // case is kept
		{"/t/alice/", "/t/alice/"},          // a trailing slash is kept
		{"/t/alice/.", "/t/alice/"},         // as RFC 3986 leaves it
		{"/t/alice/..", "/t/"},              //
		{"/a%20b/%e2%82%ac", "/a b/\u20ac"}, // escapes that keep the structure decoded
		{"/users/bob%40x.com/o", "/users/bob@x.com/o"},
		{"/t/caf%C3%A9/x", "/t/café/x"},
		{"/t/%21%2B%3a%2c%27", "/t/!+:,'"},
		{"/t/%3f%23%3b%25", "/t/%3F%23%3B%25"},  // structure kept escaped, hex upper-cased
		{"/t/%00%1f%7F", "/t/%00%1F%7F"},        // so are control bytes
		{"/t/a\x00b\nc\x7f", "/t/a%00b%0Ac%7F"}, // raw ones are escaped
		{"/%zz%4", "/%zz%4"},                    // broken escapes kept literally
		{"/%252e", "/%252e"},                    // one decoding: %25 is '%', kept escaped
		{"/...", "/..."},
		{"/.well-known/x", "/.well-known/x"},
		{"t/alice", "/t/alice"},
		{"*", "/*"},
	} {
		if got := Normal(tc.in, Key); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNormalPathAllocatesNothingWhenNormal(t *testing.T) {
	for _, p := range []string{"/", "/api/v1/users/12345", "/a%25b/.well-known/", "/%zz", "/users/bob@x.com/caf\u00e9%3F"} {
		if !IsNormal(p, Key) {
			t.Errorf("%q is not normal", p)
		}
		if n := testing.AllocsPerRun(100, func() { Normal(p, Key) }); n != 0 {
			t.Errorf("%q: %v allocations", p, n)
		}
	}
}

// referencePath is the normalisation written the plain way, to check
// pathnorm.go against: decode what the form decodes, split at slashes,
// resolve dot segments with a stack, join.
func referencePath(path string, form Form) string {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	for form == Key {
		i := strings.IndexByte(path, ';')
		if i < 0 {
			break
		}
		end := strings.IndexAny(path[i:], `/\`)
		if end < 0 {
			end = len(path) - i
		}
		path = path[:i] + path[i+end:]
	}
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '%' && i+2 < len(path) && isHexDigit(path[i+1]) && isHexDigit(path[i+2]) {
			v := hexValue(path[i+1])<<4 | hexValue(path[i+2])
			sofar := b.String()
			n := len(sofar)
			joins := isHexDigit(v) && (strings.HasSuffix(sofar, "%") || n >= 2 && sofar[n-2] == '%' && isHexDigit(sofar[n-1]))
			if !joins && (form == Admin || strings.IndexByte("%?#;", v) < 0 && v >= 0x20 && v != 0x7f) {
				c = v
			} else {
				b.WriteString(strings.ToUpper(path[i : i+3]))
				i += 2
				continue
			}
			i += 2
		}
		if c == '\\' {
			c = '/'
		}
		if form == Key && (c < 0x20 || c == 0x7f) {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		if form == Admin && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	segs := strings.Split(b.String(), "/")
	var out []string
	trailing := false
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case "", ".":
			trailing = last
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = last
		default:
			out = append(out, s)
			trailing = false
		}
	}
	r := "/" + strings.Join(out, "/")
	if trailing && len(out) > 0 {
		r += "/"
	}
	return r
}

func hexValue(c byte) byte { v, _ := unhex(c); return v }

// FuzzNormalPath checks the key normalisation's properties on any input:
// it agrees with referencePath (for the admin form too), is idempotent,
// is never longer than its input (but for the leading '/' it adds),
// leaves no empty, "." or ".." segment and no lower-case hex in an
// escape, and reports an input normal exactly when it returns it as is.
func FuzzNormalPath(f *testing.F) {
	for _, s := range []string{"/t/junk/../alice/x", "/t/./alice", "//a//b", "/%2e%2E/%61", "/a%2fb%5C",
		`\a\..\b`, "/a/b/..", "/a/.", "/%zz%4", "/%e2%82%ac", "a/b", "", "/x?y/../z", "/x#/../y",
		"/%40me/%3f%3B%23%25", "/a\x00b\n%7f", "/%%34%0%61", "/caf%C3%A9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := Normal(in, Key)
		if want := referencePath(in, Key); out != want {
			t.Fatalf("%q: %q, reference %q", in, out, want)
		}
		if admin, want := string(Append(nil, in, Admin)), referencePath(in, Admin); admin != want {
			t.Fatalf("admin %q: %q, reference %q", in, admin, want)
		}
		if again := Normal(out, Key); again != out {
			t.Fatalf("%q: %q, then %q", in, out, again)
		}
		// Only a raw control byte grows, into its escape.
		grown := 0
		for i := 0; i < len(in); i++ {
			if in[i] < 0x20 || in[i] == 0x7f {
				grown += 2
			}
		}
		if len(out) > len(in)+1+grown || (strings.HasPrefix(in, "/") && len(out) > len(in)+grown) {
			t.Fatalf("%q grew to %q", in, out)
		}
		if out[0] != '/' || strings.Contains(out, "//") || strings.ContainsAny(out, `\?#;`) {
			t.Fatalf("%q: %q", in, out)
		}
		for i := 0; i < len(out); i++ {
			if out[i] < 0x20 || out[i] == 0x7f {
				t.Fatalf("%q: %q holds control byte %#x", in, out, out[i])
			}
			if b, ok := UnhexPair(out, i+1); out[i] == '%' && ok && keyDecodes(b) && !joinsBrokenEscape(out[:i], b) {
				t.Fatalf("%q: %q keeps %q escaped", in, out, out[i:i+3])
			}
		}
		for _, seg := range strings.Split(out[1:], "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("%q: %q keeps a dot segment", in, out)
			}
		}
		if IsNormal(in, Key) != (in == out) {
			t.Fatalf("%q: normal %v, but normalises to %q", in, IsNormal(in, Key), out)
		}
	})
}

// BenchmarkNormalPath is what the normal form costs a path already in it
// (every request's common case) and one that is not.
func BenchmarkNormalPath(b *testing.B) {
	for _, p := range []string{"/api/v1/users/12345", "/t/junk/../%61lice//x"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				Normal(p, Key)
			}
		})
	}
}
