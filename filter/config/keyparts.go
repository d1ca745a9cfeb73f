package config

import (
	"fmt"
	"strconv"
	"strings"
)

// parseRequestKeyPart parses the key parts that read the query, cookies,
// path segments or a masked client address. ok is false when s is none of
// them; err is empty on success.
func parseRequestKeyPart(s string) (part KeyPart, err string, ok bool) {
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
