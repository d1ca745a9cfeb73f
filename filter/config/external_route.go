package config

import (
	"strings"

	"github.com/tidwall/gjson"
)

// Routing a tenant by its answer's backend_url: Envoy cannot proxy to a
// URL, so the filter writes an allowed value into route_header, and a
// route whose cluster_header names that header sends the request to the
// cluster of that name.

const (
	// MaxAllowedRoutes bounds allowed_routes; an answer's backend_url is
	// matched against every entry.
	MaxAllowedRoutes = 256
	// MaxRouteLen bounds each allowed route in bytes; it equals
	// limitsvc.MaxBackendURL, the longest backend_url an answer may carry.
	MaxRouteLen = 256
)

// unroutableHeaders cannot carry a route: Envoy's codecs drop or rewrite
// the hop-by-hop ones before the router sees them, and host is the
// :authority.
var unroutableHeaders = []string{"host", "connection", "keep-alive", "proxy-connection",
	"transfer-encoding", "upgrade", "te", "trailer"}

// routes reads external.route_header and external.allowed_routes, which
// come together.
func (p *parser) routes(o *object, e *External) {
	if s, ok := o.str("route_header"); ok {
		switch {
		case !headerToken(s):
			o.errorf("route_header", "must be a header name (not a pseudo-header)")
		case s != strings.ToLower(s):
			o.errorf("route_header", "must be lower case, as Envoy's header maps and cluster_header are")
		case contains(unroutableHeaders, s):
			o.errorf("route_header", "%s cannot carry a route: it is hop-by-hop or the :authority", Quote(s))
		case contains(e.ForwardHeaders, s):
			o.errorf("route_header", "%s is also in forward_headers, which would always send it empty: the client's value is removed first", Quote(s))
		default:
			e.RouteHeader = s
		}
	}
	if items, ok := o.array("allowed_routes", "must name at least one route"); ok {
		if len(items) > MaxAllowedRoutes {
			o.errorf("allowed_routes", "at most %d routes", MaxAllowedRoutes)
		}
		for i, item := range items {
			ipath := IndexPath(o.path1("allowed_routes"), i)
			switch {
			case item.Type != gjson.String || item.Str == "":
				p.errorf(ipath, item.Index, "must be a non-empty string")
			case len(item.Str) > MaxRouteLen:
				p.errorf(ipath, item.Index, "longer than %d bytes", MaxRouteLen)
			case !visibleASCII(item.Str):
				p.errorf(ipath, item.Index, "must be visible ASCII without spaces: it becomes a header value and a cluster name")
			case contains(e.AllowedRoutes, item.Str):
				p.errorf(ipath, item.Index, "duplicate route %s", Quote(item.Str))
			default:
				e.AllowedRoutes = append(e.AllowedRoutes, item.Str)
			}
		}
	}
	switch {
	case o.has("route_header") && !o.has("allowed_routes"):
		o.errorf("allowed_routes", "required with route_header: only listed backend_url values may route a request")
	case o.has("allowed_routes") && !o.has("route_header"):
		o.errorf("route_header", "required with allowed_routes: the header that carries the route")
	}
}

// RouteAllowed reports whether an answer's backend_url may route the
// request: it must equal one of AllowedRoutes exactly, so a compromised
// limits service cannot send traffic anywhere else.
func (e *External) RouteAllowed(v string) bool {
	return v != "" && e.RouteHeader != "" && contains(e.AllowedRoutes, v)
}

func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
