package config

import (
	"strings"
	"time"
)

// Recovery settings of backend.breaker: the open timeout grows while
// probes keep failing, and retries and open timeouts are jittered.
const (
	// DefaultBackendJitterPercent spreads retries and re-probes of many
	// Envoys that saw Redis fail at the same moment.
	DefaultBackendJitterPercent = 20
	// maxOpenTimeoutMultiplier is the breaker core's bound.
	maxOpenTimeoutMultiplier = 100
	// openTimeoutMaxFactor is the default open_timeout_max, in
	// open_timeouts: the breaker core's default.
	openTimeoutMaxFactor = 10
)

var (
	backendFields        = fieldsOf[wireBackend]()
	backendBreakerFields = fieldsOf[wireBackendBreaker]()
)

// defaultBackend is a backend block's settings before its fields are read.
func defaultBackend() *Backend {
	return &Backend{
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
}

func (p *parser) backend(o *object) *Backend {
	b := defaultBackend()
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
	if protocolOK {
		// Which credentials belong depends on the protocol meant.
		backendCredentials(o, b)
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
		backendBreaker(c, &b.Breaker)
	}
	return b
}

// backendCredentials reads basic_auth (webdis) or token (upstash), as
// b.Protocol wants.
func backendCredentials(o *object, b *Backend) {
	if b.Protocol == ProtocolWebdis {
		if s, ok := o.str("basic_auth"); ok {
			if !strings.Contains(s, ":") {
				o.errorf("basic_auth", `must be "user:password"`)
			}
			b.BasicAuth = s
		}
		o.onlyWith("token", `protocol "upstash"`)
		return
	}
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

// backendBreaker reads backend.breaker.
func backendBreaker(c *object, bb *BackendBreaker) {
	if n, ok := c.integer("failure_threshold", 1, maxCount); ok {
		bb.FailureThreshold = int(n)
	}
	if d, ok := c.duration("window", time.Nanosecond, 24*time.Hour); ok {
		bb.Window = d
	}
	if d, ok := c.duration("open_timeout", time.Nanosecond, 24*time.Hour); ok {
		bb.OpenTimeout = d
	}
	if n, ok := c.integer("half_open_max_requests", 1, maxCount); ok {
		bb.HalfOpenMaxRequests = int(n)
	}
	backendRecovery(c, bb)
}

// backendRecovery reads open_timeout_multiplier, open_timeout_max and
// jitter_percent of backend.breaker, after open_timeout.
func backendRecovery(c *object, bb *BackendBreaker) {
	if m, ok := c.number("open_timeout_multiplier", 1, maxOpenTimeoutMultiplier); ok {
		bb.OpenTimeoutMultiplier = m
	}
	growing := bb.OpenTimeoutMultiplier > 1
	if d, ok := c.duration("open_timeout_max", time.Nanosecond, 24*time.Hour); ok {
		switch {
		case !growing:
			c.errorf("open_timeout_max", "has no effect without open_timeout_multiplier > 1")
		case d < bb.OpenTimeout:
			c.errorf("open_timeout_max", "%v is less than open_timeout %v", d, bb.OpenTimeout)
		default:
			bb.OpenTimeoutMax = d
		}
	} else if growing && !c.has("open_timeout_max") {
		bb.OpenTimeoutMax = min(bb.OpenTimeout*openTimeoutMaxFactor, 24*time.Hour)
	}
	if n, ok := c.integer("jitter_percent", 0, 100); ok {
		bb.JitterPercent = int(n)
	}
}
