package config

import (
	"errors"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-proxy/sluice/breaker"
)

// defaultClientIP is client_ip when it is absent or empty: the peer, with
// Envoy's own hop the one trusted.
func defaultClientIP() ClientIP { return ClientIP{Source: ClientIPPeer, TrustedHops: 1} }

func (p *parser) clientIP(o *object) ClientIP {
	c := defaultClientIP()
	c.Sources = p.clientIPSources(o)
	if v, ok := readEnum(o, "source", clientIPSourceNames); ok {
		c.Source = v
	} else if o.has("source") {
		// Which of trusted_hops or header is misplaced depends on the
		// source meant; the source error is the one to fix.
		return c
	}
	if c.Source == ClientIPXFF || hasSource(c.Sources, ClientIPXFF) {
		if n, ok := o.integer("trusted_hops", 1, maxTrustedHops); ok {
			c.TrustedHops = int(n)
		}
	} else {
		o.onlyWith("trusted_hops", `source "xff" or sources with "xff"`)
	}
	if c.Source == ClientIPHeader {
		c.Header = o.headerName("header", `required with source "header"`)
	} else {
		o.onlyWith("header", `source "header"`)
	}
	return c
}

var backendFields = fieldsOf[wireBackend]()

func (p *parser) backend(o *object) *Backend {
	b := &Backend{
		PathPrefix:    "/",
		Timeout:       DefaultBackendTimeout,
		Retries:       DefaultBackendRetries,
		FailurePolicy: FailAllow,
		FailureStatus: DefaultBackendStatus,
		Instances:     1,
		Breaker: BackendBreaker{
			FailureThreshold:    DefaultBackendBreakerThreshold,
			Window:              DefaultBackendBreakerWindow,
			OpenTimeout:         DefaultBackendBreakerOpenTimeout,
			HalfOpenMaxRequests: DefaultBackendBreakerHalfOpen,
			JitterPercent:       DefaultBackendJitterPercent,
		},
	}
	b.Cluster, b.Authority = o.clusterAuthority()
	protocolOK := true
	if v, ok := readEnum(o, "protocol", protocolNames); ok {
		b.Protocol = v
	} else if o.has("protocol") {
		protocolOK = false
	}
	if s, ok := o.str("path_prefix"); ok {
		if !strings.HasPrefix(s, "/") {
			o.errorf("path_prefix", `must start with "/"`)
		}
		if !strings.HasSuffix(s, "/") {
			// The filter appends commands directly to the prefix.
			s += "/"
		}
		b.PathPrefix = s
	}
	switch {
	case !protocolOK:
		// Which credentials belong depends on the protocol meant.
	case b.Protocol == ProtocolWebdis:
		if s, ok := o.str("basic_auth"); ok {
			if !strings.Contains(s, ":") {
				o.errorf("basic_auth", `must be "user:password"`)
			}
			b.BasicAuth = s
		}
		o.onlyWith("token", `protocol "upstash"`)
	default:
		o.onlyWith("basic_auth", `protocol "webdis"`)
		if s, ok := o.str("token"); ok {
			if s == "" {
				o.errorf("token", "must not be empty")
			}
			b.Token = s
		} else if !o.has("token") {
			o.errorf("token", `required with protocol "upstash"`)
		}
	}
	if d, ok := o.duration("timeout", time.Nanosecond, maxBackendWait); ok {
		b.Timeout = d
	}
	if n, ok := o.integer("retries", 0, maxRetries); ok {
		b.Retries = int(n)
	}
	if v, ok := readEnum(o, "failure_policy", failurePolicyNames); ok {
		b.FailurePolicy = v
	}
	if n, ok := o.integer("failure_status", 400, 599); ok {
		b.FailureStatus = int(n)
	}
	if n, ok := o.integer("instances", 1, maxInstances); ok {
		b.Instances = int(n)
	}
	if c := o.child("breaker", backendBreakerFields...); c != nil {
		if n, ok := c.integer("failure_threshold", 1, maxCount); ok {
			b.Breaker.FailureThreshold = int(n)
		}
		if d, ok := c.duration("window", time.Nanosecond, 24*time.Hour); ok {
			b.Breaker.Window = d
		}
		if d, ok := c.duration("open_timeout", time.Nanosecond, 24*time.Hour); ok {
			b.Breaker.OpenTimeout = d
		}
		if n, ok := c.integer("half_open_max_requests", 1, maxCount); ok {
			b.Breaker.HalfOpenMaxRequests = int(n)
		}
		p.backendRecovery(c, &b.Breaker)
	}
	return b
}

var (
	breakerFields     = fieldsOf[wireBreaker]()
	failureRateFields = fieldsOf[wireFailureRate]()
	slowCallFields    = fieldsOf[wireSlowCall]()
)

func (p *parser) breakers(cfg *Config, path string, items []gjson.Result) {
	p.namedEntries(path, items, breakerFields, func(_ int, o *object) string {
		b := p.breaker(o)
		cfg.Breakers = append(cfg.Breakers, b)
		return b.Name
	}, func() {})
}

func (p *parser) breaker(o *object) Breaker {
	errsBefore := p.found
	b := Breaker{
		FailureStatuses:     append([]int(nil), DefaultFailureStatuses...),
		FailureOnTimeout:    true,
		FailureThreshold:    DefaultFailureThreshold,
		SuccessThreshold:    DefaultSuccessThreshold,
		OpenTimeout:         DefaultOpenTimeout,
		HalfOpenMaxRequests: DefaultHalfOpenMaxRequests,
		Status:              DefaultBreakerStatus,
	}
	b.Name = p.name(o)
	b.Disabled = p.disabled(o)
	if m := o.child("match", matchFields...); m != nil {
		b.Match = p.match(m)
	}
	if v, ok := readEnum(o, "per", breakerScopeNames); ok {
		b.Per = v
	}
	if items, ok := o.array("failure_statuses", ""); ok {
		b.FailureStatuses = []int{}
		for i, item := range items {
			ipath := IndexPath(o.path1("failure_statuses"), i)
			n, ok := p.integer(ipath, item, 100, 599)
			if !ok {
				continue
			}
			if containsInt(b.FailureStatuses, int(n)) {
				p.errorf(ipath, item.Index, "duplicate status %d", n)
				continue
			}
			b.FailureStatuses = append(b.FailureStatuses, int(n))
		}
	}
	if v, ok := o.boolean("failure_on_timeout"); ok {
		b.FailureOnTimeout = v
	}
	if c := o.child("failure_rate", failureRateFields...); c != nil {
		fr := &FailureRate{ThresholdPercent: DefaultFailureRatePercent, MinimumCalls: DefaultMinimumCalls}
		if n, ok := c.integer("threshold_percent", 1, 100); ok {
			fr.ThresholdPercent = int(n)
		}
		if v, ok := readEnum(c, "window_type", windowTypeNames); ok {
			fr.WindowType = v
		}
		if n, ok := c.integer("minimum_calls", 1, breaker.MaxCounter); ok {
			fr.MinimumCalls = int(n)
		}
		if fr.WindowType == CountWindow {
			fr.Window = DefaultFailureRateWindow
			if n, ok := c.integer("window", 1, breaker.MaxCountWindow); ok {
				fr.Window = int(n)
			}
			c.onlyWith("window_duration", `window_type "time"`)
			if fr.MinimumCalls > fr.Window {
				c.errorf("minimum_calls", "must be <= window (%d), or the rate is never judged", fr.Window)
			}
		} else {
			fr.WindowDuration = DefaultFailureRateDuration
			if d, ok := c.duration("window_duration", time.Second, 24*time.Hour); ok {
				fr.WindowDuration = d
			}
			c.onlyWith("window", `window_type "count"`)
		}
		b.FailureRate = fr
	}
	if n, ok := o.integer("failure_threshold", 0, breaker.MaxCounter); ok {
		b.FailureThreshold = int(n)
		if n == 0 && b.FailureRate == nil {
			o.errorf("failure_threshold", "must be >= 1 unless failure_rate is set, or the breaker never opens")
		}
	}
	if c := o.child("slow_call", slowCallFields...); c != nil {
		sc := &SlowCall{}
		if d, ok := c.duration("duration", time.Millisecond, time.Hour); ok {
			sc.Duration = d
		} else if !c.has("duration") {
			c.errorf("duration", "required")
		}
		if b.FailureRate != nil {
			sc.ThresholdPercent = DefaultSlowCallPercent
			if n, ok := c.integer("threshold_percent", 1, 100); ok {
				sc.ThresholdPercent = int(n)
			}
		} else {
			c.onlyWith("threshold_percent", "failure_rate (without it each slow call counts as a failure)")
		}
		b.SlowCall = sc
	}
	if n, ok := o.integer("success_threshold", 1, breaker.MaxCounter); ok {
		b.SuccessThreshold = int(n)
	}
	if d, ok := o.duration("open_timeout", time.Millisecond, 24*time.Hour); ok {
		b.OpenTimeout = d
	}
	if n, ok := o.integer("half_open_max_requests", 1, breaker.MaxCounter); ok {
		b.HalfOpenMaxRequests = int(n)
	}
	if v, ok := readEnum(o, "mode", breakerModeNames); ok {
		b.Mode = v
	}
	if n, ok := o.integer("status", 400, 599); ok {
		b.Status = int(n)
	}
	// The breaker core is the authority on its settings; asking it here
	// turns anything it would refuse at plugin start into errors with
	// their paths, all at once, even if the bounds above drift from its.
	if p.found == errsBefore {
		set := b.Settings()
		if joined, ok := set.Validate().(interface{ Unwrap() []error }); ok {
			for _, err := range joined.Unwrap() {
				var fe *breaker.FieldError
				if errors.As(err, &fe) {
					o.errorf(fe.Field, "%s", fe.Reason)
				} else {
					o.errorf("", "%v", err)
				}
			}
		}
	}
	return b
}

func containsInt(ns []int, n int) bool {
	for _, x := range ns {
		if x == n {
			return true
		}
	}
	return false
}

var headerFamilyNames = []string{"x-ratelimit", "ratelimit", "retry-after"}

// defaultResponse is response when it is absent or empty.
func defaultResponse() Response {
	return Response{Headers: AllHeaderFamilies, HeadersOnAllowed: true, Body: BodyJSON, NearLimitRatio: DefaultNearLimitRatio}
}

func (p *parser) response(o *object) Response {
	r := defaultResponse()
	if items, ok := o.array("headers", ""); ok {
		r.Headers = 0
		for i, item := range items {
			ipath := IndexPath(o.path1("headers"), i)
			idx := -1
			if item.Type == gjson.String {
				for j, n := range headerFamilyNames {
					if item.Str == n {
						idx = j
					}
				}
			}
			if idx < 0 {
				p.errorf(ipath, item.Index, "unknown header family %s; want one of %s", Excerpt(item.Raw), strings.Join(headerFamilyNames, ", "))
				continue
			}
			f := HeaderFamilies(1) << idx
			if r.Headers.Has(f) {
				p.errorf(ipath, item.Index, "duplicate header family %s", Quote(item.Str))
			}
			r.Headers |= f
		}
	}
	if b, ok := o.boolean("headers_on_allowed"); ok {
		r.HeadersOnAllowed = b
	}
	if v, ok := readEnum(o, "body", bodyNames); ok {
		r.Body = v
	}
	p.responseContract(o, &r)
	return r
}
