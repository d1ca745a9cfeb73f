package engine

// The request side of the external limit: what a request sends the
// limits service and what it does with the answer, which package
// external caches and looks up.

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/external"
	"github.com/sluice-proxy/sluice/filter/request"
	"github.com/sluice-proxy/sluice/limiter"
)

// maxRateTables bounds this worker's table views (one per distinct
// answered rate); past it they are dropped and made again on demand.
const maxRateTables = 256

type externalRuntime struct {
	p     *Plugin
	cache *external.Cache
	cfg   *config.External
	lim   *limitRuntime
	index int // of lim in p.limits

	tables    map[limiter.Limit]*limiter.Table
	fallbacks map[limiter.Limit]*limiter.Table
	// fallbackBase holds failure_policy local decisions of global and
	// hybrid answers, apart from the limit's own slots.
	fallbackBase *limiter.Table

	keyBuf []byte
}

func (p *Plugin) configureExternal(cfg *config.External) error {
	l, err := newLimitRuntime(p.host, &cfg.Limit, len(p.limits), config.FieldPath("external", "fallback"))
	if err != nil {
		return err
	}
	l.keyKinds = "tenant_key"
	if err := p.ensureBackend(l, "external.mode"); err != nil {
		return err
	}
	x := &externalRuntime{
		p: p, cfg: cfg, lim: l, index: len(p.limits),
		tables:    map[limiter.Limit]*limiter.Table{},
		fallbacks: map[limiter.Limit]*limiter.Table{},
	}
	x.cache, err = external.New(p.host, cfg, delayTick, p.ensureTick, func(now time.Time) { p.poll(waitLookup, now) })
	if err != nil {
		return err
	}
	if cfg.Limit.Mode != config.ModeLocal {
		x.fallbackBase, err = newTable(p.host.Store, &cfg.Limit, cfg.Limit.Rate,
			"sluice.rlf."+cfg.Limit.Name+".", cfg.Limit.Name+"\x00fallback")
		if err != nil {
			return fmt.Errorf("%s: %v", config.FieldPath("external", "fallback"), err)
		}
	}
	l.ext = x
	p.external = x
	p.limits = append(p.limits, l)
	p.matchNeeds |= request.NeedsOf(&cfg.Limit.Match)
	return nil
}

// resolve settles which limit the external block applies to request
// info (its lookup r), or has it wait for a lookup: the tick or the
// lookup's reply then evaluates it again. A request whose cache_key is
// ambiguous makes no lookup: info.LookupAmbiguous has the limits stage
// refuse it as it refuses any ambiguous key.
func (x *externalRuntime) resolve(r *external.Request, info *request.Info, now time.Time) outcome {
	if r.State == external.Unresolved {
		var ok bool
		if x.keyBuf, ok = x.appendLookupKey(x.keyBuf[:0], info); !ok {
			info.LookupAmbiguous = true
			return allow
		}
	}
	if x.cache.Resolve(r, x.keyBuf, func() []byte { return x.requestBody(info) }, now) {
		return allow
	}
	return waitFor(waitLookup)
}

// dropClientRoute removes the route_header a client sent, before anything
// reads the request: only an allowed backend_url may route a request, and
// a client that could set the header would pick its own cluster. Read
// first: a removal costs Envoy a new route selection, present or not.
func (p *Plugin) dropClientRoute() {
	rh := p.routeHeader
	st := p.host.Stream
	if _, ok := st.RequestHeader(rh); !ok {
		return
	}
	if err := st.RemoveRequestHeader(rh); err != nil {
		p.log.Warnf("sluice: removing the client's %s: %v", rh, err)
		return
	}
	// Envoy chose the route before the filter ran, from the client's
	// value.
	st.ClearRouteCache()
}

// routeTenant writes the resolved answer's backend_url into route_header,
// then has the route, and with it a cluster_header cluster, chosen again
// from the new value. Envoy's Wasm filter has cleared the route cache on
// every request header write since envoyproxy/envoy#14318, and
// envoyproxy/envoy#36671 makes that explicit, through the
// clear_route_cache foreign function: the filter asks for it either way.
// The value was checked against allowed_routes when the answer arrived;
// it is checked again because a cache entry may predate this
// configuration.
func (x *externalRuntime) routeTenant(lookup *external.Request) {
	r := lookup.Route
	if r == "" || !x.cfg.RouteAllowed(r) {
		return
	}
	st := x.p.host.Stream
	if err := st.ReplaceRequestHeader(x.cfg.RouteHeader, r); err != nil {
		x.p.log.Warnf("sluice: setting %s: %v", x.cfg.RouteHeader, err)
		return
	}
	st.ClearRouteCache()
}

// appendLookupKey appends the lookup key of the request to dst: each part
// appended alone, so that an absent part is an empty value. ok is false
// when a part is ambiguous (Info.AppendKey): an empty value there would share
// one cached answer among every client sending two tenants, looked up
// for whichever came first, while upstreams serve each as one of its
// values.
func (x *externalRuntime) appendLookupKey(dst []byte, info *request.Info) (key []byte, ok bool) {
	for i := range x.cfg.CacheKey {
		if i > 0 {
			dst = append(dst, request.KeySeparator)
		}
		dst, _, _ = info.AppendKey(dst, x.cfg.CacheKey[i:i+1], &x.p.cfg.ClientIP, -1)
		if info.Ambiguous {
			return dst, false
		}
	}
	return dst, true
}

// requestBody renders the lookup: {"method", "path", "headers"}. The path
// is sent without its query, which can carry credentials, and in normal
// form: the form a path cache_key part holds, so that an answer the
// service gave a re-spelled path is cached for the path it names.
func (x *externalRuntime) requestBody(info *request.Info) []byte {
	headers := info.Headers()
	b := make([]byte, 0, 256)
	b = append(b, `{"method":`...)
	b = appendJSONString(b, info.Method())
	b = append(b, `,"path":`...)
	b = appendJSONString(b, info.NormalPath())
	b = append(b, `,"headers":{`...)
	first := true
	field := func(name, value string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, name)
		b = append(b, ':')
		b = appendJSONString(b, value)
	}
	named := x.cfg.ForwardHeaders
	for _, name := range named {
		if v, ok := info.Header(name); ok {
			field(name, v)
		} else if name == "host" && info.Authority() != "" {
			field(name, info.Authority())
		}
	}
	if x.cfg.ForwardAll {
		var seen []string
		for _, kv := range headers {
			name := kv[0]
			if name == "" || name[0] == ':' || slices.Contains(named, name) || slices.Contains(seen, name) ||
				x.cfg.Denied(name) {
				continue
			}
			seen = append(seen, name)
			v, _ := info.Header(name)
			field(name, v)
		}
	}
	return append(b, "}}"...)
}

// appendBucketKey appends the bucket key for the external limit of
// request info, whose lookup is r, and returns the table and rate it is
// decided with; ok is false when the fallback key is missing.
func (x *externalRuntime) appendBucketKey(dst []byte, r *external.Request, info *request.Info) (arena []byte, t *limiter.Table, rate config.Rate, ok bool) {
	l := x.lim
	if r.Fallback {
		start := len(dst)
		dst = append(dst, external.BucketFallback)
		dst, _, ok = info.AppendKey(dst, l.cfg.Key, &x.p.cfg.ClientIP, -1)
		if !ok {
			return dst[:start], nil, config.Rate{}, false
		}
		return dst, l.def, l.cfg.Rate, true
	}
	t, err := tableWithLimit(x.tables, x.lim.def, r.Limit)
	if err != nil {
		// Parse and Decode validate every answer; this cannot happen, and
		// the fallback is the safe reading if it does.
		x.p.log.Warnf("sluice: external limit: %v", err)
		r.Fallback = true
		return x.appendBucketKey(dst, r, info)
	}
	rate = config.Rate{Limit: r.Limit.Rate, Window: r.Limit.Period, Burst: r.Limit.Burst}
	return append(append(dst, r.Tag), r.Bucket...), t, rate, true
}

// tableWithLimit is base's view deciding with lim, kept in views: made
// once per distinct answered rate, and all dropped when maxRateTables
// are there.
func tableWithLimit(views map[limiter.Limit]*limiter.Table, base *limiter.Table, lim limiter.Limit) (*limiter.Table, error) {
	if t, ok := views[lim]; ok {
		return t, nil
	}
	if len(views) >= maxRateTables {
		clear(views)
	}
	t, err := base.WithLimit(lim)
	if err != nil {
		return nil, err
	}
	views[lim] = t
	return t, nil
}
