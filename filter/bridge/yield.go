//go:build sluice_bridge

package internal

import "runtime"

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
const yieldEveryStreams = 64

var streamsSinceYield uint32

// yieldAfterContext is called when a context is deleted: for a busy VM,
// once per stream.
func yieldAfterContext() {
	streamsSinceYield++
	if streamsSinceYield >= yieldEveryStreams {
		streamsSinceYield = 0
		runtime.Gosched()
	}
}

// yieldOnTick covers a VM that ticks but serves few streams.
func yieldOnTick() {
	streamsSinceYield = 0
	runtime.Gosched()
}
