package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
	"github.com/sluice-proxy/sluice/limiter/inflight"
)

// slowBackend is a real HTTP backend that holds every request until the
// test opens its gate: the request's x-gate header names the gate, and
// requests without one share the gate "".
type slowBackend struct {
	mu    sync.Mutex
	gates map[string]chan struct{}
	open  bool
	// arrived receives the gate of every request that reached the backend.
	arrived        chan string
	inFlight, peak atomic.Int64
}

func newSlowBackend(t *testing.T) (*slowBackend, *httptest.Server) {
	b := &slowBackend{gates: map[string]chan struct{}{}, arrived: make(chan string, 1024)}
	ts := httptest.NewServer(b)
	// Cleanups run last-in first-out: the gates open before the server
	// waits for its requests to finish.
	t.Cleanup(ts.Close)
	t.Cleanup(b.shutdown)
	return b, ts
}

func (b *slowBackend) gate(id string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.gates[id]
	if g == nil {
		g = make(chan struct{})
		if b.open {
			close(g)
		} else {
			b.gates[id] = g
		}
	}
	return g
}

// release lets the requests waiting on one gate answer; later requests on
// that gate wait again.
func (b *slowBackend) release(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.gates[id]; g != nil {
		close(g)
		delete(b.gates, id)
	}
}

func (b *slowBackend) releaseAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, g := range b.gates {
		close(g)
		delete(b.gates, id)
	}
}

func (b *slowBackend) shutdown() {
	b.mu.Lock()
	b.open = true
	b.mu.Unlock()
	b.releaseAll()
}

func (b *slowBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("x-gate")
	g := b.gate(id)
	n := b.inFlight.Add(1)
	for p := b.peak.Load(); n > p && !b.peak.CompareAndSwap(p, n); p = b.peak.Load() {
	}
	select {
	case b.arrived <- id:
	default:
	}
	select {
	case <-g:
	case <-r.Context().Done():
	}
	b.inFlight.Add(-1)
	_, _ = io.WriteString(w, "ok")
}

// awaitTimeout bounds how long a test waits for a request to either reach
// the backend or be answered. It is a deadline for a failing test, not a
// synchronisation: the wait ends on the event itself.
const awaitTimeout = 10 * time.Second

// inFlightRequest is an HTTP request running in the background.
type inFlightRequest struct {
	done chan result
}

func (e *exampleEnv) start(t *testing.T, c *http.Client, path string, headers map[string]string) *inFlightRequest {
	t.Helper()
	req, err := http.NewRequest("GET", e.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	r := &inFlightRequest{done: make(chan result, 1)}
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			r.done <- result{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		r.done <- result{resp.StatusCode, resp.Header, body}
	}()
	return r
}

// await reports whether the request reached the backend (it is then held
// there) or, if the filter answered it first, that answer.
func (r *inFlightRequest) await(t *testing.T, b *slowBackend) (held bool, answer result) {
	t.Helper()
	select {
	case <-b.arrived:
		return true, result{}
	case res := <-r.done:
		return false, res
	case <-time.After(awaitTimeout):
		t.Fatalf("request neither reached the backend nor was answered in %v", awaitTimeout)
		return false, result{}
	}
}

func (r *inFlightRequest) wait(t *testing.T) result {
	t.Helper()
	select {
	case res := <-r.done:
		return res
	case <-time.After(awaitTimeout):
		t.Fatalf("no answer in %v", awaitTimeout)
		return result{}
	}
}

func wantRejection(t *testing.T, r result, status int, limit string) {
	t.Helper()
	var body map[string]any
	if r.status != status || json.Unmarshal(r.body, &body) != nil ||
		body["error"] != "concurrency_limited" || body["limit"] != limit {
		t.Fatalf("got %d %s, want %d concurrency_limited by %s", r.status, r.body, status, limit)
	}
}

// promSample returns one Prometheus sample's value, if present.
func promSample(prom, name string) (float64, bool) {
	for _, line := range strings.Split(prom, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f, true
			}
		}
	}
	return 0, false
}

// eventually polls a condition with a deadline; the heartbeat that updates
// gauges runs on the host's real one-second tick here.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(awaitTimeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s after %v", what, state, awaitTimeout)
		}
		time.Sleep(50 * time.Millisecond) // polling a real condition with a deadline
	}
}

// inflightRecords decodes every shared-data record of a concurrency limit:
// its buckets and its tally.
func inflightRecords(t *testing.T, rt *host.Runtime, vmID, limit string) map[string][]inflight.Entry {
	t.Helper()
	out := map[string][]inflight.Entry{}
	prefix := "sluice.cc." + limit + "."
	for _, k := range rt.SharedDataKeyNames(vmID) {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		v, _, _ := rt.SharedData(vmID, k)
		es, err := inflight.DecodeRecord(nil, v)
		if err != nil {
			t.Fatalf("%s holds %x: %v", k, v, err)
		}
		out[k] = es
	}
	return out
}

// countsByInstance sums the entries of a limit's bucket records (not its
// tally) per instance.
func countsByInstance(records map[string][]inflight.Entry, limit string) map[uint32]uint32 {
	by := map[uint32]uint32{}
	for k, es := range records {
		if k == "sluice.cc."+limit+".total" {
			continue
		}
		for _, e := range es {
			by[e.Instance] += e.Count
		}
	}
	return by
}

// TestFaultTrapFailReloadBulkhead traps a worker VM while
// one of its requests holds a slot, under failure_policy FAIL_RELOAD, with
// a real slow backend and the guest clock stepped by the test. The dead
// VM never ends that stream; its slot keeps counting (conservatively)
// until ccStaleAfter (10s) after the VM's last heartbeat, then frees,
// while the other worker's request, in flight the whole time, keeps
// counting because that VM's heartbeat refreshes it.
func TestFaultTrapFailReloadBulkhead(t *testing.T) {
	const staleAfter = 10 * time.Second // filter's ccStaleAfter
	b, ts := newSlowBackend(t)
	f := newFaultHost(t, trapGuest(t), `{"concurrency":[{"name":"db","max_in_flight":2}]}`, 2, "FAIL_RELOAD")
	up := forwardTo(ts.URL)
	tally := &statusTally{}
	sent := 0
	start := func(worker int, gate string, extra ...[2]string) chan *host.Response {
		sent++
		headers := append([][2]string{{":method", "GET"}, {":path", "/db"}, {":authority", "example.com"}, {"x-gate", gate}}, extra...)
		done := make(chan *host.Response, 1)
		go func() {
			resp, err := f.p.Serve(context.Background(), &host.Request{Worker: worker, Headers: headers,
				SourceAddress: "10.0.0.1:4000", RouteName: "default", ClusterName: "backend"}, up)
			if err != nil {
				resp = &host.Response{Status: -1, Body: []byte(err.Error())}
			}
			tally.add(resp)
			done <- resp
		}()
		return done
	}
	// admit starts a request and reports whether it reached the backend;
	// if not, it returns the filter's answer.
	admit := func(worker int, gate string, extra ...[2]string) (chan *host.Response, *host.Response) {
		t.Helper()
		done := start(worker, gate, extra...)
		select {
		case got := <-b.arrived:
			if got != gate {
				t.Fatalf("backend saw gate %q, want %q", got, gate)
			}
			return done, nil
		case resp := <-done:
			return nil, resp
		case <-time.After(awaitTimeout):
			t.Fatalf("request %s neither reached the backend nor was answered", gate)
			return nil, nil
		}
	}
	finish := func(gate string, done chan *host.Response) *host.Response {
		t.Helper()
		b.release(gate)
		select {
		case resp := <-done:
			return resp
		case <-time.After(awaitTimeout):
			t.Fatalf("request %s did not end", gate)
			return nil
		}
	}
	wantLimited := func(resp *host.Response, what string) {
		t.Helper()
		var body map[string]any
		if resp == nil || resp.Status != 503 || !resp.Local || json.Unmarshal(resp.Body, &body) != nil || body["error"] != "concurrency_limited" {
			t.Fatalf("%s: %+v, want 503 concurrency_limited", what, resp)
		}
	}
	gauge := func() uint64 {
		v, _ := f.rt.Stats().Lookup("sluice.concurrency.db.in_flight")
		return v
	}
	tick := func() {
		f.p.Tick(0)
		f.p.Tick(1)
	}

	admittedAt := f.clock()
	a, _ := admit(0, "a")
	bDone, _ := admit(1, "b")
	if _, r := admit(1, "c"); r == nil {
		t.Fatal("a third request reached the backend with max_in_flight 2")
	} else {
		wantLimited(r, "third request")
	}
	// Trap worker 0's VM while "a" waits at the backend.
	if _, trap := admit(0, "trap", [2]string{"x-sluice-test-trap", "1"}); trap == nil || trap.Status != 503 || trap.Details != "wasm_fail_stream" {
		t.Fatalf("trapping request: %+v", trap)
	}
	if !f.p.Failed(0) {
		t.Fatal("worker 0's VM did not fail")
	}
	// "a" ends in the dead VM: Envoy answers 503 and the plugin never
	// hears of the stream again, so nothing releases its slot.
	if resp := finish("a", a); resp.Status != 503 || resp.Details != "wasm_fail_stream" {
		t.Fatalf("the dead VM's request: %+v", resp)
	}
	trapAt := f.clock()
	_, d := admit(0, "d")
	wantLimited(d, "first request on the reloaded VM")
	if f.p.Reloads() != 1 || f.p.Failed(0) {
		t.Fatalf("reloads %d failed %v", f.p.Reloads(), f.p.Failed(0))
	}

	// Step the clock a second at a time, firing both workers' ticks as
	// Envoy's timers would, until the dead slot stops counting.
	var e chan *host.Response
	reclaimedAfter := time.Duration(-1)
	for step := 0; step < 30 && reclaimedAfter < 0; step++ {
		f.advance(time.Second)
		tick()
		done, resp := admit(0, "e")
		since := f.clock().Sub(admittedAt)
		if resp != nil {
			wantLimited(resp, fmt.Sprintf("at +%v", since))
			continue
		}
		if since <= staleAfter {
			t.Fatalf("the dead VM's slot was freed %v after its last heartbeat, before %v", since, staleAfter)
		}
		e, reclaimedAfter = done, since
	}
	if reclaimedAfter < 0 {
		t.Fatal("the dead VM's slot was never reclaimed")
	}
	if reclaimedAfter > staleAfter+time.Second {
		t.Errorf("reclaimed %v after the dead VM's last heartbeat, bound %v plus one tick", reclaimedAfter, staleAfter)
	}
	// "b" has been in flight on worker 1 all along: still counted, also by
	// worker 0, which only knows of it through shared data.
	for w := range 2 {
		_, g := admit(w, "g")
		wantLimited(g, fmt.Sprintf("request on worker %d with b and e in flight", w))
	}
	if v, _ := f.rt.Stats().Lookup("sluice.concurrency.db.reclaimed"); v != 1 {
		t.Errorf("reclaimed counter %d, want 1", v)
	}
	f.advance(time.Second)
	tick()
	if v := gauge(); v != 2 {
		t.Errorf("in_flight gauge %d with b and e in flight, want 2", v)
	}

	for gate, done := range map[string]chan *host.Response{"b": bDone, "e": e} {
		if resp := finish(gate, done); resp.Status != 200 || resp.Local {
			t.Fatalf("request %s: %+v", gate, resp)
		}
	}
	f.advance(time.Second)
	tick()
	if v := gauge(); v != 0 {
		t.Errorf("in_flight gauge %d after every request ended, want 0", v)
	}
	for k, es := range inflightRecords(t, f.rt, "faults", "db") {
		if len(es) != 0 {
			t.Errorf("%s still holds %+v after every request ended", k, es)
		}
	}
	// The count is back to exactly zero: max_in_flight fit again, no more.
	h1, _ := admit(0, "h1")
	h2, _ := admit(1, "h2")
	_, h3 := admit(0, "h3")
	wantLimited(h3, "third request after recovery")
	finish("h1", h1)
	finish("h2", h2)
	if f.p.Traps() != 1 {
		t.Errorf("%d traps, want only the injected one", f.p.Traps())
	}
	if peak := b.peak.Load(); peak > 2 {
		t.Errorf("the backend saw %d requests at once, max_in_flight 2", peak)
	}
	recordFault(t, faultRow{fault: "VM trap mid-request under FAIL_RELOAD with a concurrency limit", test: t.Name(), sent: sent,
		outcomes: fmt.Sprintf("max_in_flight 2; the dead VM's request ended 503 wasm_fail_stream without on_log; its slot counted until its "+
			"entry was %v old, freed at +%v; the survivor's request counted throughout; backend peak %d; %s", staleAfter, reclaimedAfter, b.peak.Load(), tally),
		overAdmitted: b.peak.Load() > 2,
		recovery: fmt.Sprintf("slot reclaimed %v guest time after the dead VM's last heartbeat (bound %v + one 1s tick); trap at +%v",
			reclaimedAfter, staleAfter, trapAt.Sub(admittedAt))})
}

// forwardTo is an upstream that sends the request to a real HTTP server.
func forwardTo(base string) host.Upstream {
	return func(ctx context.Context, r *host.Request) (*host.Response, error) {
		path := "/"
		for _, h := range r.Headers {
			if h[0] == ":path" {
				path = h[1]
			}
		}
		status, _, body, err := testkit.RoundTrip(ctx, "GET", base+path, r.Headers, nil)
		if err != nil {
			return nil, err
		}
		return &host.Response{Status: status, Body: body}, nil
	}
}
