package e2e_test

import (
	"testing"
	"time"
)

// TestExternalMaxConcurrentEndToEnd: with max_concurrent_requests 1 and
// the service holding one tenant's lookup on worker 0, another tenant's
// first request on worker 1 makes no lookup: the fallback decides it at
// once, and it is counted.
func TestExternalMaxConcurrentEndToEnd(t *testing.T) {
	lf := startLimits(t, hourPlans())
	e := startExternal(t, 1, externalJSON(`,"max_concurrent_requests":1`), map[string]string{"limits": lf.addr})
	clients := twoWorkers(t, e)
	lf.gate.hold()
	before := lf.arrived.Load() // the warm-up's lookup
	held := make(chan int, 1)
	go func() { held <- tenantRequest(t, clients[0], e.insts[0].base, "acme") }()
	deadline := time.Now().Add(30 * time.Second)
	for lf.arrived.Load() < before+1 {
		e.tick() // the lookup is sent from the tick
		if time.Now().After(deadline) {
			t.Fatal("acme's lookup never reached the service")
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	if st := e.get(t, clients[1], 0, "initech"); st != 200 {
		t.Fatalf("initech: status %d, want the fallback's 200", st)
	}
	if got := e.metric("sluice.external.lookups_limited"); got != 1 {
		t.Fatalf("lookups_limited = %d, want 1", got)
	}
	if got := lf.svc.Count("initech"); got != 0 {
		t.Fatalf("%d lookups for initech while the one permit was held, want 0", got)
	}
	lf.gate.release()
	if st := e.await(t, held, 1)[0]; st != 200 {
		t.Fatalf("acme: status %d", st)
	}
}
