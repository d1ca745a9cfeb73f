package engine

import (
	"strings"
	"unsafe"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
)

// requestInfo is what limits and breakers read from one request. Every
// field is fetched on first use, and properties are read only when a key
// or match needs them. The pseudo-headers never repeat, so each is one
// small single-value read; the whole header map, which the SDK copies
// value by value, is fetched only for a header match or key.
type requestInfo struct {
	host host.Request

	headersLoaded bool
	headers       [][2]string
	// pseudoLoaded has a bit per pseudo-header already read.
	pseudoLoaded requestNeeds
	method       string
	path         string
	authority    string

	// normPath is pathOnly in normal form (config.NormalPath), for keys and
	// path matches; normLoaded says it is computed.
	normLoaded bool
	normPath   string
	// ambiguous says the last appendKey found a query parameter, header
	// or cookie given more than once with different values.
	ambiguous bool
	// lookupAmbiguous says a cache_key part of the external lookup is
	// ambiguous, so no lookup is made and the external limit refuses the
	// request (external.go).
	lookupAmbiguous bool

	routeLoaded bool
	route       string

	clusterLoaded bool
	cluster       string

	clientIPLoaded bool
	clientIP       string
	clientIPOK     bool

	// clientCfg is the plugin's client_ip, for match conditions.
	clientCfg  *config.ClientIP
	clientAddr clientAddrCache
	// scratch is the worker's buffer for the values conditions read.
	scratch *[]byte
}

// requestNeeds says which parts of a request something reads.
type requestNeeds uint8

const (
	needPath requestNeeds = 1 << iota
	needMethod
	needHost
	needHeaderMap
	needRoute
)

func (r *requestInfo) loadHeaders() {
	if r.headersLoaded {
		return
	}
	r.headersLoaded = true
	r.headers = r.host.RequestHeaders()
	for _, kv := range r.headers {
		switch kv[0] {
		case ":method":
			r.method = kv[1]
		case ":path":
			r.path = kv[1]
		case ":authority":
			r.authority = kv[1]
		}
	}
	r.pseudoLoaded |= needPath | needMethod | needHost
}

// pseudo returns :path, :method or :authority.
func (r *requestInfo) pseudo(which requestNeeds) string {
	dst, name := &r.path, ":path"
	switch which {
	case needMethod:
		dst, name = &r.method, ":method"
	case needHost:
		dst, name = &r.authority, ":authority"
	}
	if r.pseudoLoaded&which == 0 {
		r.pseudoLoaded |= which
		*dst, _ = r.host.RequestHeader(name)
	}
	return *dst
}

// header returns a request header by lower-case name. Repeated headers are
// combined into one comma-separated value, in order, as HTTP field
// combination defines; ok reports presence, even of an empty value.
func (r *requestInfo) header(name string) (value string, ok bool) {
	r.loadHeaders()
	return combinedHeader(r.headers, name)
}

// headerValues returns every value of a header, for X-Forwarded-For.
func (r *requestInfo) headerValues(name string) []string {
	r.loadHeaders()
	var vs []string
	for _, kv := range r.headers {
		if kv[0] == name {
			vs = append(vs, kv[1])
		}
	}
	return vs
}

func (r *requestInfo) routeName() string {
	if !r.routeLoaded {
		r.routeLoaded = true
		r.route = r.host.Property(propRouteName)
	}
	return r.route
}

func (r *requestInfo) clusterName() string {
	if !r.clusterLoaded {
		r.clusterLoaded = true
		r.cluster = r.host.Property(propClusterName)
	}
	return r.cluster
}

// pathOnly is the :path without its query string.
func (r *requestInfo) pathOnly() string {
	p := r.pseudo(needPath)
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	return p
}

// normalPath is the path without its query in normal form: the form path
// keys and path matches read, so that no re-spelling of a path
// (config/pathnorm.go) is a path of its own. An empty :path stays empty.
func (r *requestInfo) normalPath() string {
	if !r.normLoaded {
		r.normLoaded = true
		if p := r.pathOnly(); p != "" {
			r.normPath = config.NormalPath(p, config.PathKey)
		}
	}
	return r.normPath
}

// keyHeader is the value of a header for a key: its one value, or
// missing and ambiguous when it is sent more than once with different
// values (see appendKey). A name spelled with '_' for '-' is the same
// header here: CGI and WSGI servers (Flask's) read "x_api_key" and
// "x-api-key" as one variable, HTTP_X_API_KEY, so a client could
// otherwise send its key under a name no limit reads.
func (r *requestInfo) keyHeader(name string) (string, bool) {
	r.loadHeaders()
	v, found := "", false
	for _, kv := range r.headers {
		if !sameHeaderName(kv[0], name) {
			continue
		}
		if found && kv[1] != v {
			r.ambiguous = true
			return "", false
		}
		v, found = kv[1], true
	}
	return v, found
}

// sameHeaderName reports whether the lower-case header name have is want,
// with '_' read as '-'.
func sameHeaderName(have, want string) bool {
	if len(have) != len(want) {
		return false
	}
	for i := 0; i < len(have); i++ {
		if c := have[i]; c != want[i] && !(c == '_' && want[i] == '-') {
			return false
		}
	}
	return true
}

// client returns the client address as configured.
func (r *requestInfo) client(cfg *config.ClientIP) (string, bool) {
	if r.clientIPLoaded {
		return r.clientIP, r.clientIPOK
	}
	r.clientIPLoaded = true
	if len(cfg.Sources) > 0 {
		r.clientIP, r.clientIPOK = r.clientFromSources(cfg)
		return r.clientIP, r.clientIPOK
	}
	switch cfg.Source {
	case config.ClientIPHeader:
		if v, ok := r.header(cfg.Header); ok {
			r.clientIP, r.clientIPOK = normalizeIP(v)
		}
		return r.clientIP, r.clientIPOK
	case config.ClientIPXFF:
		if ip, ok := clientIPFromXFF(r.headerValues("x-forwarded-for"), cfg.TrustedHops); ok {
			r.clientIP, r.clientIPOK = ip, true
			return ip, true
		}
	}
	r.clientIP, r.clientIPOK = peerIP(r.host.Property(propSourceAddress))
	return r.clientIP, r.clientIPOK
}

// retain copies every value read so far into memory of the stream's own.
// What the host returns is valid only until the callback that read it
// returns (see package host), and a paused stream is evaluated again, or
// goes on to its breakers and concurrency limits, from a later callback.
// Values read in that later callback are retained again if it pauses the
// stream again; one allocation holds them all.
func (r *requestInfo) retain() {
	n := len(r.method) + len(r.path) + len(r.authority) + len(r.route) + len(r.cluster) + len(r.clientIP)
	for _, kv := range r.headers {
		n += len(kv[0]) + len(kv[1])
	}
	// The normal path may view the host's :path; it is made again from
	// the copy when next needed.
	r.normLoaded, r.normPath = false, ""
	if n == 0 {
		return
	}
	buf := make([]byte, 0, n)
	own := func(s *string) {
		if len(*s) == 0 {
			return
		}
		at := len(buf)
		buf = append(buf, *s...) // within capacity: buf never moves
		*s = unsafe.String(&buf[at], len(*s))
	}
	// The header slice is the adapter's, made for this stream; only the
	// strings in it view host memory.
	for i := range r.headers {
		own(&r.headers[i][0])
		own(&r.headers[i][1])
	}
	own(&r.method)
	own(&r.path)
	own(&r.authority)
	own(&r.route)
	own(&r.cluster)
	own(&r.clientIP)
}

// matchRequest adapts requestInfo for config.Match, reading only what
// some match needs. Header matches read through Header, which loads the
// header map on first use.
func (r *requestInfo) matchRequest(needs requestNeeds) config.Request {
	req := config.Request{Header: r, Extra: r}
	if needs&needPath != 0 {
		req.Path = r.normalPath()
	}
	if needs&needMethod != 0 {
		req.Method = r.pseudo(needMethod)
	}
	if needs&needHost != 0 {
		req.Host = r.pseudo(needHost)
	}
	if needs&needRoute != 0 {
		req.Route = r.routeName()
	}
	return req
}

// keySeparator joins the parts of a composite key. A decoded query value,
// cookie or metadata string can hold it, so every part is escaped as it
// is appended (escapeKeyPart): keyEscape followed by keyEscapedSep stands
// for a separator byte inside a value, and keyEscape followed by
// keyEscapedEsc for the escape byte itself. An escaped part holds no
// separator and decodes to one value only, so distinct tuples of values
// never compose one key. A value with neither byte (every header, path
// and address Envoy passes on) is appended as it is, so such keys are
// what they were before the escaping, in shared data and in Redis alike.
const (
	keySeparator  = '\x00'
	keyEscape     = '\x01'
	keyEscapedSep = '0'
	keyEscapedEsc = '1'
)

// escapeKeyPart escapes the key part dst[start:] in place, so that it holds
// no keySeparator; without a separator or escape byte it is left as it is
// and nothing is allocated.
func escapeKeyPart(dst []byte, start int) []byte {
	n := 0
	for _, c := range dst[start:] {
		if c == keySeparator || c == keyEscape {
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
		case keySeparator:
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

// SplitKey is the values of a composite key, as appendKey composed it from
// its parts: split at each separator and unescaped. A key of one part is one
// value; a key of no parts (the single global bucket) is one empty value.
func SplitKey(key string) []string {
	values := strings.Split(key, string(rune(keySeparator)))
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
					c = keySeparator
				}
			}
			b = append(b, c)
		}
		values[i] = string(b)
	}
	return values
}

// appendKey appends the composite key of parts to dst. ok is false when a
// part is missing: an absent or empty header or cookie, an absent query
// parameter (a present, empty one is an empty value), a path with fewer
// segments, an unknown client address, route or cluster; dst is then
// returned as it came. An empty parts list is the single global bucket
// and always ok. A query parameter, header or cookie given more than once
// with different values is missing too, and r.ambiguous says so: upstreams
// disagree on which value is the caller (Go, Flask and servlets take the
// first, PHP and Rails the last), so any value taken here, or all of
// them joined, would let a client be counted as one caller and served as
// another; the callers refuse such a request whatever on_missing_key
// says, as skipping it would leave it unlimited.
// overrideValue is the value of parts[overrideBy], for tier lookups.
func (r *requestInfo) appendKey(dst []byte, parts []config.KeyPart, clientCfg *config.ClientIP, overrideBy int) (key []byte, overrideValue string, ok bool) {
	orig := len(dst)
	r.ambiguous = false
	for i, p := range parts {
		if i > 0 {
			dst = append(dst, keySeparator)
		}
		var v string
		switch p.Kind {
		case config.KeyClientIP:
			v, ok = r.client(clientCfg)
		case config.KeyHeader:
			v, ok = r.keyHeader(p.Header)
		case config.KeyPath:
			v, ok = r.normalPath(), true
		case config.KeyRoute:
			v = r.routeName()
			ok = true
		case config.KeyCluster:
			v = r.clusterName()
			ok = true
		case config.KeyMethod:
			v, ok = r.pseudo(needMethod), true
		case config.KeyPathSegment:
			v, ok = pathSegment(r.normalPath(), p.Segment)
		case config.KeyQuery, config.KeyCookie, config.KeyClientIPMasked, config.KeyMetadata, config.KeyHost:
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
func (r *requestInfo) appendDerived(dst []byte, p config.KeyPart, clientCfg *config.ClientIP) ([]byte, bool) {
	switch p.Kind {
	case config.KeyCookie:
		// Decoded as PHP's $_COOKIE and Rack read it ("al%69ce" and
		// "alice" are one caller), the way query values are.
		v, ok := r.cookie(p.Name)
		if !ok || v == "" {
			return dst, false
		}
		return appendQueryUnescaped(dst, v), true
	case config.KeyMetadata:
		return appendMetadata(dst, r.host.Property(p.Property))
	case config.KeyHost:
		return appendHostKey(dst, r.pseudo(needHost))
	case config.KeyQuery:
		q, ok := rawQuery(r.pseudo(needPath))
		if !ok {
			return dst, false
		}
		var ambiguous bool
		dst, ok, ambiguous = appendQueryKey(dst, q, p.Name)
		r.ambiguous = r.ambiguous || ambiguous
		return dst, ok
	}
	ip, ok := r.client(clientCfg)
	if !ok {
		return dst, false
	}
	return appendMaskedIP(dst, ip, p.V4Bits, p.V6Bits)
}

// appendHostKey appends the host key part of an :authority: its
// config.HostName lower-cased, so "API.example.:080" is "api.example".
// An authority that is nothing but a port or dots is missing.
func appendHostKey(dst []byte, authority string) ([]byte, bool) {
	h := config.HostName(authority)
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

// Property paths read on the request path.
var (
	propSourceAddress = []string{"source", "address"}
	propRouteName     = []string{"xds", "route_name"}
	propClusterName   = []string{"xds", "cluster_name"}
	propCodeDetails   = []string{"response", "code_details"}
)

// StatusCode reads an HTTP status; 0 for anything but one to three
// digits.
func StatusCode(s string) int {
	if len(s) == 0 || len(s) > 3 {
		return 0
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0
		}
		n = n*10 + int(s[i]-'0')
	}
	return n
}
