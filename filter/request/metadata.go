package request

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// appendMetadata appends a dynamic metadata value, as the host serialized
// it, rendered for a key. Envoy hands a google.protobuf.Value scalar out
// by kind: a string as its bytes, a number as the 8 bytes of a
// little-endian double, a bool as one byte. The bytes alone do not say
// which, so:
//   - 8 bytes that are not printable UTF-8 text are a number, rendered in
//     its shortest decimal form: integers below 2^53 without a fraction or
//     exponent ("42"), others as strconv's shortest 'g' ("0.5", "1e+300"),
//     and NaN and the infinities as "NaN", "+Inf" and "-Inf": a value a
//     client may control (a claim, a header copied into metadata) must
//     not make its request unlimited by being absurd;
//   - any other value starting with a control byte (a bool, a struct or
//     list, which are not scalars a key can use) or holding a NUL, the
//     key separator, is missing;
//   - everything else is a string, taken as is, whether or not it is
//     UTF-8; an empty one is missing.
//
// An 8-byte string of printable text is a string even if a double has
// the same bytes; such doubles are far outside any claim's range.
//
// What real Envoy returns: for the scalar kinds above, as far as we know
// from its wasm property serialization (CEL values: strings raw, doubles
// as 8 bytes, bools as one byte). For a Struct or list we are not sure
// whether it returns serialized protobuf, a serialized pair map or an
// error; every one of those starts with a control byte (a protobuf field
// tag, a length), so the rule above reads it as missing either way. Our
// host (e2e/host) reports a Struct or list as absent.
func appendMetadata(dst []byte, raw string) ([]byte, bool) {
	if raw == "" {
		return dst, false
	}
	if len(raw) == 8 && !printableText(raw) {
		f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw)))
		switch {
		case math.IsNaN(f):
			return append(dst, "NaN"...), true
		case f == math.Trunc(f) && math.Abs(f) < 1<<53:
			return strconv.AppendInt(dst, int64(f), 10), true
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64), true // ±Inf is "+Inf", "-Inf"
	}
	if c := raw[0]; c < ' ' || c == 0x7f || strings.IndexByte(raw, 0) >= 0 {
		return dst, false
	}
	return append(dst, raw...), true
}

// printableText reports whether s is UTF-8 without control bytes.
func printableText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == 0x7f {
			return false
		}
	}
	return utf8.ValidString(s)
}

// Metadata makes Info Attributes: the value at property
// path prop, rendered as a key would hold it, in the worker's scratch
// buffer (valid until the next call, which is enough for the condition
// that asked). It is read from the host on each call, only when a
// condition needs it.
func (r *Info) Metadata(prop []string) (string, bool) {
	buf := r.scratchBuf()
	v, ok := appendMetadata((*buf)[:0], r.src.Property(prop))
	*buf = v
	return scratchString(v), ok
}
