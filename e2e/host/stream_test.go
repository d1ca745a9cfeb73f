package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

func probePlugin(t *testing.T, r *Runtime, cfg PluginConfig) *Plugin {
	t.Helper()
	cfg.Code = probe(t)
	cfg.Name = cmp.Or(cfg.Name, "probe")
	cfg.RootID = cmp.Or(cfg.RootID, "probe-root")
	cfg.VMID = cmp.Or(cfg.VMID, "probe-vm")
	p, err := r.NewPlugin(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func probeReq(worker int, probe string, extra ...[2]string) *Request {
	r := getReq(worker, "/p")
	r.Headers = append(r.Headers, [2]string{"x-probe", probe})
	r.Headers = append(r.Headers, extra...)
	return r
}

func hv(hs [][2]string, k string) string {
	v, _ := headerValue(hs, k)
	return v
}

// recorder is an Upstream that remembers what reached it.
type recorder struct {
	mu    sync.Mutex
	reqs  []*Request
	resp  func(*Request) (*Response, error)
	calls atomic.Int32
}

func (rc *recorder) up(ctx context.Context, req *Request) (*Response, error) {
	rc.calls.Add(1)
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, req)
	rc.mu.Unlock()
	if rc.resp != nil {
		return rc.resp(req)
	}
	return &Response{Status: 200, Body: []byte("upstream"), Headers: [][2]string{{"Content-Type", "text/plain"}}}, nil
}

func (rc *recorder) last() *Request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.reqs) == 0 {
		return nil
	}
	return rc.reqs[len(rc.reqs)-1]
}

func TestStreamUpstreamResponseReachesOnResponseHeaders(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x")})
	rc := &recorder{}
	req := probeReq(0, "rewrite", [2]string{"X-Remove-Me", "1"})
	req.Headers = [][2]string{{":method", "GET"}, {":path", "/p"}, {":authority", "a"}, {"x-probe", "rewrite"}, {"x-remove-me", "1"}}
	resp, err := p.Serve(context.Background(), req, rc.up)
	if err != nil {
		t.Fatal(err)
	}
	up := rc.last()
	if got := hv(up.Headers, ":path"); got != "/rewritten" {
		t.Errorf("upstream :path = %q, want the plugin's rewrite", got)
	}
	if _, found := headerValue(up.Headers, "x-remove-me"); found {
		t.Errorf("x-remove-me reached upstream")
	}
	if got := hv(up.Headers, ":scheme"); got != "http" {
		t.Errorf(":scheme = %q; Envoy's request map always has :scheme", got)
	}
	if got := hv(up.Headers, "x-probe-eos"); got != "true" {
		t.Errorf("end_of_stream for a bodyless request = %q, want true", got)
	}
	if resp.Status != 200 || string(resp.Body) != "upstream" || resp.Local || resp.Details != "via_upstream" {
		t.Errorf("response = %+v", resp)
	}
	if got := hv(resp.Headers, "x-resp-seen"); got != "rewrite" {
		t.Errorf("proxy_on_response_headers did not run for the upstream response: %v", resp.Headers)
	}
	if got := hv(resp.Headers, "content-type"); got != "text/plain" {
		t.Errorf("response header keys must be lower-cased like Envoy's: %v", resp.Headers)
	}
}

// serveBody serves one probe request of mode with body to a recorded
// upstream. The timeout turns a stream that is never resumed into a
// failure rather than a hang.
func serveBody(t *testing.T, mode, body string) (*Response, *recorder, error) {
	t.Helper()
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x")})
	rc := &recorder{}
	req := probeReq(0, mode)
	req.Body = []byte(body)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := p.Serve(ctx, req, rc.up)
	return resp, rc, err
}

func TestStreamBodies(t *testing.T) {
	resp, rc, err := serveBody(t, "body", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(rc.last().Body); got != "HELLO" {
		t.Errorf("upstream body = %q, want the plugin's replacement", got)
	}
	if got := hv(rc.last().Headers, "x-probe-eos"); got != "false" {
		t.Errorf("end_of_stream on headers with a body = %q", got)
	}
	if string(resp.Body) != "upstream!" {
		t.Errorf("response body = %q, want appended", resp.Body)
	}
}

// As in Envoy, StopIteration on headers still delivers the body to the
// filter, and a Continue from the body callback resumes the stream.
func TestPausedHeadersContinuedByBody(t *testing.T) {
	resp, rc, err := serveBody(t, "pause-headers", "payload")
	if err != nil || resp.Status != 200 || string(rc.last().Body) != "payload" {
		t.Fatalf("%v %+v", err, resp)
	}
}

func TestLocalReplyIsDeferredAndRunsResponseHeaders(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x")})
	rc := &recorder{}
	resp, err := p.Serve(context.Background(), probeReq(0, "local", [2]string{"x-status", "429"}), rc.up)
	if err != nil {
		t.Fatal(err)
	}
	if rc.calls.Load() != 0 {
		t.Errorf("upstream called despite local reply")
	}
	if resp.Status != 429 || !resp.Local || string(resp.Body) != "denied by probe" || hv(resp.Headers, "x-local") != "yes" {
		t.Errorf("local reply = %+v", resp)
	}
	if hv(resp.Headers, "x-resp-seen") != "local" {
		t.Errorf("proxy_on_response_headers did not run for the local reply: %v", resp.Headers)
	}
}

func TestLocalReplyInResponsePhaseReplacesResponse(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x")})
	resp, err := p.Serve(context.Background(), probeReq(0, "local-resp"), okUpstream(200, "upstream"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 502 || string(resp.Body) != "replaced" || !resp.Local || hv(resp.Headers, "x-local") != "response-phase" {
		t.Errorf("local reply from on_response_headers: %+v", resp)
	}
}

func TestCloseEndsPausedStreams(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x")})
	done := make(chan error, 1)
	go func() {
		_, err := p.Serve(context.Background(), probeReq(0, "tick-pause"), okUpstream(200, ""))
		done <- err
	}()
	eventually(t, "stream parked", func() bool {
		w := p.workers[0]
		parked := false
		if err := w.loop.do(func() {
			for _, st := range w.vm.streams {
				parked = parked || st.paused != phaseNone
			}
		}); err != nil {
			t.Fatal(err)
		}
		return parked
	})
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrPluginClosed) {
		t.Errorf("paused stream after Close: %v", err)
	}
}

func TestUnavailableMapsAreBadArgument(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x")})
	resp, err := p.Serve(context.Background(), probeReq(0, "badarg"), (&recorder{}).up)
	if err != nil {
		t.Fatal(err)
	}
	// Single values from an unavailable map: BadArgument. Whole maps:
	// Envoy's getHeaderMapPairs reports them empty with Ok, which the SDK
	// turns into "not found" (never "bad argument"). The plugin
	// configuration is only readable in proxy_on_configure.
	nf := "error status returned by host: not found"
	want := "error status returned by host: bad argument|" + nf + "|" + nf + "|" + nf + ":0"
	if got := hv(resp.Headers, "x-result"); got != want {
		t.Errorf("unavailable maps during request headers:\n got %s\nwant %s", got, want)
	}
}

func TestRouterErrorsFlowThroughResponseHeaders(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x")})
	for _, ue := range []*UpstreamError{
		{Status: 503, Details: "upstream_reset_before_response_started{connection_failure}"},
		{Status: 504, Details: "upstream_response_timeout"},
	} {
		resp, err := p.Serve(context.Background(), probeReq(0, "x"), func(context.Context, *Request) (*Response, error) { return nil, ue })
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != ue.Status || resp.Details != ue.Details || !resp.Local || hv(resp.Headers, "x-resp-seen") != "x" {
			t.Errorf("router reply = %+v", resp)
		}
	}
}

func TestProperties(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Name: "props-plugin", RootID: "root-a", VMID: "vm-a", Configuration: []byte("x")})
	resp, err := p.Serve(context.Background(), probeReq(0, "props"), okUpstream(201, "x"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"source.address":        "10.0.0.1:1234",
		"destination.address":   "127.0.0.1:10000",
		"request.path":          "/p",
		"request.method":        "GET",
		"response.code":         "len8:201",
		"response.code_details": "via_upstream",
		"xds.cluster_name":      "backend",
		"xds.route_name":        "default",
		"plugin_name":           "props-plugin",
		"plugin_root_id":        "root-a",
		"plugin_vm_id":          "vm-a",
		"request.headers":       "ok /p",
		"no.such.property":      "ERR error status returned by host: not found",
	}
	for k, w := range want {
		if got := hv(resp.Headers, "x-prop-"+k); got != w {
			t.Errorf("property %s = %q, want %q", k, got, w)
		}
	}
}

func TestMetricsRulesAndSharingAcrossWorkers(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x"), Concurrency: 2})
	for i := 0; i < 4; i++ {
		if _, err := p.Serve(context.Background(), probeReq(i%2, "metrics"), okUpstream(200, "")); err != nil {
			t.Fatal(err)
		}
	}
	if v, ok := r.Stats().Lookup("probe.requests"); !ok || v != 4 {
		t.Errorf("counter across 2 workers = %d,%v, want one stat of 4", v, ok)
	}
	// Each request adds 5 then -2 to the gauge.
	if v, ok := r.Stats().Lookup("probe.level"); !ok || v != 12 {
		t.Errorf("gauge = %d,%v, want 12", v, ok)
	}
	var text, prom strings.Builder
	r.Stats().WriteText(&text)
	r.Stats().WritePrometheus(&prom, nil)
	if !strings.Contains(text.String(), "probe.requests: 4\n") || strings.Contains(text.String(), "wasmcustom") {
		t.Errorf("/stats:\n%s", text.String())
	}
	for _, line := range []string{"# TYPE probe_requests counter\nprobe_requests 4\n", "probe_sizes_count 4\n", "probe_sizes_bucket{le=\"50\"} 4\n", "probe_sizes_bucket{le=\"25\"} 0\n"} {
		if !strings.Contains(prom.String(), line) {
			t.Errorf("/stats/prometheus lacks %q:\n%s", line, prom.String())
		}
	}
}

func TestSharedDataCASSemantics(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x")})
	resp, err := p.Serve(context.Background(), probeReq(0, "cas", [2]string{"x-key", "k1"}), okUpstream(200, ""))
	if err != nil {
		t.Fatal(err)
	}
	want := "get-missing:error status returned by host: not found|set-missing-cas:ok|get:ok:a:nonzero=true|" +
		"set-stale:error status returned by host: cas mismatch|set-current:ok|after:c:newcas=true|unconditional:ok:d:newcas=true"
	if got := hv(resp.Headers, "x-result"); got != want {
		t.Errorf("CAS sequence:\n got %s\nwant %s", got, want)
	}
	if n := r.SharedDataKeys("probe-vm"); n != 2 { // "counter" (created at start) and k1
		t.Errorf("keys = %d", n)
	}
}

// Two workers increment one shared counter with CAS retries; no update may
// be lost and every value is handed out once. The key is created at plugin
// start so that no two first writers race on a missing key (whose CAS is
// not checked).
func TestSharedDataAcrossTwoWorkers(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("configured"), Concurrency: 2})
	// "configured" ran in the canary and both workers.
	if v, _, ok := r.SharedData("probe-vm", "configured"); !ok || v[0] != 3 {
		t.Fatalf("configured count = %v, want 3 (canary + 2 workers)", v)
	}
	const n = 200
	rc := &recorder{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if _, err := p.Serve(context.Background(), probeReq(i%2, "incr"), rc.up); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	seen := map[string]bool{}
	retried := 0
	for _, req := range rc.reqs {
		seen[hv(req.Headers, "x-counter")] = true
		if hv(req.Headers, "x-attempts") != "1" {
			retried++
		}
	}
	if len(seen) != n || !seen["1"] || !seen[fmt.Sprint(n)] {
		t.Errorf("shared counter values: %d distinct of %d (lost or duplicated updates)", len(seen), n)
	}
	t.Logf("%d of %d increments needed a CAS retry", retried, n)
}

func TestTickResumesPausedStream(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("tick=5"), Concurrency: 2})
	rc := &recorder{}
	for w := 0; w < 2; w++ {
		resp, err := p.Serve(context.Background(), probeReq(w, "tick-pause"), rc.up)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 200 || hv(rc.last().Headers, "x-resumed-by") != "tick" {
			t.Errorf("worker %d: stream not resumed by its VM's tick: %+v", w, rc.last().Headers)
		}
	}
}

func TestPausedStreamDoesNotBlockWorker(t *testing.T) {
	r, sink := newRT(t, "")
	// No tick: the paused stream only ends when its client goes away.
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x")})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Serve(ctx, probeReq(0, "tick-pause"), (&recorder{}).up)
		done <- err
	}()
	// While it is parked, the same worker serves others.
	for i := 0; i < 3; i++ {
		if resp, err := p.Serve(context.Background(), probeReq(0, "x"), okUpstream(200, "")); err != nil || resp.Status != 200 {
			t.Fatalf("worker blocked by a paused stream: %v %+v", err, resp)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled paused stream returned %v", err)
	}
	// The client went away, yet the stream still got log/done/delete.
	if !sink.containsAll("probe: done ", " tick-pause") {
		t.Errorf("on_log not called for the cancelled stream: %q", sink.messages())
	}
}

type testCaller struct {
	clusters map[string]string // name → base URL
}

func (c *testCaller) HasCluster(name string) bool { _, ok := c.clusters[name]; return ok }

func (c *testCaller) Call(ctx context.Context, cluster string, headers [][2]string, body []byte, trailers [][2]string, timeout time.Duration) (*Response, error) {
	status, hs, b, err := testkit.RoundTrip(ctx, hv(headers, ":method"), c.clusters[cluster]+hv(headers, ":path"), headers, body)
	if err != nil {
		return nil, err
	}
	return &Response{Status: status, Headers: hs, Body: b}, nil
}

func TestHTTPCall(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo", "1")
		w.WriteHeader(202)
		fmt.Fprintf(w, "pong:%s", b)
	}))
	defer srv.Close()
	defer close(release)
	// A port nobody listens on, for a transport failure.
	dead := "http://" + testkit.ClosedAddr(t)

	r, _ := newRT(t, "")
	caller := &testCaller{clusters: map[string]string{"svc": srv.URL, "dead": dead}}
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x"), Caller: caller, Concurrency: 2})
	call := func(worker int, extra ...[2]string) (*Response, *recorder) {
		rc := &recorder{}
		resp, err := p.Serve(context.Background(), probeReq(worker, "httpcall", extra...), rc.up)
		if err != nil {
			t.Fatal(err)
		}
		return resp, rc
	}
	t.Run("reply delivered to root context", func(t *testing.T) {
		for w := 0; w < 2; w++ {
			_, rc := call(w, [2]string{"x-cluster", "svc"}, [2]string{"x-call-path", "/ok"}, [2]string{"x-timeout", "5000"})
			got := hv(rc.last().Headers, "x-call-result")
			// headers: :status, x-echo, content-length, content-type, date.
			if !strings.HasSuffix(got, ",9,0,202,pong:ping") {
				t.Errorf("worker %d: call result %q", w, got)
			}
		}
	})
	t.Run("unknown cluster", func(t *testing.T) {
		resp, _ := call(0, [2]string{"x-cluster", "nope"}, [2]string{"x-call-path", "/ok"})
		if got := hv(resp.Headers, "x-result"); got != "dispatch:error status returned by host: bad argument" {
			t.Errorf("unknown cluster: %q", got)
		}
	})
	for _, drop := range []string{":method", ":path", ":authority"} {
		t.Run("missing "+drop, func(t *testing.T) {
			resp, _ := call(0, [2]string{"x-cluster", "svc"}, [2]string{"x-call-path", "/ok"}, [2]string{"x-drop", drop})
			if got := hv(resp.Headers, "x-result"); got != "dispatch:error status returned by host: bad argument" {
				t.Errorf("missing %s: %q", drop, got)
			}
		})
	}
	t.Run("transport failure is 0,0,0", func(t *testing.T) {
		_, rc := call(1, [2]string{"x-cluster", "dead"}, [2]string{"x-call-path", "/"}, [2]string{"x-timeout", "5000"})
		if got := hv(rc.last().Headers, "x-call-result"); !strings.HasPrefix(got, "0,0,0,,") {
			t.Errorf("transport failure: %q", got)
		}
	})
	t.Run("timeout honoured", func(t *testing.T) {
		start := time.Now()
		_, rc := call(0, [2]string{"x-cluster", "svc"}, [2]string{"x-call-path", "/slow"}, [2]string{"x-timeout", "50"})
		if got := hv(rc.last().Headers, "x-call-result"); !strings.HasPrefix(got, "0,0,0,,") {
			t.Errorf("timed-out call: %q", got)
		}
		// The server blocks until the test ends, so only the timeout can
		// have completed the call.
		_ = start
	})
}

func TestStreamLifecycleReleasesContexts(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x")})
	for i := 0; i < 10; i++ {
		if _, err := p.Serve(context.Background(), probeReq(0, "x"), okUpstream(200, "")); err != nil {
			t.Fatal(err)
		}
	}
	w := p.workers[0]
	n := -1
	if err := w.loop.do(func() { n = len(w.vm.streams) }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d stream contexts left after their streams ended", n)
	}
}

// request.headers.<name> is every value of the header joined with ',',
// as Envoy's HeadersWrapper gives it; the single-header read gives only
// the first.
func TestJoinedHeaderProperty(t *testing.T) {
	hs := [][2]string{{":path", "/"}, {"authorization", "Basic a"}, {"x", "1"}, {"authorization", "Bearer b"}}
	if got, ok := joinedHeader(hs, "authorization"); !ok || string(got) != "Basic a,Bearer b" {
		t.Errorf("joined = %q %v", got, ok)
	}
	if got, ok := joinedHeader(hs, "x"); !ok || string(got) != "1" {
		t.Errorf("one value = %q %v", got, ok)
	}
	if _, ok := joinedHeader(hs, "absent"); ok {
		t.Error("an absent header was found")
	}
}
