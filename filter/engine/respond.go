package engine

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/sluice-proxy/sluice/filter/config"
)

// Problem types from draft-ietf-httpapi-ratelimit-headers, for RFC 9457 bodies.
const (
	problemQuotaExceeded    = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemReducedCapacity  = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	contentTypeJSON         = "application/json"
	contentTypeProblemJSON  = "application/problem+json"
	messageRateLimited      = "Too many requests"
	messageCircuitOpen      = "Service temporarily unavailable"
	titleQuotaExceeded      = "Request cannot be satisfied as assigned quota has been exceeded"
	titleTemporaryReduction = "Service temporarily unavailable"
)

// quota is what the rate-limit headers describe: one limit's decision.
type quota struct {
	name       string
	limit      int64         // per-window allowance, R or L
	window     time.Duration // the window (1s for requests_per_second)
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
	// applies is false for a stream no enforcing limit applied to.
	applies bool
	// consts are the limit's header values that do not change between
	// requests, rendered at configure time; nil renders every value.
	consts *quotaConsts
}

// quotaConsts are the header values of one limit at its configured rate:
// x-ratelimit-limit, ratelimit-policy, and the name part of ratelimit.
// They hold only while a decision reports that rate (an override with a
// rate of its own reports another, and is rendered per request).
type quotaConsts struct {
	limit  int64
	window time.Duration
	// limitValue is x-ratelimit-limit, policy is ratelimit-policy, and
	// ratelimitPrefix is ratelimit up to its remaining count.
	limitValue, policy, ratelimitPrefix string
}

// renderQuotaConsts renders the constant header values of the named limit
// at limit per window, with the same code that renders them per request.
func renderQuotaConsts(name string, limit int64, window time.Duration) *quotaConsts {
	c := &quotaConsts{limit: limit, window: window}
	c.limitValue = string(appendInt(nil, limit))
	c.policy = string(appendPolicy(nil, name, limit, window))
	c.ratelimitPrefix = string(append(appendSFString(nil, name), ";r="...))
	return c
}

// appendPolicy renders a RateLimit-Policy value.
func appendPolicy(buf []byte, name string, limit int64, window time.Duration) []byte {
	w := ceilSeconds(window)
	if w < 1 {
		w = 1
	}
	buf = appendSFString(buf, name)
	buf = append(buf, ";q="...)
	buf = appendInt(buf, limit)
	buf = append(buf, ";w="...)
	return appendInt(buf, w)
}

// retryAfterSeconds renders a wait as Retry-After wants it: whole seconds,
// rounded up, and never 0, because "retry after 0 seconds" invites a client
// to hammer a limit that has not refilled yet.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		return 1
	}
	return s
}

// ceilSeconds rounds up, allowing 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// appendRateLimitHeaders adds the configured header families for q.
// Retry-After is added only when rejected. Values are written into buf,
// which the caller reuses across requests, and the returned pairs point
// into it: the host copies header values during the hostcall, so rendering
// headers costs no allocation once buf has grown.
func appendRateLimitHeaders(dst [][2]string, buf []byte, families config.HeaderFamilies, q quota, now time.Time, rejected bool) ([][2]string, []byte) {
	buf = buf[:0]
	// Values are sliced out only after all are written: appending may move
	// buf, and a view into the old array would then miss later writes.
	// A span with a constant value names no bytes of buf.
	type span struct {
		name     string
		from, to int
		constant string
	}
	// Spans are written and read field by field: a span literal stored,
	// or a span copied out by range, is a bulk memory copy on
	// GOARCH=wasm, which Wasmtime runs as a call into the runtime.
	var spans [6]span
	n := 0
	mark := func(name string, from int) {
		sp := &spans[n]
		sp.name, sp.from, sp.to = name, from, len(buf)
		n++
	}
	markConstant := func(name, value string) {
		sp := &spans[n]
		sp.name, sp.constant = name, value
		n++
	}
	c := q.consts
	if c != nil && (c.limit != q.limit || c.window != q.window) {
		c = nil
	}
	if families.Has(config.HeadersRetryAfter) && rejected {
		from := len(buf)
		buf = appendInt(buf, retryAfterSeconds(q.retryAfter))
		mark("retry-after", from)
	}
	if families.Has(config.HeadersXRateLimit) {
		resetUnix := resetUnixSeconds(now, q.resetAfter)
		if c != nil {
			markConstant("x-ratelimit-limit", c.limitValue)
		} else {
			from := len(buf)
			buf = appendInt(buf, q.limit)
			mark("x-ratelimit-limit", from)
		}
		from := len(buf)
		buf = appendInt(buf, q.remaining)
		mark("x-ratelimit-remaining", from)
		from = len(buf)
		buf = appendInt(buf, resetUnix)
		mark("x-ratelimit-reset", from)
	}
	if families.Has(config.HeadersRateLimit) {
		from := len(buf)
		if c != nil {
			markConstant("ratelimit-policy", c.policy)
			buf = append(buf, c.ratelimitPrefix...)
		} else {
			buf = appendPolicy(buf, q.name, q.limit, q.window)
			mark("ratelimit-policy", from)
			from = len(buf)
			buf = appendSFString(buf, q.name)
			buf = append(buf, ";r="...)
		}
		buf = appendInt(buf, q.remaining)
		buf = append(buf, ";t="...)
		buf = appendInt(buf, ceilSeconds(q.resetAfter))
		mark("ratelimit", from)
	}
	for i := range spans[:n] {
		sp := &spans[i]
		v := sp.constant
		if sp.to > sp.from {
			v = unsafe.String(&buf[sp.from], sp.to-sp.from)
		}
		dst = append(dst, [2]string{})
		kv := &dst[len(dst)-1]
		kv[0], kv[1] = sp.name, v
	}
	return dst, buf
}

// resetUnixSeconds is the Unix time, in seconds rounded up, of now +
// resetAfter; plain integer arithmetic is much cheaper than time.Time's
// in the guest.
func resetUnixSeconds(now time.Time, resetAfter time.Duration) int64 {
	resetNs := now.UnixNano()
	if d := int64(resetAfter); d > math.MaxInt64-resetNs {
		resetNs = math.MaxInt64 // a limit refilling over centuries
	} else {
		resetNs += d
	}
	resetUnix := resetNs / int64(time.Second)
	if resetNs%int64(time.Second) > 0 {
		resetUnix++
	}
	return resetUnix
}

// appendInt is strconv.AppendInt(dst, v, 10) for the header values of
// every response, where strconv's general formatter costs about twice as
// much in the wasm guest as this digit loop.
func appendInt(dst []byte, v int64) []byte {
	var digits [20]byte
	u := uint64(v)
	if v < 0 {
		dst = append(dst, '-')
		u = -u
	}
	i := len(digits)
	for u >= 10 {
		q := u / 10
		i--
		digits[i] = byte('0' + u - q*10)
		u = q
	}
	i--
	digits[i] = byte('0' + u)
	return append(dst, digits[i:]...)
}

// appendSFString renders a Structured Fields (RFC 8941) string. Limit names
// are validated to [A-Za-z0-9_-], so escaping never triggers for them; it
// is here so a future caller cannot emit a malformed field.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b = append(b, c)
	}
	return append(b, '"')
}

// rejection describes a local reply body in both formats.
type rejection struct {
	code, message      string // the json body's "error" and "message"
	problemType, title string // RFC 9457
	field, value       string // the subject: "limit" or "upstream" and its name
	// noRetryAfter leaves out retry_after, for rejections after which no
	// wait can be predicted.
	noRetryAfter bool
}

// render writes the body in the configured format. Rejections are not the
// hot path, so clarity wins over avoiding the few allocations here.
func (r rejection) render(format config.Body, status int, retryAfter time.Duration) (contentType string, body []byte) {
	var b []byte
	switch format {
	case config.BodyNone:
		return "", nil
	case config.BodyProblemJSON:
		b = append(b, `{"type":`...)
		b = appendJSONString(b, r.problemType)
		b = append(b, `,"title":`...)
		b = appendJSONString(b, r.title)
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(status), 10)
		b = append(b, `,"detail":`...)
		b = appendJSONString(b, r.message)
		if r.field == "limit" {
			// The draft's extension member for quota-exceeded.
			b = append(b, `,"violated-policies":[`...)
			b = appendJSONString(b, r.value)
			b = append(b, ']')
		} else {
			b = append(b, ',')
			b = appendJSONString(b, r.field)
			b = append(b, ':')
			b = appendJSONString(b, r.value)
		}
		contentType = contentTypeProblemJSON
	default:
		b = append(b, `{"error":`...)
		b = appendJSONString(b, r.code)
		b = append(b, `,"message":`...)
		b = appendJSONString(b, r.message)
		b = append(b, ',')
		b = appendJSONString(b, r.field)
		b = append(b, ':')
		b = appendJSONString(b, r.value)
		contentType = contentTypeJSON
	}
	if !r.noRetryAfter {
		b = append(b, `,"retry_after":`...)
		b = strconv.AppendInt(b, retryAfterSeconds(retryAfter), 10)
	}
	return contentType, append(b, '}')
}

// rateLimitedBody renders the body of a rejection by the named limit.
func rateLimitedBody(format config.Body, limitName string, status int, retryAfter time.Duration) (contentType string, body []byte) {
	return rejection{
		code: "rate_limited", message: messageRateLimited,
		problemType: problemQuotaExceeded, title: titleQuotaExceeded,
		field: "limit", value: limitName,
	}.render(format, status, retryAfter)
}

// circuitOpenBody renders the body of a rejection by an open breaker.
func circuitOpenBody(format config.Body, upstream string, status int, retryAfter time.Duration) (contentType string, body []byte) {
	return rejection{
		code: "circuit_open", message: messageCircuitOpen,
		problemType: problemReducedCapacity, title: titleTemporaryReduction,
		field: "upstream", value: upstream,
	}.render(format, status, retryAfter)
}

// appendJSONString appends s as a JSON string. Cluster and header-derived
// text can hold anything, and invalid UTF-8 becomes U+FFFD so the body is
// always valid JSON.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\ufffd"...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// missingKeyBody answers a request that lacks the key of a limit with
// on_missing_key: deny. Retrying cannot help, so there is no retry_after.
func missingKeyBody(format config.Body, limitName string, status int) (contentType string, body []byte) {
	switch format {
	case config.BodyNone:
		return "", nil
	case config.BodyProblemJSON:
		b := []byte(`{"type":"about:blank","title":"Missing rate limit key","status":`)
		b = strconv.AppendInt(b, int64(status), 10)
		b = append(b, `,"violated-policies":[`...)
		b = appendJSONString(b, limitName)
		return contentTypeProblemJSON, append(b, "]}"...)
	default:
		b := []byte(`{"error":"rate_limit_key_missing","message":"The request lacks the key this limit is counted by","limit":`)
		b = appendJSONString(b, limitName)
		return contentTypeJSON, append(b, '}')
	}
}

// appendRejectionLog starts the JSON line of a rejection by a rate or
// concurrency limit: the event, the limit and its key's kinds.
func appendRejectionLog(b []byte, event, limit, keyKinds string) []byte {
	b = append(b, `{"sluice":`...)
	b = appendJSONString(b, event)
	b = append(b, `,"limit":`...)
	b = appendJSONString(b, limit)
	b = append(b, `,"key":`...)
	return appendJSONString(b, keyKinds)
}
