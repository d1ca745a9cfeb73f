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
// and again.
//
// Under envoy-1.39 memory must stop growing. With the yield compiled out,
// this run grew linear memory 52.5 MiB over the 100,000 measured requests
// (a debug build showed the limiter on and no GC cycle completing).
//
// Under envoy-1.33 the bridge must not yield: there poll_oneoff answers
// ENOSYS, and a yielding VM trapped within 4 s of this test ("poll_oneoff
// failed" after a GC pause, once the scavenger had set a timer). Without
// the yield the limiter stalls the GC there, and the row says so.
func TestFaultWorkerPausedInGC(t *testing.T) {
	code := wasmModule(t, "sluice")
	for _, prof := range []host.Profile{host.ProfileEnvoy139, host.ProfileEnvoy133} {
		t.Run(string(prof), func(t *testing.T) {
			var mono, reads atomic.Int64
			mono.Store(1)
			const pause = 3 * time.Second
			errorLogs := newLogCapture(host.LogError, 4<<10)
			ctx := context.Background()
			rt := host.NewRuntime(host.RuntimeOptions{LogLevel: host.LogWarn, Profile: prof, Logger: errorLogs.logger,
				Monotonic: func() int64 {
					if reads.Add(1)%7 == 0 {
						return mono.Add(int64(pause))
					}
					return mono.Add(int64(time.Microsecond))
				}})
			defer rt.Close(ctx)
			p := startPlugin(t, rt, "gc", code, soakConfig, 1)
			var upstreamCalls atomic.Int64
			up := flakyUpstream(&upstreamCalls)
			tally := &statusTally{}
			// One worker, one request at a time: the guest runs the same
			// code in the same order on every run, so the pauses land in
			// the same places.
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
			t.Logf("%s: pages after warm-up %d, after %d more requests %d (growth %.2f MiB); %d pauses of %s injected after warm-up; %s",
				prof, warmPages, measured, endPages, growth, pauses, pause, tally)
			if p.Traps() != 0 {
				t.Fatalf("%s: %d traps; guest error log: %s", prof, p.Traps(), errorLogs)
			}
			if pauses < 10 {
				t.Fatalf("only %d pauses were injected: the guest's GC hardly ran, so this test shows nothing", pauses)
			}
			// Every kind of decision happened, so the heap saw real work.
			if tally.get("200") == 0 || tally.get("429") == 0 {
				t.Fatalf("outcomes %s lack admits or denials", tally)
			}
			row := faultRow{test: t.Name(), sent: warm + measured}
			if prof == host.ProfileEnvoy139 {
				if growth >= 1 {
					t.Fatalf("linear memory grew %.2f MiB after warm-up (%d → %d pages): the guest's GC stopped finishing cycles", growth, warmPages, endPages)
				}
				row.fault = "worker paused 3s inside the guest's GC, every few GC cycles (Go's GC CPU limiter engages), envoy-1.39"
				row.outcomes = fmt.Sprintf("%s; %d pauses after warm-up; linear memory %.2f MiB after warm-up, %.2f MiB at the end; no trap",
					tally, pauses, mib(warmPages), mib(endPages))
				row.recovery = "GC cycles keep completing: one the limiter stalls is finished at the bridge's next yield to the Go scheduler (every 64 streams and every tick)"
			} else {
				// What this profile claims is the absence of the trap; the
				// growth is the limitation the row reports, and it is
				// asserted so that the row stays true.
				if growth < 1 {
					t.Fatalf("linear memory grew only %.2f MiB: the GC did not stall here, so the row and the README are wrong", growth)
				}
				row.fault = "the same pauses, envoy-1.33 (poll_oneoff answers ENOSYS, so the bridge cannot yield)"
				row.outcomes = fmt.Sprintf("%s; %d pauses after warm-up (fewer: the GC stopped reading the clock); linear memory %.2f MiB after warm-up, %.2f MiB at the end; no trap in this run",
					tally, pauses, mib(warmPages), mib(endPages))
				row.recovery = "none: the GC stays stalled and the VM grows until it traps at 1 GiB (FAIL_RELOAD then starts a fresh one); use Envoy 1.39 or later"
			}
			recordFault(t, row)
		})
	}
}
