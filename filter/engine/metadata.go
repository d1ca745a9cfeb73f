package engine

import (
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf8"
)

// appendMetadata appends a dynamic metadata value, as the host serialized
// it, rendered for a key. Envoy hands a google.protobuf.Value scalar out
// by kind: a string as its bytes, a number as the 8 bytes of a
// little-endian double, a bool as one byte. The bytes alone do not say
// which, so:
//   - 8 bytes that are not printable UTF-8 text are a number, rendered in
//     its shortest decimal form: integers below 2^53 without a fraction or
//     exponent ("42"), others as strconv's shortest 'g' ("0.5", "1e+300");
//     NaN and infinities are missing;
//   - any other value holding a control byte (a bool, a struct or list,
//     which are not scalars a key can use) is missing, which also keeps
//     the key separator out of keys;
//   - everything else is a string, taken as is; an empty one is missing.
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
	text := utf8.ValidString(raw)
	for i := 0; i < len(raw) && text; i++ {
		if c := raw[i]; c < ' ' || c == 0x7f {
			text = false
		}
	}
	if text {
		return append(dst, raw...), true
	}
	if len(raw) != 8 {
		return dst, false
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw)))
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return dst, false
	case f == math.Trunc(f) && math.Abs(f) < 1<<53:
		return strconv.AppendInt(dst, int64(f), 10), true
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64), true
}

// Metadata makes requestInfo a config.RequestExtra: the value at property
// path prop, rendered as a key would hold it, in the worker's scratch
// buffer (valid until the next call, which is enough for the condition
// that asked). It is read from the host on each call, only when a
// condition needs it.
func (r *requestInfo) Metadata(prop []string) (string, bool) {
	var local []byte
	buf := &local
	if r.scratch != nil {
		buf = r.scratch
	}
	v, ok := appendMetadata((*buf)[:0], r.host.Property(prop))
	*buf = v
	return arenaString(v), ok
}
