//go:build sluice_bridge

package internal

import (
	"encoding/binary"
	"strings"
	"unsafe"
)

// The proxy-wasm wire formats of header maps and property paths, written
// for the bridge; make build drops the SDK's serde.go from its copy.
//
// A map is a u32 count, then a u32 key size and a u32 value size per
// pair, then each key and each value followed by a NUL.

// DeserializeMap reads a map the host wrote. Its strings view bs, without
// a copy. A malformed map (a host bug) yields the pairs read before the
// fault rather than a trap.
func DeserializeMap(bs []byte) [][2]string {
	if len(bs) < 4 {
		return nil
	}
	n := uint64(binary.LittleEndian.Uint32(bs))
	sizes := uint64(4) + 8*n
	if sizes > uint64(len(bs)) {
		return nil
	}
	pairs := make([][2]string, 0, n)
	data := sizes
	for i := uint64(0); i < n; i++ {
		var kv [2]string
		for j := range kv {
			size := uint64(binary.LittleEndian.Uint32(bs[4+8*i+4*uint64(j):]))
			if data+size+1 > uint64(len(bs)) {
				return pairs
			}
			kv[j] = bytesString(bs[data : data+size])
			data += size + 1
		}
		pairs = append(pairs, kv)
	}
	return pairs
}

// bytesString views b as a string. The SDK's module says go 1.19, which
// has no unsafe.String; a slice header begins with a string header.
func bytesString(b []byte) string {
	return *(*string)(unsafe.Pointer(&b))
}

// SerializeMap writes pairs for the host, which only reads it.
func SerializeMap(pairs [][2]string) []byte {
	size := 4
	for _, kv := range pairs {
		size += 8 + len(kv[0]) + 1 + len(kv[1]) + 1
	}
	b := make([]byte, size)
	binary.LittleEndian.PutUint32(b, uint32(len(pairs)))
	at := 4 + 8*len(pairs)
	for i, kv := range pairs {
		binary.LittleEndian.PutUint32(b[4+8*i:], uint32(len(kv[0])))
		binary.LittleEndian.PutUint32(b[8+8*i:], uint32(len(kv[1])))
		at += copy(b[at:], kv[0]) + 1
		at += copy(b[at:], kv[1]) + 1
	}
	return b
}

// A property path is its segments joined by NULs. Envoy's paths are a few
// constants, so each is serialized once and kept: the SDK built it again,
// with an allocation, on every property read, and those were the filter's
// only allocations per request. The kept bytes are only ever read (the
// host reads them; GetProperty and SetProperty pass them straight on).
type propertyPath struct {
	segments []string
	raw      []byte
}

// maxPropertyPaths bounds what is kept, should some caller build paths
// from request data; paths past it are serialized per call, as before.
const maxPropertyPaths = 32

var propertyPaths []propertyPath

func SerializePropertyPath(path []string) []byte {
	if len(path) == 0 {
		return []byte{}
	}
next:
	for i := range propertyPaths {
		p := &propertyPaths[i]
		if len(p.segments) != len(path) {
			continue
		}
		for j, s := range path {
			if p.segments[j] != s {
				continue next
			}
		}
		return p.raw
	}
	raw := joinPath(path)
	if len(propertyPaths) < maxPropertyPaths {
		segments := make([]string, len(path))
		for j, s := range path {
			// The caller's strings may view memory that changes later.
			segments[j] = strings.Clone(s)
		}
		propertyPaths = append(propertyPaths, propertyPath{segments: segments, raw: raw[:len(raw):len(raw)]})
	}
	return raw
}

func joinPath(path []string) []byte {
	size := len(path) - 1
	for _, s := range path {
		size += len(s)
	}
	b := make([]byte, 0, size)
	for j, s := range path {
		if j > 0 {
			b = append(b, 0)
		}
		b = append(b, s...)
	}
	return b
}
