package e2e_test

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

// TestBenchProxy is the "through the proxy" section of `make bench`: wrk
// (Debian's) drives our host serving one Envoy bootstrap twice, with the
// Sluice filter in the chain and without it, in front of the same real
// backend on 127.0.0.1. Rounds interleave the two so machine noise hits
// both alike. It runs only with SLUICE_BENCH=1 and asserts no timings:
// it fails when the harness cannot run or a request fails.
//
//	BENCH_QUICK=1                  one round of 2s per configuration (else 5 of 4s)
//	SLUICE_BENCH_OUT_PROXY         markdown output (build/bench-proxy.md)
func TestBenchProxy(t *testing.T) {
	size := benchHarness(t, benchSize{rounds: 5, dur: 4 * time.Second}, benchSize{rounds: 1, dur: 2 * time.Second})
	wrk, err := exec.LookPath("wrk")
	testkit.Need(t, err == nil, "wrk (apt-get install wrk)")
	rounds, dur := size.rounds, size.dur
	wasm := builtWasm(t)
	backend := echoBackend(t)
	type target struct {
		name string
		srv  *envoy.Server
		url  string
		runs []wrkResult
	}
	var targets []*target
	for _, c := range []struct{ name, plugin string }{
		{"without Sluice (router only)", ""},
		{"with Sluice (one limit + one breaker)", proxyBenchPlugin},
	} {
		cfg, err := envoy.Load([]byte(pluginYAML(wasm, c.plugin, backend, nil)))
		if err != nil {
			t.Fatalf("%s: loading the bootstrap: %v", c.name, err)
		}
		srv, err := startConfig(t, cfg)
		if err != nil {
			t.Fatalf("%s: Start: %v", c.name, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
		targets = append(targets, &target{name: c.name, srv: srv, url: "http://" + srv.ListenerAddr("ingress") + "/api/items"})
	}
	// Warm-up: heap growth, slots and connection pools, off the record.
	for _, tg := range targets {
		if _, err := runWrk(wrk, tg.url, time.Second); err != nil {
			t.Fatalf("%s warm-up: %v", tg.name, err)
		}
	}
	for range rounds {
		for _, tg := range targets {
			r, err := runWrk(wrk, tg.url, dur)
			if err != nil {
				t.Fatalf("%s: %v", tg.name, err)
			}
			if r.non2xx != 0 || r.socketErrors != "" {
				t.Fatalf("%s: %d non-2xx responses, socket errors %q: the run measured failures\n%s", tg.name, r.non2xx, r.socketErrors, r.raw)
			}
			tg.runs = append(tg.runs, r)
		}
	}
	// The filter really ran on every request it was given.
	allowed, _ := targets[1].srv.Runtime().Stats().Lookup("sluice.limit.per-ip.allowed")
	if allowed == 0 {
		t.Fatal("the Sluice configuration admitted nothing: the filter did not run")
	}
	for _, pl := range targets[1].srv.Plugins() {
		if pl.Traps() != 0 {
			t.Fatalf("%d traps", pl.Traps())
		}
	}

	rps := func(tg *target) []float64 {
		var v []float64
		for _, r := range tg.runs {
			v = append(v, r.rps)
		}
		return v
	}
	p99 := func(tg *target) []float64 {
		var v []float64
		for _, r := range tg.runs {
			v = append(v, msf(r.p99))
		}
		return v
	}
	var b strings.Builder
	fmt.Fprintf(&b, "`wrk -t1 -c%d -d%s --latency` (%s) against `GET /api/items` through our host with 2 workers, in front of the same echo backend on 127.0.0.1; "+
		"%s, each running both configurations in turn; medians with (min–max). wrk, the host and the backend share the machine's %d cores, "+
		"so the ratio, not the absolute rate, is the figure to read. Every request was answered 200 (%d admitted by the filter's limit, warm-up included).\n\n",
		wrkConnections, dur, wrkVersion(wrk), plural(rounds, "round"), runtime.NumCPU(), allowed)
	b.WriteString("| configuration | requests/s | p50 | p99 |\n|---|---:|---:|---:|\n")
	for _, tg := range targets {
		var p50 []float64
		for _, r := range tg.runs {
			p50 = append(p50, msf(r.p50))
		}
		fmt.Fprintf(&b, "| %s | %s | %s ms | %s ms |\n", tg.name, spread("%.0f", rps(tg)), spread("%.2f", p50), spread("%.2f", p99(tg)))
	}
	// Ratios per round, then their median: each pair ran back to back.
	var thr, lat []float64
	for i := range rounds {
		thr = append(thr, targets[1].runs[i].rps/targets[0].runs[i].rps)
		lat = append(lat, msf(targets[1].runs[i].p99)/msf(targets[0].runs[i].p99))
	}
	fmt.Fprintf(&b, "\nThroughput with Sluice ÷ without: **%s**; p99 with ÷ without: %s.\n", spread("%.2f", thr), spread("%.2f", lat))
	md := b.String()
	writeFile(t, envOr("SLUICE_BENCH_OUT_PROXY", "../build/bench-proxy.md"), []byte(md))
	t.Log("\n" + md)
}

// proxyBenchPlugin admits everything while doing all of one limit's and
// one breaker's work on every request.
const proxyBenchPlugin = `{"limits":[{"name":"per-ip","key":["client_ip"],"requests_per_second":1000000000}],"breakers":[{"name":"backend"}]}`

const wrkConnections = 16

type wrkResult struct {
	rps          float64
	p50, p99     time.Duration
	non2xx       int
	socketErrors string
	raw          string
}

func runWrk(bin, url string, d time.Duration) (wrkResult, error) {
	secs := max(1, int(d.Round(time.Second)/time.Second)) // wrk takes whole seconds
	// One wrk thread: on 2 cores a second one only takes CPU from the
	// server under test.
	cmd := exec.Command(bin, "-t1", "-c"+strconv.Itoa(wrkConnections), "-d"+strconv.Itoa(secs)+"s", "--latency", url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v\n%s", err, out)
	}
	return parseWrk(string(out))
}

var (
	wrkRPS     = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)`)
	wrkPct     = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkNon2xx  = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses:\s+([0-9]+)`)
	wrkSockErr = regexp.MustCompile(`(?m)^\s*Socket errors:\s*(.+)$`)
)

// parseWrk reads wrk --latency output: requests/s, the 50th and 99th
// percentiles, and any failures it reports.
func parseWrk(out string) (wrkResult, error) {
	r := wrkResult{raw: out}
	m := wrkRPS.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no Requests/sec in wrk output:\n%s", out)
	}
	var err error
	if r.rps, err = strconv.ParseFloat(m[1], 64); err != nil {
		return r, err
	}
	for _, m := range wrkPct.FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return r, err
		}
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[m[3]]
		d := time.Duration(v * float64(unit))
		if m[1] == "50" {
			r.p50 = d
		} else {
			r.p99 = d
		}
	}
	if r.p50 == 0 || r.p99 == 0 {
		return r, fmt.Errorf("no latency distribution in wrk output (was --latency given?):\n%s", out)
	}
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		r.non2xx, _ = strconv.Atoi(m[1])
	}
	if m := wrkSockErr.FindStringSubmatch(out); m != nil {
		r.socketErrors = strings.TrimSpace(m[1])
	}
	return r, nil
}

func wrkVersion(bin string) string {
	// wrk prints its version with usage and exits 1.
	out, _ := exec.Command(bin, "--version").CombinedOutput()
	line, _, _ := strings.Cut(string(out), "\n")
	if f := strings.Fields(line); len(f) >= 2 {
		return strings.Join(f[:2], " ")
	}
	return "wrk"
}

// TestParseWrk checks the parser on wrk 4.1's --latency layout, and that
// failures it reports are not lost.
func TestParseWrk(t *testing.T) {
	out := `Running 5s test @ http://127.0.0.1:4000/api/items
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.90ms  402.11us  10.33ms   81.20%
    Req/Sec     8.43k   612.20     9.10k    88.00%
  Latency Distribution
     50%    1.84ms
     75%    2.03ms
     90%    2.31ms
     99%    3.75ms
  41957 requests in 5.00s, 9.80MB read
  Socket errors: connect 0, read 2, write 0, timeout 0
  Non-2xx or 3xx responses: 7
Requests/sec:   8389.52
Transfer/sec:      1.96MB
`
	r, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.rps != 8389.52 || r.p50 != 1840*time.Microsecond || r.p99 != 3750*time.Microsecond || r.non2xx != 7 ||
		r.socketErrors != "connect 0, read 2, write 0, timeout 0" {
		t.Fatalf("parsed %+v", r)
	}
	if _, err := parseWrk(strings.Replace(out, "99%", "98%", 1)); err == nil {
		t.Fatal("output without a 99th percentile was accepted")
	}
	if _, err := parseWrk("unable to connect to 127.0.0.1:4000 Connection refused\n"); err == nil {
		t.Fatal("a failed run was accepted")
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
