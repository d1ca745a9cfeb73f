package engine

import (
	"fmt"
	"strings"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/request"
	"github.com/sluice-proxy/sluice/filter/request/pathnorm"
)

// QuotaKey is one bucket of a limit named by an operator rather than read
// from a request (sluicectl quota, the admin route): the key value the
// filter composes from the same parts, and the rate it decides that value
// at.
type QuotaKey struct {
	// Key is the composite key value, the parts joined as
	// request.Info.AppendKey joins them; backend.Key digests it into the
	// Redis key.
	Key string
	// Override is the overrides entry that gives the rate, "" for the
	// limit's own rate.
	Override string
	Rate     config.Rate
}

// ResolveQuotaKey is the bucket of limit cfg for a request whose key parts
// have the values parts, one per entry of cfg.Key, in order, given as a
// request carries them: a client address (masked as the part says), a
// header value, a path, a decoded query value. The values are put where a
// request carries them (quotaRequest) and the key is composed by the
// request path's own code, request.Info.AppendKey, so masking,
// lower-casing and whatever else the request path does apply alike; the override is chosen
// as the request path chooses it. Values the request path would not find
// a bucket for are errors: a wrong number of parts, an empty part (a
// missing key), a value no request can carry in that part, and a value
// whose override is unlimited or blocked.
func ResolveQuotaKey(cfg *config.Limit, parts []string) (QuotaKey, error) {
	if len(parts) != len(cfg.Key) {
		return QuotaKey{}, fmt.Errorf("limit %q has %d key parts (%s), got %d values", cfg.Name, len(cfg.Key), keyKindsOf(cfg.Key), len(parts))
	}
	req, err := newQuotaRequest(cfg.Key, parts)
	if err != nil {
		return QuotaKey{}, fmt.Errorf("limit %q: %v", cfg.Name, err)
	}
	var info request.Info
	info.Start(req, nil, nil)
	peer := &config.ClientIP{} // the client address is the value given, as the peer
	key, v, ok := info.AppendKey(nil, cfg.Key, peer, cfg.OverrideBy)
	if !ok {
		for i := range cfg.Key {
			if _, _, ok := info.AppendKey(nil, cfg.Key[i:i+1], peer, -1); !ok {
				if parts[i] == "" {
					return QuotaKey{}, fmt.Errorf("limit %q: key part %d (%s) is empty, which the filter treats as a missing key: no bucket", cfg.Name, i+1, cfg.Key[i])
				}
				return QuotaKey{}, fmt.Errorf("limit %q: key part %d (%s): %q is not a value a request can carry there: no bucket", cfg.Name, i+1, cfg.Key[i], parts[i])
			}
		}
		return QuotaKey{}, fmt.Errorf("limit %q: no request carries these values: no bucket", cfg.Name)
	}
	q := QuotaKey{Key: string(key), Rate: cfg.Rate}
	if cfg.OverrideBy < 0 || cfg.OverrideBy >= len(parts) {
		return q, nil
	}
	if cfg.OverrideCIDRs != nil {
		v = cfg.OverrideCIDRs.Resolve(v)
	}
	if a, ok := cfg.OverrideActions[v]; ok {
		return QuotaKey{}, fmt.Errorf("limit %q: override %q is %s: no bucket", cfg.Name, v, overrideActionName(a))
	}
	if r, ok := cfg.Overrides[v]; ok {
		q.Override, q.Rate = v, r
	}
	return q, nil
}

// quotaRequest is a request that carries given key part values where a
// request carries them, so that request.Info.AppendKey reads them back
// as it reads a request's.
type quotaRequest struct {
	headers [][2]string
	props   map[string]string // by property path, joined with '\x00'
}

// newQuotaRequest builds the request carrying values for parts. A value a
// request cannot carry in its part is refused rather than read back as
// something else: a header or cookie value with a control character but
// tab (Envoy refuses them), a method that is no HTTP token, a host with a
// space or control character, a header or cookie value with spaces or
// tabs around it (Envoy trims them, and the cookie reader too), a path
// or path segment with a control character (the normal form keeps those
// escaped), a path with a query or fragment, a path segment that is
// not a segment of its path's normal form (a '/', '?', '#' or ';', an
// escape the normal form decodes, "." or ".."), a cookie value with a
// ';', two client_ip parts naming different addresses, or path segments
// another path part contradicts.
func newQuotaRequest(parts []config.KeyPart, values []string) (*quotaRequest, error) {
	r := &quotaRequest{props: map[string]string{}}
	var path, method, authority string
	var query []byte
	var segments []string
	var given []bool
	for i, p := range parts {
		v := values[i]
		if err := checkQuotaValue(r.props, i, p, v); err != nil {
			return nil, err
		}
		switch p.Kind {
		case config.KeyHeader:
			r.headers = append(r.headers, [2]string{p.Header, v})
		case config.KeyCookie:
			if strings.ContainsRune(v, ';') {
				return nil, fmt.Errorf("key part %d (%s): a cookie value cannot hold ';'", i+1, p)
			}
			r.headers = append(r.headers, [2]string{"cookie", p.Name + "=" + v})
		case config.KeyPath:
			if strings.ContainsAny(v, "?#") || !strings.HasPrefix(v, "/") {
				return nil, fmt.Errorf("key part %d (%s): a path starts with '/' and holds no '?' or '#'", i+1, p)
			}
			path = string(appendEscaped(nil, v, inRequestTarget))
		case config.KeyPathSegment:
			if strings.ContainsAny(v, "/?#") {
				return nil, fmt.Errorf("key part %d (%s): a path segment cannot hold '/', '?' or '#'", i+1, p)
			}
			for len(segments) < p.Segment {
				segments, given = append(segments, "_"), append(given, false)
			}
			segments[p.Segment-1], given[p.Segment-1] = v, true
		case config.KeyQuery:
			if len(query) > 0 {
				query = append(query, '&')
			}
			query = appendEscaped(append(appendEscaped(query, p.Name, alphanumeric), '='), v, alphanumeric)
		case config.KeyMethod:
			method = v
		case config.KeyHost:
			authority = v
		case config.KeyRoute:
			r.props[strings.Join(request.RouteNameProperty, "\x00")] = v
		case config.KeyCluster:
			r.props[strings.Join(request.ClusterNameProperty, "\x00")] = v
		case config.KeyMetadata:
			r.props[strings.Join(p.Property, "\x00")] = v
		}
	}
	if segments != nil {
		built := string(appendEscaped(nil, "/"+strings.Join(segments, "/"), inRequestTarget))
		if path == "" {
			path = built
		}
		// A request's segments are those of its path's normal form
		// (Info.AppendKey), so a value that normalises to something else
		// (an escape decoded, a ';' parameter dropped, a dot segment) is
		// no segment a request carries.
		norm := pathnorm.Normal(path, pathnorm.Key)
		for i, seg := range segments {
			if got, _ := request.PathSegment(norm, i+1); given[i] && got != seg {
				return nil, fmt.Errorf("key part %s: path %q has %q, not %q, as its segment %d (paths are keyed in their normal form)",
					config.KeyPart{Kind: config.KeyPathSegment, Segment: i + 1}, path, got, seg, i+1)
			}
		}
	}
	if path == "" {
		path = "/"
	}
	if query != nil {
		path += "?" + string(query)
	}
	r.headers = append(r.headers, [2]string{":path", path}, [2]string{":method", method}, [2]string{":authority", authority})
	return r, nil
}

// checkQuotaValue refuses a value v of key part i (p) that no request can
// carry: control characters, spaces around a header value, a method that
// is no token, two client addresses. props are the properties so far.
func checkQuotaValue(props map[string]string, i int, p config.KeyPart, v string) error {
	switch p.Kind {
	case config.KeyClientIP, config.KeyClientIPMasked:
		if prev, ok := props["source\x00address"]; ok && prev != v {
			return fmt.Errorf("key parts name two client addresses, %q and %q", prev, v)
		}
		props["source\x00address"] = v
	case config.KeyHeader, config.KeyCookie:
		if !IsFieldValue(v) {
			return fmt.Errorf("key part %d (%s): a header value holds no control character but tab: no NUL, CR, LF, DEL (Envoy refuses them)", i+1, p)
		}
		if strings.Trim(v, " \t") != v {
			return fmt.Errorf("key part %d (%s): a header value has no spaces or tabs around it (Envoy trims them)", i+1, p)
		}
	case config.KeyMethod:
		if v != "" && !IsHTTPToken(v) {
			return fmt.Errorf("key part %d (%s): a method is an HTTP token: letters, digits and !#$%%&'*+-.^_`|~, no space or control character", i+1, p)
		}
	case config.KeyHost:
		if strings.ContainsFunc(v, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
			return fmt.Errorf("key part %d (%s): a host holds no space or control character", i+1, p)
		}
	case config.KeyPath, config.KeyPathSegment:
		// The normal form keeps a control byte escaped, so a key never
		// holds one raw.
		if strings.ContainsFunc(v, func(c rune) bool { return c < ' ' || c == 0x7f }) {
			return fmt.Errorf("key part %d (%s): a path key holds no control character (its normal form keeps them escaped: %%01)", i+1, p)
		}
	}
	return nil
}

// appendEscaped appends s with every byte that keep refuses
// percent-encoded, which the request path's decoders read back as s.
func appendEscaped(dst []byte, s string, keep func(byte) bool) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if keep(c) {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hex[c>>4], hex[c&15])
	}
	return dst
}

// alphanumeric keeps what any query decoder reads as itself.
func alphanumeric(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// inRequestTarget keeps what a request line carries raw in its path, and
// '%', so that the escapes a path key keeps (%25, %3F, %23, %3B) stay
// escapes: a key value in normal form, a space or a UTF-8 byte among its
// decoded bytes, becomes a path whose normal form is that value.
func inRequestTarget(c byte) bool {
	return c > ' ' && c < 0x7f && !strings.ContainsRune("\"<>\\^`{|}?#", rune(c))
}

func (r *quotaRequest) RequestHeaders() [][2]string { return r.headers }

// RequestHeader is read for the pseudo-headers, which appear once.
func (r *quotaRequest) RequestHeader(name string) (string, bool) {
	return request.CombinedHeader(r.headers, name)
}

func (r *quotaRequest) Property(path []string) string { return r.props[strings.Join(path, "\x00")] }

func overrideActionName(a config.OverrideAction) string {
	if a == config.OverrideBlock {
		return "blocked"
	}
	return "unlimited"
}

// keyKindsOf names the key parts of a rate or concurrency limit for logs
// and messages: "client_ip+header:x-tenant".
func keyKindsOf(key []config.KeyPart) string {
	kinds := make([]string, len(key))
	for i, k := range key {
		kinds[i] = k.String()
	}
	return strings.Join(kinds, "+")
}

// IsHTTPToken reports whether s is an HTTP token (RFC 9110 tchar+): what
// a method or a field name is.
func IsHTTPToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// IsFieldValue reports whether s may be an HTTP field value: no control
// characters but tab (RFC 9110 field-value).
func IsFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
