package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/sluice-proxy/sluice/internal/enum"
)

// plainKeyKinds are the key parts without an argument, written as their
// kind's name.
var plainKeyKinds = enum.Of("KeyKind", KeyClientIP, KeyPath, KeyRoute, KeyMethod, KeyHost, KeyCluster)

// parseKeyPart parses one key entry; the error is empty on success.
func parseKeyPart(s string) (KeyPart, string) {
	if k, ok := plainKeyKinds.Parse(s); ok {
		return KeyPart{Kind: k}, ""
	}
	if name, ok := strings.CutPrefix(s, "header:"); ok {
		if !headerToken(name) {
			return KeyPart{}, fmt.Sprintf("invalid header name %s", Quote(name))
		}
		h, bad := requestHeader(name, `use the key part "host"`)
		if bad != "" {
			return KeyPart{}, bad
		}
		return KeyPart{Kind: KeyHeader, Header: h}, ""
	}
	if part, err, ok := parseArgumentKeyPart(s); ok {
		return part, err
	}
	return KeyPart{}, fmt.Sprintf("unknown key part %s; want client_ip, client_ip/<v4 bits>/<v6 bits>, header:<name>, query:<name>, cookie:<name>, path, path_segment:<n>, route, cluster, method or host", Quote(s))
}

func (p *parser) key(path string, items []gjson.Result) []KeyPart {
	parts := make([]KeyPart, 0, len(items))
	for i, item := range items {
		ipath := IndexPath(path, i)
		if item.Type != gjson.String {
			p.errorf(ipath, item.Index, "must be a string")
			continue
		}
		part, err := parseKeyPart(item.Str)
		if err != "" {
			p.errorf(ipath, item.Index, "%s", err)
			continue
		}
		dup := false
		for _, q := range parts {
			dup = dup || q.Same(part)
		}
		if dup {
			p.errorf(ipath, item.Index, "duplicate key part %s", Quote(part.String()))
			continue
		}
		parts = append(parts, part)
	}
	return parts
}

// Same reports whether p and q are the same key part; Property follows
// from the other fields.
func (p KeyPart) Same(q KeyPart) bool {
	return p.Kind == q.Kind && p.Header == q.Header && p.Name == q.Name && p.Segment == q.Segment &&
		p.V4Bits == q.V4Bits && p.V6Bits == q.V6Bits && p.MetaPath == q.MetaPath
}

// parseArgumentKeyPart parses the key parts written with an argument
// other than header:<name>: a query parameter, a cookie, a path segment,
// a masked client address or a metadata value. ok is false when s is none
// of them; err is empty on success.
func parseArgumentKeyPart(s string) (part KeyPart, err string, ok bool) {
	if name, found := strings.CutPrefix(s, "query:"); found {
		if !queryName(name) {
			return KeyPart{}, fmt.Sprintf("invalid query parameter name %s: want printable ASCII without space, & or =", Quote(name)), true
		}
		return KeyPart{Kind: KeyQuery, Name: name}, "", true
	}
	if name, found := strings.CutPrefix(s, "cookie:"); found {
		if !headerToken(name) {
			return KeyPart{}, fmt.Sprintf("invalid cookie name %s", Quote(name)), true
		}
		return KeyPart{Kind: KeyCookie, Name: name}, "", true
	}
	if n, found := strings.CutPrefix(s, "path_segment:"); found {
		i, ok := smallDecimal(n, MaxPathSegment)
		if !ok || i < 1 {
			return KeyPart{}, fmt.Sprintf("invalid path segment %s: want 1 to %d", Quote(n), MaxPathSegment), true
		}
		return KeyPart{Kind: KeyPathSegment, Segment: i}, "", true
	}
	if bits, found := strings.CutPrefix(s, "client_ip/"); found {
		v4s, v6s, _ := strings.Cut(bits, "/")
		v4, ok4 := smallDecimal(v4s, 32)
		v6, ok6 := smallDecimal(v6s, 128)
		if !ok4 || !ok6 {
			return KeyPart{}, fmt.Sprintf("invalid masked client address %s: want client_ip/<0-32>/<0-128>", Quote(s)), true
		}
		return KeyPart{Kind: KeyClientIPMasked, V4Bits: uint8(v4), V6Bits: uint8(v6)}, "", true
	}
	return parseMetadataKey(s)
}

// MaxPathSegment is the deepest path segment a key may name.
const MaxPathSegment = 99

// queryName reports whether s can be a decoded query parameter name: a
// name holding '&' or '=' could never match, and spaces and controls are
// more likely a typo than a parameter.
func queryName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '&' || c == '=' {
			return false
		}
	}
	return true
}

// smallDecimal parses a decimal without sign or leading zeros, at most max.
func smallDecimal(s string, max int) (int, bool) {
	if s == "" || len(s) > 3 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > max || s[0] == '+' || s[0] == '-' {
		return 0, false
	}
	return n, true
}
