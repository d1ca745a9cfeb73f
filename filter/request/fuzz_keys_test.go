package request

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/request/pathnorm"
)

// fakeHost serves Info from fixed headers and properties, so key
// extraction can be fuzzed without a proxy-wasm host.
type fakeHost struct {
	headers [][2]string
	props   map[string]string
}

func (h *fakeHost) RequestHeaders() [][2]string { return h.headers }

func (h *fakeHost) RequestHeader(name string) (string, bool) {
	for _, kv := range h.headers {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

func (h *fakeHost) Property(path []string) string {
	return h.props[strings.Join(path, ".")]
}

// parseFuzzHeaders turns "name=value" lines into a header map. The line
// format keeps the corpus readable; names may be pseudo-headers (":path").
func parseFuzzHeaders(blob string) [][2]string {
	var hs [][2]string
	for _, line := range strings.Split(blob, "\n") {
		if line == "" {
			continue
		}
		name, value, _ := strings.Cut(line, "=")
		hs = append(hs, [2]string{name, value})
	}
	return hs
}

// fuzzKeyParts decodes one byte per part: the low four bits pick the kind
// (with values past KeyClientIPMasked exercising the unknown-kind path),
// the high bit picks which name a header, query or cookie part reads, and
// bits 4-6 pick a path segment or the mask lengths.
func fuzzKeyParts(spec []byte, headerA, headerB string) []config.KeyPart {
	if len(spec) > 8 {
		spec = spec[:8]
	}
	parts := make([]config.KeyPart, 0, len(spec))
	for _, b := range spec {
		p := config.KeyPart{Kind: config.KeyKind(b & 0xf)}
		name := headerA
		if b&0x80 != 0 {
			name = headerB
		}
		mid := b >> 4 & 0x7
		switch p.Kind {
		case config.KeyHeader:
			p.Header = name
		case config.KeyQuery, config.KeyCookie:
			p.Name = name
		case config.KeyPathSegment:
			p.Segment = int(mid) + 1
		case config.KeyClientIPMasked:
			p.V4Bits, p.V6Bits = mid*4+4, mid*16+16
		case config.KeyMetadata:
			// The source address doubles as the metadata value: arbitrary
			// bytes, sometimes eight of them.
			p.Name, p.MetaPath, p.Property = "ns", "a.b", config.MetadataProperty("ns", "a.b")
		}
		parts = append(parts, p)
	}
	return parts
}

func FuzzAppendKey(f *testing.F) {
	f.Add(":method=GET\n:path=/a?b=c\n:authority=Example.COM\nx-api-key=k1", "10.0.0.1:5555", "r1",
		[]byte{byte(config.KeyClientIP), byte(config.KeyHeader)}, "x-api-key", "x-user", uint8(0), 1, 1)
	f.Add(":path=/\nx-forwarded-for=1.1.1.1, 2.2.2.2\nx-forwarded-for=[::1]:80", "[2001:db8::2]:443", "",
		[]byte{byte(config.KeyClientIP), byte(config.KeyPath), byte(config.KeyRoute)}, "", "", uint8(1), 2, 0)
	f.Add("x-real-ip= 192.168.0.1 \nx-user=\nx-user=b", "", "route",
		[]byte{byte(config.KeyClientIP), byte(config.KeyHeader) | 0x80, byte(config.KeyMethod)}, "x-real-ip", "x-user", uint8(2), 1, 1)
	f.Add(":authority=HOST\n:method=POST", "garbage", "r",
		[]byte{byte(config.KeyHost), byte(config.KeyMethod), 7}, "", "", uint8(0), 1, -1)
	f.Add("", "", "", []byte{}, "", "", uint8(0), 0, 0)
	f.Add(":path=/api/v1/users?id=a%2Cb&id=+c&x=%zz\ncookie=sid=\"s1\"; theme=dark\ncookie=sid=s2", "[fe80::1%eth0]:443", "",
		[]byte{byte(config.KeyQuery), byte(config.KeyCookie), byte(config.KeyPathSegment) | 0x10, byte(config.KeyClientIPMasked) | 0x50},
		"id", "sid", uint8(0), 1, 0)
	f.Add("", "\x00\x00\x00\x00\x00\x00E@", "", []byte{byte(config.KeyMetadata), byte(config.KeyRoute)}, "", "", uint8(0), 1, 0)
	// Re-spellings: a ';' read both ways, names PHP rewrites, an escaped
	// cookie, a host with extra colons, escaped path bytes.
	f.Add(":path=/u/bob%40x.com/caf%C3%A9?api_key=a;j=1&api.key=a&api%5Bkey=a\n:authority=Api.example:80:80\ncookie=sid=al%69ce+x",
		"", "", []byte{byte(config.KeyQuery), byte(config.KeyCookie) | 0x80, byte(config.KeyHost), byte(config.KeyPath), byte(config.KeyPathSegment) | 0x10},
		"api_key", "sid", uint8(0), 1, 1)
	f.Add("cookie=sid=a; sid=\"a\"\ncookie=b=1; sid=b", "10.0.0.1:1", "", []byte{byte(config.KeyCookie), byte(config.KeyCookie) | 0x80},
		"sid", "b", uint8(0), 1, 1)
	// Values holding the separator and the escape byte.
	f.Add(":path=/d?a=k1%00y&b=z%01\ncookie=a=%00%01", "", "", []byte{byte(config.KeyQuery), byte(config.KeyQuery) | 0x80, byte(config.KeyCookie)},
		"a", "b", uint8(0), 1, 1)
	f.Fuzz(func(t *testing.T, headerBlob, sourceAddress, route string, spec []byte,
		headerA, headerB string, ipSource uint8, hops int, overrideBy int) {
		host := &fakeHost{
			headers: parseFuzzHeaders(headerBlob),
			// The cluster is the route name reversed: a distinct value from the
			// same input.
			props: map[string]string{"source.address": sourceAddress, "xds.route_name": route, "xds.cluster_name": reverse(route),
				"metadata.filter_metadata.ns.a.b": sourceAddress},
		}
		parts := fuzzKeyParts(spec, headerA, headerB)
		clientCfg := &config.ClientIP{Source: config.ClientIPSource(ipSource % 4), TrustedHops: hops % 64, Header: headerA}
		if ipSource >= 128 {
			// The ordered form: xff, then headerA, then the peer, rotated.
			all := []config.ClientIPFrom{{Kind: config.ClientIPXFF}, {Kind: config.ClientIPHeader, Header: headerA}, {Kind: config.ClientIPPeer}}
			n := int(ipSource) % 3
			clientCfg.Sources = append(all[n:], all[:n]...)
		}
		prefix := []byte("prefix/")

		r := &Info{src: host}
		key, override, ok := r.AppendKey(append([]byte(nil), prefix...), parts, clientCfg, overrideBy)

		if !bytes.HasPrefix(key, prefix) {
			t.Fatalf("key %q lost the caller's prefix", key)
		}
		// A missing part leaves the caller's buffer as it came.
		if !ok {
			if !bytes.Equal(key, prefix) {
				t.Fatalf("a missing part left %q", key)
			}
			if override != "" {
				t.Fatalf("a missing part still gave override value %q", override)
			}
			return
		}
		if len(parts) == 0 && len(key) != len(prefix) {
			t.Fatalf("the global bucket appended %q", key[len(prefix):])
		}

		// Same request, fresh state: extraction must not depend on what was
		// loaded lazily before.
		again, override2, ok2 := (&Info{src: host}).AppendKey(nil, parts, clientCfg, overrideBy)
		if !ok2 || !bytes.Equal(again, key[len(prefix):]) || override2 != override {
			t.Fatalf("not deterministic: %q/%q/%v then %q/%q/%v", key[len(prefix):], override, ok, again, override2, ok2)
		}

		// Every key splits back into its parts' values (SplitKey undoes
		// the escaping), whatever bytes a decoded value holds.
		if len(parts) == 0 {
			return
		}
		fields := SplitKey(string(key[len(prefix):]))
		if len(fields) != len(parts) {
			t.Fatalf("key %q has %d fields for %d parts", key, len(fields), len(parts))
		}
		for i, p := range parts {
			v := fields[i]
			if v == "" && p.Kind != config.KeyQuery { // a present, empty query value is a value
				t.Fatalf("part %d (%v) is empty in an ok key", i, p)
			}
			switch p.Kind {
			case config.KeyClientIP:
				if n, ok := normalizeIP(v); !ok || n != v {
					t.Fatalf("client part %q is not a normalised address", v)
				}
			case config.KeyHost:
				// Byte by byte: strings.ToLower would rewrite a non-UTF-8
				// byte, which the host keeps as sent.
				if strings.ContainsAny(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
					t.Fatalf("host part %q is not lower-cased", v)
				}
			case config.KeyPath:
				if strings.ContainsRune(v, '?') || pathnorm.Normal(v, pathnorm.Key) != v {
					t.Fatalf("path part %q kept its query or is not in normal form", v)
				}
			case config.KeyRoute:
				if v != route {
					t.Fatalf("route part %q, want %q", v, route)
				}
			case config.KeyPathSegment:
				if strings.ContainsAny(v, "/?") {
					t.Fatalf("path segment %q holds a separator", v)
				}
			case config.KeyClientIPMasked:
				if pfx, err := netip.ParsePrefix(v); err != nil || pfx.Masked() != pfx {
					t.Fatalf("masked client part %q is not a masked prefix (%v)", v, err)
				}
			case config.KeyMetadata:
				// Strings are used as they are, UTF-8 or not.
				if strings.ContainsAny(v, "\x00") || v[0] < ' ' || v[0] == 0x7f {
					t.Fatalf("metadata part %q holds NUL or starts with a control byte", v)
				}
			case config.KeyCluster:
				if v != reverse(route) {
					t.Fatalf("cluster part %q, want %q", v, reverse(route))
				}
			}
		}
		if overrideBy >= 0 && overrideBy < len(parts) && override != fields[overrideBy] {
			t.Fatalf("override value %q, want part %d %q", override, overrideBy, fields[overrideBy])
		}
	})
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}
