package host

import (
	"encoding/binary"
	"math"
)

// metadataProperty serves metadata.filter_metadata.<namespace>.<field>…
// from a stream's dynamic metadata: segs is the namespace, then one
// segment per field of nested Structs. Scalars are serialized as Envoy
// serializes a google.protobuf.Value's kind: a string as its bytes, a
// number as an 8-byte little-endian double, a bool as one byte 0 or 1.
// A Struct or list is reported absent: what real Envoy returns for them
// (a serialized map or message) is not something this host reproduces.
func metadataProperty(md map[string]map[string]any, segs []string) ([]byte, bool) {
	if len(segs) < 2 {
		return nil, false
	}
	fields, ok := md[segs[0]]
	if !ok {
		return nil, false
	}
	var v any = fields
	for _, s := range segs[1:] {
		m, isStruct := v.(map[string]any)
		if !isStruct {
			return nil, false
		}
		if v, ok = m[s]; !ok {
			return nil, false
		}
	}
	switch x := v.(type) {
	case string:
		return []byte(x), true
	case float64:
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, math.Float64bits(x))
		return b, true
	case bool:
		if x {
			return []byte{1}, true
		}
		return []byte{0}, true
	}
	return nil, false
}
