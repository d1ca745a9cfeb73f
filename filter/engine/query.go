package engine

import (
	"strings"

	"github.com/sluice-proxy/sluice/filter/config"
)

// The query string is never parsed into a map: a key part scans the raw
// query for its one parameter and decodes the value straight into the key
// arena, so a request whose limits read no parameter pays nothing, and one
// that does allocates nothing. Each scan is linear in the query, however
// many parameters or repeats a client sends.

// rawQuery is the :path after the first '?', or "" with ok false.
func rawQuery(path string) (string, bool) {
	i := strings.IndexByte(path, '?')
	if i < 0 {
		return "", false
	}
	return path[i+1:], true
}

// appendQueryValue appends the decoded value of parameter name in query to
// dst. Repeated occurrences are joined with ',' in order, as repeated
// headers are. found is false when the parameter does not occur; a
// parameter given without '=' or with an empty value is found and empty.
func appendQueryValue(dst []byte, query, name string) (out []byte, found bool) {
	for query != "" {
		var v string
		var ok bool
		if v, query, ok = nextQueryValue(query, name); !ok {
			continue
		}
		if found {
			dst = append(dst, ',')
		}
		found = true
		dst = appendQueryUnescaped(dst, v)
	}
	return dst, found
}

// appendQueryKey appends the decoded value of parameter name in query to
// dst, for a key: found is false when the parameter does not occur, and
// also when it occurs with two different decoded values, which is then
// ambiguous (see requestInfo.appendKey); repeats of one value are that
// value ("a=1&a=%31" is "1").
func appendQueryKey(dst []byte, query, name string) (out []byte, found, ambiguous bool) {
	start := len(dst)
	for query != "" {
		var v string
		var ok bool
		if v, query, ok = nextQueryValue(query, name); !ok {
			continue
		}
		if !found {
			found = true
			dst = appendQueryUnescaped(dst, v)
		} else if !queryComponentEquals(v, arenaString(dst[start:])) {
			return dst[:start], false, true
		}
	}
	return dst, found, false
}

// queryValues is every decoded value of parameter name in query, in
// order, each on its own (the admin route's repeated key parameters).
func queryValues(query, name string) []string {
	var out []string
	for query != "" {
		var v string
		var ok bool
		if v, query, ok = nextQueryValue(query, name); ok {
			out = append(out, string(appendQueryUnescaped(nil, v)))
		}
	}
	return out
}

// nextQueryValue takes the first parameter off query: its raw value when
// its name decodes to name (ok), and the rest of the query.
func nextQueryValue(query, name string) (raw, rest string, ok bool) {
	param := query
	if i := strings.IndexByte(query, '&'); i >= 0 {
		param, rest = query[:i], query[i+1:]
	}
	if param == "" {
		return "", rest, false // "a=1&&b=2" holds no empty-named parameter
	}
	k, v, _ := strings.Cut(param, "=")
	return v, rest, queryComponentEquals(k, name)
}

// appendQueryUnescaped decodes one query component as HTML forms encode
// it: '+' is a space and %XX a byte. An invalid escape is kept literally,
// so a broken escape is a value of its own rather than an error that
// would drop the key.
func appendQueryUnescaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		var c byte
		c, i = queryByte(s, i)
		dst = append(dst, c)
	}
	return dst
}

// queryByte decodes the byte of the query component s at i, as
// appendQueryUnescaped does, and says where the next one starts.
func queryByte(s string, i int) (c byte, next int) {
	switch c = s[i]; c {
	case '+':
		return ' ', i + 1
	case '%':
		if b, ok := config.UnhexPair(s, i+1); ok {
			return b, i + 3
		}
	}
	return c, i + 1
}

// queryComponentEquals reports whether the raw component s decodes to want,
// without decoding into memory.
func queryComponentEquals(s, want string) bool {
	j := 0
	for i := 0; i < len(s); {
		var c byte
		c, i = queryByte(s, i)
		if j >= len(want) || want[j] != c {
			return false
		}
		j++
	}
	return j == len(want)
}
