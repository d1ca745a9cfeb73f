package engine

import (
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
)

// newNativePlugin configures a plugin over fakes of the host, natively:
// the engine runs as the adapter drives it, without the SDK or its emulator.
func newNativePlugin(t testing.TB, cfgJSON string) (*Plugin, *hosttest.Fakes) {
	t.Helper()
	hc, fakes := hosttest.New(time.Unix(1_700_000_000, 0))
	return configuredPlugin(t, hc, cfgJSON), fakes
}

// configuredPlugin is a plugin of a new VM on hc, configured with cfgJSON.
func configuredPlugin(t testing.TB, hc host.Host, cfgJSON string) *Plugin {
	t.Helper()
	p := NewVM(hc).NewPlugin()
	cfg, err := config.Parse([]byte(cfgJSON))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.configure(cfg); err != nil {
		t.Fatal(err)
	}
	return p
}

// A breaker and a cost from the response both need the response headers;
// the header map read for the charge already holds :status, so the
// response phase costs one read, not two.
func TestResponseHeadersReadOnceForChargeAndBreaker(t *testing.T) {
	p, fakes := newNativePlugin(t, `{
		"limits":[{"name":"tokens","key":[],"limit":100,"window":"10s","cost_from_response":{"header":"x-tokens-used"}}],
		"breakers":[{"name":"b","failure_threshold":1}]}`)
	fakes.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}
	h := &Stream{}
	p.Begin(h, 2)
	if v := h.RequestHeaders(); v != Continue {
		t.Fatalf("request not admitted: %v", v)
	}
	fakes.Stream.ResponseHeaderMap = [][2]string{{":status", "503"}, {"x-tokens-used", "5"}}
	h.ResponseHeaders()
	if got := fakes.Stream.ResponseReads; got != 1 {
		t.Fatalf("%d response header reads, want 1", got)
	}
	if h.breakers.status != 503 {
		t.Fatalf("breaker sees status %d, want 503", h.breakers.status)
	}
	if got := fakes.Metrics.Values["sluice.limit.tokens.response_cost"]; got != 5 {
		t.Fatalf("response_cost %d, want 5", got)
	}
	h.Done()
	if got := fakes.Metrics.Values["sluice.breaker.b.failures"]; got != 1 {
		t.Fatalf("breaker failures %d, want 1: the 503 was not reported", got)
	}
}

// Without a charge, the breaker reads :status alone, not the whole map.
func TestBreakerAloneReadsOnlyStatus(t *testing.T) {
	p, fakes := newNativePlugin(t, `{"breakers":[{"name":"b","failure_threshold":1}]}`)
	fakes.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}
	h := &Stream{}
	p.Begin(h, 2)
	h.RequestHeaders()
	fakes.Stream.ResponseHeaderMap = [][2]string{{":status", "200"}}
	h.ResponseHeaders()
	if got := fakes.Stream.ResponseReads; got != 1 || h.breakers.status != 200 {
		t.Fatalf("%d reads, status %d; want 1 read of 200", got, h.breakers.status)
	}
}
