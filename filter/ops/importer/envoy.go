package importer

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Filter types the importer reads.
const (
	typeRatelimit      = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
	typeRatelimitRoute = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute"
	typeLocal          = "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit"
	typeFilterConfig   = "type.googleapis.com/envoy.config.route.v3.FilterConfig"
)

// envoyConfig is what the importer needs of the Envoy YAML.
type envoyConfig struct {
	ratelimits     []filterRef
	locals         []filterRef
	vhosts         []*vhost
	serviceCluster string
}

// filterRef is an HTTP filter: its name (the key of per-route configs)
// and its typed_config.
type filterRef struct {
	file string
	name string
	cfg  node
	// domain stands in for cfg's when there is no filter (--domain).
	domain string
}

type vhost struct {
	file string
	at   node
	// hcm is the HTTP connection manager holding the virtual host, a
	// zero node when another input (RDS) gave the route configuration.
	hcm        node
	rateLimits node
	perFilter  node
	routes     []*route
}

type route struct {
	at   node
	name string
	// key identifies the route in scopes: its name, or for an unnamed
	// route a token no name can be (routeKey).
	key        string
	vh         *vhost
	idx        int
	rateLimits node
	includeVH  bool
	perFilter  node
}

func (im *importer) readEnvoy(file string, root node) {
	r := reader{file: file, errs: &im.res.Errors}
	if c := root.child("node").child("cluster"); c.present() {
		im.envoy.serviceCluster = r.str(c)
	}
	im.walkEnvoy(r, root, node{}, 0)
}

// walkEnvoy finds HTTP filter chains and virtual hosts anywhere in the
// document (a bootstrap, a listener, a route configuration).
func (im *importer) walkEnvoy(r reader, n, hcm node, depth int) {
	if depth > maxDepth || n.n == nil {
		return
	}
	if fs := n.child("http_filters"); fs.present() && r.isSeq(fs) {
		hcm = n
		for _, f := range fs.items() {
			cfg := f.child("typed_config")
			switch r.str(cfg.child("@type")) {
			case typeRatelimit:
				im.envoy.ratelimits = append(im.envoy.ratelimits, filterRef{file: r.file, name: r.str(f.child("name")), cfg: cfg})
			case typeLocal:
				im.envoy.locals = append(im.envoy.locals, filterRef{file: r.file, name: r.str(f.child("name")), cfg: cfg})
			}
		}
	}
	if vs := n.child("virtual_hosts"); vs.present() && r.isSeq(vs) {
		for _, v := range vs.items() {
			im.readVhost(r, v, hcm)
		}
	}
	for _, k := range n.keys() {
		if k == "virtual_hosts" || k == "http_filters" {
			continue
		}
		c := n.child(k)
		im.walkEnvoy(r, c, hcm, depth+1)
		for _, it := range c.items() {
			im.walkEnvoy(r, it, hcm, depth+1)
		}
	}
}

func (im *importer) readVhost(r reader, v, hcm node) {
	vh := &vhost{file: r.file, at: v, hcm: hcm, rateLimits: v.child("rate_limits"), perFilter: v.child("typed_per_filter_config")}
	for _, rt := range v.child("routes").items() {
		ro := &route{at: rt, name: r.str(rt.child("name")), perFilter: rt.child("typed_per_filter_config"), vh: vh, idx: len(vh.routes)}
		ro.key = ro.name
		if ro.key == "" {
			ro.key = fmt.Sprintf("%sunnamed-%d", unnamedPrefix, len(im.unnamedRoutes))
			if im.unnamedRoutes == nil {
				im.unnamedRoutes = map[string]*route{}
			}
			im.unnamedRoutes[ro.key] = ro
		}
		if m := rt.child("match"); m.present() {
			r.isMap(m)
		}
		act := rt.child("route")
		ro.rateLimits = act.child("rate_limits")
		ro.includeVH = r.wrappedBool(act.child("include_vh_rate_limits"), false)
		vh.routes = append(vh.routes, ro)
	}
	im.envoy.vhosts = append(im.envoy.vhosts, vh)
}

// perFilterConfig is the typed_per_filter_config of filter name in m, its
// FilterConfig wrapper removed.
func perFilterConfig(r reader, m node, name string) node {
	c := m.child(name)
	if r.str(c.child("@type")) == typeFilterConfig {
		return c.child("config")
	}
	return c
}

// scopedEntry is a rate_limits entry and the routes whose requests it
// makes descriptors for.
type scopedEntry struct {
	file   string
	entry  node
	routes []string
}

// entriesFor gathers, per rate_limits entry of stage, the routes it
// applies to: the route's own entries, and the virtual host's as the
// filter's vh_rate_limits option (per route, default OVERRIDE: only for
// routes without entries of their own) or the route's
// include_vh_rate_limits say. vhOption reads a route's option.
//
// routes is how many routes there are: an entry every route uses needs
// no condition.
func (im *importer) entriesFor(stage uint64, vhOption func(*vhost, *route) string) (entries []*scopedEntry, routes int) {
	r := reader{errs: &im.res.Errors}
	byNode := map[*yaml.Node]*scopedEntry{}
	for _, vh := range im.envoy.vhosts {
		r.file = vh.file
		for _, rt := range vh.routes {
			routes++
			opt := vhOption(vh, rt)
			if opt == skipRoute {
				continue
			}
			own := stageEntries(r, rt.rateLimits, stage)
			use := own
			switch {
			case rt.includeVH || opt == "INCLUDE":
				use = append(use, stageEntries(r, vh.rateLimits, stage)...)
			case opt == "IGNORE":
			default:
				if len(own) == 0 {
					use = stageEntries(r, vh.rateLimits, stage)
				}
			}
			for _, e := range use {
				se := byNode[e.n]
				if se == nil {
					se = &scopedEntry{file: vh.file, entry: e}
					byNode[e.n] = se
					entries = append(entries, se)
				}
				se.routes = append(se.routes, rt.key)
			}
		}
	}
	return entries, routes
}

// skipRoute is the vh_rate_limits option that leaves a route out.
const skipRoute = "skip"

// stageEntries are the entries of list whose stage (default 0) is stage.
func stageEntries(r reader, list node, stage uint64) []node {
	var out []node
	for _, e := range list.items() {
		s, _ := r.wrappedUint(e.child("stage"), 10)
		if s == stage {
			out = append(out, e)
		}
	}
	return out
}

// vhOptionOf reads a per-route config's vh_rate_limits.
func vhOptionOf(r reader, cfg node) string {
	return strings.ToUpper(r.str(cfg.child("vh_rate_limits")))
}
