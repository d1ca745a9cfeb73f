package filter_test

import (
	"encoding/binary"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/filter"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/engine"
	"github.com/sluice-proxy/sluice/filter/filtertest"
)

// nativeHarness runs the filter in-process on the SDK's host emulator, with
// a clock the test moves by hand.
type nativeHarness struct {
	host proxytest.HostEmulator
	now  time.Time
	// metadata are the property paths the last request's dynamic
	// metadata set; proxytest has one property map for all streams, so
	// the next request clears them.
	metadata [][]string
	// answer, when set, answers the callouts the filter sends while a
	// request is held: the reply's status and body, or ok false for no
	// response. Without it a callout stays unanswered.
	answer func(cluster string, headers [][2]string, body []byte) (status int, reply []byte, ok bool)
	// answered counts the callouts answered per context.
	answered map[uint32]int
}

// newNativeHarness starts the plugin with cfg on the emulator, its clock
// at filtertest.Epoch.
func newNativeHarness(t *testing.T, cfg string) *nativeHarness {
	t.Helper()
	h := &nativeHarness{now: filtertest.Epoch, answered: map[uint32]int{}}
	opt := proxytest.NewEmulatorOption().
		WithVMContext(filter.NewVMContextWithClock(func() time.Time { return h.now })).
		WithPluginConfiguration([]byte(cfg))
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	if st := host.StartPlugin(); st != types.OnPluginStartStatusOK {
		t.Fatalf("OnPluginStart failed for config %s: %v", cfg, host.GetCriticalLogs())
	}
	h.host = host
	return h
}

// pump answers the callouts the plugin's context and stream id's sent
// since the last pump, and reports how many it answered. The filter has
// at most one in flight here: proxytest numbers callouts by how many are
// live, so two answered out of order could share an id.
func (n *nativeHarness) pump(id uint32) int {
	if n.answer == nil {
		return 0
	}
	answered := 0
	for _, ctx := range []uint32{proxytest.PluginContextID, id} {
		calls := n.host.GetCalloutAttributesFromContext(ctx)
		for ; n.answered[ctx] < len(calls); n.answered[ctx]++ {
			c := calls[n.answered[ctx]]
			status, body, ok := n.answer(c.Upstream, c.Headers, c.Body)
			if !ok {
				n.host.CallOnHttpCallResponse(c.CalloutID, nil, nil, nil)
			} else {
				n.host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", strconv.Itoa(status)}}, nil, body)
			}
			answered++
		}
	}
	return answered
}

// tickStep is how far the clock moves per emulated tick while a request is
// held; the filter's own tick period is 5ms.
const tickStep = 5 * time.Millisecond

func (n *nativeHarness) Advance(_ testing.TB, d time.Duration) { n.now = n.now.Add(d) }

func (n *nativeHarness) Do(t testing.TB, req filtertest.Request) filtertest.Response {
	t.Helper()
	return filtertest.StartAndFinish(t, n, req)
}

func (n *nativeHarness) Start(t testing.TB, req filtertest.Request) (filtertest.Flight, filtertest.Response) {
	t.Helper()
	req = req.WithDefaults()
	peer, cluster, route := req.Peer, req.Cluster, req.Route
	// proxytest has one property map for all streams; the filter reads
	// properties while deciding, which happens before Start returns.
	for path, v := range map[string]string{"source.address": peer, "xds.cluster_name": cluster, "xds.route_name": route} {
		if err := n.host.SetProperty(splitPath(path), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	n.setMetadata(t, req.Metadata)
	// proxytest keeps what the filter sets with proxy_set_property in the
	// same map, and cannot delete: a byte no value holds marks "unset".
	for _, name := range engine.FilterStateNames {
		if err := n.host.SetProperty([]string{name}, []byte{0}); err != nil {
			t.Fatal(err)
		}
	}
	id := n.host.InitializeHttpContext()
	headers := [][2]string{{":method", req.Method}, {":path", req.Path}, {":authority", req.Host}, {":scheme", "http"}}
	headers = append(headers, req.Headers...)
	start := n.now
	action := n.host.CallOnRequestHeaders(id, headers, true)
	for action == types.ActionPause && n.host.GetSentLocalResponse(id) == nil {
		if n.pump(id) > 0 {
			action = n.host.GetCurrentHttpStreamAction(id)
			continue
		}
		if n.now.Sub(start) > filtertest.MaxHold {
			t.Fatalf("request held for more than %v", filtertest.MaxHold)
		}
		if n.host.GetTickPeriod() == 0 {
			t.Fatal("request paused with no tick running to resume it")
		}
		n.now = n.now.Add(tickStep)
		n.host.Tick()
		action = n.host.GetCurrentHttpStreamAction(id)
	}
	f := &nativeFlight{n: n, id: id, req: req, waited: n.now.Sub(start), filterState: n.filterState(t)}
	if local := n.host.GetSentLocalResponse(id); local != nil {
		resp := filtertest.Response{Status: int(local.StatusCode), Local: true, Body: local.Data,
			Headers: filtertest.ToHeader(local.Headers), Waited: f.waited, FilterState: f.filterState}
		n.host.CallOnResponseHeaders(id, append([][2]string{{":status", strconv.Itoa(resp.Status)}}, local.Headers...), len(local.Data) == 0)
		n.complete(id, resp.Status, "wasm_local_reply")
		return nil, resp
	}
	f.upstreamHeaders = filtertest.ToHeader(n.host.GetCurrentRequestHeaders(id))
	return f, filtertest.Response{}
}

type nativeFlight struct {
	n               *nativeHarness
	id              uint32
	req             filtertest.Request
	waited          time.Duration
	upstreamHeaders http.Header
	filterState     map[string]string
}

// filterState is what the filter set for the access log since Start
// marked the names unset, under Envoy's names for it.
func (n *nativeHarness) filterState(t testing.TB) map[string]string {
	var fs map[string]string
	for _, name := range engine.FilterStateNames {
		v, err := n.host.GetProperty([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		if len(v) == 1 && v[0] == 0 {
			continue
		}
		if fs == nil {
			fs = map[string]string{}
		}
		fs["wasm."+name] = string(v)
	}
	return fs
}

func (f *nativeFlight) Finish(t testing.TB) filtertest.Response {
	n := f.n
	status := 200
	if f.req.UpstreamStatus != 0 {
		status = f.req.UpstreamStatus
	}
	resp := filtertest.Response{Status: status, UpstreamHeaders: f.upstreamHeaders, Waited: f.waited, FilterState: f.filterState}
	chunks := f.req.UpstreamBody
	n.host.CallOnResponseHeaders(f.id, append([][2]string{{":status", strconv.Itoa(status)}}, f.req.UpstreamResponseHeaders...), chunks == nil)
	resp.Headers = filtertest.ToHeader(n.host.GetCurrentResponseHeaders(f.id))
	// proxytest buffers on Pause and hands the filter everything so far,
	// as Envoy does; a Continue lets what it holds through.
	for i, c := range chunks {
		if n.host.CallOnResponseBody(f.id, []byte(c), i == len(chunks)-1) == types.ActionContinue {
			resp.Body = append(resp.Body, n.host.GetCurrentResponseBody(f.id)...)
		}
	}
	n.complete(f.id, status, "via_upstream")
	return resp
}

// complete ends the stream (proxy_on_log) with the response code and
// details Envoy would report.
func (n *nativeHarness) complete(id uint32, status int, details string) {
	code := make([]byte, 8)
	binary.LittleEndian.PutUint64(code, uint64(status))
	_ = n.host.SetProperty([]string{"response", "code"}, code)
	_ = n.host.SetProperty([]string{"response", "code_details"}, []byte(details))
	n.host.CompleteHttpContext(id)
}

func (n *nativeHarness) Tick(testing.TB) { n.host.Tick() }

// setMetadata serves md as Envoy serves dynamic metadata to the wasm:
// strings as their bytes, numbers as 8-byte little-endian doubles.
// proxytest can neither delete a property nor hold an empty one, so the
// last request's values are overwritten with a bool false (one zero
// byte), which the filter reads as absent as it reads every bool; the
// wasm harness serves true absence.
func (n *nativeHarness) setMetadata(t testing.TB, md []filtertest.Metadata) {
	for _, prop := range n.metadata {
		if err := n.host.SetProperty(prop, []byte{0}); err != nil {
			t.Fatal(err)
		}
	}
	n.metadata = n.metadata[:0]
	for _, m := range md {
		prop := config.MetadataProperty(m.Namespace, m.Path)
		var v []byte
		switch x := m.Value.(type) {
		case string:
			v = []byte(x)
		case float64:
			v = binary.LittleEndian.AppendUint64(nil, math.Float64bits(x))
		default:
			t.Fatalf("metadata value %T: want string or float64", m.Value)
		}
		if err := n.host.SetProperty(prop, v); err != nil {
			t.Fatal(err)
		}
		n.metadata = append(n.metadata, prop)
	}
}

func splitPath(p string) []string {
	for i := range p {
		if p[i] == '.' {
			return []string{p[:i], p[i+1:]}
		}
	}
	return []string{p}
}

func (n *nativeHarness) Counter(t testing.TB, name string) uint64 {
	v, err := n.host.GetCounterMetric(name)
	if err != nil {
		return 0
	}
	return v
}

func (n *nativeHarness) Gauge(t testing.TB, name string) int64 {
	v, err := n.host.GetGaugeMetric(name)
	if err != nil {
		return 0
	}
	return int64(v)
}

// Defined implements filtertest.MetricDefiner.
func (n *nativeHarness) Defined(t testing.TB, name string) bool {
	_, errC := n.host.GetCounterMetric(name)
	_, errG := n.host.GetGaugeMetric(name)
	_, errH := n.host.GetHistogramMetric(name)
	return errC == nil || errG == nil || errH == nil
}

func TestCasesNative(t *testing.T) {
	for _, c := range filtertest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			c.Run(t, newNativeHarness(t, c.Config))
		})
	}
}

// TestRateErrorsFailPluginStartWithPaths: rates the limiter or the Redis
// scripts cannot take fail plugin start with every path named at once,
// from Parse, not the first one found while building the limits.
func TestRateErrorsFailPluginStartWithPaths(t *testing.T) {
	cfg := `{"backend": {"cluster": "redis"}, "limits": [
	  {"name": "a", "key": ["header:x-plan"], "requests_per_second": 5, "mode": "global",
	   "overrides": {"gold": {"limit": 1, "window": "1000001ns"}}},
	  {"name": "b", "limit": 1, "window": "168h", "burst": 1000000000},
	  {"name": "c", "requests_per_second": 1e400}]}`
	opt := proxytest.NewEmulatorOption().WithVMContext(filter.NewVMContext()).WithPluginConfiguration([]byte(cfg))
	host, reset := proxytest.NewHostEmulator(opt)
	defer reset()
	if st := host.StartPlugin(); st != types.OnPluginStartStatusFailed {
		t.Fatal("out-of-range rates must fail OnPluginStart")
	}
	joined := strings.Join(host.GetCriticalLogs(), "\n")
	for _, want := range []string{
		"sluice: invalid configuration: limits[0].overrides.gold.window: must be a whole number of microseconds",
		"sluice: invalid configuration: limits[1]: capacity×period/rate",
		"sluice: invalid configuration: limits[2].requests_per_second: must be <= 1000000000",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("critical logs do not say %q:\n%s", want, joined)
		}
	}
}

func TestBadConfigFailsPluginStart(t *testing.T) {
	opt := proxytest.NewEmulatorOption().WithVMContext(filter.NewVMContext()).
		WithPluginConfiguration([]byte(`{"limits":[{"name":"x","burts":1,"requests_per_second":-1}]}`))
	host, reset := proxytest.NewHostEmulator(opt)
	defer reset()
	if st := host.StartPlugin(); st != types.OnPluginStartStatusFailed {
		t.Fatal("a bad config must fail OnPluginStart")
	}
	logs := host.GetCriticalLogs()
	joined := ""
	for _, l := range logs {
		joined += l + "\n"
	}
	for _, want := range []string{"limits[0].burts", "limits[0].requests_per_second"} {
		if !strings.Contains(joined, want) {
			t.Errorf("critical logs do not name %s:\n%s", want, joined)
		}
	}
}
