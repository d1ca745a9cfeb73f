package filter_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/filter"
	"github.com/sluice-proxy/sluice/filter/filtertest"
)

// nativeHarness runs the filter in-process on the SDK's host emulator.
type nativeHarness struct {
	host proxytest.HostEmulator
}

func (n *nativeHarness) Do(t testing.TB, req filtertest.Request) filtertest.Response {
	t.Helper()
	id := n.host.InitializeHttpContext()
	headers := [][2]string{{":method", req.Method}, {":path", req.Path}, {":authority", req.Host}, {":scheme", "http"}}
	headers = append(headers, req.Headers...)
	action := n.host.CallOnRequestHeaders(id, headers, true)
	var resp filtertest.Response
	if local := n.host.GetSentLocalResponse(id); local != nil {
		resp = filtertest.Response{Status: int(local.StatusCode), Local: true, Headers: toHeader(local.Headers), Body: local.Data}
		n.host.CallOnResponseHeaders(id, append([][2]string{{":status", strconv.Itoa(resp.Status)}}, local.Headers...), len(local.Data) == 0)
	} else {
		if action != types.ActionContinue {
			t.Fatalf("request paused without a local reply; native cases must not pause")
		}
		resp.UpstreamHeaders = toHeader(n.host.GetCurrentRequestHeaders(id))
		n.host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
		resp.Status = 200
		resp.Headers = toHeader(n.host.GetCurrentResponseHeaders(id))
	}
	n.host.CompleteHttpContext(id)
	return resp
}

func (n *nativeHarness) Counter(t testing.TB, name string) uint64 {
	t.Helper()
	v, err := n.host.GetCounterMetric(name)
	if err != nil {
		return 0
	}
	return v
}

func toHeader(pairs [][2]string) http.Header {
	h := http.Header{}
	for _, kv := range pairs {
		h.Add(kv[0], kv[1])
	}
	return h
}

func TestCasesNative(t *testing.T) {
	for _, c := range filtertest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			opt := proxytest.NewEmulatorOption().WithVMContext(filter.NewVMContext()).
				WithPluginConfiguration([]byte(c.Config))
			host, reset := proxytest.NewHostEmulator(opt)
			defer reset()
			if st := host.StartPlugin(); st != types.OnPluginStartStatusOK {
				t.Fatalf("OnPluginStart failed for config %s", c.Config)
			}
			c.Run(t, &nativeHarness{host: host})
		})
	}
}
