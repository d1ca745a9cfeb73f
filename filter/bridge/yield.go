//go:build sluice_bridge

package internal

import (
	"runtime"
	"unsafe"
)

// The Go runtime on wasm runs its background GC mark worker, and updates
// its GC CPU limiter outside of mark assists, only when the running
// goroutine yields to the scheduler (there is no sysmon thread). A
// proxy-wasm callback never blocks, so without help it never yields, and
// every GC cycle is finished by mark assists alone. That holds until the
// limiter engages: it turns assists off once GC has had more than half of
// the elapsed time for about a second, and a worker thread paused for a
// second in the middle of a GC pause or an assist (a loaded machine, CPU
// throttling, a debugger) is enough. With assists off and nothing else
// able to mark or to turn the limiter off again, the mark phase never
// ends, nothing is freed again, and the VM grows to the 1 GiB cap and
// traps. Yielding every yieldEveryStreams streams and on every tick lets
// the scheduler update the limiter and run the mark worker, so a cycle the
// limiter has stalled is finished within that many streams.
//
// Yielding is only safe where WASI poll_oneoff works (Envoy 1.39 and
// later). Once the scheduler runs, the runtime's scavenger runs too and
// sleeps on a timer; from the first timer on, every GC pause ends with a
// non-blocking poll_oneoff, and Envoy 1.33 to 1.38 answer that with
// ENOSYS, which the Go runtime treats as fatal. There the bridge does not
// yield, and a worker paused inside its GC can still stop collecting.
const yieldEveryStreams = 64

var streamsSinceYield uint32

// yieldAfterContext is called when a context is deleted: for a busy VM,
// once per stream.
func yieldAfterContext() {
	streamsSinceYield++
	if streamsSinceYield >= yieldEveryStreams {
		streamsSinceYield = 0
		if yieldIsSafe() {
			runtime.Gosched()
		}
	}
}

// yieldOnTick covers a VM that ticks but serves few streams.
func yieldOnTick() {
	streamsSinceYield = 0
	if yieldIsSafe() {
		runtime.Gosched()
	}
}

const (
	yieldUnprobed = iota
	yieldSafe
	yieldUnsafe
)

var yieldState = yieldUnprobed

// yieldIsSafe asks the host once, from a callback (the allocator and
// _initialize may not make this hostcall), whether poll_oneoff works.
func yieldIsSafe() bool {
	if yieldState == yieldUnprobed {
		yieldState = yieldUnsafe
		if probePollOneoff() == 0 {
			yieldState = yieldSafe
		}
	}
	return yieldState == yieldSafe
}

//go:wasmimport wasi_snapshot_preview1 poll_oneoff
//go:noescape
func pollOneoff(subscriptions, events unsafe.Pointer, n uint32, nevents unsafe.Pointer) uint32

// The probe's buffers are globals for the same reason as the
// out-parameters: the host writes into them during the call. A WASI
// preview1 subscription is 48 bytes: userdata, then the tag (0, clock) at
// offset 8 and the clock's id, timeout, precision and flags at 16, 24, 32
// and 40. An event is 32 bytes.
var (
	probeSubscription [6]uint64
	probeEvent        [4]uint64
	probeEvents       uint32
)

// probePollOneoff polls a relative monotonic clock with a zero timeout, the
// call the runtime makes after every GC pause, and returns its errno.
func probePollOneoff() uint32 {
	probeSubscription = [6]uint64{0, 0, 1, 0, 0, 0}
	return pollOneoff(unsafe.Pointer(&probeSubscription), unsafe.Pointer(&probeEvent), 1, unsafe.Pointer(&probeEvents))
}
