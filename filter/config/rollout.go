package config

import (
	"math"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// Rollout is a limit's rollout, as Envoy's filter_enabled and
// filter_enforced fractions: both are drawn per request.
type Rollout struct {
	// EnabledPercent of requests are evaluated by the limit at all; the
	// others skip it as if it did not match: nothing is counted or
	// consumed, and it replaces no other limit for them.
	EnabledPercent float64
	// EnforcedPercent of the requests the limit would reject are
	// rejected; the others pass like a shadow limit's.
	EnforcedPercent float64
}

// FullRollout is the default: every request evaluated and enforced.
var FullRollout = Rollout{EnabledPercent: 100, EnforcedPercent: 100}

// PerMillion is p percent in millionths, the resolution of the draws.
func PerMillion(p float64) uint32 { return uint32(math.Round(p * 10_000)) }

// Header limits for the headers an operator configures; Envoy itself
// refuses header maps far larger, these keep one reply or request sane.
const (
	maxConfiguredHeaders = 16
	maxHeaderNameLen     = 256
	maxHeaderValueLen    = 4096
)

var rolloutFields = fieldsOf[wireRollout]()

// rollout reads a limit's rollout and upstream_headers_when_limited.
func (p *parser) rollout(o *object, l *Limit) {
	l.Rollout = FullRollout
	if c := o.child("rollout", rolloutFields...); c != nil {
		if v, ok := c.percent("enabled_percent"); ok {
			l.Rollout.EnabledPercent = v
		}
		if v, ok := c.percent("enforced_percent"); ok {
			l.Rollout.EnforcedPercent = v
		}
	}
	if v, ok := o.fields["upstream_headers_when_limited"]; ok {
		l.UpstreamHeadersWhenLimited = p.headerMap(o.path1("upstream_headers_when_limited"), v)
	}
}

// percent reads a number from 0 to 100, fractions allowed.
func (o *object) percent(name string) (float64, bool) {
	v, ok := o.typed(name, gjson.Number, "must be a number from 0 to 100")
	if !ok {
		return 0, false
	}
	if v.Num < 0 || v.Num > 100 {
		o.errorf(name, "must be from 0 to 100, got %s", Excerpt(v.Raw))
		return 0, false
	}
	return v.Num, true
}

// headerMap reads an object of header name to value, as headers a filter
// adds to a request or a reply. Names are lowercased, as HTTP/2 and
// Envoy's header maps carry them; what Envoy would refuse to add is an
// error here rather than a header silently dropped at run time.
func (p *parser) headerMap(path string, v gjson.Result) [][2]string {
	if !v.IsObject() {
		p.errorf(path, v.Index, "must be an object of header name to value")
		return nil
	}
	var out [][2]string
	seen := map[string]bool{}
	v.ForEach(func(k, val gjson.Result) bool {
		name := k.String()
		hpath := FieldPath(path, name)
		lower := strings.ToLower(name)
		switch {
		case len(out) == maxConfiguredHeaders:
			p.errorf(hpath, k.Index, "more than %d headers", maxConfiguredHeaders)
			return false
		case !headerToken(name) || len(name) > maxHeaderNameLen:
			p.errorf(hpath, k.Index, "must be a header name (an RFC 9110 token of at most %d characters)", maxHeaderNameLen)
			return true
		case lower == "host" || lower == "content-length" || lower == "transfer-encoding" || lower == "connection":
			p.errorf(hpath, k.Index, "%s is framing, not a header the filter may set", lower)
			return true
		case seen[lower]:
			p.errorf(hpath, k.Index, "duplicate header (names are case-insensitive)")
			return true
		case val.Type != gjson.String:
			p.errorf(hpath, val.Index, "must be a string")
			return true
		case !headerValue(val.Str):
			p.errorf(hpath, val.Index, "must be a header value: at most %d visible characters, spaces or tabs, without leading or trailing whitespace", maxHeaderValueLen)
			return true
		}
		seen[lower] = true
		out = append(out, [2]string{lower, val.Str})
		return true
	})
	// Sorted, so the effective configuration (MarshalJSON writes a map)
	// parses back to the same order.
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// headerObject is the wire form of a header list; nil when empty.
func headerObject(hs [][2]string) map[string]string {
	if len(hs) == 0 {
		return nil
	}
	m := make(map[string]string, len(hs))
	for _, kv := range hs {
		m[kv[0]] = kv[1]
	}
	return m
}

// headerValue reports whether s is a field value Envoy accepts (RFC 9110
// field-value: no control characters but tab, so no CR, LF or NUL) and
// one it would not change by trimming.
func headerValue(s string) bool {
	if len(s) > maxHeaderValueLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return s == strings.Trim(s, " \t")
}
