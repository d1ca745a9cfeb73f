package config

import (
	"strings"

	"github.com/tidwall/gjson"
)

// forwardHeaders reads external.forward_headers: the headers sent to the
// service, and "*" for every header not denied. It returns a key part for
// each header named, the default cache key.
func (p *parser) forwardHeaders(o *object, e *External) []KeyPart {
	items, ok := o.array("forward_headers", "")
	if !ok {
		return nil
	}
	var named []KeyPart
	for i, item := range items {
		ipath := IndexPath(o.path1("forward_headers"), i)
		switch {
		case item.Type == gjson.String && item.Str == "*":
			if e.ForwardAll {
				p.errorf(ipath, item.Index, `duplicate entry "*"`)
			}
			e.ForwardAll = true
		case item.Type != gjson.String || !headerToken(item.Str):
			p.errorf(ipath, item.Index, `must be a header name or "*"`)
		case contains(e.ForwardHeaders, strings.ToLower(item.Str)):
			p.errorf(ipath, item.Index, "duplicate header %s", Quote(strings.ToLower(item.Str)))
		default:
			h := strings.ToLower(item.Str)
			e.ForwardHeaders = append(e.ForwardHeaders, h)
			named = append(named, KeyPart{Kind: KeyHeader, Header: h})
		}
	}
	return named
}

// cacheKey reads external.cache_key, by default the headers forwarded by
// name (named): a lookup's answer is shared by the requests that send
// the service the same values.
func (p *parser) cacheKey(o *object, e *External, named []KeyPart) {
	if items, ok := o.array("cache_key", ""); ok {
		e.CacheKey = p.key(o.path1("cache_key"), items)
		return
	}
	if e.ForwardAll && !o.has("cache_key") {
		o.errorf("cache_key", `required when forward_headers has "*": the cache cannot be keyed by every header`)
	}
	e.CacheKey = named
	if e.CacheKey == nil {
		e.CacheKey = []KeyPart{}
	}
}

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
