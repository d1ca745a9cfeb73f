package backend

import (
	"github.com/sluice-proxy/sluice/internal/enum"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-proxy/sluice/limiter"
)

// Kind classifies backend failures for metrics and for deciding whether a
// retry can help.
type Kind uint8

const (
	// KindTimeout: the call did not finish in time. The parser never
	// returns it; the caller, which owns the clock, builds it with Timeout.
	KindTimeout Kind = iota + 1
	// KindUnavailable: HTTP 5xx, e.g. Webdis's empty 503 when Redis is
	// down, or Envoy's 503 when the cluster has no healthy host.
	KindUnavailable
	// KindHTTPStatus: any other unexpected HTTP status (401/403 from an
	// ACL or a wrong token, 404 from a wrong path prefix): a deployment
	// error, which fails every call alike.
	KindHTTPStatus
	// KindNoScript: Redis does not know the script; load it and retry.
	KindNoScript
	// KindMalformed: the reply is not the JSON shape the script returns
	// (HTML error page, wrong array length, null, out-of-range numbers).
	KindMalformed
	// KindRedis: Redis answered with an error (bad arguments, WRONGTYPE,
	// OOM, BUSY …).
	KindRedis
	// KindRequest: the HTTP front refused this one call as too large or
	// malformed (400, 413, 414, 431), which the call's own data causes,
	// not the backend's health. Keys are fixed-length digests (Key), so a
	// client cannot provoke it; it is classified apart all the same, so
	// that if anything ever does, it costs only that request.
	KindRequest
)

// LastKind is the highest Kind, for tables indexed by Kind.
const LastKind = KindRequest

// CountsAgainstBreaker reports whether a failure of kind k says the
// backend is unavailable or broken for everyone, and so counts against
// backend.breaker. Only KindRequest does not: it is one request's error.
func (k Kind) CountsAgainstBreaker() bool { return k != KindRequest }

// Retryable reports whether repeating a call that failed with kind k can
// succeed: a timeout or an unavailable backend may recover, and NOSCRIPT
// is answered by loading the script. A wrong answer would be wrong again.
func (k Kind) Retryable() bool {
	switch k {
	case KindTimeout, KindUnavailable, KindNoScript:
		return true
	}
	return false
}

func (k Kind) String() string {
	return enum.Name(k, "Kind", "", "timeout", "unavailable", "http_status", "noscript", "malformed", "redis_error", "request")
}

// Error is every failure the backend reports.
type Error struct {
	Kind Kind
	// Status is the HTTP status, 0 when there was none (timeout).
	Status int
	// Detail is Redis's message or a description of what was wrong,
	// truncated to keep log lines bounded.
	Detail string
}

func (e *Error) Error() string {
	s := "backend: " + e.Kind.String()
	if e.Status != 0 {
		s += " (HTTP " + strconv.Itoa(e.Status) + ")"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Timeout is the error a caller reports when its per-call timeout fired.
func Timeout() error { return &Error{Kind: KindTimeout} }

// TooLarge is the error a caller reports, without parsing anything, for a
// reply body of size bytes when it reads at most max: no script result is
// that long, and a prefix that parses is not the reply.
func TooLarge(status, size, max int) error {
	return &Error{Kind: KindMalformed, Status: status,
		Detail: "reply body of " + strconv.Itoa(size) + " bytes is over the " + strconv.Itoa(max) + "-byte limit"}
}

// StatusKind classifies an HTTP status other than 200 that carries no
// Redis reply (see the backend section of filter/config/README.md):
// 5xx is unavailability (Webdis's 503 when Redis is down, Envoy's 503
// when the cluster has no healthy host or its circuit breaker overflows);
// 400, 413, 414 and 431 are refusals of the call's own request data;
// everything else (401/403 credentials, 404 path prefix, 3xx …) is a
// deployment error that fails every call alike.
func StatusKind(status int) Kind {
	switch {
	case status >= 500:
		return KindUnavailable
	case status == 400, status == 413, status == 414, status == 431:
		return KindRequest
	}
	return KindHTTPStatus
}

// KindOf returns err's Kind, or 0 when err is nil or not an *Error.
func KindOf(err error) Kind {
	if e, ok := err.(*Error); ok {
		return e.Kind
	}
	return 0
}

const maxDetail = 200

func fail(kind Kind, status int, detail string) error {
	if len(detail) > maxDetail {
		detail = detail[:maxDetail]
	}
	return &Error{Kind: kind, Status: status, Detail: detail}
}

// Reply is a decoded script result.
type Reply struct {
	// Granted is 1 for an allowed decision, 0 for a denied one, and the
	// number of tokens taken for a lease.
	Granted int64
	// Remaining is whole units left after this call.
	Remaining int64
	// RetryAfter is when the requested units could be granted, rounded up
	// to the millisecond; 0 when granted or when retrying cannot help. For
	// a lease that granted tokens it is when the last of them may be spent
	// (limiter.LeaseResult.ReadyAfter); 0 when all may be spent now.
	RetryAfter time.Duration
	// ResetAfter is when the key is back to its full allowance, rounded
	// up to the millisecond.
	ResetAfter time.Duration
	Reason     limiter.Reason
	// ServerMicros is the Redis clock (µs since the epoch) the script used.
	ServerMicros int64
}

// Allowed reports whether anything was granted.
func (r Reply) Allowed() bool { return r.Granted > 0 }

// Result converts r into the local limiter's result type for a limit
// whose per-period allowance is limit.
func (r Reply) Result(limit int64) limiter.Result {
	return limiter.Result{
		Allowed:    r.Granted > 0,
		Limit:      limit,
		Remaining:  r.Remaining,
		RetryAfter: r.RetryAfter,
		ResetAfter: r.ResetAfter,
		Reason:     r.Reason,
	}
}

// replyLen is the length of every script's flat result array.
const replyLen = 6

// maxMillis keeps durations from overflowing time.Duration.
const maxMillis = math.MaxInt64 / int64(time.Millisecond)

// ParseReply decodes a script reply in protocol p. status is the HTTP
// status; body may be reused by the caller after return.
func ParseReply(p Protocol, status int, body []byte) (Reply, error) {
	v, err := unwrap(p, status, body)
	if err != nil {
		return Reply{}, err
	}
	return decodeResult(v, false)
}

// ParseLeaseReply decodes the reply to a Lease command, whose grants
// carry the time their last token may be spent where decisions must have
// no retry time.
func ParseLeaseReply(p Protocol, status int, body []byte) (Reply, error) {
	v, err := unwrap(p, status, body)
	if err != nil {
		return Reply{}, err
	}
	return decodeResult(v, true)
}

// ParseWebdis decodes a Webdis reply such as {"EVALSHA":[1,5,0,1000,0,t]}.
func ParseWebdis(status int, body []byte) (Reply, error) { return ParseReply(Webdis, status, body) }

// ParseUpstash decodes an Upstash reply such as {"result":[1,5,0,1000,0,t]}.
func ParseUpstash(status int, body []byte) (Reply, error) { return ParseReply(Upstash, status, body) }

// ParseScriptLoad decodes the reply to LoadScript and checks that Redis
// named the script as s.SHA1, which catches a proxy that mangled the source.
func ParseScriptLoad(p Protocol, status int, body []byte, s *Script) error {
	v, err := unwrap(p, status, body)
	if err != nil {
		return err
	}
	if v.Type != gjson.String {
		return fail(KindMalformed, status, "SCRIPT LOAD reply is not a string")
	}
	if v.Str != s.SHA1 {
		return fail(KindMalformed, status, "SCRIPT LOAD returned "+v.Str+", want "+s.SHA1)
	}
	return nil
}

// unwrap checks the HTTP status and the envelope and returns the Redis
// value inside it.
func unwrap(p Protocol, status int, body []byte) (gjson.Result, error) {
	// Upstash reports command errors as {"error": …} with HTTP 400, so
	// its 400s are judged by the body: one that is not such an error is
	// classified by status after all.
	if status != 200 && !(p == Upstash && status == 400) {
		return gjson.Result{}, fail(StatusKind(status), status, snippet(body))
	}
	if p == Upstash && status == 400 && !upstashError(body) {
		return gjson.Result{}, fail(StatusKind(status), status, snippet(body))
	}
	if !gjson.ValidBytes(body) {
		return gjson.Result{}, fail(KindMalformed, status, "invalid JSON: "+snippet(body))
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return gjson.Result{}, fail(KindMalformed, status, "reply is not a JSON object")
	}
	if p == Upstash {
		if e := root.Get("error"); e.Exists() {
			if e.Type != gjson.String {
				return gjson.Result{}, fail(KindMalformed, status, "error is not a string")
			}
			return gjson.Result{}, redisError(status, e.Str)
		}
		if status != 200 {
			return gjson.Result{}, fail(KindHTTPStatus, status, snippet(body))
		}
		r := root.Get("result")
		if !r.Exists() {
			return gjson.Result{}, fail(KindMalformed, status, "no result field")
		}
		return r, nil
	}
	// Webdis: exactly one member, named after the command.
	var v gjson.Result
	n := 0
	root.ForEach(func(_, value gjson.Result) bool {
		v = value
		n++
		return n < 2
	})
	if n != 1 {
		return gjson.Result{}, fail(KindMalformed, status, "reply object must have exactly one member")
	}
	// Redis errors come as [false, "ERR …"].
	if v.IsArray() {
		first := v.Get("0")
		if first.Type == gjson.False {
			msg := v.Get("1")
			if msg.Type != gjson.String {
				return gjson.Result{}, fail(KindMalformed, status, "error without message")
			}
			return gjson.Result{}, redisError(status, msg.Str)
		}
	}
	return v, nil
}

// upstashError reports whether body is an Upstash error reply,
// {"error": …}; unwrap checks the rest of its shape.
func upstashError(body []byte) bool {
	if !gjson.ValidBytes(body) {
		return false
	}
	root := gjson.ParseBytes(body)
	return root.IsObject() && root.Get("error").Exists()
}

func redisError(status int, msg string) error {
	if strings.HasPrefix(msg, "NOSCRIPT") {
		return fail(KindNoScript, status, msg)
	}
	return fail(KindRedis, status, msg)
}

// decodeResult validates the flat integer array every script returns.
func decodeResult(v gjson.Result, lease bool) (Reply, error) {
	if !v.IsArray() {
		return Reply{}, fail(KindMalformed, 0, "result is not an array")
	}
	var vals [replyLen]int64
	n := 0
	bad := ""
	v.ForEach(func(_, e gjson.Result) bool {
		if n >= replyLen {
			n++
			return false
		}
		if e.Type != gjson.Number {
			bad = "result element " + strconv.Itoa(n) + " is not a number"
			return false
		}
		x, err := strconv.ParseInt(e.Raw, 10, 64)
		if err != nil || x < 0 {
			bad = "result element " + strconv.Itoa(n) + " is not a non-negative integer"
			return false
		}
		vals[n] = x
		n++
		return true
	})
	switch {
	case bad != "":
		return Reply{}, fail(KindMalformed, 0, bad)
	case n != replyLen:
		return Reply{}, fail(KindMalformed, 0, "result must have "+strconv.Itoa(replyLen)+" elements")
	case vals[2] > maxMillis || vals[3] > maxMillis:
		return Reply{}, fail(KindMalformed, 0, "duration out of range")
	case vals[4] > 3:
		return Reply{}, fail(KindMalformed, 0, "unknown reason code")
	case (vals[0] > 0) != (vals[4] == 0):
		return Reply{}, fail(KindMalformed, 0, "granted and reason disagree")
	case vals[0] > 0 && vals[2] != 0 && !lease:
		return Reply{}, fail(KindMalformed, 0, "granted reply with a retry time")
	}
	reasons := [...]limiter.Reason{limiter.ReasonAllowed, limiter.ReasonLimited, limiter.ReasonCostExceedsCapacity, limiter.ReasonInvalidCost}
	return Reply{
		Granted:      vals[0],
		Remaining:    vals[1],
		RetryAfter:   time.Duration(vals[2]) * time.Millisecond,
		ResetAfter:   time.Duration(vals[3]) * time.Millisecond,
		Reason:       reasons[vals[4]],
		ServerMicros: vals[5],
	}, nil
}

// snippet keeps error details short and printable.
func snippet(body []byte) string {
	if len(body) > 64 {
		body = body[:64]
	}
	return strconv.Quote(string(body))
}
