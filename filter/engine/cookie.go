package engine

import "strings"

// cookie returns the value of cookie name from the Cookie header(s);
// HTTP/2 may split one Cookie header into several, read here in order.
func (r *requestInfo) cookie(name string) (string, bool) {
	r.loadHeaders()
	for _, kv := range r.headers {
		if kv[0] != "cookie" {
			continue
		}
		if v, ok := cookieValue(kv[1], name); ok {
			return v, true
		}
	}
	return "", false
}

// cookieValue returns the value of cookie name in one Cookie header. The
// first occurrence wins, as Envoy's cookie lookup does; a value in double
// quotes loses them, as RFC 6265's cookie-value grammar puts them around
// the value. Pairs without '=' and stray separators are skipped, so broken
// syntax costs its own pair and no more.
func cookieValue(header, name string) (string, bool) {
	for header != "" {
		var pair string
		if i := strings.IndexByte(header, ';'); i >= 0 {
			pair, header = header[:i], header[i+1:]
		} else {
			pair, header = header, ""
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || strings.TrimSpace(k) != name {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		return v, true
	}
	return "", false
}
