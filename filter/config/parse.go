package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/sluice-proxy/sluice/breaker"
)

// Upper bounds, mirrored in schema.json. They keep limiter arithmetic
// (tokens × nanoseconds) far from int64 overflow; the duration bounds also
// reject values that can only be typos, such as a 200-hour window.
const (
	maxCount       = 1_000_000_000
	maxWindow      = 7 * 24 * time.Hour
	maxMaxDelay    = 60 * time.Second
	maxBackendWait = 10 * time.Second
	maxRetries     = 5
	maxInstances   = 10_000
	maxTrustedHops = 64
	maxNameLen     = 64
	// maxEntries bounds limits and breakers: every request walks the
	// lists, and replaces resolution is quadratic in the number of limits.
	maxEntries = 1000
)

// DefaultFailureStatuses are the upstream statuses a breaker counts as
// failures when failure_statuses is not set. Parse copies it into each
// Breaker, so changing a parsed config never changes the defaults.
var DefaultFailureStatuses = []int{500, 502, 503, 504}

// Defaults that Parse fills in, exported so the filter, tests and README
// refer to one definition. A default the decision cores also have is
// theirs, so the two cannot drift apart.
const (
	DefaultLimitStatus         = 429
	DefaultMaxDelay            = 500 * time.Millisecond
	DefaultBreakerStatus       = 503
	DefaultConcurrencyStatus   = 503
	DefaultFailureThreshold    = breaker.DefaultFailureThreshold
	DefaultSuccessThreshold    = breaker.DefaultSuccessThreshold
	DefaultOpenTimeout         = breaker.DefaultOpenTimeout
	DefaultHalfOpenMaxRequests = breaker.DefaultHalfOpenMaxRequests
	DefaultFailureRatePercent  = 50
	DefaultFailureRateWindow   = breaker.DefaultWindowSize
	DefaultFailureRateDuration = breaker.DefaultWindowDuration
	DefaultMinimumCalls        = breaker.DefaultMinimumCalls
	DefaultSlowCallPercent     = 100
	DefaultBackendTimeout      = 50 * time.Millisecond
	DefaultBackendRetries      = 1
	DefaultBackendStatus       = 429

	DefaultBackendBreakerThreshold   = 5
	DefaultBackendBreakerWindow      = 30 * time.Second
	DefaultBackendBreakerOpenTimeout = 15 * time.Second
	DefaultBackendBreakerHalfOpen    = 2
)

// Parse parses and validates a plugin configuration. Empty input (Envoy
// passes an empty configuration when none is set) and {} are valid and give a
// config with no limits or breakers and every default. On failure the error
// is an Errors listing every problem in document order.
func Parse(data []byte) (*Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return defaultConfig(), nil
	}
	if err := checkJSON(data); err != nil {
		return nil, Errors{*err}
	}
	p := &parser{}
	cfg := p.config(gjson.ParseBytes(data))
	if p.found > 0 {
		p.errs.sort()
		if more := p.found - len(p.errs); more > 0 {
			p.errs = append(p.errs, FieldError{Message: fmt.Sprintf("and %d more errors, not listed", more), Unlisted: more, offset: len(data)})
		}
		return nil, p.errs
	}
	return cfg, nil
}

func defaultConfig() *Config {
	return &Config{
		ClientIP: defaultClientIP(),
		Response: defaultResponse(),
	}
}

// checkJSON requires both gjson and encoding/json to accept the document:
// gjson is what we read with, encoding/json gives a message with an offset.
// Only the syntax is checked here: decoding into a RawMessage converts no
// number, so a valid document with a number no float64 holds (1e400) gets
// to the field checks, which name its path and range.
func checkJSON(data []byte) *FieldError {
	if bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		return &FieldError{Message: "invalid JSON at byte 0: the document starts with a UTF-8 byte order mark, which JSON does not allow (RFC 8259 section 8.1): save it without one"}
	}
	if !utf8.Valid(data) {
		at := 0
		for at < len(data) {
			r, n := utf8.DecodeRune(data[at:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			at += n
		}
		return &FieldError{Message: fmt.Sprintf("invalid JSON at byte %d: not valid UTF-8", at)}
	}
	var v json.RawMessage
	if err := json.Unmarshal(data, &v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return &FieldError{Message: fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, se.Error())}
		}
		return &FieldError{Message: "invalid JSON: " + err.Error()}
	}
	if !gjson.ValidBytes(data) {
		return &FieldError{Message: "invalid JSON"}
	}
	return nil
}

var (
	configFields   = fieldsOf[wireConfig]()
	clientIPFields = fieldsOf[wireClientIP]()
)

type parser struct {
	errs Errors
	// found counts every error, also those past MaxErrors that errs
	// does not keep.
	found int
}

// MaxErrors is how many errors Parse lists at most; one more entry
// counts the rest. A hostile document can hold millions (a key repeated
// over 16 MiB), and each listed one is a log line in Envoy.
const MaxErrors = 100

func (p *parser) errorf(path string, at int, format string, args ...any) {
	if p.found++; p.found > MaxErrors {
		return
	}
	p.errs = append(p.errs, FieldError{Path: path, Message: fmt.Sprintf(format, args...), offset: at})
}

func (p *parser) config(root gjson.Result) *Config {
	cfg := defaultConfig()
	if !root.IsObject() {
		p.errorf("", 0, "configuration must be a JSON object")
		return cfg
	}
	o := p.object("", root, configFields...)
	if c := o.child("client_ip", clientIPFields...); c != nil {
		cfg.ClientIP = p.clientIP(c)
	}
	if b := o.child("backend", backendFields...); b != nil {
		cfg.Backend = p.backend(b)
	}
	p.entryList(o, "limits", cfg, p.limits)
	if e := o.child("external", externalFields...); e != nil {
		cfg.External = p.external(e, cfg)
	}
	p.entryList(o, "breakers", cfg, p.breakers)
	p.entryList(o, "concurrency", cfg, p.concurrency)
	if a := o.child("admin", adminFields...); a != nil {
		cfg.Admin = p.admin(a)
	}
	if r := o.child("response", responseFields...); r != nil {
		cfg.Response = p.response(r)
	}
	return cfg
}
