package e2e_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
	"github.com/sluice-proxy/sluice/filter/filtertest"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

// wasmModule reads build/<name>.wasm. Under CI a missing module fails the
// test: the wasm is what ships, so its tests are never optional there.
func wasmModule(t testing.TB, name string) []byte {
	t.Helper()
	code, err := os.ReadFile(testkit.Built(t, filepath.Join("..", "build", name+".wasm")))
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// wasmHarness runs the behavioural cases on build/sluice.wasm in our host,
// one VM per worker, with the guest's WASI clock and ticks driven by the
// test exactly as the native harness drives proxytest.
type wasmHarness struct {
	rt     *host.Runtime
	plugin *host.Plugin
	steppedClock
}

func (w *wasmHarness) Advance(_ testing.TB, d time.Duration) { w.advance(d) }

// tickStep matches the filter's delay tick.
const tickStep = 5 * time.Millisecond

type served struct {
	resp *host.Response
	err  error
}

func (w *wasmHarness) Do(t testing.TB, req filtertest.Request) filtertest.Response {
	t.Helper()
	return filtertest.StartAndFinish(t, w, req)
}

// wasmFlight is a stream whose upstream holds the request until Finish.
type wasmFlight struct {
	w               *wasmHarness
	start           time.Time
	release         chan struct{}
	done            chan served
	upstreamHeaders http.Header
}

func (w *wasmHarness) Start(t testing.TB, req filtertest.Request) (filtertest.Flight, filtertest.Response) {
	t.Helper()
	req = req.WithDefaults()
	peer, cluster, route := req.Peer, req.Cluster, req.Route
	headers := [][2]string{{":method", req.Method}, {":path", req.Path}, {":authority", req.Host}, {":scheme", "http"}}
	headers = append(headers, req.Headers...)
	parked := make(chan struct{}, 1)
	hreq := &host.Request{
		Worker: req.Worker, Headers: headers, SourceAddress: peer, DestinationAddress: "127.0.0.1:10000",
		RouteName: route, ClusterName: cluster,
		DynamicMetadata: dynamicMetadata(req.Metadata),
		OnPark: func() {
			select {
			case parked <- struct{}{}:
			default:
			}
		},
	}
	status := req.UpstreamStatus
	if status == 0 {
		status = 200
	}
	f := &wasmFlight{w: w, start: w.clock(), release: make(chan struct{}), done: make(chan served, 1)}
	reached := make(chan http.Header, 1)
	upstream := func(ctx context.Context, r *host.Request) (*host.Response, error) {
		reached <- filtertest.ToHeader(r.Headers)
		select {
		case <-f.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if req.UpstreamBody != nil {
			body := chunkedBody(req.UpstreamBody)
			return &host.Response{Status: status, Headers: req.UpstreamResponseHeaders, BodyStream: &body}, nil
		}
		hs := append([][2]string{{"content-type", "text/plain"}}, req.UpstreamResponseHeaders...)
		return &host.Response{Status: status, Headers: hs, Body: []byte("ok")}, nil
	}
	go func() {
		resp, err := w.plugin.Serve(context.Background(), hreq, upstream)
		f.done <- served{resp, err}
	}()
	for {
		select {
		case out := <-f.done:
			return nil, f.response(t, out)
		case f.upstreamHeaders = <-reached:
			return f, filtertest.Response{}
		case <-parked:
			// The filter holds the request: move time a tick at a time and
			// fire the tick, as Envoy's timer would, until it lets go.
			for w.plugin.ParkedStreams(req.Worker) > 0 {
				if w.clock().Sub(f.start) > filtertest.MaxHold {
					t.Fatalf("request held for more than %v", filtertest.MaxHold)
				}
				w.Advance(t, tickStep)
				if !w.plugin.Tick(req.Worker) {
					t.Fatal("request paused with no tick running to resume it")
				}
			}
		}
	}
}

func (f *wasmFlight) Finish(t testing.TB) filtertest.Response {
	t.Helper()
	close(f.release)
	return f.response(t, <-f.done)
}

func (f *wasmFlight) response(t testing.TB, out served) filtertest.Response {
	t.Helper()
	if out.err != nil {
		t.Fatalf("serve: %v", out.err)
	}
	resp := filtertest.Response{
		Status:  out.resp.Status,
		Local:   out.resp.Local,
		Headers: filtertest.ToHeader(out.resp.Headers),
		Body:    out.resp.Body,
		Waited:  f.w.clock().Sub(f.start),
		// Filter state is set while the request is decided, so a
		// streamed body's headers already carry it.
		FilterState: out.resp.FilterState,
	}
	if bs := out.resp.BodyStream; bs != nil {
		for {
			b, err := bs.Next(context.Background())
			resp.Body = append(resp.Body, b...)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("body: %v", err)
			}
		}
	}
	if !out.resp.Local {
		resp.UpstreamHeaders = f.upstreamHeaders
	}
	return resp
}

// chunkedBody is an upstream body sent in the given chunks.
type chunkedBody []string

func (c *chunkedBody) Next(context.Context) ([]byte, error) {
	if len(*c) == 0 {
		return nil, io.EOF
	}
	b := (*c)[0]
	*c = (*c)[1:]
	if len(*c) == 0 {
		return []byte(b), io.EOF
	}
	return []byte(b), nil
}

func (w *wasmHarness) Tick(testing.TB) {
	for i := 0; i < w.plugin.Concurrency(); i++ {
		w.plugin.Tick(i)
	}
}

func (w *wasmHarness) Counter(t testing.TB, name string) uint64 {
	v, _ := w.rt.Stats().Lookup(name)
	return v
}

func (w *wasmHarness) Gauge(t testing.TB, name string) int64 {
	v, _ := w.rt.Stats().Lookup(name)
	return int64(v)
}

// Defined implements filtertest.MetricDefiner.
func (w *wasmHarness) Defined(t testing.TB, name string) bool {
	_, ok := w.rt.Stats().Lookup(name)
	return ok
}

// TestCasesWasm runs filtertest.Cases on build/sluice.wasm: the same cases
// filter's TestCasesNative runs on proxytest.
func TestCasesWasm(t *testing.T) {
	code := wasmModule(t, "sluice")
	for _, c := range filtertest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			h := newWasmHarness(t, code, c)
			c.Run(t, h)
			if n := h.plugin.Traps(); n != 0 {
				t.Fatalf("%d traps", n)
			}
		})
	}
}

// newWasmHarness serves case c's configuration on code, its clock at
// filtertest.Epoch; the runtime closes when the test ends.
func newWasmHarness(t *testing.T, code []byte, c filtertest.Case) *wasmHarness {
	return newWasmHarnessLogging(t, code, c, func(host.LogLevel, string, string) {})
}

// newWasmHarnessLogging is newWasmHarness with the plugin's logs going to
// logger.
func newWasmHarnessLogging(t *testing.T, code []byte, c filtertest.Case, logger func(host.LogLevel, string, string)) *wasmHarness {
	h := &wasmHarness{steppedClock: steppedClock{now: filtertest.Epoch}}
	h.rt = host.NewRuntime(host.RuntimeOptions{Clock: h.clock, ManualTicks: true, Logger: logger})
	t.Cleanup(func() { h.rt.Close(context.Background()) })
	p, err := h.rt.NewPlugin(context.Background(), host.PluginConfig{
		Name: "sluice", RootID: "sluice", VMID: "sluice-" + strconv.Itoa(int(time.Now().UnixNano())),
		Code: code, Configuration: []byte(c.Config), Concurrency: c.Workers,
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	h.plugin = p
	return h
}

// dynamicMetadata nests dotted paths into the Structs Envoy keeps.
func dynamicMetadata(md []filtertest.Metadata) map[string]map[string]any {
	if len(md) == 0 {
		return nil
	}
	out := map[string]map[string]any{}
	for _, m := range md {
		if out[m.Namespace] == nil {
			out[m.Namespace] = map[string]any{}
		}
		fields := out[m.Namespace]
		elems := strings.Split(m.Path, ".")
		for _, e := range elems[:len(elems)-1] {
			next, ok := fields[e].(map[string]any)
			if !ok {
				next = map[string]any{}
				fields[e] = next
			}
			fields = next
		}
		fields[elems[len(elems)-1]] = m.Value
	}
	return out
}
