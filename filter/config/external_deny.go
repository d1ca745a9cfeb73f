package config

import (
	"strings"

	"github.com/tidwall/gjson"
)

// denyHeaders reads external.deny_headers, after forward_headers: names
// that "*" must not send, on top of SensitiveHeaders, which stay denied
// whatever the list says.
func (p *parser) denyHeaders(o *object, e *External) {
	items, ok := o.array("deny_headers", "")
	if !ok {
		return
	}
	if !e.ForwardAll {
		o.errorf("deny_headers", `has no effect without "*" in forward_headers: only the wildcard sends unnamed headers`)
	}
	// An empty list stays nil, as an absent one: the encoded config omits
	// both, and must parse back equal.
	for i, item := range items {
		ipath := IndexPath(o.path1("deny_headers"), i)
		if item.Type != gjson.String || item.Str == "*" || !headerToken(item.Str) {
			p.errorf(ipath, item.Index, "must be a header name")
			continue
		}
		h := strings.ToLower(item.Str)
		switch {
		case contains(e.DenyHeaders, h):
			p.errorf(ipath, item.Index, "duplicate header %s", Quote(h))
		case contains(e.ForwardHeaders, h):
			p.errorf(ipath, item.Index, "%s is also named in forward_headers, which sends it", Quote(h))
		default:
			e.DenyHeaders = append(e.DenyHeaders, h)
		}
	}
}

// Denied reports whether the wildcard of forward_headers must not send
// the lower-case header name: a sensitive header or one of DenyHeaders.
func (e *External) Denied(name string) bool {
	return IsSensitiveHeader(name) || contains(e.DenyHeaders, name)
}
