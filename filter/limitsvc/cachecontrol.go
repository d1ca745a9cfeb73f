package limitsvc

import (
	"strings"
	"time"
)

// CacheControl is what a lookup reply's Cache-Control header says about
// caching the answer (RFC 9111 response directives; others are ignored).
type CacheControl struct {
	// MaxAge is max-age, clamped to MaxAge; HasMaxAge says it was given.
	MaxAge    time.Duration
	HasMaxAge bool
	// NoStore: the answer serves only the requests waiting for it.
	NoStore bool
	// NoCache: the answer is never fresh, but may serve as a stale answer.
	NoCache bool
	// Invalid reports a directive we know with a value we cannot read
	// (max-age=abc, an unterminated quote); that directive is ignored.
	Invalid bool
}

// maxCacheControl bounds how much of the header is read: a service does
// not need more to say four directives.
const maxCacheControl = 4096

// ParseCacheControl reads v. It never fails: unknown directives are
// ignored, as HTTP requires, and unreadable known ones are reported in
// Invalid and ignored.
func ParseCacheControl(v string) CacheControl {
	var cc CacheControl
	if len(v) > maxCacheControl {
		v = v[:maxCacheControl]
		cc.Invalid = true
	}
	for v != "" {
		var item string
		item, v = nextDirective(v)
		name, value, hasValue := strings.Cut(item, "=")
		name = strings.ToLower(strings.TrimSpace(name))
		value = strings.TrimSpace(value)
		if hasValue && strings.HasPrefix(value, `"`) {
			if len(value) < 2 || !strings.HasSuffix(value, `"`) {
				if name == "max-age" || name == "no-store" || name == "no-cache" {
					cc.Invalid = true
				}
				continue
			}
			value = value[1 : len(value)-1]
		}
		switch name {
		case "max-age":
			secs, ok := deltaSeconds(value)
			if !hasValue || !ok {
				cc.Invalid = true
				continue
			}
			cc.MaxAge, cc.HasMaxAge = secs, true
		case "no-store":
			cc.NoStore = true
		case "no-cache":
			// The qualified form (no-cache="field") is read as the whole
			// answer: the cautious reading.
			cc.NoCache = true
		}
	}
	return cc
}

// nextDirective splits off the first comma-separated element, keeping
// commas inside a quoted string.
func nextDirective(v string) (item, rest string) {
	quoted := false
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			quoted = !quoted
		case '\\':
			if quoted {
				i++
			}
		case ',':
			if !quoted {
				return v[:i], v[i+1:]
			}
		}
	}
	return v, ""
}

// deltaSeconds reads 1*DIGIT; a value past MaxAge is MaxAge, as RFC 9111
// asks of values too large to represent.
func deltaSeconds(s string) (time.Duration, bool) {
	if s == "" {
		return 0, false
	}
	limit := int64(MaxAge / time.Second)
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n <= limit {
			n = n*10 + int64(c-'0')
		}
	}
	return time.Duration(min(n, limit)) * time.Second, true
}
