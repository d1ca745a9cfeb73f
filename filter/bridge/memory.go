//go:build sluice_bridge

package internal

import "unsafe"

// pinnedAllocations keeps host-requested buffers reachable between
// proxy_on_memory_allocate and the end of the hostcall that triggered it.
// A hostcall makes at most a handful of allocations, so a short slice that
// is reused beats a map.
var pinnedAllocations [][]byte

// Out-parameters handed to the host; see the package comment for why they
// are globals. Wasm guests are single-threaded, and no hostcall is made
// from inside the allocator, so one set suffices.
var (
	outPtr  uint32
	outSize uint32
	outU32  uint32
	outU64  uint64
)

// Small host-returned values (header values, properties, shared-data
// records) are carved from a chunk by bumping an offset, because a Go
// allocation per value was a large share of a request's cost in this guest.
// This stays memory-safe without any freeing: a chunk is an ordinary
// []byte that is never reused once carved, and the GC keeps a chunk alive
// for as long as any string or slice the SDK built on one of its values
// (an interior pointer) is reachable.
const (
	chunkSize = 8 << 10
	// chunkMaxValue keeps large values (plugin configuration, call bodies)
	// out of chunks, so one retained small value never pins much memory.
	chunkMaxValue = 512
)

var (
	chunk     []byte
	chunkUsed int
)

// allocate backs proxy_on_memory_allocate. Size 0 is legal in the ABI (an
// empty value) and must not trap, so it still gets a one-byte buffer with a
// valid address.
func allocate(size uint32) uint32 {
	n := int(size)
	if n == 0 {
		n = 1
	}
	var buf []byte
	if n <= chunkMaxValue {
		if chunkUsed+n > len(chunk) {
			chunk, chunkUsed = make([]byte, chunkSize), 0
		}
		buf = chunk[chunkUsed : chunkUsed+n : chunkUsed+n]
		chunkUsed += n
	} else {
		buf = make([]byte, n)
	}
	pinnedAllocations = append(pinnedAllocations, buf)
	return uint32(uintptr(unsafe.Pointer(&buf[0])))
}

// takeReturned turns the (outPtr, outSize) pair the host wrote into a Go
// pointer the SDK can read, and releases every pin made during the call.
// An address the allocator never produced yields nil rather than a pointer
// into arbitrary memory.
func takeReturned(st Status, returnData **byte, returnSize *int) Status {
	var found *byte
	if outPtr != 0 {
		for _, buf := range pinnedAllocations {
			if uint32(uintptr(unsafe.Pointer(&buf[0]))) == outPtr && int(outSize) <= len(buf) {
				found = &buf[0]
				break
			}
		}
	}
	lost := st == StatusOK && outPtr != 0 && found == nil
	if found == nil {
		*returnData, *returnSize = nil, 0
	} else {
		*returnData, *returnSize = found, int(outSize)
	}
	releasePins()
	if lost {
		return StatusInternalFailure
	}
	return st
}

func releasePins() {
	for i := range pinnedAllocations {
		pinnedAllocations[i] = nil
	}
	pinnedAllocations = pinnedAllocations[:0]
	outPtr, outSize = 0, 0
}
