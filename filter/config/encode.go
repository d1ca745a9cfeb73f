package config

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/limiter"
)

// MarshalJSON writes the effective configuration: every default spelled out,
// names normalised, replaces as names. Parse accepts the output and gives an
// equal Config, so it is safe to log, diff or feed back to Envoy.
func (c *Config) MarshalJSON() ([]byte, error) {
	w := wireConfig{
		ClientIP:    wireClientIP{Source: c.ClientIP.Source.String()},
		Limits:      []wireLimit{},
		Breakers:    []wireBreaker{},
		Concurrency: []wireConcurrency{},
	}
	if len(c.ClientIP.Sources) > 0 {
		w.ClientIP.Source = ""
		for _, s := range c.ClientIP.Sources {
			w.ClientIP.Sources = append(w.ClientIP.Sources, s.String())
		}
		if hasSource(c.ClientIP.Sources, ClientIPXFF) {
			w.ClientIP.TrustedHops = c.ClientIP.TrustedHops
		}
	}
	switch c.ClientIP.Source {
	case ClientIPXFF:
		w.ClientIP.TrustedHops = c.ClientIP.TrustedHops
	case ClientIPHeader:
		w.ClientIP.Header = c.ClientIP.Header
	}
	for i := range c.Limits {
		w.Limits = append(w.Limits, c.wireLimit(&c.Limits[i]))
	}
	for i := range c.Breakers {
		w.Breakers = append(w.Breakers, wireBreakerOf(&c.Breakers[i]))
	}
	for i := range c.Concurrency {
		w.Concurrency = append(w.Concurrency, wireConcurrencyOf(&c.Concurrency[i]))
	}
	w.Response.Headers = c.Response.Headers.names()
	w.Response.HeadersOnAllowed = c.Response.HeadersOnAllowed
	w.Response.Body = c.Response.Body.String()
	w.Response.ReplyHeaders = headerObject(c.Response.ReplyHeaders)
	w.Response.GRPC = !c.Response.PlainGRPC
	w.Response.NearLimitRatio = c.Response.NearLimitRatio
	if t := c.Response.Templates; t != nil {
		w.Response.Templates = map[string]string{"content_type": t.ContentType}
		for k, tpl := range t.ByKind {
			if tpl != nil {
				w.Response.Templates[ReplyKind(k).String()] = tpl.Source
			}
		}
	}
	if b := c.Backend; b != nil {
		w.Backend = &wireBackend{
			Cluster: b.Cluster, Authority: b.Authority, Protocol: b.Protocol.String(), PathPrefix: b.PathPrefix,
			BasicAuth: b.BasicAuth, Token: b.Token, Timeout: dur(b.Timeout), Retries: b.Retries,
			FailurePolicy: b.FailurePolicy.String(), FailureStatus: b.FailureStatus, Instances: b.Instances,
			Breaker: wireBackendBreaker{
				FailureThreshold: b.Breaker.FailureThreshold, Window: dur(b.Breaker.Window),
				OpenTimeout: dur(b.Breaker.OpenTimeout), HalfOpenMaxRequests: b.Breaker.HalfOpenMaxRequests,
				OpenTimeoutMultiplier: b.Breaker.OpenTimeoutMultiplier, JitterPercent: b.Breaker.JitterPercent,
			},
		}
	}
	if b := c.Backend; b != nil && b.Breaker.OpenTimeoutMultiplier > 1 {
		w.Backend.Breaker.OpenTimeoutMax = dur(b.Breaker.OpenTimeoutMax)
	}
	if e := c.External; e != nil {
		w.External = wireExternalOf(e)
	}
	if a := c.Admin; a != nil {
		w.Admin = &wireAdmin{PathPrefix: a.PathPrefix, TokenSHA256: hex.EncodeToString(a.TokenSHA256[:])}
		for _, p := range a.ClientCIDRs.Prefixes {
			w.Admin.ClientCIDRs = append(w.Admin.ClientCIDRs, p.String())
		}
	}
	return json.Marshal(w)
}

func wireExternalOf(e *External) *wireExternal {
	l := &e.Limit
	w := &wireExternal{
		Name: l.Name, Match: wireMatchOf(&l.Match), Cluster: e.Cluster, Authority: e.Authority, Path: e.Path,
		Timeout: dur(e.Timeout), ForwardHeaders: append([]string{}, e.ForwardHeaders...), CacheKey: []string{},
		MaxConcurrent: e.MaxConcurrentRequests,
		CacheTTL:      dur(e.CacheTTL), StaleTTL: dur(e.StaleTTL), MaxCached: e.MaxCached, Mode: l.Mode.String(),
		OnMissingKey: l.OnMissingKey.String(),
		OnLimit:      wireOnLimit{Action: l.OnLimit.Action.String(), Status: l.OnLimit.Status},
		Fallback:     wireFallback{wireBucketRate: wireRateOf(l.Rate, TokenBucket).wireBucketRate, Key: []string{}},
		Slots:        l.Slots, OverflowSlots: l.OverflowSlots, ForgetMaxUsed: l.ForgetMaxUsed,
	}
	if e.ForwardAll {
		w.ForwardHeaders = append(w.ForwardHeaders, "*")
		w.DenyHeaders = e.DenyHeaders
	}
	w.RouteHeader, w.AllowedRoutes = e.RouteHeader, e.AllowedRoutes
	if g := e.Grpc; g != nil {
		w.Grpc = &wireGrpc{Cluster: e.Cluster, Authority: e.Authority, Codec: g.Codec.String()}
		for _, kv := range g.InitialMetadata {
			if w.Grpc.InitialMetadata == nil {
				w.Grpc.InitialMetadata = map[string]string{}
			}
			w.Grpc.InitialMetadata[kv[0]] = kv[1]
		}
		w.Cluster, w.Authority, w.Path = "", "", ""
	}
	for _, k := range e.CacheKey {
		w.CacheKey = append(w.CacheKey, k.String())
	}
	for _, k := range l.Key {
		w.Fallback.Key = append(w.Fallback.Key, k.String())
	}
	if l.Mode != ModeLocal {
		w.FailurePolicy = l.FailurePolicy.String()
		w.Instances = l.Instances
	}
	if l.OnLimit.Action == ActionDelay {
		w.OnLimit.MaxDelay = dur(l.OnLimit.MaxDelay)
	}
	return w
}

func dur(d time.Duration) string { return d.String() }

func (c *Config) wireLimit(l *Limit) wireLimit {
	w := wireLimit{
		Name:                       l.Name,
		Match:                      wireMatchOf(&l.Match),
		Key:                        []string{},
		Algorithm:                  l.Algorithm.String(),
		Cost:                       l.Cost,
		Mode:                       l.Mode.String(),
		OnMissingKey:               l.OnMissingKey.String(),
		OnLimit:                    wireOnLimit{Action: l.OnLimit.Action.String(), Status: l.OnLimit.Status},
		Shadow:                     l.Shadow,
		Enabled:                    !l.Disabled,
		Rollout:                    wireRollout{l.Rollout.EnabledPercent, l.Rollout.EnforcedPercent},
		Slots:                      l.Slots,
		UpstreamHeadersWhenLimited: headerObject(l.UpstreamHeadersWhenLimited),
		OverflowSlots:              l.OverflowSlots,
		ForgetMaxUsed:              l.ForgetMaxUsed,
	}
	w.wireRate = wireRateOf(l.Rate, l.Algorithm)
	if ch := l.CostHeader; ch != nil {
		w.Cost = wireCost{Header: ch.Header, Default: ch.Default, Max: ch.Max}
	}
	if rc := l.CostFromResponse; rc != nil {
		// cost is implied (one unit at admission) and may not be written.
		w.Cost = nil
		w.CostFromResponse = &wireResponseCost{Header: rc.Header, JSON: strings.Join(rc.JSON, "."),
			Default: rc.Default, MaxBodyBytes: rc.MaxBodyBytes}
	}
	for _, k := range l.Key {
		w.Key = append(w.Key, k.String())
	}
	if l.Overrides != nil {
		w.Overrides = map[string]any{}
		for v, r := range l.Overrides {
			w.Overrides[v] = wireRateOf(r, l.Algorithm)
		}
		for v, a := range l.OverrideActions {
			w.Overrides[v] = map[string]bool{a.String(): true}
		}
		if l.OverrideBy >= 0 && l.OverrideBy < len(l.Key) {
			w.OverrideBy = l.Key[l.OverrideBy].String()
		}
	}
	if l.Mode != ModeLocal {
		w.FailurePolicy = l.FailurePolicy.String()
		w.Instances = l.Instances
	}
	if l.OnLimit.Action == ActionDelay {
		w.OnLimit.MaxDelay = dur(l.OnLimit.MaxDelay)
	}
	for _, j := range l.Replaces {
		if j >= 0 && j < len(c.Limits) {
			w.Replaces = append(w.Replaces, c.Limits[j].Name)
		}
	}
	return w
}

func wireRateOf(r Rate, a Algorithm) wireRate {
	w := wireRate{wireBucketRate: wireBucketRate{Limit: r.Limit, Window: dur(r.Window)}}
	if r.Calendar != limiter.NoCalendar {
		w.Window = r.Calendar.String()
		if r.Offset != 0 {
			w.WindowOffset = formatUTCOffset(r.Offset)
		}
	}
	if a == TokenBucket {
		w.Burst = &r.Burst
	}
	return w
}

func wireMatchOf(m *Match) *wireMatch {
	w := &wireMatch{Path: m.Path, PathPrefix: m.PathPrefix, Methods: m.Methods, Hosts: m.Hosts, Routes: m.Routes}
	for _, h := range m.Headers {
		wh := wireHeaderMatch{Name: h.Name}
		wh.wireValueCondition = wireValueConditionOf(h.ValueCondition)
		w.Headers = append(w.Headers, wh)
	}
	wireMatchAttributesOf(m, w)
	return w
}

func wireConcurrencyOf(c *ConcurrencyLimit) wireConcurrency {
	w := wireConcurrency{Name: c.Name, Match: wireMatchOf(&c.Match), Key: []string{},
		MaxInFlight: c.MaxInFlight, Status: c.Status, Shadow: c.Shadow, Enabled: !c.Disabled}
	for _, k := range c.Key {
		w.Key = append(w.Key, k.String())
	}
	return w
}

func wireBreakerOf(b *Breaker) wireBreaker {
	w := wireBreaker{
		Name: b.Name, Match: wireMatchOf(&b.Match), Per: b.Per.String(),
		FailureStatuses: append([]int{}, b.FailureStatuses...), FailureOnTimeout: b.FailureOnTimeout,
		FailureThreshold: b.FailureThreshold, SuccessThreshold: b.SuccessThreshold,
		OpenTimeout: dur(b.OpenTimeout), HalfOpenMaxRequests: b.HalfOpenMaxRequests,
		Mode: b.Mode.String(), Status: b.Status, Enabled: !b.Disabled,
	}
	if fr := b.FailureRate; fr != nil {
		w.FailureRate = &wireFailureRate{
			ThresholdPercent: fr.ThresholdPercent, WindowType: fr.WindowType.String(), MinimumCalls: fr.MinimumCalls,
		}
		if fr.WindowType == CountWindow {
			w.FailureRate.Window = fr.Window
		} else {
			w.FailureRate.WindowDuration = dur(fr.WindowDuration)
		}
	}
	if sc := b.SlowCall; sc != nil {
		w.SlowCall = &wireSlowCall{Duration: dur(sc.Duration)}
		if b.FailureRate != nil {
			w.SlowCall.ThresholdPercent = sc.ThresholdPercent
		}
	}
	return w
}

// The wire types mirror schema.json. omitempty only marks fields that are
// either absent or invalid in a given combination (e.g. max_delay without
// delay); everything else is always written.
type wireConfig struct {
	ClientIP    wireClientIP      `json:"client_ip"`
	Limits      []wireLimit       `json:"limits"`
	Breakers    []wireBreaker     `json:"breakers"`
	Concurrency []wireConcurrency `json:"concurrency"`
	Response    wireResponse      `json:"response"`
	Backend     *wireBackend      `json:"backend,omitempty"`
	External    *wireExternal     `json:"external,omitempty"`
	Admin       *wireAdmin        `json:"admin,omitempty"`
}

type wireAdmin struct {
	PathPrefix  string   `json:"path_prefix"`
	ClientCIDRs []string `json:"client_cidrs"`
	TokenSHA256 string   `json:"token_sha256"`
}

type wireConcurrency struct {
	Name        string     `json:"name"`
	Match       *wireMatch `json:"match"`
	Key         []string   `json:"key"`
	MaxInFlight int64      `json:"max_in_flight"`
	Status      int        `json:"status"`
	Shadow      bool       `json:"shadow"`
	Enabled     bool       `json:"enabled"`
}

type wireClientIP struct {
	Source      string   `json:"source,omitempty"`
	Sources     []string `json:"sources,omitempty"`
	TrustedHops int      `json:"trusted_hops,omitempty"`
	Header      string   `json:"header,omitempty"`
}

// wireBucketRate is a rate a token bucket can have: no calendar period.
type wireBucketRate struct {
	// RequestsPerSecond is only ever read: limit per "1s", written out as
	// limit and window.
	RequestsPerSecond int64  `json:"requests_per_second,omitempty"`
	Limit             int64  `json:"limit"`
	Window            string `json:"window"`
	Burst             *int64 `json:"burst,omitempty"`
}

// wireRate is a limit's or an override's rate. Burst (token bucket only)
// and WindowOffset (calendar windows, fixed_window only) are never both
// written.
type wireRate struct {
	wireBucketRate
	WindowOffset string `json:"window_offset,omitempty"`
}

// formatUTCOffset is ParseUTCOffset's inverse.
func formatUTCOffset(off int32) string {
	sign := byte('+')
	if off < 0 {
		sign, off = '-', -off
	}
	h, m := off/3600, off/60%60
	return string([]byte{sign, byte('0' + h/10), byte('0' + h%10), ':', byte('0' + m/10), byte('0' + m%10)})
}

type wireLimit struct {
	Name      string     `json:"name"`
	Match     *wireMatch `json:"match"`
	Key       []string   `json:"key"`
	Algorithm string     `json:"algorithm"`
	wireRate
	// Cost is the integer cost or a wireCost; nil with cost_from_response.
	Cost             any               `json:"cost,omitempty"`
	CostFromResponse *wireResponseCost `json:"cost_from_response,omitempty"`
	Overrides        map[string]any    `json:"overrides,omitempty"`
	OverrideBy       string            `json:"override_by,omitempty"`
	Mode             string            `json:"mode"`
	FailurePolicy    string            `json:"failure_policy,omitempty"`
	Instances        int               `json:"instances,omitempty"`
	OnMissingKey     string            `json:"on_missing_key"`
	OnLimit          wireOnLimit       `json:"on_limit"`
	Shadow           bool              `json:"shadow"`
	Rollout          wireRollout       `json:"rollout"`
	// UpstreamHeadersWhenLimited is nil, absent, when there are none.
	UpstreamHeadersWhenLimited map[string]string `json:"upstream_headers_when_limited,omitempty"`
	Replaces                   []string          `json:"replaces,omitempty"`
	Slots                      int               `json:"slots"`
	// OverflowSlots is 0, absent, when it is the default Slots/16.
	OverflowSlots int   `json:"overflow_slots,omitempty"`
	ForgetMaxUsed int64 `json:"forget_max_used"`
	Enabled       bool  `json:"enabled"`
}

type wireRollout struct {
	EnabledPercent  float64 `json:"enabled_percent"`
	EnforcedPercent float64 `json:"enforced_percent"`
}

type wireCost struct {
	Header  string `json:"header"`
	Default int64  `json:"default"`
	Max     int64  `json:"max"`
}

type wireResponseCost struct {
	Header       string `json:"header,omitempty"`
	JSON         string `json:"json,omitempty"`
	Default      int64  `json:"default"`
	MaxBodyBytes int64  `json:"max_body_bytes,omitempty"`
}

type wireOnLimit struct {
	Action   string `json:"action"`
	MaxDelay string `json:"max_delay,omitempty"`
	Status   int    `json:"status"`
}

type wireMatch struct {
	Path       string            `json:"path,omitempty"`
	PathPrefix string            `json:"path_prefix,omitempty"`
	Methods    []string          `json:"methods,omitempty"`
	Hosts      []string          `json:"hosts,omitempty"`
	Headers    []wireHeaderMatch `json:"headers,omitempty"`
	Routes     []string          `json:"routes,omitempty"`
	wireMatchAttributes
}

type wireHeaderMatch struct {
	Name string `json:"name"`
	wireValueCondition
}

type wireBreaker struct {
	Name                string           `json:"name"`
	Match               *wireMatch       `json:"match"`
	Per                 string           `json:"per"`
	FailureStatuses     []int            `json:"failure_statuses"`
	FailureOnTimeout    bool             `json:"failure_on_timeout"`
	FailureThreshold    int              `json:"failure_threshold"`
	FailureRate         *wireFailureRate `json:"failure_rate,omitempty"`
	SlowCall            *wireSlowCall    `json:"slow_call,omitempty"`
	SuccessThreshold    int              `json:"success_threshold"`
	OpenTimeout         string           `json:"open_timeout"`
	HalfOpenMaxRequests int              `json:"half_open_max_requests"`
	Mode                string           `json:"mode"`
	Status              int              `json:"status"`
	Enabled             bool             `json:"enabled"`
}

type wireFailureRate struct {
	ThresholdPercent int    `json:"threshold_percent"`
	WindowType       string `json:"window_type"`
	Window           int    `json:"window,omitempty"`
	WindowDuration   string `json:"window_duration,omitempty"`
	MinimumCalls     int    `json:"minimum_calls"`
}

type wireSlowCall struct {
	Duration         string `json:"duration"`
	ThresholdPercent int    `json:"threshold_percent,omitempty"`
}

type wireResponse struct {
	Headers          []string `json:"headers"`
	HeadersOnAllowed bool     `json:"headers_on_allowed"`
	Body             string   `json:"body"`
	// ReplyHeaders and Templates are nil, absent, when not configured.
	ReplyHeaders   map[string]string `json:"reply_headers,omitempty"`
	Templates      map[string]string `json:"templates,omitempty"`
	GRPC           bool              `json:"grpc"`
	NearLimitRatio float64           `json:"near_limit_ratio"`
}

type wireBackend struct {
	Cluster       string             `json:"cluster"`
	Authority     string             `json:"authority"`
	Protocol      string             `json:"protocol"`
	PathPrefix    string             `json:"path_prefix"`
	BasicAuth     string             `json:"basic_auth,omitempty"`
	Token         string             `json:"token,omitempty"`
	Timeout       string             `json:"timeout"`
	Retries       int                `json:"retries"`
	FailurePolicy string             `json:"failure_policy"`
	FailureStatus int                `json:"failure_status"`
	Instances     int                `json:"instances"`
	Breaker       wireBackendBreaker `json:"breaker"`
}

type wireBackendBreaker struct {
	FailureThreshold    int    `json:"failure_threshold"`
	Window              string `json:"window"`
	OpenTimeout         string `json:"open_timeout"`
	HalfOpenMaxRequests int    `json:"half_open_max_requests"`
	// OpenTimeoutMultiplier and OpenTimeoutMax are absent without growth.
	OpenTimeoutMultiplier float64 `json:"open_timeout_multiplier,omitempty"`
	OpenTimeoutMax        string  `json:"open_timeout_max,omitempty"`
	JitterPercent         int     `json:"jitter_percent"`
}

type wireExternal struct {
	Name           string       `json:"name"`
	Match          *wireMatch   `json:"match"`
	Cluster        string       `json:"cluster,omitempty"`
	Authority      string       `json:"authority,omitempty"`
	Path           string       `json:"path,omitempty"`
	Grpc           *wireGrpc    `json:"grpc,omitempty"`
	Timeout        string       `json:"timeout"`
	ForwardHeaders []string     `json:"forward_headers"`
	DenyHeaders    []string     `json:"deny_headers,omitempty"`
	RouteHeader    string       `json:"route_header,omitempty"`
	AllowedRoutes  []string     `json:"allowed_routes,omitempty"`
	MaxConcurrent  int          `json:"max_concurrent_requests"`
	CacheKey       []string     `json:"cache_key"`
	CacheTTL       string       `json:"cache_ttl"`
	StaleTTL       string       `json:"stale_ttl"`
	MaxCached      int          `json:"max_cached"`
	Mode           string       `json:"mode"`
	FailurePolicy  string       `json:"failure_policy,omitempty"`
	Instances      int          `json:"instances,omitempty"`
	OnMissingKey   string       `json:"on_missing_key"`
	OnLimit        wireOnLimit  `json:"on_limit"`
	Fallback       wireFallback `json:"fallback"`
	Slots          int          `json:"slots"`
	OverflowSlots  int          `json:"overflow_slots,omitempty"`
	ForgetMaxUsed  int64        `json:"forget_max_used"`
}

// wireGrpc is external.grpc; the HTTP fields are then left out.
type wireGrpc struct {
	Cluster         string            `json:"cluster"`
	Authority       string            `json:"authority"`
	InitialMetadata map[string]string `json:"initial_metadata,omitempty"`
	Codec           string            `json:"codec"`
}

// wireFallback is the external block's fallback: a token bucket's rate.
type wireFallback struct {
	wireBucketRate
	Key []string `json:"key"`
}
