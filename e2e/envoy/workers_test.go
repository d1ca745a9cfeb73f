package envoy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/wabt"
)

// spinWAT is a proxy-wasm filter that only burns CPU: every
// proxy_on_request_headers runs a loop of SPIN iterations the compiler
// cannot drop, so a request costs about the same guest time whatever else
// the host does.
const spinWAT = `(module
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 4096))
  (global $sink (mut i32) (i32.const 0))
  (func (export "proxy_abi_version_0_2_0"))
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32) (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (i32.add (local.get $n) (i32.const 8))))
    (local.get $p))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_request_headers") (param $id i32) (param $n i32) (param $eos i32) (result i32)
    (local $i i32) (local $x i32)
    (local.set $x (local.get $id))
    (block $out (loop $spin
      (br_if $out (i32.ge_u (local.get $i) (i32.const {{SPIN}})))
      (local.set $x (i32.add (i32.mul (local.get $x) (i32.const 1664525)) (i32.const 1013904223)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $spin)))
    (global.set $sink (local.get $x))
    (i32.const 0))
  (func (export "proxy_on_done") (param i32) (result i32) (i32.const 1))
  (func (export "proxy_on_delete") (param i32)))
`

// markWAT logs the request's x-mark header from proxy_on_request_headers,
// proxy_on_response_headers and proxy_on_log.
const markWAT = `(module
  (import "env" "proxy_log" (func $log (param i32 i32 i32) (result i32)))
  (import "env" "proxy_get_header_map_value" (func $hdr (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 1024) "x-mark")
  (func (export "proxy_abi_version_0_2_0"))
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32) (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (i32.add (local.get $n) (i32.const 8))))
    (local.get $p))
  (func $mark
    (if (i32.eqz (call $hdr (i32.const 0) (i32.const 1024) (i32.const 6) (i32.const 2000) (i32.const 2004)))
      (then (drop (call $log (i32.const 2) (i32.load (i32.const 2000)) (i32.load (i32.const 2004)))))))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32) (call $mark) (i32.const 0))
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32) (call $mark) (i32.const 0))
  (func (export "proxy_on_log") (param i32) (call $mark))
  (func (export "proxy_on_done") (param i32) (result i32) (i32.const 1))
  (func (export "proxy_on_delete") (param i32)))
`

// watFile assembles WAT source with wat2wasm into a file the YAML can name.
func watFile(tb testing.TB, src string) string {
	tb.Helper()
	return wabt.File(tb, src)
}

// startWAT serves a WAT filter in front of an "ok" backend on concurrency
// workers, logging to logs at info level, and returns the listener URL.
func startWAT(tb testing.TB, module string, concurrency int, logs io.Writer) string {
	tb.Helper()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	tb.Cleanup(ok.Close)
	_, port, _ := net.SplitHostPort(ok.Listener.Addr().String())
	y := routerOnly{aPort: port, bPort: port, downPort: port, wasm: module, wasmName: "spin"}.yaml()
	cfg, err := Load([]byte(y))
	if err != nil {
		tb.Fatal(err)
	}
	srv := startServer(tb, cfg, Options{Concurrency: concurrency, Logger: NewLogger(logs, LevelInfo)})
	return "http://" + srv.ListenerAddr("main") + "/a/wat"
}

// goroutineLog remembers, for every plugin log line, the goroutine that
// wrote it: the logger writes synchronously from the callback.
type goroutineLog struct {
	mu    sync.Mutex
	lines []goroutineLine
}

type goroutineLine struct {
	gid  uint64
	text string
}

func (g *goroutineLog) Write(p []byte) (int, error) {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	gid, _ := strconv.ParseUint(strings.Fields(string(buf[:n]))[1], 10, 64)
	g.mu.Lock()
	g.lines = append(g.lines, goroutineLine{gid, string(p)})
	g.mu.Unlock()
	return len(p), nil
}

var markRE = regexp.MustCompile(`wasm log [^:]*: (c\d+)-r\d+\s*$`)

// TestServeConnectionCallbacksOnItsWorker follows four connections over
// two workers through real HTTP: the workers take the connections in turn
// as they are accepted, and every filter callback of every request of a
// connection runs on its worker's one goroutine, which the worker's other
// connection shares and the other worker's connections do not.
func TestServeConnectionCallbacksOnItsWorker(t *testing.T) {
	logs := &goroutineLog{}
	url := startWAT(t, watFile(t, markWAT), 2, logs)
	const conns, perConn = 4, 4
	clients := make([]*http.Client, conns)
	get := func(c, r int) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("x-mark", fmt.Sprintf("c%d-r%d", c, r))
		resp, err := clients[c].Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("connection %d: status %d", c, resp.StatusCode)
		}
	}
	// Opened one after the other, so accept order is connection order.
	for c := range clients {
		clients[c] = &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
		get(c, 0)
	}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 1; r < perConn; r++ {
				get(c, r)
			}
		}()
	}
	wg.Wait()
	for _, c := range clients {
		c.CloseIdleConnections()
	}

	gids := map[string]map[uint64]int{}
	logs.mu.Lock()
	for _, l := range logs.lines {
		if m := markRE.FindStringSubmatch(l.text); m != nil {
			if gids[m[1]] == nil {
				gids[m[1]] = map[uint64]int{}
			}
			gids[m[1]][l.gid]++
		}
	}
	logs.mu.Unlock()
	var on [conns]uint64
	for c := range on {
		name := fmt.Sprintf("c%d", c)
		if len(gids[name]) != 1 {
			t.Fatalf("connection %d: callbacks ran on goroutines %v, want one", c, gids[name])
		}
		for g, n := range gids[name] {
			if n != 3*perConn {
				t.Errorf("connection %d: %d callbacks, want %d", c, n, 3*perConn)
			}
			on[c] = g
		}
	}
	if on[0] != on[2] || on[1] != on[3] || on[0] == on[1] {
		t.Errorf("connections ran on goroutines %v, want the two workers' two goroutines taking connections in turn", on)
	}
}

// BenchmarkWorkerScaling drives a filter through real HTTP on 127.0.0.1
// with one and with two workers, from eight keep-alive connections: spin, a
// CPU-bound filter (about a millisecond of guest code per request),
// spin-small (about 20µs, so the host's own costs show), and the Sluice
// module with its default configuration. Compare the req/s of
// workers=1 and workers=2: with two free cores the second worker should
// nearly double spin's, and use two cores. Nothing is asserted; timings
// depend on the machine and on what else runs on it.
func BenchmarkWorkerScaling(b *testing.B) {
	modules := map[string]string{
		"spin":       watFile(b, strings.ReplaceAll(spinWAT, "{{SPIN}}", "1000000")),
		"spin-small": watFile(b, strings.ReplaceAll(spinWAT, "{{SPIN}}", "20000")),
	}
	if p, err := filepath.Abs(filepath.Join("..", "..", "build", "sluice.wasm")); err == nil {
		if _, err := os.Stat(p); err == nil {
			modules["sluice"] = p
		} else if os.Getenv("CI") == "true" {
			b.Fatalf("%s missing: %v", p, err)
		}
	}
	for _, name := range []string{"spin", "spin-small", "sluice"} {
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/workers=%d", name, workers), func(b *testing.B) {
				if modules[name] == "" {
					b.Skip("build/sluice.wasm missing (run make build)")
				}
				benchWorkers(b, modules[name], workers)
			})
		}
	}
}

func benchWorkers(b *testing.B, module string, workers int) {
	url := startWAT(b, module, workers, io.Discard)
	// Enough connections that each worker always has several.
	const conns = 8
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
	var next sync.Mutex
	left := b.N
	cpu0 := processCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				if left == 0 {
					next.Unlock()
					return
				}
				left--
				next.Unlock()
				if !getOK(b, client, url) {
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	// CPU per request (client, proxy and backend together) does not depend
	// on what else the machine runs, unlike req/s; cores says how much of
	// the machine the run got, so a workers=2 run that did not scale can be
	// told apart from one that could not.
	cpu := processCPU() - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/req")
	b.ReportMetric(cpu.Seconds()/b.Elapsed().Seconds(), "cores")
}

// processCPU is the user and system time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
