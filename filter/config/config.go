// Package config parses and validates the Sluice plugin configuration.
//
// Parse turns the JSON an operator puts in the Envoy WasmService/Wasm filter
// configuration into a typed, fully defaulted Config. Everything the filter
// needs per request (key layout, upper-cased methods, lower-cased header
// names, durations, statuses) is resolved here, once, at configure time, so
// the request path never parses text.
//
// The package has no proxy-wasm imports so it can be tested, fuzzed and used
// by tools natively. The operator-facing field reference is README.md; the
// JSON Schema is schema.json (see Schema).
package config

import (
	"strconv"
	"time"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/request/cidr"
	"github.com/sluice-proxy/sluice/internal/enum"
	"github.com/sluice-proxy/sluice/limiter"
)

// Config is a parsed plugin configuration. The zero value is not meaningful;
// use Parse, which fills every default.
type Config struct {
	// ClientIP says where the client address used by the client_ip key comes from.
	ClientIP ClientIP
	// Limits in config order, which is also evaluation order.
	Limits []Limit
	// Breakers in config order.
	Breakers []Breaker
	// Concurrency limits (bulkheads) in config order, which is also
	// evaluation order.
	Concurrency []ConcurrencyLimit
	// Response controls rate-limit headers and reply bodies.
	Response Response
	// Backend is the Redis-over-HTTP backend for global and hybrid limits.
	// Nil when the config has no "backend" block (then no limit may be
	// global or hybrid).
	Backend *Backend
	// External is the limits-service lookup; nil without an "external"
	// block.
	External *External
	// Admin is the admin route; nil (off) without an "admin" block.
	Admin *Admin
}

// LimitIndex returns the index in c.Limits of the limit with that name, or -1.
func (c *Config) LimitIndex(name string) int {
	for i := range c.Limits {
		if c.Limits[i].Name == name {
			return i
		}
	}
	return -1
}

// ClientIPSource selects where the client address comes from.
type ClientIPSource uint8

const (
	// ClientIPPeer uses Envoy's downstream remote address (source.address)
	// without the port: the connection's address with use_remote_address,
	// but without it the last X-Forwarded-For entry, which the client
	// writes (see the field reference).
	ClientIPPeer ClientIPSource = iota
	// ClientIPXFF uses the X-Forwarded-For entry TrustedHops from the right,
	// falling back to the peer when the header has fewer entries.
	ClientIPXFF
	// ClientIPHeader uses the named header verbatim.
	ClientIPHeader
)

var clientIPSourceNames = enum.New[ClientIPSource]("ClientIPSource", "peer", "xff", "header")

func (s ClientIPSource) String() string { return clientIPSourceNames.Name(s) }

// ClientIP configures client address extraction.
type ClientIP struct {
	// Source defaults to ClientIPPeer.
	Source ClientIPSource
	// TrustedHops is how many X-Forwarded-For entries, counted from the
	// right, were appended by proxies we trust; the entry at that position is
	// the client. Default 1 (only Envoy's own hop is trusted). Only set with
	// Source ClientIPXFF.
	TrustedHops int
	// Header is the lower-cased header name for ClientIPHeader; empty otherwise.
	Header string
	// Sources, when set, replaces Source: the first that yields a valid
	// address wins (Source and Header are then unset).
	Sources []ClientIPFrom
}

// Algorithm is a limiting algorithm: the limiter's own type, so the
// config and the decision core cannot disagree on its values or names.
type Algorithm = limiter.Algorithm

const (
	// TokenBucket refills Rate.Limit tokens per Rate.Window and holds at most
	// Rate.Limit+Rate.Burst tokens. It is the default.
	TokenBucket = limiter.TokenBucket
	// FixedWindow admits Rate.Limit requests per aligned window.
	FixedWindow = limiter.FixedWindow
	// SlidingWindow admits Rate.Limit requests per window, weighting the
	// previous window's count by its remaining overlap.
	SlidingWindow = limiter.SlidingWindow
	// SlidingLog admits at most Rate.Limit requests in any window of
	// length Rate.Window, exactly, keeping each admission's time;
	// Rate.Limit is at most limiter.MaxLogLimit.
	SlidingLog = limiter.SlidingLog
)

var algorithmNames = enum.Of("Algorithm", TokenBucket, FixedWindow, SlidingWindow, SlidingLog)

// Rate is an allowance: Limit requests per Window, plus Burst extra for
// token buckets. requests_per_second: R is Rate{Limit: R, Window: time.Second}.
type Rate struct {
	// Limit is the number of requests per Window; always >= 1.
	Limit int64
	// Window is always > 0.
	Window time.Duration
	// Burst is extra bucket capacity above Limit (token bucket only); >= 0,
	// default 0.
	Burst int64
	// Calendar, when set (window "day", "week" or "month"), makes the
	// windows calendar periods in the UTC offset Offset (seconds east);
	// Window is then the calendar's longest period.
	Calendar limiter.Calendar
	Offset   int32
}

// Capacity is the most requests the algorithm admits at once from a fresh
// state: Limit+Burst for a token bucket, Limit for window algorithms.
func (r Rate) Capacity(a Algorithm) int64 {
	if a == TokenBucket {
		return r.Limit + r.Burst
	}
	return r.Limit
}

// WindowString is the window as an operator reads it: a duration, or a
// calendar period with its UTC offset ("month +09:00").
func (r Rate) WindowString() string {
	if r.Calendar == limiter.NoCalendar {
		return r.Window.String()
	}
	return r.Calendar.String() + " " + formatUTCOffset(r.Offset)
}

// Limiter is the limiter.Limit that enforces r with algorithm a: the one
// definition the filter's tables and Redis commands and Parse's range
// checks share.
func (r Rate) Limiter(a Algorithm) limiter.Limit {
	lim := limiter.Limit{Rate: r.Limit, Period: r.Window, Burst: r.Burst, Calendar: r.Calendar, Offset: r.Offset}
	switch a {
	case FixedWindow:
		lim.Algorithm = limiter.FixedWindow
	case SlidingWindow:
		lim.Algorithm = limiter.SlidingWindow
	case SlidingLog:
		lim.Algorithm = limiter.SlidingLog
	default:
		lim.Algorithm = limiter.TokenBucket
	}
	return lim
}

// KeyKind is one kind of key part.
type KeyKind uint8

const (
	// KeyClientIP is the client address as configured by Config.ClientIP.
	KeyClientIP KeyKind = iota
	// KeyHeader is the value of KeyPart.Header.
	KeyHeader
	// KeyPath is the request path without the query string.
	KeyPath
	// KeyRoute is the Envoy route name.
	KeyRoute
	// KeyMethod is the request method.
	KeyMethod
	// KeyHost is the :authority.
	KeyHost
	// KeyCluster is the upstream cluster the route picked (xds.cluster_name).
	KeyCluster
	// KeyQuery is the percent-decoded value of query parameter KeyPart.Name.
	KeyQuery
	// KeyCookie is the value of cookie KeyPart.Name.
	KeyCookie
	// KeyPathSegment is the KeyPart.Segment-th segment (1-based) of the path.
	KeyPathSegment
	// KeyClientIPMasked is the client address masked to KeyPart.V4Bits or
	// KeyPart.V6Bits, as Envoy's masked_remote_address.
	KeyClientIPMasked
	// KeyMetadata is the dynamic metadata value at KeyPart.MetaPath in
	// namespace KeyPart.Name.
	KeyMetadata
)

// keyKindNames are the kinds' names in config syntax, the prefix of a
// part with an argument ("header" of "header:x-api-key"); a masked client
// address is a client_ip with prefix lengths.
var keyKindNames = enum.New[KeyKind]("KeyKind", "client_ip", "header", "path", "route", "method", "host",
	"cluster", "query", "cookie", "path_segment", "client_ip", "metadata")

func (k KeyKind) String() string { return keyKindNames.Name(k) }

// KeyPart is one element of a (possibly composite) limit key.
type KeyPart struct {
	Kind KeyKind
	// Header is the lower-cased header name when Kind is KeyHeader.
	Header string
	// Name is the parameter or cookie name (case-sensitive) when Kind is
	// KeyQuery or KeyCookie.
	Name string
	// Segment is the 1-based path segment when Kind is KeyPathSegment.
	Segment int
	// V4Bits and V6Bits are the prefix lengths when Kind is
	// KeyClientIPMasked.
	V4Bits, V6Bits uint8
	// MetaPath is the dotted path within namespace Name when Kind is
	// KeyMetadata, and Property the proxy-wasm property path it reads.
	MetaPath string
	Property []string
}

// String gives the part in config syntax, e.g. "client_ip" or "header:x-api-key".
func (p KeyPart) String() string {
	switch p.Kind {
	case KeyHeader:
		return "header:" + p.Header
	case KeyQuery, KeyCookie:
		return p.Kind.String() + ":" + p.Name
	case KeyPathSegment:
		return "path_segment:" + strconv.Itoa(p.Segment)
	case KeyMetadata:
		return "metadata:" + p.Name + ":" + p.MetaPath
	case KeyClientIPMasked:
		return "client_ip/" + strconv.Itoa(int(p.V4Bits)) + "/" + strconv.Itoa(int(p.V6Bits))
	}
	return p.Kind.String()
}

// Mode is where a limit's counters live.
type Mode uint8

const (
	// ModeLocal counts in this Envoy's shared data only. It is the default.
	ModeLocal Mode = iota
	// ModeGlobal makes one atomic Redis call per decision (exact).
	ModeGlobal
	// ModeHybrid serves decisions from tokens leased from Redis.
	ModeHybrid
)

var modeNames = enum.New[Mode]("Mode", "local", "global", "hybrid")

func (m Mode) String() string { return modeNames.Name(m) }

// FailurePolicy is what a global or hybrid limit does when Redis cannot answer.
type FailurePolicy uint8

const (
	// FailAllow passes the request through (fail open). It is the default,
	// matching Envoy's ratelimit filter (failure_mode_deny: false): a
	// limiter outage should not become a site outage.
	FailAllow FailurePolicy = iota
	// FailDeny rejects with Backend.FailureStatus (fail closed).
	FailDeny
	// FailLocal falls back to the local limiter with the limit divided by
	// the instances hint.
	FailLocal
)

var failurePolicyNames = enum.New[FailurePolicy]("FailurePolicy", "allow", "deny", "local")

func (f FailurePolicy) String() string { return failurePolicyNames.Name(f) }

// MissingKeyAction is what a limit does when a key part is absent (for
// example the header is not sent).
type MissingKeyAction uint8

const (
	// MissingKeySkip does not apply the limit to the request. Default.
	MissingKeySkip MissingKeyAction = iota
	// MissingKeyDeny rejects the request with OnLimit.Status.
	MissingKeyDeny
)

var missingKeyActionNames = enum.New[MissingKeyAction]("MissingKeyAction", "skip", "deny")

func (m MissingKeyAction) String() string { return missingKeyActionNames.Name(m) }

// LimitAction is what happens to a request over the limit.
type LimitAction uint8

const (
	// ActionReject sends a local reply with OnLimit.Status. Default.
	ActionReject LimitAction = iota
	// ActionDelay holds the request until a token is free, up to
	// OnLimit.MaxDelay, and rejects it if the wait would be longer.
	ActionDelay
)

var limitActionNames = enum.New[LimitAction]("LimitAction", "reject", "delay")

func (a LimitAction) String() string { return limitActionNames.Name(a) }

// OnLimit configures the answer to an over-limit request.
type OnLimit struct {
	// Action defaults to ActionReject.
	Action LimitAction
	// MaxDelay is the longest a request is held; > 0 when Action is
	// ActionDelay (default 500ms), zero otherwise.
	MaxDelay time.Duration
	// Status of the local reply, 400-599, default 429.
	Status int
}

// Limit is one rate limit.
type Limit struct {
	// Name is unique among limits and is the metric label; it matches
	// [A-Za-z0-9_-]{1,64}.
	Name string
	// Match selects the requests the limit applies to; the zero Match
	// matches every request.
	Match Match
	// Key is the bucket key; an empty Key is a single bucket for all
	// matching requests. Default: [client_ip].
	Key []KeyPart
	// Algorithm defaults to TokenBucket.
	Algorithm Algorithm
	// Rate is the default allowance for every key value.
	Rate Rate
	// Cost is the tokens one request takes; >= 1, default 1, and never more
	// than Rate.Capacity(Algorithm) (that request could never pass). With
	// CostHeader it is CostHeader.Default, the cost of a request without
	// the header; with CostFromResponse it is 1, the unit a request takes
	// at admission.
	Cost int64
	// CostHeader, when not nil, takes each request's cost from a request
	// header. Nil for a fixed cost.
	CostHeader *CostHeader
	// CostFromResponse, when not nil, charges each admitted request's cost
	// from a response header after the upstream answered. Only with
	// TokenBucket, and never with CostHeader.
	CostFromResponse *ResponseCost
	// Overrides maps a value of the key part Key[OverrideBy] to its own rate
	// (SLA tiers). Nil when none are configured.
	Overrides map[string]Rate
	// OverrideBy is the index in Key of the part whose value selects an
	// override; -1 when Overrides is nil.
	OverrideBy int
	// OverrideActions maps values that are exempt ({"unlimited": true})
	// or rejected ({"block": true}) rather than given a rate; nil when none.
	OverrideActions map[string]OverrideAction
	// OverrideCIDRs, set when Key[OverrideBy] is client_ip, resolves a
	// client address to its override key by longest prefix.
	OverrideCIDRs *cidr.Overrides
	// Mode defaults to ModeLocal.
	Mode Mode
	// FailurePolicy applies in ModeGlobal and ModeHybrid; it defaults to
	// Backend.FailurePolicy. Always FailAllow (unused) in ModeLocal.
	FailurePolicy FailurePolicy
	// Instances is the number of Envoy instances sharing the global limit;
	// FailLocal divides the limit by it. Default Backend.Instances (1).
	Instances int
	// OnMissingKey defaults to MissingKeySkip.
	OnMissingKey MissingKeyAction
	// OnLimit defaults to reject with 429.
	OnLimit OnLimit
	// Shadow evaluates and counts but never rejects or delays.
	Shadow bool
	// Rollout is drawn per request (rollout.go); default FullRollout.
	Rollout Rollout
	// UpstreamHeadersWhenLimited are request headers added when a shadow
	// or not enforced evaluation of the limit would have rejected the
	// request; lowercase names.
	UpstreamHeadersWhenLimited [][2]string
	// Replaces holds indexes in Config.Limits of the limits this one
	// disables when it matches (the most specific applies). Resolved and
	// cycle-free.
	Replaces []int
	// Slots is the size of the limit's local slot table (limiter
	// TableConfig.Slots), per rate: 1 to limiter.MaxSlots, default
	// limiter.DefaultSlots. Used in ModeLocal and by the local fallback.
	Slots int
	// OverflowSlots is the number of overflow buckets (limiter
	// TableConfig.OverflowSlots), 1 to Slots; 0 means Slots/16.
	OverflowSlots int
	// ForgetMaxUsed is the most units a key may have used and still be
	// forgotten for a newcomer (limiter TableConfig.ForgetMaxUsed), 0 to
	// limiter.MaxRate, default limiter.DefaultForgetMaxUsed (limiter.ForgetAny,
	// any key); 0 forgets no key.
	ForgetMaxUsed int64
	// Disabled ("enabled": false) keeps the entry configured but switched
	// off: never evaluated, never counted; its metrics stay at zero.
	Disabled bool
}

// CostHeader is a cost sent by the client in a request header
// ("cost": {"header": ..., "default": ..., "max": ...}).
type CostHeader struct {
	// Header is the lower-cased request header name.
	Header string
	// Default is the cost of a request without the header (or with it
	// empty); 1 <= Default <= Max, default 1.
	Default int64
	// Max is the largest cost a request may claim; a larger one is
	// rejected with 400. At most the capacity of every rate of the limit,
	// which is also its default.
	Max int64
}

// ResponseCost is a cost reported by the upstream, in a response header
// ("cost_from_response": {"header": ...}) or at a path into a JSON body
// or the events of a text/event-stream body ({"json": "usage.total_tokens"}):
// the request takes one unit when admitted and the rest of the reported
// cost is charged when the response headers arrive, or at the end of the
// body, into debt if need be.
type ResponseCost struct {
	// Header is the lower-cased response header name; empty with JSON.
	Header string
	// JSON is the path of member names into the body; nil with Header.
	JSON []string
	// Default is the cost charged when the response lacks the header or
	// the path, its value is not a whole number >= 0, or the body is over
	// MaxBodyBytes; >= 1, default 1 (the unit taken at admission and
	// nothing more).
	Default int64
	// MaxBodyBytes bounds the JSON body buffered to read JSON from;
	// DefaultMaxBodyBytes unless set. Zero with Header.
	MaxBodyBytes int64
}

// DefaultMaxBodyBytes is max_body_bytes when not set: 1 MiB, Envoy's
// default per_connection_buffer_limit_bytes, past which Envoy itself
// would give up buffering the body.
const DefaultMaxBodyBytes = 1 << 20

// MaxResponseBodyBytes bounds max_body_bytes: a body buffered in every
// worker's VM must stay far below the VM's memory.
const MaxResponseBodyBytes = 64 << 20

// RateFor returns the rate for a key-part value: its override if one exists,
// the limit's default otherwise.
func (l *Limit) RateFor(overrideValue string) Rate {
	if r, ok := l.Overrides[overrideValue]; ok {
		return r
	}
	return l.Rate
}

// Match is a request predicate. Every non-empty condition must hold.
type Match struct {
	// Path is an exact path (query excluded); empty means any.
	Path string
	// PathPrefix is a path prefix; empty means any. Never set together with Path.
	PathPrefix string
	// Methods are upper-case; nil means any.
	Methods []string
	// Hosts are lower-case, without port. An entry "*.example.com" matches
	// any host ending in ".example.com". Nil means any.
	Hosts []string
	// Headers must all hold.
	Headers []HeaderMatch
	// Routes are Envoy route names; nil means any.
	Routes []string
	// ClientCIDRs, when set, must contain the client address.
	ClientCIDRs *cidr.Set
	// Query conditions must all hold.
	Query []QueryMatch
	// PathRegex, when set, must match the whole path without the query.
	PathRegex *Regex
	// Not, when set, must not match.
	Not *Match
	// Metadata conditions on dynamic metadata must all hold.
	Metadata []MetadataMatch
}

// HeaderMatch is a condition on one request header.
type HeaderMatch struct {
	// Name is lower-case.
	Name string
	ValueCondition
}

// ValueCondition is what a header or query parameter condition asks of
// the value: with HasValue, Op compares it with Value (Regex is set for
// OpRegex); without, Present says whether it must be present (true) or
// absent (false).
type ValueCondition struct {
	Value    string
	HasValue bool
	Present  bool
	Op       ValueOp
	Regex    *Regex
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ConcurrencyLimit caps the requests in flight at once per key: a
// bulkhead. A request counts from its admission until its stream ends.
type ConcurrencyLimit struct {
	// Name is unique among concurrency limits and is the metric label; it
	// matches [A-Za-z0-9_-]{1,64}.
	Name string
	// Match selects the requests the limit applies to; zero matches all.
	Match Match
	// Key is what a count is per; empty (the default) is one count for
	// every matching request.
	Key []KeyPart
	// MaxInFlight is the most requests of one key in flight at once; >= 1.
	MaxInFlight int64
	// Status of the rejection, 400-599, default 503.
	Status int
	// Shadow counts and reports but never rejects.
	Shadow bool
	// Disabled ("enabled": false) keeps the entry configured but switched
	// off: never evaluated, never counted; its metrics stay at zero.
	Disabled bool
}

// BreakerScope is what one breaker instance covers.
type BreakerScope uint8

const (
	// PerCluster keeps one breaker per upstream cluster (xds.cluster_name). Default.
	PerCluster BreakerScope = iota
	// PerRoute keeps one breaker per route name.
	PerRoute
)

var breakerScopeNames = enum.New[BreakerScope]("BreakerScope", "cluster", "route")

func (s BreakerScope) String() string { return breakerScopeNames.Name(s) }

// BreakerMode controls whether a breaker acts: the breaker's own type.
type BreakerMode = breaker.Mode

const (
	// BreakerEnforce rejects while open. Default.
	BreakerEnforce = breaker.ModeEnforce
	// BreakerMetricsOnly tracks state and metrics but never rejects.
	BreakerMetricsOnly = breaker.ModeMetricsOnly
	// BreakerForcedOpen rejects every matching request (manual cut-off).
	BreakerForcedOpen = breaker.ModeForcedOpen
	// BreakerDisabled neither tracks nor rejects.
	BreakerDisabled = breaker.ModeDisabled
)

var breakerModeNames = enum.Of("BreakerMode", BreakerEnforce, BreakerMetricsOnly, BreakerForcedOpen, BreakerDisabled)

// WindowType is how a failure-rate window is measured: the breaker's own
// type.
type WindowType = breaker.WindowType

const (
	// CountWindow covers the last FailureRate.Window calls. Default.
	CountWindow = breaker.WindowCount
	// TimeWindow covers calls in the last FailureRate.WindowDuration.
	TimeWindow = breaker.WindowTime
)

var windowTypeNames = enum.Of("WindowType", CountWindow, TimeWindow)

// FailureRate opens a breaker when a share of recent calls failed.
type FailureRate struct {
	// ThresholdPercent, 1-100, default 50: the breaker opens when at least
	// this percentage of the calls in the window failed.
	ThresholdPercent int
	// WindowType defaults to CountWindow.
	WindowType WindowType
	// Window is the number of calls for CountWindow (default 100); 0 for TimeWindow.
	Window int
	// WindowDuration is the window for TimeWindow (default 60s); 0 for CountWindow.
	WindowDuration time.Duration
	// MinimumCalls, default 20, is how many calls the window needs before
	// the rate is judged, so one early failure cannot open the breaker.
	MinimumCalls int
}

// SlowCall makes slow upstream answers count against the upstream.
type SlowCall struct {
	// Duration is the time from request headers to response headers above
	// which a call is slow; > 0.
	Duration time.Duration
	// ThresholdPercent, 1-100, applies with Breaker.FailureRate: the breaker
	// also opens when this percentage of the window's calls were slow.
	// Zero when the breaker has no FailureRate; then each slow call counts
	// as a failure toward FailureThreshold.
	ThresholdPercent int
}

// Breaker is one circuit breaker definition.
type Breaker struct {
	// Name is unique among breakers and is the metric label; it matches
	// [A-Za-z0-9_-]{1,64}.
	Name string
	// Match selects the requests the breaker guards; zero matches all.
	Match Match
	// Per defaults to PerCluster.
	Per BreakerScope
	// FailureStatuses are upstream statuses that count as failures;
	// default [500 502 503 504]; may be empty (only timeouts/slow calls fail).
	FailureStatuses []int
	// FailureOnTimeout counts upstream timeouts and resets as failures; default true.
	FailureOnTimeout bool
	// FailureThreshold is the consecutive failures that open the breaker;
	// default 5. Zero disables the consecutive trip, which is only allowed
	// with FailureRate set.
	FailureThreshold int
	// FailureRate is nil unless configured.
	FailureRate *FailureRate
	// SlowCall is nil unless configured.
	SlowCall *SlowCall
	// SuccessThreshold is the consecutive half-open successes that close
	// the breaker; >= 1, default 2.
	SuccessThreshold int
	// OpenTimeout is how long the breaker stays open before half-open; default 30s.
	OpenTimeout time.Duration
	// HalfOpenMaxRequests is how many probes are let through while
	// half-open; >= 1, default 1.
	HalfOpenMaxRequests int
	// Mode defaults to BreakerEnforce.
	Mode BreakerMode
	// Status of the reply while open, 400-599, default 503.
	Status int
	// Disabled ("enabled": false) keeps the entry configured but switched
	// off: never evaluated, never counted; its metrics stay at zero.
	Disabled bool
}

// Settings is the breaker core's configuration for b, the one conversion
// the parser validates and the filter runs.
func (b *Breaker) Settings() breaker.Settings {
	set := breaker.Settings{
		FailureThreshold:    uint32(b.FailureThreshold),
		SuccessThreshold:    uint32(b.SuccessThreshold),
		OpenTimeout:         b.OpenTimeout,
		HalfOpenMaxRequests: uint32(b.HalfOpenMaxRequests),
		Mode:                b.Mode,
	}
	if fr := b.FailureRate; fr != nil {
		set.FailureRatePercent = uint32(fr.ThresholdPercent)
		set.Window = breaker.Window{Type: fr.WindowType, MinimumCalls: uint32(fr.MinimumCalls)}
		if fr.WindowType == TimeWindow {
			set.Window.Duration = fr.WindowDuration
		} else {
			set.Window.Size = uint32(fr.Window)
		}
		if sc := b.SlowCall; sc != nil {
			set.SlowCallDuration = sc.Duration
			set.SlowCallPercent = uint32(sc.ThresholdPercent)
		}
	}
	return set
}

// IsFailureStatus reports whether an upstream status counts as a failure.
func (b *Breaker) IsFailureStatus(status int) bool {
	for _, s := range b.FailureStatuses {
		if s == status {
			return true
		}
	}
	return false
}

// HeaderFamilies is a set of rate-limit header families.
type HeaderFamilies uint8

const (
	// HeadersXRateLimit is X-RateLimit-Limit/-Remaining/-Reset.
	HeadersXRateLimit HeaderFamilies = 1 << iota
	// HeadersRateLimit is the IETF RateLimit-Policy and RateLimit fields.
	HeadersRateLimit
	// HeadersRetryAfter is Retry-After on rejections.
	HeadersRetryAfter

	// AllHeaderFamilies is the default.
	AllHeaderFamilies = HeadersXRateLimit | HeadersRateLimit | HeadersRetryAfter
)

// Has reports whether f includes all of g.
func (f HeaderFamilies) Has(g HeaderFamilies) bool { return f&g == g }

// Body is the format of local reply bodies.
type Body uint8

const (
	// BodyJSON is {"error": ..., "message": ..., ...}. Default.
	BodyJSON Body = iota
	// BodyProblemJSON is RFC 9457 application/problem+json.
	BodyProblemJSON
	// BodyNone sends an empty body.
	BodyNone
	// BodyTemplate renders Response.Templates (template.go).
	BodyTemplate
)

var bodyNames = enum.New[Body]("Body", "json", "problem+json", "none", "template")

func (b Body) String() string { return bodyNames.Name(b) }

// Response controls what rejections and allowed responses carry.
type Response struct {
	// Headers defaults to AllHeaderFamilies; zero sends none.
	Headers HeaderFamilies
	// HeadersOnAllowed adds the rate-limit headers to allowed responses too;
	// default true. Retry-After is only ever sent on rejections.
	HeadersOnAllowed bool
	// Body defaults to BodyJSON.
	Body Body
	// Templates are set with BodyTemplate.
	Templates *Templates
	// ReplyHeaders are added to every local reply; lowercase names.
	ReplyHeaders [][2]string
	// NearLimitRatio: an admission leaving at most 1-NearLimitRatio of
	// the capacity counts as near_limit; default DefaultNearLimitRatio.
	NearLimitRatio float64
	// PlainGRPC (response.grpc false) answers gRPC requests with plain
	// HTTP replies rather than trailers-only gRPC ones.
	PlainGRPC bool
}

// Protocol is how the backend speaks Redis over HTTP: the backend
// client's own type, so the config and the client cannot disagree on its
// values or names.
type Protocol = backend.Protocol

const (
	// ProtocolWebdis is GET /CMD/arg1/arg2 (Webdis). Default.
	ProtocolWebdis = backend.Webdis
	// ProtocolUpstash is POST of a JSON command array with a bearer token.
	ProtocolUpstash = backend.Upstash
)

var protocolNames = enum.Of("Protocol", ProtocolWebdis, ProtocolUpstash)

// Backend is the Redis-over-HTTP endpoint for global and hybrid limits.
type Backend struct {
	// Cluster is the Envoy cluster name for proxy_http_call; required.
	Cluster string
	// Authority is the :authority sent; default Cluster.
	Authority string
	// Protocol defaults to ProtocolWebdis.
	Protocol Protocol
	// PathPrefix starts with "/" and ends with "/"; default "/".
	PathPrefix string
	// BasicAuth is "user:pass" for Webdis ACLs; empty when unset.
	BasicAuth string
	// Token is the Upstash bearer token; required with ProtocolUpstash.
	Token string
	// Timeout per call, default 50ms, at most 10s.
	Timeout time.Duration
	// Retries after a failed call, 0-5, default 1.
	Retries int
	// FailurePolicy is the default for limits that set none; default FailAllow.
	FailurePolicy FailurePolicy
	// FailureStatus is the reply status under FailDeny, 400-599, default 429.
	FailureStatus int
	// Instances is the default Limit.Instances, >= 1, default 1.
	Instances int
	// Breaker guards the backend itself.
	Breaker BackendBreaker
}

// BackendBreaker stops calling Redis after repeated failures.
type BackendBreaker struct {
	// FailureThreshold is the failures within Window that open it; default 5.
	FailureThreshold int
	// Window over which failures are counted; default 30s.
	Window time.Duration
	// OpenTimeout before half-open; default 15s.
	OpenTimeout time.Duration
	// HalfOpenMaxRequests probes while half-open; default 2.
	HalfOpenMaxRequests int
	// OpenTimeoutMultiplier grows the open timeout on each re-open while
	// probes keep failing; 1 to 100, 0 (the default) for no growth.
	OpenTimeoutMultiplier float64
	// OpenTimeoutMax caps the grown open timeout; set, default 10 ×
	// OpenTimeout, only with OpenTimeoutMultiplier > 1.
	OpenTimeoutMax time.Duration
	// JitterPercent, 0-100, default 20, shortens each retry backoff and
	// open timeout by a random share of at most this percent.
	JitterPercent int
}
