package e2e_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/ratelimitsvc"
	"github.com/sluice-proxy/sluice/internal/fixtures/redistest"
)

// TestBenchDistributed is the distributed section of `make bench`: strict
// (mode global), hybrid and the peer envoyproxy/ratelimit, each offered
// twice the limit for one key across 3 host instances × 2 workers (the
// peer: one ratelimit process), each against its own fresh redis-server
// (behind webdis for Sluice). Redis is killed at 2/3 of each run so the
// plot shows what each does then. It runs only with SLUICE_BENCH=1 and
// asserts no timings: it fails only when the harness itself cannot run.
//
// Environment:
//
//	SLUICE_BENCH=1                        run at all
//	BENCH_QUICK=1                         ~3 s per mode instead of 30 s
//	SLUICE_BENCH_DIST_SECONDS             run length per mode (overrides both)
//	SLUICE_BENCH_OUT_DISTRIBUTED          markdown table (build/bench-distributed.md)
//	SLUICE_BENCH_SERIES_DISTRIBUTED       series JSON (build/bench-distributed-series.json)
//	SLUICE_BENCH_FAILURE_POLICY           Sluice's failure_policy (local)
//	SLUICE_BENCH_BACKEND_TIMEOUT          Sluice's backend timeout, retries 1 (250ms)
//	SLUICE_BENCH_DIST_RUNS                rounds of all modes (1); the table gives medians and ranges
//	SLUICE_BENCH_DIST_LIMIT               the per-key limit per second (benchLimit); twice it is offered
//	SLUICE_BENCH_DIST_MODES               comma-separated subset of strict,hybrid,ratelimit (all)
//	SLUICE_RATELIMIT_BIN                  a prebuilt ratelimit service_cmd (skips go install)
//	SLUICE_RATELIMIT_VERSION              module version to go install (ratelimitsvc.Version)
func TestBenchDistributed(t *testing.T) {
	dur := benchHarness(t, benchSize{dur: 30 * time.Second}, benchSize{dur: 3 * time.Second}).dur
	if s := os.Getenv("SLUICE_BENCH_DIST_SECONDS"); s != "" {
		n, err := strconv.ParseFloat(s, 64)
		if err != nil || n <= 0 {
			t.Fatalf("SLUICE_BENCH_DIST_SECONDS=%q: want a positive number of seconds", s)
		}
		dur = time.Duration(n * float64(time.Second))
	}
	policy := envOr("SLUICE_BENCH_FAILURE_POLICY", "local")
	switch policy {
	case "allow", "deny", "local":
	default:
		t.Fatalf("SLUICE_BENCH_FAILURE_POLICY=%q: want allow, deny or local", policy)
	}
	// 250ms rather than a production-like 50ms: on a loaded 2-core
	// machine a stalled scheduler turns 50ms into timeouts, the breaker
	// opens and the failure policy, not Redis, decides, which is not what
	// this benchmark compares. Redis being killed gives instant 503s from
	// webdis, so the timeout does not shape the fault phase.
	timeout := envOr("SLUICE_BENCH_BACKEND_TIMEOUT", "250ms")
	if d, err := time.ParseDuration(timeout); err != nil || d <= 0 {
		t.Fatalf("SLUICE_BENCH_BACKEND_TIMEOUT=%q: want a positive duration", timeout)
	}
	limit := benchLimit
	if s := os.Getenv("SLUICE_BENCH_DIST_LIMIT"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_BENCH_DIST_LIMIT=%q: want a positive integer", s)
		}
		limit = n
	}
	modes := map[string]bool{"strict": true, "hybrid": true, "ratelimit": true}
	if s := os.Getenv("SLUICE_BENCH_DIST_MODES"); s != "" {
		modes = map[string]bool{}
		for _, m := range strings.Split(s, ",") {
			switch m {
			case "strict", "hybrid", "ratelimit":
				modes[m] = true
			default:
				t.Fatalf("SLUICE_BENCH_DIST_MODES=%q: %q is not strict, hybrid or ratelimit", s, m)
			}
		}
	}
	plan := benchPlan{
		limit:          limit,
		offered:        2 * limit,
		duration:       dur,
		killAt:         dur * 2 / 3,
		policy:         policy,
		backendTimeout: timeout,
	}
	// Installing the peer first keeps its compile off the measured runs.
	var rlBin string
	rlErr := errPeerLeftOut
	if modes["ratelimit"] {
		rlBin, rlErr = ratelimitsvc.Binary(t)
	}
	if rlErr != nil && modes["ratelimit"] {
		if os.Getenv("CI") == "true" {
			t.Fatalf("envoyproxy/ratelimit could not be installed: %v", rlErr)
		}
		t.Logf("envoyproxy/ratelimit could not be installed, its row is left out: %v", rlErr)
	}

	rounds := 1
	if s := os.Getenv("SLUICE_BENCH_DIST_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_BENCH_DIST_RUNS=%q: want a positive integer", s)
		}
		rounds = n
	}

	// Rounds interleave the modes, so a slow patch of the machine hits
	// all of them rather than one.
	var results []*modeResult
	for round := range rounds {
		for _, mode := range []string{"strict", "hybrid"} {
			if !modes[mode] {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", mode, round), func(t *testing.T) {
				results = append(results, runSluiceMode(t, plan, mode))
			})
		}
		if rlErr == nil {
			t.Run(fmt.Sprintf("ratelimit/%d", round), func(t *testing.T) {
				results = append(results, runRatelimitMode(t, plan, rlBin))
			})
		}
	}
	if len(results) == 0 {
		t.Fatal("no mode produced a result")
	}
	md := benchMarkdown(plan, results, rlErr)
	mdPath := envOr("SLUICE_BENCH_OUT_DISTRIBUTED", filepath.Join("..", "build", "bench-distributed.md"))
	seriesPath := envOr("SLUICE_BENCH_SERIES_DISTRIBUTED", filepath.Join("..", "build", "bench-distributed-series.json"))
	writeFile(t, mdPath, []byte(md))
	js, err := json.MarshalIndent(benchSeriesFile(plan, results), "", " ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, seriesPath, js)
	t.Logf("\n%s\nwrote %s and %s", md, mdPath, seriesPath)
}

// errPeerLeftOut stands for the peer's result when SLUICE_BENCH_DIST_MODES
// leaves it out.
var errPeerLeftOut = errors.New("left out by SLUICE_BENCH_DIST_MODES")

// benchLimit is the per-key limit in every mode: 200 per second, with a
// bucket of 200 for Sluice; the peer only has fixed windows, so it gets
// 200 per one-second window, the nearest it can express.
const benchLimit = 200

type benchPlan struct {
	limit, offered int
	duration       time.Duration
	killAt         time.Duration
	policy         string
	backendTimeout string
}

// baselineRate is the rate of latency baseline probes, sent during the
// measured run (until the kill) so both see the same machine load; it is
// a small fraction of the offered load so it barely adds to it.
func (p benchPlan) baselineRate() int { return max(p.offered/8, 1) }

// measure offers the plan's load through decide, killing Redis at
// plan.killAt with kill, while probing the baseline path concurrently
// until the kill.
func measure(plan benchPlan, kill func(), decide, probe func(i int) int) (run, base loadRun) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		base = offerLoad(plan.baselineRate(), plan.killAt, 0, nil, probe)
	}()
	run = offerLoad(plan.offered, plan.duration, plan.killAt, kill, decide)
	<-done
	return run, base
}

// sample is one request: when it was sent (from the run's start), how
// long it took, and its HTTP status (0: transport error).
type sample struct {
	sent    time.Duration
	latency time.Duration
	status  int
}

// loadRun is the outcome of offering a paced load.
type loadRun struct {
	samples []sample
	// skipped counts sends the client could not start because too many
	// requests were in flight (load that was not offered), before and
	// after the fault.
	skipped, skippedAfter int
	// killedAt is when fault() was called, from the start; 0 if never.
	killedAt time.Duration
	elapsed  time.Duration
}

// benchClient is separate from distClient so the bench's in-flight bound
// and timeout do not depend on what the correctness tests need.
var benchClient = &http.Client{
	Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256},
	Timeout:   5 * time.Second,
}

// maxInFlight bounds concurrent requests; beyond it sends are counted as
// skipped rather than queued, so a stalled server cannot pile up load.
const maxInFlight = 240

// offerLoad sends rate requests per second for dur, request i done by
// do(i). At faultAt (if > 0) it calls fault once, between two sends, so
// the moment is exact relative to the samples.
func offerLoad(rate int, dur, faultAt time.Duration, fault func(), do func(i int) int) loadRun {
	var (
		mu  sync.Mutex
		run loadRun
		wg  sync.WaitGroup
	)
	interval := time.Second / time.Duration(rate)
	sem := make(chan struct{}, maxInFlight)
	start := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	i := 0
	for now := range tick.C {
		off := now.Sub(start)
		// The fault comes before the end check: on a stalled machine one
		// late tick may pass both, and the fault must still happen.
		if fault != nil && faultAt > 0 && run.killedAt == 0 && off >= faultAt {
			run.killedAt = time.Since(start)
			fault()
		}
		if off >= dur {
			break
		}
		// Catch up when the ticker fell behind, so the offered load holds.
		due := int(off/interval) + 1
		for ; i < due; i++ {
			select {
			case sem <- struct{}{}:
			default:
				if run.killedAt == 0 {
					run.skipped++
				} else {
					run.skippedAfter++
				}
				continue
			}
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				defer func() { <-sem }()
				sent := time.Since(start)
				st := do(i)
				s := sample{sent: sent, latency: time.Since(start) - sent, status: st}
				mu.Lock()
				run.samples = append(run.samples, s)
				mu.Unlock()
			}(i)
		}
	}
	run.elapsed = time.Since(start)
	wg.Wait()
	return run
}

func benchGet(url, key string) int {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0
	}
	req.Header.Set("x-key", key)
	return doBench(req)
}

func doBench(req *http.Request) int {
	resp, err := benchClient.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// modeResult is what one mode measured.
type modeResult struct {
	mode   string
	run    loadRun
	base   loadRun // latency baseline at the same offered load
	baseIs string  // what the baseline path is, for the report
	// commands is the INFO commandstats delta from the start to the
	// moment Redis was killed, without the harness's own commands. It
	// includes commands run inside scripts, which are not calls.
	commands map[string]int64
	// calls names the commands the client itself sends: the Redis calls.
	calls []string
	// extra notes (breaker, lease metrics) for the report.
	notes []string
}

func runSluiceMode(t *testing.T, plan benchPlan, mode string) *modeResult {
	be := startDistBackend(t, viaWebdis)
	cfgMode := "global"
	if mode == "hybrid" {
		cfgMode = "hybrid"
	}
	cfg := fmt.Sprintf(`{"limits":[{"name":"api","key":["header:x-key"],"requests_per_second":%d,"mode":%q,"failure_policy":%q,"instances":3}],%s}`,
		plan.limit, cfgMode, plan.policy, be.backendBlock(fmt.Sprintf(`"timeout":%q,"retries":1`, plan.backendTimeout)))
	insts := startDistInstances(t, 3, cfg, be.addr)
	// The baseline is the same request path through 3 hosts running the
	// same filter with no limit that matches: what remains is the cost of
	// the limit itself, Redis round trips included.
	base := startDistInstances(t, 3, `{"limits":[{"name":"other","match":{"path_prefix":"/nothing-here"},"key":[],"requests_per_second":10}]}`, be.addr)
	key := uniqueKey("bench-" + mode)

	res := &modeResult{mode: mode, baseIs: "the same 3 hosts' path with a non-matching limit",
		calls: []string{"evalsha", "eval", "script|load"}}
	// Warm each instance and worker (script load, first lease, heap
	// growth) outside the measured run, on another key so the measured
	// key starts with a full bucket.
	warm := uniqueKey("warm")
	for i := range 12 {
		benchGet(insts[i%len(insts)].base+"/", warm)
		benchGet(base[i%len(base)].base+"/", warm)
	}

	before := commandStats(t, be.redis.Addr())
	var atKill string
	res.run, res.base = measure(plan, func() {
		res.commands = commandDelta(before, commandStats(t, be.redis.Addr()))
		atKill = backendHealth(insts, plan.policy)
		be.redis.Kill()
	}, func(i int) int {
		return benchGet(insts[i%len(insts)].base+"/", key)
	}, func(i int) int {
		return benchGet(base[i%len(base)].base+"/", key)
	})
	// Fallbacks before the kill mean the backend failed while Redis was
	// up (on a loaded machine: mostly timeouts), which moves the figures
	// away from what Redis alone would give.
	res.notes = append(res.notes, "filter metrics when Redis was killed: "+atKill,
		"filter metrics at the end: "+backendHealth(insts, plan.policy))
	return res
}

// backendHealth summarises the instances' backend metrics.
func backendHealth(insts []*distInstance, policy string) string {
	var errs []string
	for _, k := range []string{"timeout", "unavailable", "http_status", "malformed", "noscript", "redis_error", "other"} {
		if n := sumMetric(insts, "sluice.backend.errors."+k); n > 0 {
			errs = append(errs, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(errs) == 0 {
		errs = []string{"none"}
	}
	return fmt.Sprintf("backend calls %d (lease calls %d), errors: %s; breaker opens %d; fallbacks (%s) %d; negative-cache hits %d; leased tokens expired unused %d",
		sumMetric(insts, "sluice.backend.calls"), sumMetric(insts, "sluice.backend.lease_calls"), strings.Join(errs, ", "),
		sumMetric(insts, "sluice.backend.breaker.opens"), policy, sumMetric(insts, "sluice.backend.fallback."+policy),
		sumMetric(insts, "sluice.backend.negative_cache_hits"), sumMetric(insts, "sluice.backend.lease_expired_tokens"))
}

func runRatelimitMode(t *testing.T, plan benchPlan, bin string) *modeResult {
	r := redistest.StartRedis(t)
	rl := startRatelimit(t, bin, r.Addr(), plan.limit)
	body := []byte(`{"domain":"sluice-bench","descriptors":[{"entries":[{"key":"x-key","value":"` + uniqueKey("bench") + `"}]}]}`)
	post := func() int {
		req, err := http.NewRequest("POST", rl.HTTP+"/json", bytes.NewReader(body))
		if err != nil {
			return 0
		}
		return doBench(req)
	}
	res := &modeResult{mode: "envoyproxy/ratelimit", baseIs: "the same ratelimit HTTP server's /healthcheck",
		calls: []string{"incrby", "expire", "ping"}}
	health := func(int) int {
		req, err := http.NewRequest("GET", rl.HTTP+"/healthcheck", nil)
		if err != nil {
			return 0
		}
		return doBench(req)
	}
	for range 12 {
		health(0)
	}
	before := commandStats(t, r.Addr())
	res.run, res.base = measure(plan, func() {
		res.commands = commandDelta(before, commandStats(t, r.Addr()))
		r.Kill()
	}, func(int) int { return post() }, health)
	return res
}

// commandStats retries: on a loaded machine one INFO can miss its read
// deadline while Redis is healthy, and the run's figures need this one.
func commandStats(t *testing.T, addr string) map[string]int64 {
	t.Helper()
	var err error
	for range 5 {
		var st map[string]int64
		if st, err = redistest.CommandStats(addr); err == nil {
			return st
		}
	}
	t.Fatalf("INFO commandstats, 5 attempts: %v", err)
	return nil
}

// harnessCommands are what redistest.CommandStats itself sends.
var harnessCommands = map[string]bool{"info": true, "hello": true, "client|setinfo": true}

// commandDelta is after − before, without the harness's commands.
func commandDelta(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		if harnessCommands[k] {
			continue
		}
		if n := v - before[k]; n != 0 {
			d[k] = n
		}
	}
	return d
}

// startRatelimit runs the peer against redisAddr with one descriptor,
// x-key (any value), limited to limit per second.
func startRatelimit(t *testing.T, bin, redisAddr string, limit int) *ratelimitsvc.Service {
	t.Helper()
	yaml := fmt.Sprintf("domain: sluice-bench\ndescriptors:\n  - key: x-key\n    rate_limit:\n      unit: second\n      requests_per_unit: %d\n", limit)
	probe := []byte(`{"domain":"sluice-bench","descriptors":[{"entries":[{"key":"x-key","value":"probe"}]}]}`)
	return ratelimitsvc.Start(t, bin, redisAddr, map[string]string{"bench.yaml": yaml}, probe)
}

// summary is what the report needs from one mode, computed over the
// samples sent before Redis was killed (after: the fault phase).
type summary struct {
	decisions, admitted int
	errors              int
	window              time.Duration
	perSecond           float64
	p50, p99            time.Duration
	baseP50, baseP99    time.Duration
	baseSamples         int
	ideal               float64
	redisCommands       int64
	afterAdmittedPerSec float64
	afterStatuses       map[int]int
	afterP99, afterMax  time.Duration
}

func (s summary) perThousand() float64 {
	if s.decisions == 0 {
		return 0
	}
	return 1000 * float64(s.redisCommands) / float64(s.decisions)
}

func summarize(plan benchPlan, r *modeResult) summary {
	var s summary
	s.window = r.run.killedAt
	if s.window == 0 {
		s.window = r.run.elapsed
	}
	var lat, after []time.Duration
	s.afterStatuses = map[int]int{}
	for _, x := range r.run.samples {
		if x.sent < s.window {
			switch x.status {
			case 200:
				s.admitted++
				s.decisions++
				lat = append(lat, x.latency)
			case 429:
				s.decisions++
				lat = append(lat, x.latency)
			default:
				s.errors++
			}
			continue
		}
		s.afterStatuses[x.status]++
		after = append(after, x.latency)
		s.afterMax = max(s.afterMax, x.latency)
		if x.status == 200 {
			s.afterAdmittedPerSec++
		}
	}
	if afterLen := r.run.elapsed - s.window; afterLen > 0 {
		s.afterAdmittedPerSec /= afterLen.Seconds()
	}
	s.perSecond = float64(s.decisions) / s.window.Seconds()
	s.p50, s.p99 = percentile(lat, 50), percentile(lat, 99)
	s.afterP99 = percentile(after, 99)
	var base []time.Duration
	s.baseSamples = len(r.base.samples)
	for _, x := range r.base.samples {
		if x.status == 200 {
			base = append(base, x.latency)
		}
	}
	s.baseP50, s.baseP99 = percentile(base, 50), percentile(base, 99)
	// The bucket starts full (capacity = limit) and refills at limit/s.
	s.ideal = float64(plan.limit) + float64(plan.limit)*s.window.Seconds()
	for _, c := range r.calls {
		s.redisCommands += r.commands[c]
	}
	return s
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func benchMarkdown(plan benchPlan, results []*modeResult, rlErr error) string {
	var b strings.Builder
	var modes []string
	byMode := map[string][]summary{}
	for _, r := range results {
		if _, ok := byMode[r.mode]; !ok {
			modes = append(modes, r.mode)
		}
		byMode[r.mode] = append(byMode[r.mode], summarize(plan, r))
	}
	rounds := len(byMode[modes[0]])
	fmt.Fprintf(&b, "### Distributed: strict vs hybrid vs envoyproxy/ratelimit\n\n")
	fmt.Fprintf(&b, "One key, limit %d/s, offered %d/s for %v; Redis killed at %v. Sluice: 3 host instances × 2 workers through webdis, failure_policy %q, backend timeout %s with 1 retry; ratelimit: one process, driven through its HTTP /json API. Figures before the kill, except the last column. Added latency is the decision path's minus a baseline probed at the same time: for Sluice the same request through 3 hosts whose filter has no matching limit, for ratelimit its own /healthcheck (ratelimit's whole /json call is what an Envoy would add, on top of Envoy's gRPC hop, which this does not measure). The client gives up after %v.",
		plan.limit, plan.offered, plan.duration, plan.killAt, plan.policy, plan.backendTimeout, benchClient.Timeout)
	if rounds > 1 {
		fmt.Fprintf(&b, " Medians of %d rounds, (min–max) in brackets.", rounds)
	}
	fmt.Fprintf(&b, " Load average (1, 5, 15 min) when the report was written: %s on %d CPUs; other work on the machine shows up as latency and as fewer decisions than offered.", loadAvg(), runtime.NumCPU())
	b.WriteString("\n\n| mode | decisions/s | added p50 | added p99 | Redis calls / 1,000 decisions | admitted ÷ ideal | after Redis killed |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---|\n")
	for _, m := range modes {
		ss := byMode[m]
		col := func(format string, f func(summary) float64) string {
			var v []float64
			for _, s := range ss {
				v = append(v, f(s))
			}
			return spread(format, v)
		}
		fmt.Fprintf(&b, "| %s | %s | %s ms | %s ms | %s | %s | %s admitted/s, p99 %s ms |\n", m,
			col("%.0f", func(s summary) float64 { return s.perSecond }),
			col("%.2f", func(s summary) float64 { return msf(s.p50 - s.baseP50) }),
			col("%.2f", func(s summary) float64 { return msf(s.p99 - s.baseP99) }),
			col("%.1f", func(s summary) float64 { return s.perThousand() }),
			col("%.3f", func(s summary) float64 { return float64(s.admitted) / s.ideal }),
			col("%.0f", func(s summary) float64 { return s.afterAdmittedPerSec }),
			col("%.1f", func(s summary) float64 { return msf(s.afterP99) }))
	}
	b.WriteString("\nPer run:\n\n")
	for _, r := range results {
		s := summarize(plan, r)
		fmt.Fprintf(&b, "- **%s**: %d decisions (%d admitted, ideal %.0f = %d + %d × %.2f s), %d errors, %d sends skipped by the client (%d after the kill); latency p50 %s / p99 %s against a baseline of %s / %s (%s, %d probes at %d/s during the same run). After the kill: p99 %s, max %s, statuses %s. Redis calls (%s): %d. INFO commandstats delta, script-internal commands included: %s.\n",
			r.mode, s.decisions, s.admitted, s.ideal, plan.limit, plan.limit, s.window.Seconds(), s.errors, r.run.skipped, r.run.skippedAfter,
			ms(s.p50), ms(s.p99), ms(s.baseP50), ms(s.baseP99), r.baseIs, s.baseSamples, plan.baselineRate(),
			ms(s.afterP99), ms(s.afterMax), statusList(s.afterStatuses),
			strings.ToUpper(strings.Join(r.calls, ", ")), s.redisCommands, commandList(r.commands))
		for _, n := range r.notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	fmt.Fprintf(&b, "\nNotes: decisions/s is the rate served at this offered load, not a saturation figure. Ideal is capacity + limit × elapsed; for ratelimit, which only has fixed windows (%d per wall-clock second), the same figure bounds what it can admit. Redis calls are the commands the client sends: for Sluice the script calls (EVALSHA; EVAL or SCRIPT LOAD after NOSCRIPT), each one round trip; for ratelimit INCRBY and EXPIRE, which it sends per descriptor in one pipeline (two calls, one round trip per decision), plus its pool's PINGs. Commands run inside Sluice's scripts (TIME, HMGET, HSET, PTTL, PEXPIRE) are listed but are not calls.\n", plan.limit)
	if errors.Is(rlErr, errPeerLeftOut) {
		fmt.Fprintf(&b, "\nenvoyproxy/ratelimit was %s.\n", rlErr)
	} else if rlErr != nil {
		fmt.Fprintf(&b, "\nenvoyproxy/ratelimit could not be installed: `%s`\n", strings.ReplaceAll(rlErr.Error(), "\n", " "))
	}
	return b.String()
}

// spread is the median of v, followed by (min–max) when there are
// several values.
func spread(format string, v []float64) string {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	out := fmt.Sprintf(format, med)
	if n > 1 {
		out += fmt.Sprintf(" ("+format+"–"+format+")", s[0], s[n-1])
	}
	return out
}

// loadAvg is /proc/loadavg's first three fields, or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func statusList(m map[int]int) string {
	return sortedList(m, " ", func(k, n int) string {
		name := strconv.Itoa(k)
		if k == 0 {
			name = "no reply (client timeout or transport error)"
		}
		return fmt.Sprintf("%s×%d", name, n)
	})
}

func commandList(m map[string]int64) string {
	return sortedList(m, ", ", func(k string, n int64) string {
		return fmt.Sprintf("%s %d", strings.ToUpper(k), n)
	})
}

// sortedList is m's entries in key order, each as entry writes it, joined
// with sep; "none" when m is empty.
func sortedList[K cmp.Ordered, V any](m map[K]V, sep string, entry func(K, V) string) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, entry(k, m[k]))
	}
	return strings.Join(parts, sep)
}

// seriesBucket is the time series' resolution.
const seriesBucket = 100 * time.Millisecond

// benchSeries is the JSON read by tools/benchreport; keep the two in step.
type benchSeries struct {
	Limit         int          `json:"limit"`
	Offered       int          `json:"offered"`
	BucketMS      int          `json:"bucket_ms"`
	DurationS     float64      `json:"duration_s"`
	FailurePolicy string       `json:"failure_policy"`
	Modes         []modeSeries `json:"modes"`
}

type modeSeries struct {
	Mode string `json:"mode"`
	// KillS is when Redis was killed, in seconds from the run's start.
	KillS float64 `json:"kill_s"`
	// Admitted, Denied and Errors count decisions per bucket, by when the
	// reply arrived.
	Admitted []int `json:"admitted"`
	Denied   []int `json:"denied"`
	Errors   []int `json:"errors"`
}

func benchSeriesFile(plan benchPlan, results []*modeResult) benchSeries {
	f := benchSeries{Limit: plan.limit, Offered: plan.offered, BucketMS: int(seriesBucket / time.Millisecond),
		DurationS: plan.duration.Seconds(), FailurePolicy: plan.policy}
	// One line per mode: with several rounds the plot shows the last, the
	// one furthest from start-up effects (the peer's install, cold caches).
	last := map[string]*modeResult{}
	var order []string
	for _, r := range results {
		if last[r.mode] == nil {
			order = append(order, r.mode)
		}
		last[r.mode] = r
	}
	for _, mode := range order {
		r := last[mode]
		n := int(r.run.elapsed/seriesBucket) + 1
		ms := modeSeries{Mode: r.mode, KillS: r.run.killedAt.Seconds(), Admitted: make([]int, n), Denied: make([]int, n), Errors: make([]int, n)}
		for _, s := range r.run.samples {
			i := int((s.sent + s.latency) / seriesBucket)
			if i >= n {
				// Replies after the last send: the tail of the run.
				continue
			}
			switch s.status {
			case 200:
				ms.Admitted[i]++
			case 429:
				ms.Denied[i]++
			default:
				ms.Errors[i]++
			}
		}
		f.Modes = append(f.Modes, ms)
	}
	return f
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBenchDistributedFigures checks the report's arithmetic on a made-up
// run, so the benchmark's numbers can be trusted without running it.
func TestBenchDistributedFigures(t *testing.T) {
	plan := benchPlan{limit: 200, offered: 400, duration: 3 * time.Second, killAt: 2 * time.Second}
	ms := time.Millisecond
	r := &modeResult{
		mode:     "m",
		calls:    []string{"evalsha"},
		commands: map[string]int64{"evalsha": 8, "time": 8},
		run: loadRun{killedAt: 2 * time.Second, elapsed: 3 * time.Second, samples: []sample{
			{sent: 0, latency: 1 * ms, status: 200},
			{sent: 100 * ms, latency: 2 * ms, status: 200},
			{sent: 200 * ms, latency: 3 * ms, status: 429},
			{sent: 300 * ms, latency: 4 * ms, status: 0}, // an error: no decision
			{sent: 1900 * ms, latency: 500 * ms, status: 200},
			{sent: 2100 * ms, latency: 5 * ms, status: 200}, // after the kill
			{sent: 2200 * ms, latency: 9 * ms, status: 503},
		}},
		base: loadRun{samples: []sample{{latency: 1 * ms, status: 200}, {latency: 7 * ms, status: 500}}},
	}
	s := summarize(plan, r)
	if s.decisions != 4 || s.admitted != 3 || s.errors != 1 {
		t.Fatalf("decisions %d admitted %d errors %d, want 4, 3, 1", s.decisions, s.admitted, s.errors)
	}
	if s.perSecond != 2 {
		t.Fatalf("decisions/s %v, want 4 over the 2 s before the kill", s.perSecond)
	}
	if s.ideal != 600 {
		t.Fatalf("ideal %v, want 200 + 200 × 2", s.ideal)
	}
	if s.p50 != 2*ms || s.p99 != 500*ms || s.baseP50 != 1*ms {
		t.Fatalf("p50 %v p99 %v base p50 %v", s.p50, s.p99, s.baseP50)
	}
	if s.redisCommands != 8 || s.perThousand() != 2000 {
		t.Fatalf("calls %d (%v per 1000), want only EVALSHA counted: 8, 2000", s.redisCommands, s.perThousand())
	}
	if s.afterAdmittedPerSec != 1 || s.afterStatuses[503] != 1 || s.afterMax != 9*ms {
		t.Fatalf("after the kill: %v/s, statuses %v, max %v", s.afterAdmittedPerSec, s.afterStatuses, s.afterMax)
	}

	for _, c := range []struct {
		v    []float64
		want string
	}{
		{[]float64{5}, "5"},
		{[]float64{3, 1, 2}, "2 (1–3)"},
		{[]float64{4, 1, 2, 3}, "2.5 (1–4)"},
	} {
		if got := spread("%g", c.v); got != c.want {
			t.Errorf("spread(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	if got := statusList(map[int]int{429: 2, 0: 1, 200: 5}); got != "no reply (client timeout or transport error)×1 200×5 429×2" {
		t.Errorf("statusList = %q, want the statuses in order", got)
	}
	if got := commandList(map[string]int64{"time": 4, "evalsha": 9}); got != "EVALSHA 9, TIME 4" {
		t.Errorf("commandList = %q, want the commands in order", got)
	}
	if statusList(nil) != "none" || commandList(nil) != "none" {
		t.Errorf("empty lists: %q, %q; want none", statusList(nil), commandList(nil))
	}
	d := commandDelta(map[string]int64{"evalsha": 5, "info": 1}, map[string]int64{"evalsha": 9, "info": 3, "hello": 2, "time": 4})
	if len(d) != 2 || d["evalsha"] != 4 || d["time"] != 4 {
		t.Fatalf("commandDelta = %v, want evalsha 4, time 4 and no harness commands", d)
	}

	f := benchSeriesFile(plan, []*modeResult{r, {mode: "m", run: loadRun{elapsed: time.Second}}})
	if len(f.Modes) != 1 || len(f.Modes[0].Admitted) != 11 || f.Modes[0].KillS != 0 {
		t.Fatalf("series keeps the last round per mode: %+v", f.Modes)
	}
	f = benchSeriesFile(plan, []*modeResult{r})
	m := f.Modes[0]
	// Replies land at 1, 102, 203, 304, 2400, 2105, 2209 ms.
	if m.Admitted[0] != 1 || m.Admitted[1] != 1 || m.Denied[2] != 1 || m.Errors[3] != 1 || m.Admitted[24] != 1 || m.Admitted[21] != 1 || m.Errors[22] != 1 {
		t.Fatalf("series buckets wrong: %+v", m)
	}
	if m.KillS != 2 {
		t.Fatalf("kill_s %v, want 2", m.KillS)
	}
}
