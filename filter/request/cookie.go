package request

import "strings"

// cookie returns the value of cookie name from the Cookie header(s), for
// a key; HTTP/2 may split one Cookie header into several, read here in
// order. A cookie given more than once is that value when every copy
// agrees, and otherwise missing and ambiguous, as a repeated header or
// query parameter is (see AppendKey): upstreams disagree on which copy
// counts (Go, PHP, Rack and Werkzeug take the first, Django and Python's
// SimpleCookie the last), so a client sending "sid=junk; sid=real" would
// otherwise be counted under one value and served under the other.
func (r *Info) cookie(name string) (string, bool) {
	r.loadHeaders()
	v, found := "", false
	for _, kv := range r.headers {
		if kv[0] != "cookie" {
			continue
		}
		for rest := kv[1]; rest != ""; {
			var c string
			var ok bool
			if c, rest, ok = nextCookie(rest, name); !ok {
				continue
			}
			// Compared decoded, as the key reads the value.
			if found && c != v && !sameQueryComponent(c, v) {
				r.Ambiguous = true
				return "", false
			}
			v, found = c, true
		}
	}
	return v, found
}

// cookieValue returns the value of the first cookie name in one Cookie
// header, as Envoy's cookie lookup does.
func cookieValue(header, name string) (string, bool) {
	for header != "" {
		var v string
		var ok bool
		if v, header, ok = nextCookie(header, name); ok {
			return v, true
		}
	}
	return "", false
}

// nextCookie takes the first pair off a Cookie header: its value when its
// name is name (ok), and the rest of the header. A value in double quotes
// loses them, as RFC 6265's cookie-value grammar puts them around the
// value. Pairs without '=' and stray separators are skipped, so broken
// syntax costs its own pair and no more.
func nextCookie(header, name string) (value, rest string, ok bool) {
	pair := header
	if i := strings.IndexByte(header, ';'); i >= 0 {
		pair, rest = header[:i], header[i+1:]
	}
	k, v, ok := strings.Cut(pair, "=")
	if !ok || strings.TrimSpace(k) != name {
		return "", rest, false
	}
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	return v, rest, true
}
