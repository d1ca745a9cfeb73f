package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

// Fault-matrix rows that need no Redis (the Redis ones are in
// faults_redis_test.go). Each test injects one fault into build/sluice.wasm
// running in our host, with the guest's clock driven by the test so
// recovery times are exact, and writes its row of the matrix to
// build/faults/ (see writeTableRow).

// faultOrder is the matrix's row order: the list of faults.
var faultOrder = []string{
	"TestFaultRedisKilled", "TestFaultRedisRestarted", "TestFaultWebdisFrozen", "TestFaultWebdisGarbage",
	"TestFaultUpstreamTimeout", "TestFaultUpstream5xx", "TestFaultGarbageSharedData", "TestFaultCASStorm",
	"TestFaultTrapFailReload", "TestFaultTrapFailReloadBulkhead",
	"TestFaultWorkerPausedInGC/envoy-1.39", "TestFaultWorkerPausedInGC/envoy-1.33",
}

var faultsHeader = []string{"fault", "test", "requests sent", "outcomes", "nothing over-admitted", "time to recover"}

type faultRow struct {
	fault, test string
	sent        int
	outcomes    string
	// overAdmitted is what the test found; the row says yes/no for
	// "nothing over-admitted".
	overAdmitted bool
	recovery     string
}

func recordFault(t *testing.T, r faultRow) {
	t.Helper()
	nothing := "yes"
	if r.overAdmitted {
		nothing = "no"
	}
	t.Logf("fault %q: sent %d; %s; nothing over-admitted: %s; recovery: %s", r.fault, r.sent, r.outcomes, nothing, r.recovery)
	pos := slices.Index(faultOrder, r.test)
	if pos < 0 {
		t.Fatalf("%s is not in faultOrder", r.test)
	}
	writeTableRow(t, "faults", fmt.Sprintf("%02d-%s", pos+1, strings.ReplaceAll(r.test, "/", "-")), faultsHeader,
		[]string{r.fault, r.test, strconv.Itoa(r.sent), r.outcomes, nothing, r.recovery})
}

// faultHost runs one plugin with a stepped clock and manual ticks.
type faultHost struct {
	rt *host.Runtime
	p  *host.Plugin
	steppedClock
}

func newFaultHost(t *testing.T, code []byte, config string, workers int, policy string) *faultHost {
	t.Helper()
	f := &faultHost{steppedClock: steppedClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	// A trap's panic arrives as many short log writes; they are worth
	// reading only when the test fails.
	logs := newLogCapture(host.LogWarn, 64<<10)
	f.rt = host.NewRuntime(host.RuntimeOptions{Clock: f.clock, ManualTicks: true, LogLevel: host.LogWarn,
		Logger: logs.logger})
	t.Cleanup(func() {
		f.rt.Close(context.Background())
		if t.Failed() {
			t.Logf("host and plugin logs:\n%s", logs)
		}
	})
	var err error
	f.p, err = f.rt.NewPlugin(context.Background(), host.PluginConfig{Name: "faults", RootID: "faults", VMID: "faults",
		Code: code, Configuration: []byte(config), Concurrency: workers, FailurePolicy: policy})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *faultHost) do(t *testing.T, worker int, key string, extra [][2]string, up host.Upstream) *host.Response {
	t.Helper()
	headers := append([][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "example.com"}, {"x-key", key}}, extra...)
	resp, err := f.p.Serve(context.Background(), &host.Request{Worker: worker, Headers: headers,
		SourceAddress: "10.0.0.1:4000", RouteName: "default", ClusterName: "backend"}, up)
	if err != nil {
		t.Fatalf("serve: %v", err)
	}
	return resp
}

// startPlugin runs code as plugin name (its root and VM id too) on rt with
// config on workers workers, until the test ends.
func startPlugin(t *testing.T, rt *host.Runtime, name string, code []byte, config string, workers int) *host.Plugin {
	t.Helper()
	p, err := rt.NewPlugin(context.Background(), host.PluginConfig{Name: name, RootID: name, VMID: name,
		Code: code, Configuration: []byte(config), Concurrency: workers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// okUpstream answers 200 "ok" and counts the requests in calls.
func okUpstream(calls *atomic.Int64) host.Upstream {
	return func(context.Context, *host.Request) (*host.Response, error) {
		calls.Add(1)
		return &host.Response{Status: 200, Body: []byte("ok")}, nil
	}
}

// breakerFault trips a breaker with a failing upstream, checks that no
// request reaches the upstream while it is open, then heals the upstream
// and measures (in guest time) how long until requests pass again.
func breakerFault(t *testing.T, fault, breakerJSON string, failing host.Upstream) {
	const threshold, openTimeout, successes = 3, 10 * time.Second, 2
	cfg := fmt.Sprintf(`{"breakers":[{"name":"backend","per":"cluster","failure_threshold":%d,"open_timeout":"%s","success_threshold":%d%s}]}`,
		threshold, openTimeout, successes, breakerJSON)
	f := newFaultHost(t, wasmModule(t, "sluice"), cfg, 1, "")
	var failingCalls atomic.Int64
	up := func(ctx context.Context, r *host.Request) (*host.Response, error) {
		failingCalls.Add(1)
		return failing(ctx, r)
	}
	tally := &statusTally{}
	sent := 0
	// The breaker counts outcomes at the end of each stream, so it opens
	// exactly after the threshold's failure.
	for i := 0; i < threshold+20; i++ {
		tally.add(f.do(t, 0, "k", nil, up))
		sent++
		f.advance(10 * time.Millisecond)
	}
	reachedWhileOpen := failingCalls.Load() - threshold
	if v, _ := f.rt.Stats().Lookup("sluice.breaker.backend.opens"); v != 1 {
		t.Errorf("breaker opened %d times, want 1", v)
	}
	if got := tally.get("503"); got < 20 {
		t.Errorf("only %d requests rejected while open (%s)", got, tally)
	}

	var healthy atomic.Int64
	good := okUpstream(&healthy)
	faultEnd := f.clock()
	var recovered time.Duration = -1
	for i := 0; i < 200 && recovered < 0; i++ {
		r := f.do(t, 0, "k", nil, good)
		tally.add(r)
		sent++
		if r.Status == 200 {
			recovered = f.clock().Sub(faultEnd)
			break
		}
		f.advance(500 * time.Millisecond)
	}
	if recovered < 0 {
		t.Fatalf("no request passed within 100s of guest time after the upstream healed (%s)", tally)
	}
	// success_threshold probes close it; then traffic flows freely.
	for i := 0; i < 10; i++ {
		r := f.do(t, 0, "k", nil, good)
		tally.add(r)
		sent++
		if r.Status != 200 {
			t.Fatalf("request %d after recovery: %d (%s)", i, r.Status, tally)
		}
	}
	if v, _ := f.rt.Stats().Lookup("sluice.breaker.backend.closes"); v != 1 {
		t.Errorf("breaker closed %d times, want 1", v)
	}
	if f.p.Traps() != 0 {
		t.Fatalf("%d traps", f.p.Traps())
	}
	if reachedWhileOpen != 0 {
		t.Errorf("%d requests reached the failing upstream after the breaker opened", reachedWhileOpen)
	}
	if recovered < openTimeout {
		t.Errorf("recovered after %v, before open_timeout %v", recovered, openTimeout)
	}
	recordFault(t, faultRow{fault: fault, test: t.Name(), sent: sent,
		outcomes: fmt.Sprintf("%d reached the failing upstream (threshold %d), then breaker open; %s", failingCalls.Load(), threshold, tally),
		// Over-admission for a breaker is letting requests through to the
		// failing upstream once it is open.
		overAdmitted: reachedWhileOpen != 0,
		recovery:     fmt.Sprintf("%v guest time (open_timeout %v), closed after %d probes", recovered, openTimeout, successes)})
}

func TestFaultUpstreamTimeout(t *testing.T) {
	// failure_statuses [] so only the timeout itself can count as a failure.
	breakerFault(t, "upstream times out (route timeout, 504 upstream_response_timeout)", `,"failure_statuses":[]`,
		func(context.Context, *host.Request) (*host.Response, error) {
			return nil, &host.UpstreamError{Status: 504, Details: "upstream_response_timeout"}
		})
}

func TestFaultUpstream5xx(t *testing.T) {
	breakerFault(t, "upstream returns 5xx (503)", "",
		func(context.Context, *host.Request) (*host.Response, error) {
			return &host.Response{Status: 503, Body: []byte("unavailable")}, nil
		})
}

// garbageValues are what another plugin sharing the vm_id, or an older
// build, could have left in a slot.
var garbageValues = map[string][]byte{
	"empty":          {},
	"one byte":       {0x01},
	"all ones":       []byte(strings.Repeat("\xff", 24)),
	"ascii":          []byte("hello, this is not a slot"),
	"huge":           make([]byte, 1<<16),
	"wrong version":  append([]byte{0x7f}, make([]byte, 23)...),
	"truncated half": make([]byte, 12),
}

// TestFaultGarbageSharedData overwrites every slot the filter created with
// garbage, then checks the limit still answers and never gives a client
// more than a fresh bucket; after one refill period it works as before.
func TestFaultGarbageSharedData(t *testing.T) {
	const capacity = 5 // requests_per_second 1 + burst 4
	code := wasmModule(t, "sluice")
	cfg := `{"limits":[{"name":"per-key","key":["header:x-key"],"requests_per_second":1,"burst":4}]}`
	total, worst := 0, 0
	var outcomes []string
	over := false
	for name, garbage := range garbageValues {
		t.Run(name, func(t *testing.T) {
			f := newFaultHost(t, code, cfg, 2, "")
			var calls atomic.Int64
			up := okUpstream(&calls)
			// Drain the bucket so the planted value decides what happens next.
			for i := 0; i < capacity; i++ {
				if r := f.do(t, i%2, "victim", nil, up); r.Status != 200 {
					t.Fatalf("request %d before the fault: %d", i, r.Status)
				}
			}
			keys := f.rt.SharedDataKeyNames("faults")
			if len(keys) == 0 {
				t.Fatal("the limit created no shared-data keys")
			}
			for _, k := range keys {
				f.rt.SetSharedData("faults", k, garbage)
			}
			tally := &statusTally{}
			const burst = 3 * capacity
			admitted := 0
			for i := 0; i < burst; i++ {
				r := f.do(t, i%2, "victim", nil, up)
				tally.add(r)
				if r.Status == 200 {
					admitted++
				} else if r.Status != 429 {
					t.Fatalf("request %d on garbage: status %d (%s)", i, r.Status, r.Body)
				}
			}
			// Another client must be unaffected by the victim's garbage slot.
			other := f.do(t, 0, "bystander", nil, up)
			// One refill period later the key answers exactly as a fresh
			// bucket would: capacity admitted, then denied.
			f.advance(capacity * time.Second)
			after := 0
			for i := 0; i < capacity+3; i++ {
				if f.do(t, i%2, "victim", nil, up).Status == 200 {
					after++
				}
			}
			if f.p.Traps() != 0 {
				t.Fatalf("%d traps", f.p.Traps())
			}
			faultsMu.Lock()
			total += capacity + burst + 1 + capacity + 3
			worst = max(worst, admitted)
			outcomes = append(outcomes, fmt.Sprintf("%s: %d/%d admitted", name, admitted, burst))
			if admitted > capacity || after > capacity {
				over = true
			}
			faultsMu.Unlock()
			if admitted > capacity {
				t.Errorf("%d requests admitted on a garbage slot; a fresh bucket holds %d", admitted, capacity)
			}
			if other.Status != 200 {
				t.Errorf("another key was denied (%d) after the garbage", other.Status)
			}
			if after != capacity {
				t.Errorf("after a refill period %d admitted, want exactly %d", after, capacity)
			}
		})
	}
	recordFault(t, faultRow{fault: "garbage bytes planted in every shared-data slot", test: t.Name(), sent: total,
		outcomes: fmt.Sprintf("no 5xx, no trap; bucket drained before the fault, so 0 is the true state and %d a fresh bucket; "+
			"admitted at most %d of each burst: %s", capacity, worst, strings.Join(sortedStrings(outcomes), "; ")),
		overAdmitted: over, recovery: fmt.Sprintf("immediate (correct answers on the next request); exact fresh bucket after one refill period (%ds)", capacity)})
}

var faultsMu sync.Mutex

func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// TestFaultCASStorm has 8 workers race for one key's slot with the clock
// stopped: every admission is a compare-and-swap on the same shared-data
// entry, so lost updates would show as more admissions than the capacity.
func TestFaultCASStorm(t *testing.T) {
	const workers, perDriver, capacity = 8, 100, 100 // requests_per_second 1 + burst 99
	f := newFaultHost(t, wasmModule(t, "sluice"),
		`{"limits":[{"name":"storm","key":["header:x-key"],"requests_per_second":1,"burst":99}]}`, workers, "")
	var calls atomic.Int64
	up := okUpstream(&calls)
	tally := &statusTally{}
	// Two drivers per worker keep each VM busy while the other waits on
	// the worker lock, maximising interleaving in shared data.
	start := make(chan struct{})
	var wg sync.WaitGroup
	for d := 0; d < 2*workers; d++ {
		wg.Add(1)
		go func(d int) {
			defer wg.Done()
			<-start
			for i := 0; i < perDriver; i++ {
				resp, err := f.p.Serve(context.Background(), &host.Request{Worker: d % workers,
					Headers:       [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "h"}, {"x-key", "hot"}},
					SourceAddress: "10.0.0.1:1", RouteName: "default", ClusterName: "backend"}, up)
				if err != nil {
					t.Errorf("serve: %v", err)
					return
				}
				tally.add(resp)
			}
		}(d)
	}
	wallStart := time.Now()
	close(start)
	wg.Wait()
	wall := time.Since(wallStart)
	sent := 2 * workers * perDriver
	admitted := tally.get("200")
	allowed, _ := f.rt.Stats().Lookup("sluice.limit.storm.allowed")
	limited, _ := f.rt.Stats().Lookup("sluice.limit.storm.limited")
	// Recovery: one refill later the key admits again.
	f.advance(time.Second)
	next := f.do(t, 3, "hot", nil, up)
	recordFault(t, faultRow{fault: "CAS-mismatch storm: 8 workers on one key", test: t.Name(), sent: sent + 1,
		outcomes: fmt.Sprintf("%d admitted (capacity %d), %s; metrics allowed %d limited %d; %v wall",
			admitted, capacity, tally, allowed, limited, wall.Round(time.Millisecond)),
		overAdmitted: admitted > capacity,
		recovery:     "none needed: no request failed; the next refill (1s) admits again"})
	if f.p.Traps() != 0 {
		t.Fatalf("%d traps", f.p.Traps())
	}
	if admitted != capacity {
		t.Errorf("%d admitted from one key by %d workers, want exactly the capacity %d (%s)", admitted, workers, capacity, tally)
	}
	if tally.get("429") != sent-capacity {
		t.Errorf("outcomes %s: every request beyond the capacity must be a 429", tally)
	}
	if allowed != capacity || limited != uint64(sent-capacity) {
		t.Errorf("metrics allowed %d limited %d, want %d and %d", allowed, limited, capacity, sent-capacity)
	}
	if next.Status != 200 {
		t.Errorf("after a refill period: %d", next.Status)
	}
}

// trapGuest builds e2e/testdata/trapguest: the real filter plus a header
// that makes the guest panic, since the filter itself never traps.
func trapGuest(t *testing.T) []byte {
	t.Helper()
	mod := testkit.Built(t, filepath.Join("..", "build", "go.wasm.mod"))
	out := filepath.Join(t.TempDir(), "trapguest.wasm")
	cmd := exec.Command("go", "build", "-modfile="+mod, "-tags", "sluice_bridge", "-buildmode=c-shared", "-trimpath",
		"-o", out, "./e2e/testdata/trapguest")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the trap guest: %v\n%s", err, msg)
	}
	code, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// TestFaultTrapFailReload traps the VM mid-stream under FAIL_RELOAD: the
// trapping request fails, the next one runs on a fresh VM, and because
// shared data outlives the VM the limit's state carries over, so the
// reload does not hand out a fresh bucket.
func TestFaultTrapFailReload(t *testing.T) {
	const capacity = 5
	f := newFaultHost(t, trapGuest(t),
		`{"limits":[{"name":"per-key","key":["header:x-key"],"requests_per_second":1,"burst":4}]}`, 2, "FAIL_RELOAD")
	var calls atomic.Int64
	up := okUpstream(&calls)
	tally := &statusTally{}
	sent := 0
	for i := 0; i < 3; i++ {
		r := f.do(t, 0, "k", nil, up)
		tally.add(r)
		sent++
		if r.Status != 200 {
			t.Fatalf("request %d before the trap: %d", i, r.Status)
		}
	}
	trap := f.do(t, 0, "k", [][2]string{{"x-sluice-test-trap", "1"}}, up)
	tally.add(trap)
	sent++
	if trap.Status != 503 || trap.Details != "wasm_fail_stream" {
		t.Fatalf("trapping request: %d %q", trap.Status, trap.Details)
	}
	if f.p.Traps() != 1 || !f.p.Failed(0) {
		t.Fatalf("traps %d failed(0) %v", f.p.Traps(), f.p.Failed(0))
	}
	reloadStart := time.Now()
	first := f.do(t, 0, "k", nil, up)
	reloadWall := time.Since(reloadStart)
	tally.add(first)
	sent++
	admittedAfter := 0
	if first.Status == 200 {
		admittedAfter++
	}
	for i := 0; i < capacity; i++ {
		r := f.do(t, i%2, "k", nil, up)
		tally.add(r)
		sent++
		if r.Status == 200 {
			admittedAfter++
		}
	}
	recordFault(t, faultRow{fault: "VM trap under failure_policy FAIL_RELOAD", test: t.Name(), sent: sent,
		outcomes: fmt.Sprintf("trapping request 503 wasm_fail_stream; reloads %d; %d admitted after the reload (%d left in the bucket); %s",
			f.p.Reloads(), admittedAfter, capacity-3, tally),
		overAdmitted: 3+admittedAfter > capacity,
		recovery:     fmt.Sprintf("next request (%v wall for reload + request); only the trapping request failed", reloadWall.Round(time.Millisecond))})
	if first.Status != 200 || f.p.Reloads() != 1 || f.p.Failed(0) {
		t.Fatalf("after the trap: status %d reloads %d failed %v", first.Status, f.p.Reloads(), f.p.Failed(0))
	}
	// Shared data survived: the reloaded VM continues from 3 spent tokens.
	if 3+admittedAfter != capacity {
		t.Errorf("%d admitted before and %d after the reload, want %d in all: the reload lost or forged state",
			3, admittedAfter, capacity)
	}
	if f.p.Traps() != 1 {
		t.Errorf("%d traps, want only the injected one", f.p.Traps())
	}
}
