// Package limitsvc is the wire side of the external limits service: the
// strict parsing of its answers and the shared-data record that caches
// them with their singleflight and breaker state.
//
// It performs no I/O and imports nothing from proxy-wasm, so it builds
// natively (and is fuzzed) as well as for GOOS=wasip1. Failures are
// *backend.Error values with the same kinds as Redis backend failures, so
// the filter classifies and counts both alike.
package limitsvc

import (
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/limiter"
)

// Policy is the failure policy an answer asks for its global or hybrid
// limit.
type Policy uint8

const (
	// PolicyDefault leaves the configured failure_policy in force.
	PolicyDefault Policy = iota
	// PolicyAllow, PolicyDeny and PolicyLocal override it for this answer.
	PolicyAllow
	PolicyDeny
	PolicyLocal
)

// Bounds on what an answer may say. A service asking for more is broken or
// compromised, and its answer counts as a failure.
const (
	// MaxRate bounds the requests per period and the burst, as the
	// configuration does.
	MaxRate = 1_000_000_000
	// MaxTenantKey bounds tenant_key in bytes: it is stored in every cached
	// entry and becomes a shared-data or Redis key.
	MaxTenantKey = 256
	// MaxAge bounds cache_max_age_seconds.
	MaxAge = 7 * 24 * time.Hour
	// MinPeriod and MaxPeriod bound the period, as the configuration's
	// window.
	MinPeriod = time.Millisecond
	// MinFailureCode and MaxFailureCode bound failure_code, as the
	// configuration's failure_status.
	MinFailureCode = 400
	MaxFailureCode = 599
	MaxPeriod      = 7 * 24 * time.Hour
	// MaxBackendURL bounds backend_url in bytes, as the configuration
	// bounds each of external.allowed_routes: it is stored in every cached
	// entry, and a longer value could never be allowed.
	MaxBackendURL = 256
)

// Answer is what the service said about one request.
type Answer struct {
	// Unlimited is set when the service answered a rate of 0: no limit
	// applies. Rate, Period and Burst are then zero.
	Unlimited bool
	// Rate requests per Period refill a bucket of Burst tokens: as in seed
	// 003, an answer's burst is the bucket's capacity (0 or absent: Rate),
	// unlike a static limit's burst, which is added on top of the rate.
	Rate   int64
	Period time.Duration
	Burst  int64
	// TenantKey selects the bucket; empty when the service named none.
	TenantKey string
	Policy    Policy
	// FailureCode is the status of this tenant's rejections under the
	// deny failure policy, 400-599; zero keeps the backend's
	// failure_status.
	FailureCode int
	// BackendURL is the answer's backend_url, unchecked: only a value in
	// external.allowed_routes may route the request (see
	// config.External.RouteAllowed); empty when the answer has none.
	BackendURL string
	// MaxAge is how long the answer is fresh; zero means the configured
	// cache_ttl.
	MaxAge time.Duration
	// NoStore asks that the answer serve only the requests waiting for it.
	NoStore bool
	// NoCache (Cache-Control no-cache or max-age=0) keeps the answer
	// for stale use without ever serving it fresh.
	NoCache bool
}

// Limit is the token bucket the answer describes: capacity Burst (Rate
// when 0), refilled at Rate per Period. A capacity below the rate is the
// same refill speed over a shorter period, Capacity per
// Period×Capacity/Rate, rounded up (never faster) and at least
// limiter.MinPeriod.
func (a *Answer) Limit() limiter.Limit {
	capacity := a.Burst
	if capacity == 0 || capacity == a.Rate {
		return limiter.Limit{Algorithm: limiter.TokenBucket, Rate: a.Rate, Period: a.Period}
	}
	if capacity > a.Rate {
		return limiter.Limit{Algorithm: limiter.TokenBucket, Rate: a.Rate, Period: a.Period, Burst: capacity - a.Rate}
	}
	if a.Rate <= 0 || a.Period <= 0 || capacity < 0 {
		// Not a limit Parse accepts; Validate reports it.
		return limiter.Limit{Algorithm: limiter.TokenBucket, Rate: a.Rate, Period: a.Period, Burst: a.Burst}
	}
	// Period × capacity < 2^128 and, as capacity < Rate, the quotient is
	// below Period.
	hi, lo := bits.Mul64(uint64(a.Period), uint64(capacity))
	q, r := bits.Div64(hi, lo, uint64(a.Rate))
	if r != 0 {
		q++
	}
	period := max(time.Duration(q), limiter.MinPeriod)
	return limiter.Limit{Algorithm: limiter.TokenBucket, Rate: capacity, Period: period}
}

func fail(kind backend.Kind, status int, detail string) error {
	return &backend.Error{Kind: kind, Status: status, Detail: detail}
}

func malformed(detail string) error { return fail(backend.KindMalformed, 200, detail) }

// Parse reads the service's answer. Anything but HTTP 200 with a JSON
// object stating a valid limit is an error: KindUnavailable for 5xx,
// KindHTTPStatus for other statuses, KindMalformed for the body. Unknown
// members are ignored, so a service can add its own.
func Parse(status int, body []byte) (Answer, error) {
	return ParseWith(status, body, CacheControl{})
}

// ParseWith is Parse of a reply whose Cache-Control header said cc: the
// header applies where the body is silent, and the body's
// cache_max_age_seconds and cache_no_store win where both speak;
// max-age=0 and no-cache make the answer never fresh.
func ParseWith(status int, body []byte, cc CacheControl) (Answer, error) {
	switch {
	case status >= 500:
		return Answer{}, fail(backend.KindUnavailable, status, "")
	case status != 200:
		return Answer{}, fail(backend.KindHTTPStatus, status, "")
	}
	if !gjson.ValidBytes(body) {
		return Answer{}, malformed("invalid JSON")
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return Answer{}, malformed("answer is not a JSON object")
	}
	var a Answer
	var rateName, periodName string
	var rate, period gjson.Result
	for _, name := range [...]string{"average", "requests_per_second", "limit"} {
		if v := root.Get(name); v.Exists() {
			if rateName != "" {
				return Answer{}, malformed(rateName + " and " + name + " both given")
			}
			rateName, rate = name, v
		}
	}
	for _, name := range [...]string{"period", "window"} {
		if v := root.Get(name); v.Exists() {
			if periodName != "" {
				return Answer{}, malformed(periodName + " and " + name + " both given")
			}
			periodName, period = name, v
		}
	}
	var err error
	switch {
	case rateName == "":
		return Answer{}, malformed("no average, requests_per_second or limit")
	case rateName == "requests_per_second" && periodName != "":
		return Answer{}, malformed("requests_per_second with " + periodName)
	case rateName != "requests_per_second" && periodName == "":
		return Answer{}, malformed(rateName + " without period or window")
	}
	if a.Rate, err = count(rateName, rate); err != nil {
		return Answer{}, err
	}
	a.Period = time.Second
	if periodName != "" {
		if a.Period, err = duration(periodName, period); err != nil {
			return Answer{}, err
		}
	}
	if v := root.Get("burst"); v.Exists() {
		if a.Burst, err = count("burst", v); err != nil {
			return Answer{}, err
		}
	}
	if a.Rate == 0 {
		a.Unlimited = true
		a.Period, a.Burst = 0, 0
	} else if err := a.Limit().Validate(); err != nil {
		return Answer{}, malformed(err.Error())
	}
	if v := root.Get("tenant_key"); v.Exists() {
		if a.TenantKey, err = text("tenant_key", v, MaxTenantKey); err != nil {
			return Answer{}, err
		}
	}
	if v := root.Get("failure_policy"); v.Exists() {
		if a.Policy, err = policy(v); err != nil {
			return Answer{}, err
		}
	}
	if v := root.Get("failure_code"); v.Exists() {
		if a.FailureCode, err = failureCode(v); err != nil {
			return Answer{}, err
		}
	}
	if v := root.Get("backend_url"); v.Exists() {
		if a.BackendURL, err = text("backend_url", v, MaxBackendURL); err != nil {
			return Answer{}, err
		}
	}
	if v := root.Get("cache_max_age_seconds"); v.Exists() {
		n, err := count("cache_max_age_seconds", v)
		if err != nil {
			return Answer{}, err
		}
		if n > int64(MaxAge/time.Second) {
			return Answer{}, malformed("cache_max_age_seconds above " + strconv.Itoa(int(MaxAge/time.Second)))
		}
		a.MaxAge = time.Duration(n) * time.Second
	} else {
		switch {
		case cc.NoCache, cc.HasMaxAge && cc.MaxAge == 0:
			a.NoCache = true
		case cc.HasMaxAge:
			a.MaxAge = cc.MaxAge
		}
	}
	if v := root.Get("cache_no_store"); v.Exists() {
		if v.Type != gjson.True && v.Type != gjson.False {
			return Answer{}, malformed("cache_no_store is not a boolean")
		}
		a.NoStore = v.Type == gjson.True
	} else {
		a.NoStore = cc.NoStore
	}
	return a, nil
}

// count reads a non-negative integer literal up to MaxRate; fractions,
// exponents and strings are refused rather than guessed at.
func count(name string, v gjson.Result) (int64, error) {
	if v.Type != gjson.Number {
		return 0, malformed(name + " is not a number")
	}
	n, err := strconv.ParseInt(v.Raw, 10, 64)
	switch {
	case err != nil:
		return 0, malformed(name + " is not an integer")
	case n < 0:
		return 0, malformed(name + " is negative")
	case n > MaxRate:
		return 0, malformed(name + " above " + strconv.Itoa(MaxRate))
	}
	return n, nil
}

// text reads a non-empty string of at most maxLen bytes: a value stored
// in every cached entry.
func text(name string, v gjson.Result, maxLen int) (string, error) {
	switch {
	case v.Type != gjson.String:
		return "", malformed(name + " is not a string")
	case v.Str == "":
		return "", malformed(name + " is empty")
	case len(v.Str) > maxLen:
		return "", malformed(name + " longer than " + strconv.Itoa(maxLen) + " bytes")
	}
	return v.Str, nil
}

// duration reads a Go duration string ("1s", "1m30s") or whole seconds.
func duration(name string, v gjson.Result) (time.Duration, error) {
	var d time.Duration
	switch v.Type {
	case gjson.String:
		var err error
		if d, err = time.ParseDuration(v.Str); err != nil {
			return 0, malformed(name + " is not a duration")
		}
	case gjson.Number:
		n, err := count(name, v)
		if err != nil {
			return 0, err
		}
		if n > int64(MaxPeriod/time.Second) {
			return 0, malformed(name + " above " + MaxPeriod.String())
		}
		d = time.Duration(n) * time.Second
	default:
		return 0, malformed(name + " is neither a duration string nor seconds")
	}
	if d < MinPeriod || d > MaxPeriod {
		return 0, malformed(name + " outside " + MinPeriod.String() + " to " + MaxPeriod.String())
	}
	return d, nil
}

// policy accepts the filter's spellings and the common aliases of other
// rate limiters' services.
func policy(v gjson.Result) (Policy, error) {
	if v.Type != gjson.String {
		return 0, malformed("failure_policy is not a string")
	}
	switch strings.ToLower(v.Str) {
	case "allow", "passthrough":
		return PolicyAllow, nil
	case "deny", "failclosed":
		return PolicyDeny, nil
	case "local", "inmemoryfallback":
		return PolicyLocal, nil
	}
	return 0, malformed("unknown failure_policy")
}

// failureCode reads failure_code: an HTTP status a rejection can carry.
func failureCode(v gjson.Result) (int, error) {
	n, err := count("failure_code", v)
	if err != nil {
		return 0, err
	}
	if n < MinFailureCode || n > MaxFailureCode {
		return 0, malformed("failure_code outside " + strconv.Itoa(MinFailureCode) + "-" + strconv.Itoa(MaxFailureCode))
	}
	return int(n), nil
}
