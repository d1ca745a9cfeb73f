package config

import (
	"strings"
	"time"
)

// External asks a limits service which limit applies to a request, and
// enforces the answer like one more limit (top-level "external").
type External struct {
	// Limit is how the answers are enforced. Name, Match, Mode,
	// FailurePolicy, Instances, OnMissingKey and OnLimit come from the
	// external block; Rate and Key are the fallback's, used when the
	// service cannot answer and no stale answer is left (Key defaults to
	// CacheKey). Algorithm is always TokenBucket and Cost 1.
	Limit Limit
	// Cluster is the Envoy cluster of the limits service; required.
	Cluster string
	// Authority is the :authority of lookups; default Cluster.
	Authority string
	// Path is the :path of lookups, starting with "/"; default "/limits".
	Path string
	// Timeout per lookup, default 100ms, at most 10s.
	Timeout time.Duration
	// ForwardHeaders are the lower-cased request headers sent to the
	// service, in config order. "host" sends the :authority.
	ForwardHeaders []string
	// ForwardAll is set by a "*" entry: every request header is sent except
	// pseudo-headers and SensitiveHeaders not named in ForwardHeaders.
	ForwardAll bool
	// DenyHeaders are lower-cased headers ForwardAll does not send either
	// (deny_headers); nil when none are. See Denied.
	DenyHeaders []string
	// CacheKey identifies a lookup: requests with equal values share one
	// cached answer, one lookup in flight and one breaker. Default: a
	// header part for every name in ForwardHeaders. An absent part is an
	// empty value, so it never makes a request skip the lookup.
	CacheKey []KeyPart
	// CacheTTL is how long an answer is fresh when the service does not
	// say (cache_max_age_seconds); default 60s.
	CacheTTL time.Duration
	// StaleTTL is how long after it stops being fresh an answer is still
	// used when a lookup fails; default 5m, zero never uses stale answers.
	StaleTTL time.Duration
	// MaxCached bounds the cached lookups (shared-data keys); default 10000.
	MaxCached int
	// MaxConcurrentRequests caps the lookups in flight across all workers,
	// 1-1000, default 50; an excess lookup is decided like a failed one.
	MaxConcurrentRequests int
	// RouteHeader is the lower-case request header an allowed backend_url
	// is written into (route_header); "" when answers do not route.
	// Whatever the client sent in it is removed from every request.
	RouteHeader string
	// AllowedRoutes are the only backend_url values that route a request
	// (allowed_routes); set exactly when RouteHeader is.
	AllowedRoutes []string
}

// SensitiveHeaders are never forwarded to the limits service unless
// forward_headers names them: credentials do not leave the proxy because
// of a wildcard.
var SensitiveHeaders = []string{"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"}

// IsSensitiveHeader reports whether a lower-case header name is one of
// SensitiveHeaders.
func IsSensitiveHeader(name string) bool { return contains(SensitiveHeaders, name) }

// Defaults of the external block.
const (
	DefaultExternalName     = "external"
	DefaultExternalPath     = "/limits"
	DefaultExternalTimeout  = 100 * time.Millisecond
	DefaultExternalCacheTTL = 60 * time.Second
	DefaultExternalStaleTTL = 5 * time.Minute
	DefaultExternalMaxCache = 10_000
	maxExternalCached       = 1_000_000
	// DefaultExternalConcurrent and maxExternalConcurrent bound the
	// lookups in flight; the cap keeps the permits one small value.
	DefaultExternalConcurrent = 50
	maxExternalConcurrent     = 1000
	maxCacheTTL               = 24 * time.Hour
)

var (
	externalFields = fieldsOf[wireExternal]()
	fallbackFields = fieldsOf[wireFallback]()
)

func (p *parser) external(o *object, cfg *Config) *External {
	e := &External{
		Limit:     defaultLimit(DefaultExternalName),
		Path:      DefaultExternalPath,
		Timeout:   DefaultExternalTimeout,
		CacheTTL:  DefaultExternalCacheTTL,
		StaleTTL:  DefaultExternalStaleTTL,
		MaxCached: DefaultExternalMaxCache,

		MaxConcurrentRequests: DefaultExternalConcurrent,
	}
	if o.has("name") {
		if n := p.name(o); n != "" {
			e.Limit.Name = n
		}
	}
	if i := cfg.LimitIndex(e.Limit.Name); i >= 0 {
		o.errorf("name", "%q is also the name of limits[%d]; metrics need distinct names", e.Limit.Name, i)
	}
	if m := o.child("match", matchFields...); m != nil {
		e.Limit.Match = p.match(m)
	}
	p.slots(o, &e.Limit)
	e.Cluster, e.Authority = o.clusterAuthority()
	if s, ok := o.str("path"); ok {
		if !strings.HasPrefix(s, "/") {
			o.errorf("path", `must start with "/"`)
		}
		e.Path = s
	}
	if d, ok := o.duration("timeout", time.Millisecond, maxBackendWait); ok {
		e.Timeout = d
	}
	named := p.forwardHeaders(o, e)
	p.denyHeaders(o, e)
	p.routes(o, e)
	if n, ok := o.integer("max_concurrent_requests", 1, maxExternalConcurrent); ok {
		e.MaxConcurrentRequests = int(n)
	}
	p.cacheKey(o, e, named)
	if d, ok := o.duration("cache_ttl", time.Second, maxCacheTTL); ok {
		e.CacheTTL = d
	}
	if d, ok := o.duration("stale_ttl", 0, maxCacheTTL); ok {
		e.StaleTTL = d
	}
	if n, ok := o.integer("max_cached", 1, maxExternalCached); ok {
		e.MaxCached = int(n)
	}
	p.mode(o, &e.Limit, cfg.Backend)
	if v, ok := readEnum(o, "on_missing_key", missingKeyActionNames); ok {
		e.Limit.OnMissingKey = v
	}
	p.onLimit(o, &e.Limit)
	if f := o.child("fallback", fallbackFields...); f != nil {
		if r, ok := p.rate(f, TokenBucket); ok {
			e.Limit.Rate = r
			p.rateFits(f, e.Limit.Mode, TokenBucket, r)
		}
		e.Limit.Key = e.CacheKey
		if items, ok := f.array("key", ""); ok {
			e.Limit.Key = p.key(f.path1("key"), items)
		}
	} else if !o.has("fallback") {
		o.errorf("fallback", "required: the limit applied when the service cannot answer")
	}
	return e
}
