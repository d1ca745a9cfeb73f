package request

import (
	"strings"

	"github.com/sluice-proxy/sluice/filter/config"
)

// KeySeparator joins the parts of a composite key. A decoded query value,
// cookie or metadata string can hold it, so every part is escaped as it
// is appended (escapeKeyPart): keyEscape followed by keyEscapedSep stands
// for a separator byte inside a value, and keyEscape followed by
// keyEscapedEsc for the escape byte itself. An escaped part holds no
// separator and decodes to one value only, so distinct tuples of values
// never compose one key. A value with neither byte (every header, path
// and address Envoy passes on) is appended as it is, so such keys are
// what they were before the escaping, in shared data and in Redis alike.
const (
	KeySeparator  = '\x00'
	keyEscape     = '\x01'
	keyEscapedSep = '0'
	keyEscapedEsc = '1'
)

// escapeKeyPart escapes the key part dst[start:] in place, so that it holds
// no KeySeparator; without a separator or escape byte it is left as it is
// and nothing is allocated.
func escapeKeyPart(dst []byte, start int) []byte {
	n := 0
	for _, c := range dst[start:] {
		if c == KeySeparator || c == keyEscape {
			n++
		}
	}
	if n == 0 {
		return dst
	}
	end := len(dst)
	dst = append(dst, make([]byte, n)...)
	// Walk back from the end so that each byte moves before it is
	// overwritten.
	w := len(dst)
	for r := end - 1; r >= start; r-- {
		c := dst[r]
		switch c {
		case KeySeparator:
			w -= 2
			dst[w], dst[w+1] = keyEscape, keyEscapedSep
		case keyEscape:
			w -= 2
			dst[w], dst[w+1] = keyEscape, keyEscapedEsc
		default:
			w--
			dst[w] = c
		}
	}
	return dst
}

// SplitKey is the values of a composite key, as AppendKey composed it from
// its parts: split at each separator and unescaped. A key of one part is one
// value; a key of no parts (the single global bucket) is one empty value.
func SplitKey(key string) []string {
	values := strings.Split(key, string(rune(KeySeparator)))
	for i, v := range values {
		if strings.IndexByte(v, keyEscape) < 0 {
			continue
		}
		b := make([]byte, 0, len(v))
		for j := 0; j < len(v); j++ {
			c := v[j]
			if c == keyEscape && j+1 < len(v) {
				j++
				if v[j] == keyEscapedSep {
					c = KeySeparator
				}
			}
			b = append(b, c)
		}
		values[i] = string(b)
	}
	return values
}

// AppendKey appends the composite key of parts to dst. ok is false when a
// part is missing: an absent or empty header or cookie, an absent query
// parameter (a present, empty one is an empty value), a path with fewer
// segments, an unknown client address, route or cluster; dst is then
// returned as it came. An empty parts list is the single global bucket
// and always ok. A query parameter, header or cookie given more than once
// with different values is missing too, and r.Ambiguous says so: upstreams
// disagree on which value is the caller (Go, Flask and servlets take the
// first, PHP and Rails the last), so any value taken here, or all of
// them joined, would let a client be counted as one caller and served as
// another; the callers refuse such a request whatever on_missing_key
// says, as skipping it would leave it unlimited.
// overrideValue is the value of parts[overrideBy], for tier lookups.
func (r *Info) AppendKey(dst []byte, parts []config.KeyPart, clientCfg *config.ClientIP, overrideBy int) (key []byte, overrideValue string, ok bool) {
	orig := len(dst)
	r.Ambiguous = false
	for i, p := range parts {
		if i > 0 {
			dst = append(dst, KeySeparator)
		}
		var v string
		switch p.Kind {
		case config.KeyClientIP:
			v, ok = r.Client(clientCfg)
		case config.KeyHeader:
			v, ok = r.keyHeader(p.Header)
		case config.KeyPath:
			v, ok = r.NormalPath(), true
		case config.KeyRoute:
			v = r.Route()
			ok = true
		case config.KeyCluster:
			v = r.Cluster()
			ok = true
		case config.KeyPathSegment:
			v, ok = PathSegment(r.NormalPath(), p.Segment)
		case config.KeyQuery, config.KeyCookie, config.KeyClientIPMasked, config.KeyMetadata, config.KeyHost, config.KeyMethod:
			// These decode or mask into dst rather than slicing a value.
			start := len(dst)
			if dst, ok = r.appendDerived(dst, p, clientCfg); !ok {
				return dst[:orig], "", false
			}
			if i == overrideBy {
				overrideValue = string(dst[start:])
			}
			dst = escapeKeyPart(dst, start)
			continue
		default:
			ok = false
		}
		if !ok || v == "" {
			return dst[:orig], "", false
		}
		if i == overrideBy {
			overrideValue = v
		}
		start := len(dst)
		dst = escapeKeyPart(append(dst, v...), start)
	}
	return dst, overrideValue, true
}

// appendDerived appends the value of a query, cookie, host, metadata or
// masked client address part, which exist only once decoded, folded,
// rendered or masked.
func (r *Info) appendDerived(dst []byte, p config.KeyPart, clientCfg *config.ClientIP) ([]byte, bool) {
	switch p.Kind {
	case config.KeyCookie:
		// Decoded as PHP's $_COOKIE and Rack read it ("al%69ce" and
		// "alice" are one caller), the way query values are.
		v, ok := r.cookie(p.Name)
		if !ok || v == "" {
			return dst, false
		}
		return AppendQueryUnescaped(dst, v), true
	case config.KeyMetadata:
		return appendMetadata(dst, r.src.Property(p.Property))
	case config.KeyHost:
		return appendHostKey(dst, r.pseudo(NeedHost))
	case config.KeyMethod:
		// In upper case, as the methods match reads any case and as CGI
		// and WSGI upstreams hand REQUEST_METHOD on: "delete" and
		// "DELETE" are one method to them, so one bucket here.
		m := r.pseudo(NeedMethod)
		if m == "" {
			return dst, false // missing, as any empty part
		}
		for i := 0; i < len(m); i++ {
			c := m[i]
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
		}
		return dst, true
	case config.KeyQuery:
		q, ok := RawQuery(r.pseudo(NeedPath))
		if !ok {
			return dst, false
		}
		var ambiguous bool
		dst, ok, ambiguous = appendQueryKey(dst, q, p.Name)
		r.Ambiguous = r.Ambiguous || ambiguous
		return dst, ok
	}
	ip, ok := r.Client(clientCfg)
	if !ok {
		return dst, false
	}
	return appendMaskedIP(dst, ip, p.V4Bits, p.V6Bits)
}

// appendHostKey appends the host key part of an :authority: its
// HostName lower-cased, so "API.example.:080" is "api.example".
// An authority that is nothing but a port or dots is missing.
func appendHostKey(dst []byte, authority string) ([]byte, bool) {
	h := HostName(authority)
	if h == "" {
		return dst, false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst, true
}
