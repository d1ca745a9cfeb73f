//go:build sluice_bridge

package internal

import "unsafe"

// Out-parameters handed to the host; see the package comment for why they
// are globals. Wasm guests are single-threaded, and no hostcall is made
// from inside the allocator, so one set suffices.
var (
	outPtr  uint32
	outSize uint32
	outU32  uint32
	outU64  uint64
)

// Host-returned values (header values and maps, properties, shared-data
// records, buffers) are placed in a static arena by bumping an offset. The
// arena is a global, so its address never moves and the GC never frees it:
// an allocation needs no pin to survive until the hostcall that asked for
// it has returned, and costs a few instructions instead of a Go allocation
// and a pin.
//
// The price is a lifetime: the arena starts over when the host next enters
// the guest (beginCallback), so a value the host wrote is valid only until
// the callback that read it returns. Whatever keeps such a value longer
// must copy it first; the filter does where it does (see filter/host's
// package comment and Stream.retain in filter/engine).
const (
	arenaSize = 16 << 10
	// arenaAlign keeps every allocation 8-byte aligned, as a Go allocation
	// of its size would be.
	arenaAlign = 8
)

var (
	arena     [arenaSize]byte
	arenaUsed uint32
	// spills are the allocations the arena had no room for (a very large
	// header map, a call body): ordinary Go memory, kept reachable here
	// until the next callback, for the same lifetime as the arena's.
	spills [][]byte
	// depth counts exports in progress. A host may call into the guest
	// again from inside a hostcall (a resumed stream reaching the response
	// phase at once); only the outermost entry may start the arena over,
	// or the outer callback would lose what it has read.
	depth uint32
)

// beginCallback is called first by every export but the allocator.
func beginCallback() {
	if depth == 0 {
		arenaUsed = 0
		if len(spills) > 0 {
			// (no clear: the SDK's module says go 1.19)
			for i := range spills {
				spills[i] = nil
			}
			spills = spills[:0]
		}
	}
	depth++
}

func endCallback() { depth-- }

// allocate backs proxy_on_memory_allocate. Size 0 is legal in the ABI (an
// empty value) and must not trap, so it still gets a one-byte buffer with a
// valid address.
func allocate(size uint32) uint32 {
	n := size
	if n == 0 {
		n = 1
	}
	if n <= arenaSize-arenaUsed {
		p := &arena[arenaUsed]
		arenaUsed += (n + arenaAlign - 1) &^ (arenaAlign - 1)
		if arenaUsed > arenaSize {
			arenaUsed = arenaSize
		}
		return uint32(uintptr(unsafe.Pointer(p)))
	}
	buf := make([]byte, n)
	spills = append(spills, buf)
	return uint32(uintptr(unsafe.Pointer(&buf[0])))
}

// takeReturned turns the (outPtr, outSize) pair the host wrote into a Go
// pointer the SDK can read. Only memory the allocator handed out in this
// callback is accepted: any other address (a host bug, or a hostile one)
// yields nil rather than a pointer into arbitrary memory, and a call that
// claimed success with it fails.
func takeReturned(st Status, returnData **byte, returnSize *int) Status {
	p, n := outPtr, outSize
	outPtr, outSize = 0, 0
	if p == 0 {
		*returnData, *returnSize = nil, 0
		return st
	}
	if found := returnedMemory(p, n); found != nil {
		*returnData, *returnSize = found, int(n)
		return st
	}
	*returnData, *returnSize = nil, 0
	if st == StatusOK {
		return StatusInternalFailure
	}
	return st
}

// returnedMemory finds [p, p+n) among this callback's allocations.
func returnedMemory(p, n uint32) *byte {
	base := uint32(uintptr(unsafe.Pointer(&arena[0])))
	if off := p - base; p >= base && off < arenaUsed && uint64(off)+uint64(n) <= uint64(arenaUsed) {
		return &arena[off]
	}
	for _, buf := range spills {
		if uint32(uintptr(unsafe.Pointer(&buf[0]))) == p && uint64(n) <= uint64(len(buf)) {
			return &buf[0]
		}
	}
	return nil
}
