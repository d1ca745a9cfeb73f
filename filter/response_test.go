package filter

import (
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
)

// newNativePlugin configures a plugin over fakes of the host, natively:
// the callbacks run as the SDK would run them, without its emulator.
func newNativePlugin(t *testing.T, cfgJSON string) (*pluginContext, *hosttest.Fakes) {
	t.Helper()
	hc, fakes := hosttest.New(time.Unix(1_700_000_000, 0))
	vm := &vmContext{host: hc}
	p := vm.NewPluginContext(1).(*pluginContext)
	cfg, err := config.Parse([]byte(cfgJSON))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.configure(cfg); err != nil {
		t.Fatal(err)
	}
	return p, fakes
}

// A breaker and a cost from the response both need the response headers;
// the header map read for the charge already holds :status, so the
// response phase costs one read, not two.
func TestResponseHeadersReadOnceForChargeAndBreaker(t *testing.T) {
	p, fakes := newNativePlugin(t, `{
		"limits":[{"name":"tokens","key":[],"limit":100,"window":"10s","cost_from_response":{"header":"x-tokens-used"}}],
		"breakers":[{"name":"b","failure_threshold":1}]}`)
	fakes.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}
	h := p.NewHttpContext(2).(*httpContext)
	if a := h.OnHttpRequestHeaders(0, true); a != 0 {
		t.Fatalf("request not admitted: action %v", a)
	}
	fakes.Stream.ResponseHeaderMap = [][2]string{{":status", "503"}, {"x-tokens-used", "5"}}
	h.OnHttpResponseHeaders(0, true)
	if got := fakes.Stream.ResponseReads; got != 1 {
		t.Fatalf("%d response header reads, want 1", got)
	}
	if h.status != 503 {
		t.Fatalf("breaker sees status %d, want 503", h.status)
	}
	if got := fakes.Metrics.Values["sluice.limit.tokens.response_cost"]; got != 5 {
		t.Fatalf("response_cost %d, want 5", got)
	}
	h.OnHttpStreamDone()
	if got := fakes.Metrics.Values["sluice.breaker.b.failures"]; got != 1 {
		t.Fatalf("breaker failures %d, want 1: the 503 was not reported", got)
	}
}

// Without a charge, the breaker reads :status alone, not the whole map.
func TestBreakerAloneReadsOnlyStatus(t *testing.T) {
	p, fakes := newNativePlugin(t, `{"breakers":[{"name":"b","failure_threshold":1}]}`)
	fakes.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}
	h := p.NewHttpContext(2).(*httpContext)
	h.OnHttpRequestHeaders(0, true)
	fakes.Stream.ResponseHeaderMap = [][2]string{{":status", "200"}}
	h.OnHttpResponseHeaders(0, true)
	if got := fakes.Stream.ResponseReads; got != 1 || h.status != 200 {
		t.Fatalf("%d reads, status %d; want 1 read of 200", got, h.status)
	}
}
