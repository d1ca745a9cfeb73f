// Package pathnorm is the normal form of request paths: one mechanism
// for every place that must see every spelling of a path as one path, so
// that a client cannot re-spell a resource into a fresh bucket (the
// engine's keys and path matches) or around the admin route, and so that
// a match's own path can be checked (by package config) to be in the
// form requests are compared in. It is RFC 3986 section
// 6.2.2, decoding further than its unreserved bytes, plus what upstreams
// commonly treat as the same path:
//
//   - a percent escape is decoded ("%61lice" is "alice", "%2e%2e" is
//     "..", "%40" is "@", "%C3%A9" the two bytes of "é"), as Go's
//     ServeMux, servlet containers and nginx's locations read it, unless
//     its byte would change the path's structure on a second reading or
//     is a control byte: '%', '?', '#', ';' and bytes below 0x20 and 0x7F
//     stay escaped, their hex digits upper-cased ("%3f" is "%3F"), and a
//     raw control byte is escaped the same way ("\n" is "%0A"), so each
//     has one spelling and a key never holds a control byte; a broken
//     escape ("%zz", "%4") is kept literally;
//   - '\', "%2F" and "%5C" count as '/', as Istio's
//     DECODE_AND_MERGE_SLASHES, WSGI servers (Flask), nginx and
//     Windows servers read them; a spelling the upstream reads as a
//     plain byte then merely shares the bucket of the path it resembles,
//     which no client can use to escape its own;
//   - a segment's parameters, from ';' to its end, are dropped, as
//     servlet containers drop them ("/t/alice;jsessionid=1/x" is
//     "/t/alice/x", and Tomcat's "/..;/" is "/../"); not for the admin
//     route, whose decoded "%3B" would then be cut on a second pass;
//   - runs of '/' are merged, and "." and ".." segments removed, ".."
//     never above the root;
//   - the path ends at '?' or '#'; the result starts with '/', and ends
//     with '/' exactly when the input's last segment was empty, "." or
//     "..", as RFC 3986's remove_dot_segments leaves it;
//   - case is kept: paths are case-sensitive.
//
// The admin route (Admin) also decodes every escape and lower-cases
// ASCII letters: it must catch every spelling an upstream might resolve
// to its prefix, and a false positive only keeps a request from the
// upstream.
package pathnorm

import "strings"

// Form selects the normalisation's extras.
type Form uint8

const (
	Key   Form = iota // keys and path matches
	Admin             // the admin route: every escape decoded, letters lower-cased
)

// Normal returns the normal form of path (the path part of a :path),
// path itself when it is already normal, which is the common case and
// allocates nothing.
func Normal(path string, form Form) string {
	if IsNormal(path, form) {
		return path
	}
	return string(Append(make([]byte, 0, len(path)+1), path, form))
}

// IsNormal reports whether Append would return path unchanged.
func IsNormal(path string, form Form) bool {
	if path == "" || path[0] != '/' {
		return false
	}
	for i := 0; i < len(path); i++ {
		switch c := path[i]; c {
		case '\\', '?', '#':
			return false
		case ';':
			if form == Key {
				return false
			}
		case '%':
			if _, decode, ok := pathEscape(path, i, form, path[:i]); ok && (decode || path[i+1] >= 'a' || path[i+2] >= 'a') {
				return false // decoded, or its hex upper-cased
			}
		case '/':
			if dotSegmentAt(path, i+1) {
				return false
			}
		default:
			if form == Admin && 'A' <= c && c <= 'Z' || form == Key && isControl(c) {
				return false
			}
		}
	}
	return true
}

// dotSegmentAt reports whether the segment at path[i:] is empty, "." or
// "..", which normalising removes.
func dotSegmentAt(path string, i int) bool {
	end := i
	for end < len(path) && end-i < 3 && path[end] != '/' && path[end] != '?' && path[end] != '#' {
		end++
	}
	switch path[i:end] {
	case "":
		return end < len(path) && path[end] == '/'
	case ".", "..":
		return true
	}
	return false
}

// pathEscape reads the escape at path[i] ('%'): the byte it stands for,
// whether the normal form has that byte (decode) or keeps the escape,
// and whether it is a valid escape at all. before is the normal form so
// far. An escape of a hex digit right after a broken escape's '%' or
// '%' and digit stays escaped: decoding it would complete the broken one
// ("%0%61" would become the escape "%0a"), and the normal form must be
// its own normal form.
func pathEscape[S string | []byte](path string, i int, form Form, before S) (b byte, decode, ok bool) {
	if b, ok = UnhexPair(path, i+1); !ok {
		return 0, false, false
	}
	decode = (form == Admin || keyDecodes(b)) && !joinsBrokenEscape(before, b)
	return b, decode, true
}

// joinsBrokenEscape reports whether b, decoded after before, would
// complete a broken escape at before's end into a valid one.
func joinsBrokenEscape[S string | []byte](before S, b byte) bool {
	n := len(before)
	return isHexDigit(b) && (n >= 1 && before[n-1] == '%' || n >= 2 && before[n-2] == '%' && isHexDigit(before[n-1]))
}

func isHexDigit(c byte) bool { _, ok := unhex(c); return ok }

// keyDecodes reports whether the key form decodes an escape of b: every
// byte but those a second reading would take as structure ('%' would
// start an escape, '?' and '#' end the path, ';' a segment's
// parameters) and the control bytes, which no upstream serves as part
// of a name and which must not reach a key (its parts are separated by
// NUL).
func keyDecodes(b byte) bool {
	switch b {
	case '%', '?', '#', ';':
		return false
	}
	return !isControl(b)
}

func isControl(c byte) bool { return c < 0x20 || c == 0x7f }

// Append appends the normal form of path to dst.
func Append(dst []byte, path string, form Form) []byte {
	const hex = "0123456789ABCDEF"
	dst = append(dst, '/')
	base := len(dst)
	seg := base
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '?' || c == '#' {
			break
		}
		if c == ';' && form == Key {
			for i+1 < len(path) && strings.IndexByte(`/\?#`, path[i+1]) < 0 {
				i++
			}
			continue
		}
		if c == '%' {
			b, decode, ok := pathEscape(path, i, form, dst)
			if ok && !decode {
				dst = append(dst, '%', hex[b>>4], hex[b&15])
				i += 2
				continue
			}
			if ok {
				c = b
				i += 2
			}
		}
		switch {
		case c == '\\':
			c = '/'
		case form == Key && isControl(c):
			// Raw, as an escaped one is never decoded here.
			dst = append(dst, '%', hex[c>>4], hex[c&15])
			continue
		case form == Admin && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		if c == '/' {
			dst = endSegment(dst, base, seg)
			seg = len(dst)
			continue
		}
		dst = append(dst, c)
	}
	if seg == len(dst) || isDotSegment(dst[seg:]) {
		return endSegment(dst, base, seg)
	}
	return dst // the last segment gets no '/' of its own
}

func isDotSegment(s []byte) bool { return string(s) == "." || string(s) == ".." }

// endSegment closes the segment dst[seg:], which follows a '/': an empty
// one (merged slashes) and "." are dropped, ".." is dropped with the
// segment before it (never past base, the root), any other gets its '/'.
func endSegment(dst []byte, base, seg int) []byte {
	switch string(dst[seg:]) {
	case "", ".":
		return dst[:seg]
	case "..":
		dst = dst[:seg]
		if len(dst) > base {
			i := len(dst) - 2
			for i >= base && dst[i] != '/' {
				i--
			}
			dst = dst[:i+1]
		}
		return dst
	}
	return append(dst, '/')
}

// UnhexPair decodes the two hex digits at s[i:i+2], as a percent escape
// holds them.
func UnhexPair(s string, i int) (byte, bool) {
	if i+1 >= len(s) {
		return 0, false
	}
	hi, ok1 := unhex(s[i])
	lo, ok2 := unhex(s[i+1])
	return hi<<4 | lo, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
