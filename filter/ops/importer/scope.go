package importer

import (
	"fmt"
	"regexp"
	"strings"
)

// unnamedPrefix starts the key of an unnamed route: a NUL, which no route
// name holds.
const unnamedPrefix = "\x00"

// routeLabel names a route in messages and limit names.
func (im *importer) routeLabel(key string) string {
	rt := im.unnamedRoutes[key]
	if rt == nil {
		return key
	}
	vh := rt.vh.at.child("name").n
	if vh == nil {
		return fmt.Sprintf("route %d of %s", rt.idx, rt.vh.at.path)
	}
	return fmt.Sprintf("%s route %d", vh.Value, rt.idx)
}

// scopeFor is the condition that a request took one of routes (keys):
// their names (match.routes), or for one unnamed route, its own match
// less the routes before it in its virtual host (Envoy takes the first
// route that matches), within its virtual host's domains. Several routes
// of which one is unnamed cannot be one condition: reported, false.
func (im *importer) scopeFor(routes []string) (*match, bool) {
	routes = dedupe(routes)
	var names []string
	var unnamed []*route
	for _, k := range routes {
		if rt := im.unnamedRoutes[k]; rt != nil {
			unnamed = append(unnamed, rt)
		} else {
			names = append(names, k)
		}
	}
	if len(unnamed) == 0 {
		return &match{Routes: names}, true
	}
	if len(unnamed) == 1 && len(names) == 0 {
		if m, why := im.pathScope(unnamed[0]); m != nil {
			return m, true
		} else if why != "" {
			im.note(Unsupported, unnamed[0].vh.file, unnamed[0].at, "this route has no name and %s: its rate limits are not imported (give it a name: Sluice scopes limits to routes by name)", why)
			return nil, false
		}
	}
	for _, rt := range unnamed {
		im.note(Unsupported, rt.vh.file, rt.at, "this route has no name, and it shares rate limits with other routes, which one Sluice condition cannot name together: its rate limits are not imported (give it a name: Sluice scopes limits to routes by name)")
	}
	if len(names) == 0 {
		return nil, false
	}
	return &match{Routes: names}, true
}

// pathScope is the condition that a request took the unnamed route rt,
// or why there is none.
func (im *importer) pathScope(rt *route) (*match, string) {
	r := reader{file: rt.vh.file, errs: &im.res.Errors}
	own, why := im.routeMatch(r, rt)
	if own == nil {
		return nil, why
	}
	var earlier []*match
	for _, e := range rt.vh.routes[:rt.idx] {
		em, why := im.routeMatch(r, e)
		if em == nil {
			return nil, "a route before it " + why
		}
		if !disjoint(own, em) {
			earlier = append(earlier, em)
		}
	}
	switch len(earlier) {
	case 0:
	case 1:
		own.Not = earlier[0]
	default:
		// Several routes before it: one negation of their paths as
		// alternatives, which needs them to match on the path alone.
		var alts []string
		for _, em := range earlier {
			re, ok := pathRegex(em)
			if !ok {
				return nil, "several routes before it match on more than the path, which one Sluice negation cannot exclude"
			}
			alts = append(alts, re)
		}
		own.Not = &match{PathRegex: "(?:" + strings.Join(alts, "|") + ")"}
	}
	if usesPath(own) && !(r.wrappedBool(rt.vh.hcm.child("normalize_path"), false) && r.boolean(rt.vh.hcm.child("merge_slashes"))) {
		im.note(Inexact, rt.vh.file, rt.at, "this route is scoped by the request path: Envoy routes the path as sent, since its connection manager does not set both normalize_path and merge_slashes, while Sluice's path matches read it in normal form, so /api/../public/x takes this route in Envoy and is /public/x to Sluice (set both in the connection manager, or name the route: a name scopes exactly)")
	}
	if len(im.envoy.vhosts) > 1 {
		hosts, why := im.vhostHosts(r, rt.vh)
		if hosts == nil {
			return nil, why
		}
		own.Hosts = hosts
	}
	return own, ""
}

// usesPath reports whether m, or its negation, reads the path.
func usesPath(m *match) bool {
	return m != nil && (m.Path != "" || m.PathPrefix != "" || m.PathRegex != "" || usesPath(m.Not))
}

// routeMatch converts a route's match, or says why it cannot.
func (im *importer) routeMatch(r reader, rt *route) (*match, string) {
	m := rt.at.child("match")
	out := &match{}
	for _, k := range m.keys() {
		c := m.child(k)
		switch k {
		case "prefix":
			p := r.str(c)
			switch {
			case strings.Contains(p, "?"):
				return nil, "matches a prefix holding a query"
			case p == "" || p == "/":
				// Every path.
			case !strings.HasPrefix(p, "/"):
				return nil, "matches a prefix not starting with /"
			default:
				out.PathPrefix = p
			}
		case "path":
			p := r.str(c)
			if !strings.HasPrefix(p, "/") {
				return nil, "matches a path not starting with /"
			}
			out.Path = p
		case "safe_regex":
			out.PathRegex = r.str(c.child("regex"))
		case "headers":
			for _, h := range c.items() {
				cs, ok := im.headerCond(r, h)
				if !ok {
					return nil, "matches a header in a way Sluice cannot"
				}
				out.Headers = append(out.Headers, cs...)
			}
		case "case_sensitive":
			if !r.wrappedBool(c, true) {
				return nil, "matches case-insensitively"
			}
		default:
			return nil, "matches on " + k
		}
	}
	return out, ""
}

// disjoint reports that no request matches both a and b, as far as their
// literal paths tell.
func disjoint(a, b *match) bool {
	lit := func(m *match) (string, bool, bool) { // text, exact, known
		switch {
		case m.PathRegex != "":
			return "", false, false
		case m.Path != "":
			return m.Path, true, true
		default:
			return m.PathPrefix, false, true // "" is every path
		}
	}
	at, ae, ak := lit(a)
	bt, be, bk := lit(b)
	switch {
	case !ak || !bk:
		return false
	case ae && be:
		return at != bt
	case ae:
		return !strings.HasPrefix(at, bt)
	case be:
		return !strings.HasPrefix(bt, at)
	}
	return !strings.HasPrefix(at, bt) && !strings.HasPrefix(bt, at)
}

// pathRegex is a route match on the path alone as a regex.
func pathRegex(m *match) (string, bool) {
	if len(m.Headers) > 0 || m.Not != nil {
		return "", false
	}
	switch {
	case m.PathRegex != "":
		return "(?:" + m.PathRegex + ")", true
	case m.Path != "":
		return regexp.QuoteMeta(m.Path), true
	}
	return regexp.QuoteMeta(m.PathPrefix) + ".*", true
}

// vhostHosts are the Sluice hosts of a virtual host's domains, or why
// they cannot be: a catch-all or a prefix wildcard would need the other
// virtual hosts' domains excluded, and ports are not compared.
func (im *importer) vhostHosts(r reader, vh *vhost) ([]string, string) {
	var hosts []string
	for _, d := range vh.at.child("domains").items() {
		h := strings.ToLower(r.str(d))
		switch {
		case h == "*" || strings.HasSuffix(h, "*") || strings.Contains(h, ":"):
			return nil, fmt.Sprintf("its virtual host's domain %q cannot be a Sluice hosts condition while other virtual hosts exist", h)
		case strings.HasPrefix(h, "*.") || !strings.Contains(h, "*"):
			hosts = append(hosts, h)
		default:
			return nil, fmt.Sprintf("its virtual host's domain %q is no Sluice host", h)
		}
	}
	if len(hosts) == 0 {
		return nil, "its virtual host has no domains"
	}
	return hosts, ""
}
