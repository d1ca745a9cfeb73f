package e2e_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// TestFaultWorkerPausedInGC replays the one trap of the soak: a worker VM
// whose linear memory grew to the 1 GiB cap.
//
// The Go runtime's GC CPU limiter turns mark assists off once GC has had
// more than half of the elapsed time for about a second. A worker thread
// paused for a second or more in the middle of a GC pause or an assist (a
// loaded machine, CPU throttling, a debugger) is enough: the whole pause
// counts as GC time. Natively the background mark worker then finishes the
// cycle and the scheduler turns the limiter off again. On wasm both happen
// only when the running goroutine yields, which a proxy-wasm callback never
// does by itself: without the bridge's periodic yield the mark phase never
// ends, nothing is freed again, and the worker's heap grows with every
// request until the VM traps.
//
// The pauses are injected through the guest's monotonic clock, which only
// the Go runtime reads (the filter reads the realtime clock): every
// seventh read jumps 3 s, so pauses land inside GC pauses and assists again
// and again. Memory must still stop growing. With the yield compiled out,
// this test saw linear memory grow 52.5 MiB over the 100,000 measured
// requests, and only 29 pauses, as the GC had stopped reading the clock;
// a debug build showed the limiter on and no GC cycle completing.
func TestFaultWorkerPausedInGC(t *testing.T) {
	code := wasmModule(t, "sluice")
	var mono, reads atomic.Int64
	mono.Store(1)
	const pause = 3 * time.Second
	ctx := context.Background()
	rt := host.NewRuntime(host.RuntimeOptions{LogLevel: host.LogWarn,
		Logger: func(host.LogLevel, string, string) {},
		Monotonic: func() int64 {
			if reads.Add(1)%7 == 0 {
				return mono.Add(int64(pause))
			}
			return mono.Add(int64(time.Microsecond))
		}})
	defer rt.Close(ctx)
	p, err := rt.NewPlugin(ctx, host.PluginConfig{Name: "gc", RootID: "gc", VMID: "gc",
		Code: code, Configuration: []byte(soakConfig), Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	var upstreamCalls atomic.Int64
	up := flakyUpstream(&upstreamCalls)
	tally := &statusTally{}
	// One worker, one request at a time: the guest runs the same code in
	// the same order on every run, so the pauses land in the same places.
	serve := func(from, n int) {
		for i := from; i < from+n; i++ {
			resp, err := p.Serve(ctx, soakRequest(i, 0), up)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			tally.add(resp)
		}
	}
	const warm, measured = 20_000, 100_000
	serve(0, warm)
	warmPages := p.MemoryPages(0)
	readsWarm := reads.Load()
	serve(warm, measured)
	endPages := p.MemoryPages(0)
	pauses := (reads.Load() - readsWarm) / 7
	growth := mib(endPages) - mib(warmPages)
	t.Logf("pages after warm-up %d, after %d more requests %d (growth %.2f MiB); %d pauses of %s injected after warm-up; %s",
		warmPages, measured, endPages, growth, pauses, pause, tally)
	if p.Traps() != 0 {
		t.Fatalf("%d traps", p.Traps())
	}
	if pauses < 10 {
		t.Fatalf("only %d pauses were injected: the guest's GC hardly ran, so this test shows nothing", pauses)
	}
	// Every kind of decision happened, so the heap saw real request work.
	if tally.get("200") == 0 || tally.get("429") == 0 {
		t.Fatalf("outcomes %s lack admits or denials", tally)
	}
	if growth >= 1 {
		t.Fatalf("linear memory grew %.2f MiB after warm-up (%d → %d pages): the guest's GC stopped finishing cycles", growth, warmPages, endPages)
	}
	recordFault(t, faultRow{fault: "worker paused 3s inside the guest's GC, every few GC cycles (Go's GC CPU limiter engages)", test: t.Name(),
		sent: warm + measured,
		outcomes: fmt.Sprintf("%s; %d pauses after warm-up; linear memory %.2f MiB after warm-up, %.2f MiB at the end; no trap",
			tally, pauses, mib(warmPages), mib(endPages)),
		recovery: "GC cycles keep completing: one the limiter stalls is finished at the bridge's next yield to the Go scheduler (every 64 streams and every tick)"})
}
