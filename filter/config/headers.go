package config

import (
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// Limits of the headers an operator configures for the filter to add, to
// requests sent upstream (upstream_headers_when_limited) or to local
// replies (response.reply_headers): Envoy itself refuses header maps far
// larger, these keep one reply or request sane.
const (
	maxConfiguredHeaders = 16
	maxHeaderNameLen     = 256
	maxHeaderValueLen    = 4096
)

// headerMap reads an object of header name to value, as headers a filter
// adds to a request or a reply. Names are lowercased, as HTTP/2 and
// Envoy's header maps carry them; what Envoy would refuse to add is an
// error here rather than a header silently dropped at run time.
func (p *parser) headerMap(path string, v gjson.Result) [][2]string {
	if !v.IsObject() {
		p.errorf(path, v.Index, "must be an object of header name to value")
		return nil
	}
	var out [][2]string
	seen := map[string]bool{}
	v.ForEach(func(k, val gjson.Result) bool {
		name := k.String()
		hpath := FieldPath(path, name)
		lower := strings.ToLower(name)
		switch {
		case len(out) == maxConfiguredHeaders:
			p.errorf(hpath, k.Index, "more than %d headers", maxConfiguredHeaders)
			return false
		case !headerToken(name) || len(name) > maxHeaderNameLen:
			p.errorf(hpath, k.Index, "must be a header name (an RFC 9110 token of at most %d characters)", maxHeaderNameLen)
			return true
		case lower == "host" || lower == "content-length" || lower == "transfer-encoding" || lower == "connection":
			p.errorf(hpath, k.Index, "%s is framing, not a header the filter may set", lower)
			return true
		case seen[lower]:
			p.errorf(hpath, k.Index, "duplicate header (names are case-insensitive)")
			return true
		case val.Type != gjson.String:
			p.errorf(hpath, val.Index, "must be a string")
			return true
		case !headerValue(val.Str):
			p.errorf(hpath, val.Index, "must be a header value: at most %d visible characters, spaces or tabs, without leading or trailing whitespace", maxHeaderValueLen)
			return true
		}
		seen[lower] = true
		out = append(out, [2]string{lower, val.Str})
		return true
	})
	// Sorted, so the effective configuration (MarshalJSON writes a map)
	// parses back to the same order.
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// headerObject is the wire form of a header list; nil when empty.
func headerObject(hs [][2]string) map[string]string {
	if len(hs) == 0 {
		return nil
	}
	m := make(map[string]string, len(hs))
	for _, kv := range hs {
		m[kv[0]] = kv[1]
	}
	return m
}

// headerValue reports whether s is a field value Envoy accepts (RFC 9110
// field-value: no control characters but tab, so no CR, LF or NUL) and
// one it would not change by trimming.
func headerValue(s string) bool {
	if len(s) > maxHeaderValueLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return s == strings.Trim(s, " \t")
}
