package request

import (
	"strings"
	"unsafe"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/request/pathnorm"
)

// Source is what a request is read from: the proxy's request headers and
// properties. host.Request is one; tests serve fixed values.
type Source interface {
	// RequestHeaders returns the whole request header map.
	RequestHeaders() [][2]string
	// RequestHeader returns one header's first value; for headers that
	// never repeat, such as the pseudo-headers.
	RequestHeader(name string) (string, bool)
	// Property returns a string property, or "" when there is none. The
	// path is a package-level value, so a read allocates no slice. The
	// string may be valid only until the proxy's callback returns
	// (see Retain).
	Property(path []string) string
}

// Info is what limits and breakers read from one request. Every
// field is fetched on first use, and properties are read only when a key
// or match needs them. The pseudo-headers never repeat, so each is one
// small single-value read; the whole header map, which the SDK copies
// value by value, is fetched only for a header match or key.
type Info struct {
	src Source

	headersLoaded bool
	headers       [][2]string
	// pseudoLoaded has a bit per pseudo-header already read.
	pseudoLoaded Needs
	method       string
	path         string
	authority    string

	// normPath is PathOnly in normal form (pathnorm.Normal), for keys and
	// path matches; normLoaded says it is computed.
	normLoaded bool
	normPath   string
	// Ambiguous says the last AppendKey found a query parameter, header
	// or cookie given more than once with different values; the caller
	// may also set it, to refuse the request as such a key is refused.
	Ambiguous bool
	// LookupAmbiguous says a cache_key part of the external lookup is
	// ambiguous, so no lookup is made and the external limit refuses the
	// request (the engine's external.go sets it).
	LookupAmbiguous bool

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

// Start makes r the reading of a new request from src. clientCfg is the
// plugin's client_ip, for client_cidrs conditions (nil: no client
// address); scratch is the worker's buffer for the values conditions
// read (nil: each read allocates its own).
func (r *Info) Start(src Source, clientCfg *config.ClientIP, scratch *[]byte) {
	*r = Info{src: src, clientCfg: clientCfg, scratch: scratch}
}

// Needs says which parts of a request something reads.
type Needs uint8

const (
	NeedPath Needs = 1 << iota
	NeedMethod
	NeedHost
	NeedHeaderMap
	NeedRoute
)

func (r *Info) loadHeaders() {
	if r.headersLoaded {
		return
	}
	r.headersLoaded = true
	r.headers = r.src.RequestHeaders()
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
	r.pseudoLoaded |= NeedPath | NeedMethod | NeedHost
}

// Path is the :path, query included.
func (r *Info) Path() string { return r.pseudo(NeedPath) }

// Method is the :method.
func (r *Info) Method() string { return r.pseudo(NeedMethod) }

// Authority is the :authority.
func (r *Info) Authority() string { return r.pseudo(NeedHost) }

// Headers is the whole request header map, read once.
func (r *Info) Headers() [][2]string {
	r.loadHeaders()
	return r.headers
}

// Property reads a property of the request from its source, unretained.
func (r *Info) Property(path []string) string { return r.src.Property(path) }

// Source is what r reads the request from, for a reading of its own.
func (r *Info) Source() Source { return r.src }

// pseudo returns :path, :method or :authority.
func (r *Info) pseudo(which Needs) string {
	dst, name := &r.path, ":path"
	switch which {
	case NeedMethod:
		dst, name = &r.method, ":method"
	case NeedHost:
		dst, name = &r.authority, ":authority"
	}
	if r.pseudoLoaded&which == 0 {
		r.pseudoLoaded |= which
		*dst, _ = r.src.RequestHeader(name)
	}
	return *dst
}

// header returns a request header by lower-case name. Repeated headers are
// combined into one comma-separated value, in order, as HTTP field
// combination defines; ok reports presence, even of an empty value.
func (r *Info) Header(name string) (value string, ok bool) {
	r.loadHeaders()
	return CombinedHeader(r.headers, name)
}

// headerValues returns every value of a header, for X-Forwarded-For.
func (r *Info) headerValues(name string) []string {
	r.loadHeaders()
	var vs []string
	for _, kv := range r.headers {
		if kv[0] == name {
			vs = append(vs, kv[1])
		}
	}
	return vs
}

// Route is the name of the route Envoy chose, "" without one.
func (r *Info) Route() string {
	if !r.routeLoaded {
		r.routeLoaded = true
		r.route = r.src.Property(RouteNameProperty)
	}
	return r.route
}

// Cluster is the name of the upstream cluster Envoy chose.
func (r *Info) Cluster() string {
	if !r.clusterLoaded {
		r.clusterLoaded = true
		r.cluster = r.src.Property(ClusterNameProperty)
	}
	return r.cluster
}

// PathOnly is the :path without its query string.
func (r *Info) PathOnly() string {
	p := r.pseudo(NeedPath)
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	return p
}

// NormalPath is the path without its query in normal form: the form path
// keys and path matches read, so that no re-spelling of a path
// (package pathnorm) is a path of its own. An empty :path stays empty.
func (r *Info) NormalPath() string {
	if !r.normLoaded {
		r.normLoaded = true
		if p := r.PathOnly(); p != "" {
			r.normPath = pathnorm.Normal(p, pathnorm.Key)
		}
	}
	return r.normPath
}

// keyHeader is the value of a header for a key: its one value, or
// missing and ambiguous when it is sent more than once with different
// values (see AppendKey). A name spelled with '_' for '-' is the same
// header here: CGI and WSGI servers (Flask's) read "x_api_key" and
// "x-api-key" as one variable, HTTP_X_API_KEY, so a client could
// otherwise send its key under a name no limit reads.
func (r *Info) keyHeader(name string) (string, bool) {
	r.loadHeaders()
	v, found := "", false
	for _, kv := range r.headers {
		if !sameHeaderName(kv[0], name) {
			continue
		}
		if found && kv[1] != v {
			r.Ambiguous = true
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

// Client returns the client address as cfg (client_ip) says to find it,
// in canonical text form.
func (r *Info) Client(cfg *config.ClientIP) (string, bool) {
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
		if v, ok := r.Header(cfg.Header); ok {
			r.clientIP, r.clientIPOK = normalizeIP(v)
		}
		return r.clientIP, r.clientIPOK
	case config.ClientIPXFF:
		if ip, ok := clientIPFromXFF(r.headerValues("x-forwarded-for"), cfg.TrustedHops); ok {
			r.clientIP, r.clientIPOK = ip, true
			return ip, true
		}
	}
	r.clientIP, r.clientIPOK = peerIP(r.src.Property(SourceAddressProperty))
	return r.clientIP, r.clientIPOK
}

// Retain copies every value read so far into memory of the stream's own.
// What the host returns is valid only until the callback that read it
// returns (see package host), and a paused stream is evaluated again, or
// goes on to its breakers and concurrency limits, from a later callback.
// Values read in that later callback are retained again if it pauses the
// stream again; one allocation holds them all.
func (r *Info) Retain() {
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

// NeedsOf is what m reads of a request, for View.
func NeedsOf(m *config.Match) Needs {
	var n Needs
	if m.Path != "" || m.PathPrefix != "" || m.Query != nil || m.PathRegex != nil {
		n |= NeedPath
	}
	if m.Methods != nil {
		n |= NeedMethod
	}
	if m.Hosts != nil {
		n |= NeedHost
	}
	if len(m.Headers) > 0 {
		n |= NeedHeaderMap
	}
	if m.Routes != nil {
		n |= NeedRoute
	}
	if m.Not != nil {
		n |= NeedsOf(m.Not)
	}
	return n
}

// FirstHeader is the value of the first field of a request header named
// name (lower case), "" when absent: {header:<name>} inserts that one,
// not the values of a repeated header joined.
func (r *Info) FirstHeader(name string) string {
	r.loadHeaders()
	for _, kv := range r.headers {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

// View is what Matches reads of the request, with only what some match
// needs (NeedsOf). Header conditions read through r's MatchHeader, which
// loads the header map on first use.
func (r *Info) View(needs Needs) View {
	req := View{Header: r, Attributes: r}
	if needs&NeedPath != 0 {
		req.Path = r.NormalPath()
	}
	if needs&NeedMethod != 0 {
		req.Method = r.pseudo(NeedMethod)
	}
	if needs&NeedHost != 0 {
		req.Host = r.pseudo(NeedHost)
	}
	if needs&NeedRoute != 0 {
		req.Route = r.Route()
	}
	return req
}

// CombinedHeader returns a header of a request or response header map by
// lower-case name, repeated headers combined into one comma-separated value
// in order; ok reports presence, even of an empty value. It inlines into
// Info.Header.
func CombinedHeader(headers [][2]string, name string) (value string, ok bool) {
	n := 0
	for _, kv := range headers {
		if kv[0] != name {
			continue
		}
		if n == 0 {
			value = kv[1]
		} else {
			value = value + "," + kv[1]
		}
		n++
	}
	return value, n > 0
}

// Property paths read on the request path.
var (
	// SourceAddressProperty is the downstream peer's "ip:port".
	SourceAddressProperty = []string{"source", "address"}
	// RouteNameProperty and ClusterNameProperty name the route and the
	// upstream cluster Envoy chose.
	RouteNameProperty   = []string{"xds", "route_name"}
	ClusterNameProperty = []string{"xds", "cluster_name"}
)
