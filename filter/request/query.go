package request

import (
	"bytes"
	"strings"

	"github.com/sluice-proxy/sluice/filter/request/pathnorm"
)

// The query string is never parsed into a map: a key part scans the raw
// query for its one parameter and decodes the value straight into the key
// arena, so a request whose limits read no parameter pays nothing, and one
// that does allocates nothing. Each scan is linear in the query, however
// many parameters or repeats a client sends.

// RawQuery is the :path after the first '?', or "" with ok false.
func RawQuery(path string) (string, bool) {
	i := strings.IndexByte(path, '?')
	if i < 0 {
		return "", false
	}
	return path[i+1:], true
}

// appendQueryKey appends the decoded value of parameter name in query to
// dst, for a key: found is false when the parameter does not occur, and
// also when it occurs with two different decoded values, which is then
// ambiguous (see Info.AppendKey); repeats of one value are that
// value ("a=1&a=%31" is "1").
//
// Upstreams disagree on what a parameter is, and every reading a
// common one makes counts, so that no spelling is missing to one and
// present to another, or another value:
//   - ';' separates parameters for Python's parse_qs(separator=';') and
//     Rack 2, not for Go (which drops a pair holding one) or PHP. A query
//     holding ';' is read both ways, and if the two readings differ
//     ("api_key=alice;junk=1" is "alice" or "alice;junk=1",
//     "junk=1;api_key=alice" is "alice" or nothing) it is ambiguous;
//   - PHP rewrites a name as it registers it (phpName): "api.key",
//     "api key" and "api[key" are all its "api_key", so each is the
//     parameter too, as one more repeat.
func appendQueryKey(dst []byte, query, name string) (out []byte, found, ambiguous bool) {
	start, firstEnd := len(dst), 0
	for i, seps := range QueryReadings(query) {
		at := len(dst)
		var f bool
		if dst, f, ambiguous = appendQueryKeyAt(dst, query, name, seps); ambiguous ||
			i > 0 && (f != found || string(dst[start:firstEnd]) != string(dst[at:])) {
			return dst[:start], false, true
		}
		if i == 0 {
			found, firstEnd = f, len(dst)
		} else {
			dst = dst[:firstEnd]
		}
	}
	return dst, found, false
}

// querySeparators are the separators of each reading of a query: '&'
// (Go, PHP, servlets), and '&' with ';' (parse_qs(separator=';'), Rack 2).
var querySeparators = [...]string{"&", "&;"}

// QueryReadings is the separators of every reading of query that
// upstreams make; a query without ';' has one.
func QueryReadings(query string) []string {
	if strings.IndexByte(query, ';') < 0 {
		return querySeparators[:1]
	}
	return querySeparators[:]
}

// appendQueryKeyAt is appendQueryKey for one reading: parameters
// separated by any byte of seps.
func appendQueryKeyAt(dst []byte, query, name, seps string) (out []byte, found, ambiguous bool) {
	start := len(dst)
	for s := (queryScan{rest: query, name: name, seps: seps}); ; {
		v, _, ok := s.next()
		if !ok {
			return dst, found, false
		}
		if !found {
			found = true
			dst = AppendQueryUnescaped(dst, v)
		} else if !queryComponentEquals(v, scratchString(dst[start:])) {
			return dst[:start], false, true
		}
	}
}

// queryScan walks the parameters of one reading of a query (separated by
// any byte of seps) that are parameter name to some upstream: the raw
// name decodes to name, or PHP reads both as one name. Keys and matches
// read a parameter through it alike.
type queryScan struct{ rest, name, seps string }

// next is the raw value of the next such parameter, with exact true when
// its name decodes to name itself (what Go and servlets read), or ok
// false when there is none.
func (s *queryScan) next() (raw string, exact, ok bool) {
	for s.rest != "" {
		var k string
		k, raw, s.rest = NextQueryParam(s.rest, s.seps)
		if k == "" {
			continue // "a=1&&b=2" holds no empty-named parameter
		}
		if queryComponentEquals(k, s.name) {
			return raw, true, true
		}
		if samePHPName(k, s.name) {
			return raw, false, true
		}
	}
	return "", false, false
}

// phpNameBytes are the raw bytes without which a name is its own PHP
// name: PHP's rewritten bytes, '+' (a space), and '%', which may hide
// either or a NUL.
const phpNameBytes = ". +[%"

// samePHPName reports whether PHP registers the raw name k and name as
// one name. It is looked at only when a name holds a byte PHP rewrites.
func samePHPName(k, name string) bool {
	if strings.IndexAny(k, phpNameBytes) < 0 && strings.IndexAny(name, phpNameBytes) < 0 {
		return false
	}
	var kBuf, nameBuf [64]byte
	kName, kOK := phpName(AppendQueryUnescaped(kBuf[:0], k))
	nName, nOK := phpName(append(nameBuf[:0], name...))
	return kOK && nOK && string(kName) == string(nName)
}

// phpName rewrites the decoded parameter name b in place as PHP
// registers it in $_GET: the name ends at a NUL (PHP reads it as a C
// string), leading spaces are dropped, then ' ' and '.' become '_' up to
// the first '['; a '[' with a ']' after it makes an array (ok false: no
// string parameter of that name), one without becomes '_' and ends the
// rewriting.
func phpName(b []byte) (name []byte, ok bool) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	for i, c := range b {
		switch c {
		case ' ', '.':
			b[i] = '_'
		case '[':
			if bytes.IndexByte(b[i+1:], ']') >= 0 {
				return nil, false
			}
			b[i] = '_'
			return b, true
		}
	}
	return b, true
}

// QueryValues is every decoded value of parameter name in query, in
// order, each on its own (the admin route's repeated key parameters).
func QueryValues(query, name string) []string {
	var out []string
	for query != "" {
		var v string
		var ok bool
		if v, query, ok = nextQueryValue(query, name); ok {
			out = append(out, string(AppendQueryUnescaped(nil, v)))
		}
	}
	return out
}

// nextQueryValue takes the first parameter off query: its raw value when
// its name decodes to name (ok), and the rest of the query.
func nextQueryValue(query, name string) (raw, rest string, ok bool) {
	k, v, rest := NextQueryParam(query, "&")
	// "a=1&&b=2" holds no empty-named parameter.
	return v, rest, k != "" && queryComponentEquals(k, name)
}

// NextQueryParam takes the first parameter, up to any byte of seps, off
// query: its raw name and value, and the rest of the query.
func NextQueryParam(query, seps string) (name, value, rest string) {
	param := query
	if i := strings.IndexAny(query, seps); i >= 0 {
		param, rest = query[:i], query[i+1:]
	}
	name, value, _ = strings.Cut(param, "=")
	return name, value, rest
}

// AppendQueryUnescaped decodes one query component as HTML forms encode
// it: '+' is a space and %XX a byte. An invalid escape is kept literally,
// so a broken escape is a value of its own rather than an error that
// would drop the key.
func AppendQueryUnescaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		var c byte
		c, i = QueryByte(s, i)
		dst = append(dst, c)
	}
	return dst
}

// QueryByte is the decoded byte of the query component s at i, and the
// index after its spelling: '+' is a space, a valid %XX escape its byte,
// any other byte itself.
func QueryByte(s string, i int) (byte, int) {
	switch s[i] {
	case '+':
		return ' ', i + 1
	case '%':
		if b, ok := pathnorm.UnhexPair(s, i+1); ok {
			return b, i + 3
		}
	}
	return s[i], i + 1
}

// sameQueryComponent reports whether the raw components a and b decode
// to the same bytes, without decoding into memory.
func sameQueryComponent(a, b string) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		var ca, cb byte
		ca, i = QueryByte(a, i)
		cb, j = QueryByte(b, j)
		if ca != cb {
			return false
		}
	}
	return i == len(a) && j == len(b)
}

// queryComponentEquals reports whether the raw component s decodes to want,
// without decoding into memory.
func queryComponentEquals(s, want string) bool {
	j := 0
	for i := 0; i < len(s); {
		var c byte
		c, i = QueryByte(s, i)
		if j >= len(want) || want[j] != c {
			return false
		}
		j++
	}
	return j == len(want)
}
