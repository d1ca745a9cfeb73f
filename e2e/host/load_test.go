package host

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

func loadPlugin(t *testing.T, r *Runtime, code []byte, mut ...func(*PluginConfig)) (*Plugin, error) {
	t.Helper()
	cfg := PluginConfig{Name: "wat", RootID: "r", VMID: "wat-vm", Code: code, Configuration: []byte("plugin-config"), VMConfiguration: []byte("vm-config")}
	for _, f := range mut {
		f(&cfg)
	}
	p, err := r.NewPlugin(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { _ = p.Close(context.Background()) })
	}
	return p, err
}

func TestLoadNeedsABIVersion(t *testing.T) {
	r, _ := newRT(t, "")
	_, err := loadPlugin(t, r, watModule{abi: "-"}.build(t))
	if err == nil || !strings.Contains(err.Error(), "Missing or unknown Proxy-Wasm ABI version") {
		t.Fatalf("err = %v", err)
	}
	if _, err := loadPlugin(t, r, watModule{abi: "proxy_abi_version_0_2_1"}.build(t)); err != nil {
		t.Fatalf("0.2.1 module: %v", err)
	}
}

func TestMissingImportIsRefusedWithEnvoysWording(t *testing.T) {
	r, _ := newRT(t, "")
	code := watModule{imports: `(import "env" "proxy_fancy_new_call" (func (param i32) (result i32)))`}.build(t)
	_, err := loadPlugin(t, r, code)
	want := "Failed to load Wasm module due to a missing import: env.proxy_fancy_new_call"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("err = %v, want suffix %q", err, want)
	}
	// proxy_get_log_level exists only for ABI 0.2.1 modules.
	code = watModule{imports: `(import "env" "proxy_get_log_level" (func (param i32) (result i32)))`}.build(t)
	if _, err := loadPlugin(t, r, code); err == nil || !strings.Contains(err.Error(), "missing import: env.proxy_get_log_level") {
		t.Errorf("0.2.0 module importing proxy_get_log_level: %v", err)
	}
	code = watModule{abi: "proxy_abi_version_0_2_1", imports: `(import "env" "proxy_get_log_level" (func (param i32) (result i32)))`}.build(t)
	if _, err := loadPlugin(t, r, code); err != nil {
		t.Errorf("0.2.1 module importing proxy_get_log_level: %v", err)
	}
	// A wrong signature is refused too, not left to trap later.
	code = watModule{imports: `(import "env" "proxy_done" (func (param i32) (result i32)))`}.build(t)
	if _, err := loadPlugin(t, r, code); err == nil || !strings.Contains(err.Error(), "import type mismatch for env.proxy_done") {
		t.Errorf("mismatched signature: %v", err)
	}
}

func TestWASIImportSetDependsOnProfile(t *testing.T) {
	// fd_filestat_get came with cpp-host #533: Envoy 1.33 refuses it.
	code := watModule{imports: `(import "wasi_unstable" "fd_filestat_get" (func (param i32 i32) (result i32)))`}.build(t)
	r133, _ := newRT(t, ProfileEnvoy133)
	_, err := loadPlugin(t, r133, code)
	if err == nil || !strings.HasSuffix(err.Error(), "Failed to load Wasm module due to a missing import: wasi_unstable.fd_filestat_get") {
		t.Errorf("envoy-1.33: %v", err)
	}
	r139, _ := newRT(t, ProfileEnvoy139)
	if _, err := loadPlugin(t, r139, code); err != nil {
		t.Errorf("envoy-1.39: %v", err)
	}
}

func TestRealGuestImportsAreWithinBothProfiles(t *testing.T) {
	for _, name := range []string{"sluice.wasm", "noop.wasm"} {
		code := guest(t, name)
		for _, prof := range []Profile{ProfileEnvoy133, ProfileEnvoy139} {
			r, sink := newRT(t, prof)
			if _, err := loadPlugin(t, r, code, func(c *PluginConfig) { c.Configuration = []byte("{}") }); err != nil {
				t.Errorf("%s under %s: %v (logs %q)", name, prof, err, sink.messages())
			}
		}
	}
}

func TestMallocPreferredOverProxyOnMemoryAllocate(t *testing.T) {
	r, sink := newRT(t, "")
	// Reading the plugin configuration makes the host allocate in the guest.
	code := watModule{malloc: true, alloc: `(call $say {{"proxy_on_memory_allocate"}})`,
		config: `(drop (call $getbuf (i32.const 7) (i32.const 0) (i32.const 100) (i32.const 9000) (i32.const 9004)))`}.build(t)
	if _, err := loadPlugin(t, r, code); err != nil {
		t.Fatal(err)
	}
	if !sink.contains("malloc") || sink.contains("proxy_on_memory_allocate") {
		t.Errorf("allocator calls: %q", sink.messages())
	}
}

func TestStartSequenceAndCanary(t *testing.T) {
	r, sink := newRT(t, "")
	code := watModule{
		init:    `(call $say {{"init"}})`,
		main:    `(call $say {{"main"}})`,
		start:   `(call $say {{"_start must not run in a reactor"}})`,
		create:  `(call $say {{"create"}})`,
		vmStart: `(call $say {{"vm_start"}})`,
		config:  `(call $say {{"configure"}})`,
	}.build(t)
	if _, err := loadPlugin(t, r, code, func(c *PluginConfig) { c.Concurrency = 2 }); err != nil {
		t.Fatal(err)
	}
	one := "init,main,create,vm_start,configure"
	// Canary + 2 workers: configuration side effects happen 3 times.
	want := strings.Join([]string{one, one, one}, ",")
	if got := strings.Join(sink.messages(), ","); got != want {
		t.Errorf("start-up calls:\n got %s\nwant %s", got, want)
	}

	r2, sink2 := newRT(t, "")
	cmd := watModule{init: "-", start: `(call $say {{"_start"}})`}.build(t)
	if _, err := loadPlugin(t, r2, cmd); err != nil {
		t.Fatal(err)
	}
	if got := sink2.messages(); len(got) != 2 || got[0] != "_start" {
		t.Errorf("WASI command start-up: %q (canary + 1 worker)", got)
	}
}

func TestStartFailuresAreClear(t *testing.T) {
	r, _ := newRT(t, "")
	for _, tc := range []struct {
		m    watModule
		want string
	}{
		{watModule{vmStart: `(return (i32.const 0))`}, "Failed to start base Wasm plugin: proxy_on_vm_start returned false"},
		{watModule{config: `(return (i32.const 0))`}, "Failed to configure base Wasm plugin: proxy_on_configure returned false"},
		{watModule{config: `unreachable`}, "Failed to configure base Wasm plugin"},
		{watModule{memory: `(memory (export "memory") 16385)`}, "Failed to"},
	} {
		_, err := loadPlugin(t, r, tc.m.build(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
}

func TestMemoryIsCappedAt16384Pages(t *testing.T) {
	r, _ := newRT(t, "")
	// vm_start succeeds only if growing past the cap fails.
	code := watModule{vmStart: `(if (i32.ne (memory.grow (i32.const 16383)) (i32.const -1)) (then (return (i32.const 0))))`}.build(t)
	if _, err := loadPlugin(t, r, code); err != nil {
		t.Errorf("memory.grow beyond 16384 pages did not fail: %v", err)
	}
}

func TestConfigurationBuffersOnlyInTheirCallbacks(t *testing.T) {
	r, _ := newRT(t, "")
	// Each callback stores the status of reading buffer 6 and 7.
	probe := func(key string) string {
		return `(i32.store (i32.const 8000) (call $getbuf (i32.const 6) (i32.const 0) (i32.const 100) (i32.const 9000) (i32.const 9004)))
		(i32.store (i32.const 8004) (call $getbuf (i32.const 7) (i32.const 0) (i32.const 100) (i32.const 9008) (i32.const 9012)))
		(drop (call $set {{"` + key + `"}} (i32.const 8000) (i32.const 8) (i32.const 0)))`
	}
	code := watModule{vmStart: probe("vm_start"), config: probe("configure"), reqHdrs: probe("request")}.build(t)
	p, err := loadPlugin(t, r, code)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Serve(context.Background(), getReq(0, "/"), okUpstream(200, "")); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]uint32{
		"vm_start":  {uint32(StatusOK), uint32(StatusNotFound)},
		"configure": {uint32(StatusNotFound), uint32(StatusOK)},
		"request":   {uint32(StatusNotFound), uint32(StatusNotFound)},
	}
	for k, w := range want {
		v, _, ok := r.SharedData("wat-vm", k)
		if !ok || len(v) != 8 {
			t.Fatalf("%s: no result", k)
		}
		got := [2]uint32{binary.LittleEndian.Uint32(v), binary.LittleEndian.Uint32(v[4:])}
		if got != w {
			t.Errorf("%s: (vm config, plugin config) statuses = %v, want %v", k, got, w)
		}
	}
}

func TestRestrictedCallbacksDuringStart(t *testing.T) {
	r, sink := newRT(t, "")
	// proxy_log is allowed while _initialize runs.
	if _, err := loadPlugin(t, r, watModule{init: `(call $say {{"hello from init"}})`}.build(t)); err != nil || !sink.contains("hello from init") {
		t.Fatalf("proxy_log during _initialize: %v", err)
	}
	// Shared data is not: the VM fails, so start-up fails.
	_, err := loadPlugin(t, r, watModule{init: `(drop (call $set {{"k"}} {{"v"}} (i32.const 0)))`}.build(t))
	if err == nil || !strings.Contains(err.Error(), "restricted_callback") || !strings.Contains(err.Error(), "env.proxy_set_shared_data") {
		t.Errorf("proxy_set_shared_data during _initialize: %v", err)
	}
	if _, ok := func() ([]byte, bool) { v, _, ok := r.SharedData("wat-vm", "k"); return v, ok }(); ok {
		t.Errorf("the restricted call took effect")
	}
	// poll_oneoff during _initialize: refused by 1.33, allowed by 1.39 (#533).
	poll := watModule{
		imports: `(import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))`,
		init:    `(drop (call $poll (i32.const 7600) (i32.const 7700) (i32.const 1) (i32.const 7800)))`,
	}.build(t)
	r133, _ := newRT(t, ProfileEnvoy133)
	if _, err := loadPlugin(t, r133, poll); err == nil || !strings.Contains(err.Error(), "restricted_callback") {
		t.Errorf("envoy-1.33 poll_oneoff in _initialize: %v", err)
	}
	if _, err := loadPlugin(t, r, poll); err != nil {
		t.Errorf("envoy-1.39 poll_oneoff in _initialize: %v", err)
	}
}

func TestRestrictedCallbacksInAllocator(t *testing.T) {
	r, _ := newRT(t, "")
	// The allocator calls proxy_get_shared_data, which Envoy forbids there.
	code := watModule{
		alloc:   `(drop (call $get {{"k"}} (i32.const 9000) (i32.const 9004) (i32.const 9008)))`,
		reqHdrs: `(drop (call $pairs (i32.const 0) (i32.const 9100) (i32.const 9104)))`,
	}.build(t)
	p, err := loadPlugin(t, r, code)
	if err != nil {
		t.Fatal(err)
	}
	rc := &recorder{}
	resp, err := p.Serve(context.Background(), getReq(0, "/"), rc.up)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 503 || resp.Details != "wasm_fail_stream" || rc.calls.Load() != 0 || p.Traps() != 1 || !p.Failed(0) {
		t.Errorf("restricted call in allocator: resp %+v upstream calls %d traps %d", resp, rc.calls.Load(), p.Traps())
	}
	// proxy_log in the allocator is fine.
	code = watModule{alloc: `(call $say {{"alloc"}})`, reqHdrs: `(drop (call $pairs (i32.const 0) (i32.const 9100) (i32.const 9104)))`}.build(t)
	p, err = loadPlugin(t, r, code)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := p.Serve(context.Background(), getReq(0, "/"), okUpstream(200, "")); err != nil || resp.Status != 200 {
		t.Errorf("proxy_log in allocator: %v %+v", err, resp)
	}
}

const wasiImports = `
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_unstable" "fd_write" (func $fd_write_u (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $prestat (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $env_sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $env_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
`

const wasiBody = `
  (i32.store (i32.const 7000) (i32.const 7100)) (i32.store (i32.const 7004) (i32.const 10))
  (i32.store (i32.const 7008) (i32.const 7200)) (i32.store (i32.const 7012) (i32.const 10))
  (i32.store (i32.const 8192) (call $fd_write (i32.const 1) (i32.const 7000) (i32.const 1) (i32.const 7500)))
  (i32.store (i32.const 8196) (call $fd_write_u (i32.const 2) (i32.const 7008) (i32.const 1) (i32.const 7500)))
  (i32.store (i32.const 8200) (call $fd_write (i32.const 3) (i32.const 7000) (i32.const 1) (i32.const 7500)))
  (i32.store (i32.const 8204) (call $fd_read (i32.const 0) (i32.const 7000) (i32.const 1) (i32.const 7500)))
  (i32.store (i32.const 8208) (call $path_open (i32.const 3) (i32.const 0) (i32.const 7100) (i32.const 4) (i32.const 0) (i64.const 0) (i64.const 0) (i32.const 0) (i32.const 7500)))
  (i32.store (i32.const 8212) (call $prestat (i32.const 3) (i32.const 7500)))
  (i32.store (i32.const 8216) (call $poll (i32.const 7600) (i32.const 7700) (i32.const 1) (i32.const 7800)))
  (i32.store (i32.const 8220) (call $env_sizes (i32.const 8224) (i32.const 8228)))
  (i32.store (i32.const 8232) (call $clock (i32.const 0) (i64.const 1) (i32.const 8240)))
  (i32.store (i32.const 8236) (call $clock (i32.const 1) (i64.const 1) (i32.const 8248)))
  (i32.store (i32.const 8256) (call $random (i32.const 8260) (i32.const 16)))
  (i32.store (i32.const 8276) (call $clock (i32.const 2) (i64.const 1) (i32.const 7500)))
  (i32.store (i32.const 8280) (call $env_get (i32.const 8900) (i32.const 9000)))
  (drop (call $set {{"wasi"}} (i32.const 8192) (i32.const 92) (i32.const 0)))
  (drop (call $set {{"env"}} (i32.const 9000) (i32.load (i32.const 8228)) (i32.const 0)))
`

func TestWASIBehaviour(t *testing.T) {
	for _, prof := range []Profile{ProfileEnvoy133, ProfileEnvoy139} {
		t.Run(string(prof), func(t *testing.T) {
			r, sink := newRT(t, prof)
			m := watModule{imports: wasiImports, vmStart: wasiBody,
				extra: `(data (i32.const 7100) "to-stdout\n") (data (i32.const 7200) "to-stderr\n")`}
			before := time.Now()
			if _, err := loadPlugin(t, r, m.build(t), func(c *PluginConfig) { c.Environment = map[string]string{"A": "1", "B": "two"} }); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			v, _, ok := r.SharedData("wat-vm", "wasi")
			if !ok || len(v) != 92 {
				t.Fatalf("no results")
			}
			u32 := func(off int) uint32 { return binary.LittleEndian.Uint32(v[off:]) }
			u64 := func(off int) uint64 { return binary.LittleEndian.Uint64(v[off:]) }
			wantPoll := uint32(0)
			if prof == ProfileEnvoy133 {
				wantPoll = 52
			}
			for _, c := range []struct {
				name string
				off  int
				want uint32
			}{
				{"fd_write(1)", 0, 0}, {"fd_write(2) via wasi_unstable", 4, 0}, {"fd_write(3)", 8, errnoBadf},
				{"fd_read", 12, errnoNosys}, {"path_open", 16, errnoNoent}, {"fd_prestat_get", 20, errnoBadf},
				{"poll_oneoff", 24, wantPoll}, {"environ_sizes_get", 28, 0}, {"environ count", 32, 2},
				{"environ buf size", 36, uint32(len("A=1\x00B=two\x00"))}, {"clock realtime", 40, 0}, {"clock monotonic", 44, 0},
				{"random_get", 64, 0}, {"clock process-cpu", 84, errnoNotsup}, {"environ_get", 88, 0},
			} {
				if got := u32(c.off); got != c.want {
					t.Errorf("%s = %d, want %d", c.name, got, c.want)
				}
			}
			// Real clocks: wall time within the test's window.
			if wall := u64(48); wall < uint64(before.UnixNano()) || wall > uint64(after.UnixNano()) {
				t.Errorf("realtime clock %d outside [%d,%d]: not a real clock", wall, before.UnixNano(), after.UnixNano())
			}
			if u64(56) == 0 {
				t.Errorf("monotonic clock is zero")
			}
			if rnd := v[68:84]; string(rnd) == string(make([]byte, 16)) {
				t.Errorf("random_get left the buffer zero")
			}
			env, _, _ := r.SharedData("wat-vm", "env")
			if string(env) != "A=1\x00B=two\x00" {
				t.Errorf("environ = %q, want only the configured variables", env)
			}
			var sawOut, sawErr bool
			sink.mu.Lock()
			for _, l := range sink.lines {
				if l.msg == "to-stdout" && l.level == LogInfo {
					sawOut = true
				}
				if l.msg == "to-stderr" && l.level == LogError {
					sawErr = true
				}
			}
			sink.mu.Unlock()
			if !sawOut || !sawErr {
				t.Errorf("fd_write to stdout/stderr not logged at info/error: %q", sink.messages())
			}
		})
	}
}

func TestRandomDiffersBetweenVMs(t *testing.T) {
	r, _ := newRT(t, "")
	m := watModule{imports: wasiImports, config: `(drop (call $random (i32.const 8260) (i32.const 16))) (drop (call $set {{"rnd"}} (i32.const 8260) (i32.const 16) (i32.const 0)))`}
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		if _, err := loadPlugin(t, r, m.build(t)); err != nil {
			t.Fatal(err)
		}
		v, _, _ := r.SharedData("wat-vm", "rnd")
		seen[string(v)] = true
	}
	if len(seen) != 3 {
		t.Errorf("random_get repeated across VMs: not a real random source")
	}
}

func TestLogDoneDeleteOrder(t *testing.T) {
	r, sink := newRT(t, "")
	code := watModule{
		reqHdrs:  `(call $say {{"request_headers"}})`,
		respHdrs: `(call $say {{"response_headers"}})`,
		onLog:    `(call $say {{"log"}})`,
		onDone:   `(call $say {{"done"}})`,
		onDelete: `(call $say {{"delete"}})`,
	}.build(t)
	p, err := loadPlugin(t, r, code)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Serve(context.Background(), getReq(0, "/"), okUpstream(200, "")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sink.messages(), ","); got != "request_headers,response_headers,log,done,delete" {
		t.Errorf("stream callbacks: %s", got)
	}
	// Shutdown gives the root context on_done then on_delete.
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sink.messages(), ","); got != "request_headers,response_headers,log,done,delete,done,delete" {
		t.Errorf("after Close: %s", got)
	}
}

// trapOnce traps in the first request that finds no "trapped" key in shared
// data, after setting it; later VMs of the same vm_id therefore succeed.
var trapOnce = watModule{reqHdrs: `
	(if (i32.eq (call $get {{"trapped"}} (i32.const 9000) (i32.const 9004) (i32.const 9008)) (i32.const 1))
	  (then (drop (call $set {{"trapped"}} {{"1"}} (i32.const 0))) unreachable))`}

func TestTrapFailClosed(t *testing.T) {
	r, _ := newRT(t, "")
	p, err := loadPlugin(t, r, trapOnce.build(t), func(c *PluginConfig) { c.Concurrency = 2 })
	if err != nil {
		t.Fatal(err)
	}
	rc := &recorder{}
	for i := 0; i < 2; i++ {
		resp, err := p.Serve(context.Background(), getReq(0, "/"), rc.up)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 503 || resp.Details != "wasm_fail_stream" || !resp.Local {
			t.Errorf("request %d on the failed VM: %+v", i, resp)
		}
	}
	if rc.calls.Load() != 0 || p.Traps() != 1 || !p.Failed(0) || p.Failed(1) {
		t.Errorf("upstream calls %d, traps %d, failed(0)=%v failed(1)=%v", rc.calls.Load(), p.Traps(), p.Failed(0), p.Failed(1))
	}
	// The other worker's VM is unaffected.
	if resp, err := p.Serve(context.Background(), getReq(1, "/"), rc.up); err != nil || resp.Status != 200 {
		t.Errorf("worker 1: %v %+v", err, resp)
	}
}

func TestTrapFailOpen(t *testing.T) {
	for _, cfg := range []func(*PluginConfig){
		func(c *PluginConfig) { c.FailOpen = true },
		func(c *PluginConfig) { c.FailurePolicy = "FAIL_OPEN" },
	} {
		r, _ := newRT(t, "")
		p, err := loadPlugin(t, r, trapOnce.build(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		rc := &recorder{}
		for i := 0; i < 2; i++ {
			resp, err := p.Serve(context.Background(), getReq(0, "/"), rc.up)
			if err != nil || resp.Status != 200 || string(resp.Body) != "upstream" {
				t.Errorf("request %d fail-open: %v %+v", i, err, resp)
			}
		}
		if rc.calls.Load() != 2 || p.Traps() != 1 {
			t.Errorf("upstream calls %d traps %d", rc.calls.Load(), p.Traps())
		}
	}
}

func TestTrapFailReloadKeepsSharedData(t *testing.T) {
	r, _ := newRT(t, "")
	p, err := loadPlugin(t, r, trapOnce.build(t), func(c *PluginConfig) { c.FailurePolicy = "FAIL_RELOAD" })
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.Serve(context.Background(), getReq(0, "/"), okUpstream(200, "ok"))
	if err != nil || resp.Status != 503 || resp.Details != "wasm_fail_stream" {
		t.Fatalf("trapping request: %v %+v", err, resp)
	}
	// The reloaded VM finds "trapped" in shared data, so it does not trap.
	resp, err = p.Serve(context.Background(), getReq(0, "/"), okUpstream(200, "ok"))
	if err != nil || resp.Status != 200 {
		t.Fatalf("after reload: %v %+v", err, resp)
	}
	if p.Reloads() != 1 || p.Traps() != 1 || p.Failed(0) {
		t.Errorf("reloads %d traps %d failed %v", p.Reloads(), p.Traps(), p.Failed(0))
	}
}

func TestBadFailurePolicy(t *testing.T) {
	r, _ := newRT(t, "")
	if _, err := loadPlugin(t, r, watModule{}.build(t), func(c *PluginConfig) { c.FailurePolicy = "FAIL_SOMETIMES" }); err == nil {
		t.Error("unknown failure_policy accepted")
	}
}

// Bad pointers and malformed pairs from the guest give statuses, never a
// host panic or a failed VM.
func TestBadGuestInputGivesStatuses(t *testing.T) {
	r, _ := newRT(t, "")
	code := watModule{
		imports: `(import "env" "proxy_set_header_map_pairs" (func $setpairs (param i32 i32 i32) (result i32)))
		(import "env" "proxy_http_call" (func $call (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))`,
		reqHdrs: `
		(i32.store (i32.const 8100) (call $log (i32.const 2) (i32.const 0x7ffffff0) (i32.const 100)))
		(i32.store (i32.const 8104) (call $log (i32.const 9) {{"x"}}))
		(i32.store (i32.const 8108) (call $set (i32.const 0xfffffff0) (i32.const 64) (i32.const 0) (i32.const 0) (i32.const 0)))
		(i32.store (i32.const 8000) (i32.const 0xffff))
		(i32.store (i32.const 8112) (call $setpairs (i32.const 0) (i32.const 8000) (i32.const 4)))
		(i32.store (i32.const 8116) (call $getbuf (i32.const 99) (i32.const 0) (i32.const 10) (i32.const 8200) (i32.const 8204)))
		(i32.store (i32.const 8120) (call $call {{"c"}} (i32.const 8000) (i32.const 4) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 10) (i32.const 8300)))
		(drop (call $set {{"bad"}} (i32.const 8100) (i32.const 24) (i32.const 0)))`,
	}.build(t)
	p, err := loadPlugin(t, r, code)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.Serve(context.Background(), getReq(0, "/"), okUpstream(200, ""))
	if err != nil || resp.Status != 200 || p.Traps() != 0 {
		t.Fatalf("%v %+v traps %d", err, resp, p.Traps())
	}
	v, _, ok := r.SharedData("wat-vm", "bad")
	if !ok {
		t.Fatal("no results")
	}
	for i, want := range []Status{StatusInvalidMemoryAccess, StatusBadArgument, StatusInvalidMemoryAccess, StatusBadArgument, StatusNotFound, StatusBadArgument} {
		if got := Status(binary.LittleEndian.Uint32(v[i*4:])); got != want {
			t.Errorf("call %d: status %d, want %d", i, got, want)
		}
	}
}
