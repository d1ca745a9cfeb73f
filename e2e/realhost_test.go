package e2e_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
	"github.com/sluice-proxy/sluice/filter/filtertest"
)

// The real host (tools/realhost): proxy-wasm-cpp-host, the library Envoy
// embeds for Wasm, on Wasmtime, with a minimal Envoy-like host around it.
// Its sources are not in this repository: CPPHOST names a directory holding
// checkouts of proxy-wasm-cpp-host and proxy-wasm-cpp-sdk, and every test
// here skips without it, under CI=true too, because the real host is
// optional (make test-realhost fails instead when CPPHOST is missing).

var realHostBuild struct {
	once sync.Once
	path string
	err  error
}

// realHostBinary builds the driver from $CPPHOST once per test binary and
// returns its path.
func realHostBinary(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("CPPHOST")
	if dir == "" {
		t.Skip("CPPHOST is not set: the real-host tests are optional; see tools/realhost/README.md (make test-realhost CPPHOST=dir)")
	}
	b := &realHostBuild
	b.once.Do(func() {
		cmd := exec.Command("bash", filepath.Join("..", "tools", "realhost", "build.sh"), dir, filepath.Join("..", "build", "realhost"))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			b.err = fmt.Errorf("tools/realhost/build.sh: %v", err)
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		b.path = lines[len(lines)-1]
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// realHost is one driver process: a plugin on its workers' VMs.
type realHost struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// realHostOptions is how a driver starts its plugin.
type realHostOptions struct {
	code    []byte
	config  string
	workers int
	vmID    string
	// clock is the guest's clock at start: the Go runtime reads it while
	// it initializes, so it must be set before the plugin loads.
	clock time.Time
}

// startRealHost starts a driver serving code; it ends with the test.
func startRealHost(t testing.TB, o realHostOptions) *realHost {
	t.Helper()
	bin := realHostBinary(t)
	sum := sha256.Sum256(o.code)
	name := hex.EncodeToString(sum[:12])
	cacheDir := filepath.Join("..", "build", "realhost", "cache")
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		t.Fatal(err)
	}
	codePath := filepath.Join(cacheDir, name+".wasm")
	if _, err := os.Stat(codePath); err != nil {
		if err := os.WriteFile(codePath, o.code, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	absCode, _ := filepath.Abs(codePath)
	absCache, _ := filepath.Abs(filepath.Join(cacheDir, name+".cwasm"))
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &realHost{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<16)}
	t.Cleanup(func() {
		fmt.Fprintln(h.in, "quit")
		h.in.Close()
		h.cmd.Wait()
	})
	h.call(t, "clock", strconv.FormatInt(o.clock.UnixNano(), 10))
	h.call(t, "plugin", esc(absCode), esc(o.vmID), strconv.Itoa(o.workers), esc(o.config), "0", esc(absCache))
	return h
}

// call sends one command and returns the reply's tokens; an "err" reply
// fails the test.
func (h *realHost) call(t testing.TB, fields ...string) []string {
	t.Helper()
	if _, err := io.WriteString(h.in, strings.Join(fields, " ")+"\n"); err != nil {
		t.Fatalf("realhost %s: %v", fields[0], err)
	}
	line, err := h.out.ReadString('\n')
	if err != nil {
		t.Fatalf("realhost %s: %v (the driver's stderr is above)", fields[0], err)
	}
	reply := strings.Fields(line)
	if len(reply) == 0 || reply[0] == "err" {
		t.Fatalf("realhost %s: %s", fields[0], line)
	}
	return reply
}

// esc is one token of the driver's protocol (tools/realhost/README.md).
func esc(s string) string {
	var b strings.Builder
	b.WriteByte('=')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func unesc(t testing.TB, tok string) string {
	s, ok := strings.CutPrefix(tok, "=")
	if !ok {
		t.Fatalf("realhost: %q is not a string token", tok)
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				t.Fatalf("realhost: bad escape in %q", tok)
			}
			b.WriteByte(byte(n))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func escPairs(pairs [][2]string) []string {
	out := []string{strconv.Itoa(len(pairs))}
	for _, kv := range pairs {
		out = append(out, esc(kv[0]), esc(kv[1]))
	}
	return out
}

// unescPairs reads a count and that many pairs from toks, and returns them
// with what follows.
func unescPairs(t testing.TB, toks []string) ([][2]string, []string) {
	n, err := strconv.Atoi(toks[0])
	if err != nil || len(toks) < 1+2*n {
		t.Fatalf("realhost: bad pairs %q", toks)
	}
	out := make([][2]string, n)
	for i := range n {
		out[i] = [2]string{unesc(t, toks[1+2*i]), unesc(t, toks[2+2*i])}
	}
	return out, toks[1+2*n:]
}

// realHarness runs the behavioural cases on the real host, its clock
// stepped by the test as the other harnesses' are.
type realHarness struct {
	h       *realHost
	workers int
	steppedClock
	// redis answers the callouts of a case with Redis set; served counts
	// the callouts answered since the harness last looked.
	redis  *filtertest.RedisFront
	served int
}

func newRealHarness(t *testing.T, code []byte, c filtertest.Case) *realHarness {
	workers := max(c.Workers, 1)
	r := &realHarness{workers: workers, steppedClock: steppedClock{now: filtertest.Epoch}}
	r.h = startRealHost(t, realHostOptions{code: code, config: c.Config, workers: workers,
		vmID: "sluice-" + strconv.FormatInt(time.Now().UnixNano(), 36), clock: filtertest.Epoch})
	if c.Redis != "" {
		r.redis = filtertest.StartRedisFront(t, c.Redis)
		r.h.call(t, "cluster", esc(filtertest.RedisCluster))
	}
	return r
}

// do sends a command that runs the plugin, then answers the callouts it
// made, as our host's clocked Redis does: in no time on the harness's
// clock, each reply delivered to the plugin before the next command.
func (r *realHarness) do(t testing.TB, fields ...string) []string {
	t.Helper()
	reply := r.h.call(t, fields...)
	for {
		calls := r.h.call(t, "calls")
		n, err := strconv.Atoi(calls[1])
		if err != nil || n == 0 {
			return reply
		}
		toks := calls[2:]
		for range n {
			token := toks[0]
			headers, rest := unescPairs(t, toks[2:])
			body := unesc(t, rest[0])
			toks = rest[2:] // body, timeout
			if r.redis == nil {
				r.h.call(t, "fail", token)
				continue
			}
			status, answer, err := r.redis.Call(r.clock(), headers, []byte(body))
			if err != nil {
				r.h.call(t, "fail", token)
				continue
			}
			cmd := append([]string{"reply", token, strconv.Itoa(status)}, escPairs([][2]string{{"content-type", "application/json"}})...)
			r.h.call(t, append(cmd, esc(string(answer)))...)
			r.served++
		}
	}
}

func (r *realHarness) Advance(t testing.TB, d time.Duration) {
	r.advance(d)
	r.h.call(t, "clock", strconv.FormatInt(r.clock().UnixNano(), 10))
}

func (r *realHarness) Do(t testing.TB, req filtertest.Request) filtertest.Response {
	t.Helper()
	return filtertest.StartAndFinish(t, r, req)
}

// metadataProps are the request's dynamic metadata as the properties the
// filter reads (metadata.filter_metadata.<namespace>.<path>), encoded as
// Envoy serializes a google.protobuf.Value's scalar kinds.
func metadataProps(md []filtertest.Metadata) [][2]string {
	var out [][2]string
	for _, m := range md {
		path := "metadata\x00filter_metadata\x00" + m.Namespace + "\x00" + strings.ReplaceAll(m.Path, ".", "\x00")
		var val string
		switch v := m.Value.(type) {
		case string:
			val = v
		case float64:
			b := make([]byte, 8)
			binary.LittleEndian.PutUint64(b, math.Float64bits(v))
			val = string(b)
		case bool:
			val = "\x00"
			if v {
				val = "\x01"
			}
		default:
			continue
		}
		out = append(out, [2]string{path, val})
	}
	return out
}

type realFlight struct {
	r               *realHarness
	id              string
	req             filtertest.Request
	start           time.Time
	upstreamHeaders http.Header
}

func (r *realHarness) Start(t testing.TB, req filtertest.Request) (filtertest.Flight, filtertest.Response) {
	t.Helper()
	req = req.WithDefaults()
	headers := [][2]string{{":method", req.Method}, {":path", req.Path}, {":authority", req.Host}, {":scheme", "http"}}
	headers = append(headers, req.Headers...)
	start := r.clock()
	cmd := []string{"start", strconv.Itoa(req.Worker)}
	cmd = append(cmd, escPairs(headers)...)
	cmd = append(cmd, esc(req.Peer), esc(req.Cluster), esc(req.Route))
	cmd = append(cmd, escPairs(metadataProps(req.Metadata))...)
	r.served = 0
	reply := r.do(t, cmd...)
	for {
		switch reply[0] {
		case "done":
			return nil, r.response(t, reply, start, nil)
		case "reached":
			up, _ := unescPairs(t, reply[2:])
			return &realFlight{r: r, id: reply[1], req: req, start: start, upstreamHeaders: filtertest.ToHeader(up)}, filtertest.Response{}
		case "parked":
			if r.served > 0 {
				// Answered callouts may have let it go: look first.
				r.served = 0
				reply = r.do(t, "poll", reply[1])
				continue
			}
			// Move time a tick at a time and fire the tick, as Envoy's
			// timer would, until the filter lets the request go.
			if r.clock().Sub(start) > filtertest.MaxHold {
				t.Fatalf("request held for more than %v", filtertest.MaxHold)
			}
			r.Advance(t, tickStep)
			if tick := r.do(t, "tick", strconv.Itoa(req.Worker)); tick[1] != "1" {
				t.Fatal("request paused with no tick running to resume it")
			}
			reply = r.do(t, "poll", reply[1])
		default:
			t.Fatalf("realhost: stream ended with %q", reply)
		}
	}
}

func (f *realFlight) Finish(t testing.TB) filtertest.Response {
	t.Helper()
	req := f.req
	status := req.UpstreamStatus
	if status == 0 {
		status = 200
	}
	headers, chunks := req.UpstreamResponseHeaders, req.UpstreamBody
	if chunks == nil {
		headers = append([][2]string{{"content-type", "text/plain"}}, req.UpstreamResponseHeaders...)
		chunks = []string{"ok"}
	}
	cmd := []string{"answer", f.id, strconv.Itoa(status)}
	cmd = append(cmd, escPairs(headers)...)
	cmd = append(cmd, strconv.Itoa(len(chunks)))
	for _, c := range chunks {
		cmd = append(cmd, esc(c))
	}
	return f.r.response(t, f.r.do(t, cmd...), f.start, f.upstreamHeaders)
}

// response reads a "done" reply: id, status, local, headers, body, and the
// filter state the plugin set.
func (r *realHarness) response(t testing.TB, reply []string, start time.Time, upstream http.Header) filtertest.Response {
	t.Helper()
	if reply[0] != "done" || len(reply) < 5 {
		t.Fatalf("realhost: want a response, got %q", reply)
	}
	status, _ := strconv.Atoi(reply[2])
	headers, rest := unescPairs(t, reply[4:])
	resp := filtertest.Response{Status: status, Local: reply[3] == "1", Headers: filtertest.ToHeader(headers),
		Body: []byte(unesc(t, rest[0])), Waited: r.clock().Sub(start)}
	if state, _ := unescPairs(t, rest[1:]); len(state) > 0 {
		resp.FilterState = make(map[string]string, len(state))
		for _, kv := range state {
			resp.FilterState[kv[0]] = kv[1]
		}
	}
	if !resp.Local {
		resp.UpstreamHeaders = upstream
	}
	return resp
}

func (r *realHarness) Tick(t testing.TB) {
	for w := range r.workers {
		r.do(t, "tick", strconv.Itoa(w))
	}
}

// metric is a metric's value across workers (the driver keeps one store,
// as Envoy does) and whether the plugin defined it.
func (r *realHarness) metric(t testing.TB, name string) (uint64, bool) {
	reply := r.h.call(t, "metric", esc(name))
	v, _ := strconv.ParseUint(reply[2], 10, 64)
	return v, reply[1] == "1"
}

func (r *realHarness) Counter(t testing.TB, name string) uint64 {
	v, _ := r.metric(t, name)
	return v
}

func (r *realHarness) Gauge(t testing.TB, name string) int64 {
	v, _ := r.metric(t, name)
	return int64(v)
}

// Defined implements filtertest.MetricDefiner.
func (r *realHarness) Defined(t testing.TB, name string) bool {
	_, ok := r.metric(t, name)
	return ok
}

// failedVMs is how many workers' VMs cpp-host marked failed (a trap).
func (r *realHarness) failedVMs(t testing.TB) int {
	n, _ := strconv.Atoi(r.h.call(t, "failed")[1])
	return n
}

// TestRealHostCases runs filtertest.Cases on build/sluice.wasm in the real
// host: the cases TestCasesWasm runs in ours. A case failing here and
// passing there is a defect in one of the two hosts, or one of the
// simplifications tools/realhost/README.md lists.
func TestRealHostCases(t *testing.T) {
	realHostBinary(t)
	code := wasmModule(t, "sluice")
	for _, c := range filtertest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			h := newRealHarness(t, code, c)
			c.Run(t, h)
			if n := h.failedVMs(t); n != 0 {
				t.Fatalf("%d VMs failed", n)
			}
		})
	}
}

// transcript wraps a harness and writes down everything a case observes
// through it: every response whole, every metric read. Two hosts agree on
// a case when their transcripts, and the plugin's logs, are equal.
type transcript struct {
	filtertest.Harness
	lines []string
}

func (r *transcript) note(resp filtertest.Response) {
	r.lines = append(r.lines, fmt.Sprintf("response %d local=%v waited=%v headers=%s body=%q upstream=%s filter_state=%v",
		resp.Status, resp.Local, resp.Waited, sortedHeader(resp.Headers), resp.Body, sortedHeader(resp.UpstreamHeaders), resp.FilterState))
}

func sortedHeader(h http.Header) string {
	if h == nil {
		return "none"
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(h)) {
		fmt.Fprintf(&b, "%s=%q;", k, h[k])
	}
	return b.String()
}

func (r *transcript) Do(t testing.TB, req filtertest.Request) filtertest.Response {
	resp := r.Harness.Do(t, req)
	r.note(resp)
	return resp
}

func (r *transcript) Start(t testing.TB, req filtertest.Request) (filtertest.Flight, filtertest.Response) {
	f, resp := r.Harness.Start(t, req)
	if f == nil {
		r.note(resp)
		return nil, resp
	}
	return &transcriptFlight{f, r}, resp
}

type transcriptFlight struct {
	filtertest.Flight
	r *transcript
}

func (f *transcriptFlight) Finish(t testing.TB) filtertest.Response {
	resp := f.Flight.Finish(t)
	f.r.note(resp)
	return resp
}

func (r *transcript) Counter(t testing.TB, name string) uint64 {
	v := r.Harness.Counter(t, name)
	r.lines = append(r.lines, fmt.Sprintf("counter %s = %d", name, v))
	return v
}

func (r *transcript) Gauge(t testing.TB, name string) int64 {
	v := r.Harness.Gauge(t, name)
	r.lines = append(r.lines, fmt.Sprintf("gauge %s = %d", name, v))
	return v
}

func (r *transcript) Defined(t testing.TB, name string) bool {
	v := r.Harness.(filtertest.MetricDefiner).Defined(t, name)
	r.lines = append(r.lines, fmt.Sprintf("defined %s = %v", name, v))
	return v
}

// logs are the plugin's log lines the real host kept since the last call.
func (r *realHarness) logs(t testing.TB) []string {
	reply := r.h.call(t, "logs")
	out := make([]string, 0, len(reply)-2)
	for _, tok := range reply[2:] {
		out = append(out, unesc(t, tok))
	}
	return out
}

// TestRealHostAgrees runs every filtertest case on our host and on the
// real host and compares what the case saw, response by response (status,
// headers, body, what the upstream received, how long it was held), every
// metric it read, and every line the plugin logged. Each difference is a
// defect in one of the two hosts or a simplification of the real host's
// driver listed in tools/realhost/README.md. A case that sees different
// things in two runs on our host draws on randomness (a rollout percentage
// samples WASI random_get, which both hosts serve from the system's
// random source); for it, agreeing means passing on both.
func TestRealHostAgrees(t *testing.T) {
	realHostBinary(t)
	code := wasmModule(t, "sluice")
	exact, random, redis := 0, 0, 0
	for _, c := range filtertest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			ours, ourLogs := ourTranscript(t, code, c)
			again, againLogs := ourTranscript(t, code, c)
			real := newRealHarness(t, code, c)
			realHost := &transcript{Harness: real}
			if c.Redis != "" {
				// Our host's harness runs a Redis call in real time and
				// steps its clock a tick at a time while the call is out;
				// the real host's driver answers each call before the
				// clock moves. Hold times, and with them how many units
				// a hybrid lease asks for, differ with that timing, so
				// for these cases agreeing means passing on both.
				c.Run(t, realHost)
				redis++
				return
			}
			c.Run(t, realHost)
			if firstDifference("", ours, again) != "" || firstDifference("", ourLogs, againLogs) != "" {
				random++
				return
			}
			diff := firstDifference("observed", ours, realHost.lines)
			if diff == "" {
				diff = firstDifference("logged", ourLogs, real.logs(t))
			}
			if diff != "" {
				t.Fatalf("our host and the real host disagree: %s", diff)
			}
			exact++
		})
	}
	t.Logf("of %d cases, %d agree exactly, and %d drawing on randomness and %d calling Redis pass on both", len(filtertest.Cases), exact, random, redis)
}

// ourTranscript runs c on our host and returns what it observed and what
// the plugin logged.
func ourTranscript(t *testing.T, code []byte, c filtertest.Case) (observed, logged []string) {
	var mu sync.Mutex
	h := &transcript{Harness: newWasmHarnessLogging(t, code, c, func(level host.LogLevel, _, msg string) {
		mu.Lock()
		logged = append(logged, fmt.Sprintf("%d %s", level, msg))
		mu.Unlock()
	})}
	c.Run(t, h)
	mu.Lock()
	defer mu.Unlock()
	return h.lines, slices.Clone(logged)
}

// firstDifference describes where two transcripts first differ, or is "".
func firstDifference(what string, ours, real []string) string {
	for i := range max(len(ours), len(real)) {
		var a, b string
		if i < len(ours) {
			a = ours[i]
		}
		if i < len(real) {
			b = real[i]
		}
		if a != b {
			return fmt.Sprintf("%s line %d:\n  ours: %s\n  real: %s", what, i+1, a, b)
		}
	}
	return ""
}
