package engine

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/host/hosttest"
)

const bodyLimits = `{"limits":[{"name":"tokens","key":[],"limit":1000,"window":"1000s",
	"cost_from_response":{"json":"usage.total_tokens","default":50,"max_body_bytes":64}}]}`

// bodyStream admits one request and delivers the response headers.
func bodyStream(t *testing.T, p *Plugin, fakes *hosttest.Fakes, contentType string) *Stream {
	t.Helper()
	fakes.Stream.Headers = [][2]string{{":method", "POST"}, {":path", "/v1/chat"}, {":authority", "a"}}
	h := &Stream{}
	p.Begin(h, 2)
	if v := h.RequestHeaders(); v != Continue {
		t.Fatalf("request not admitted: %v", v)
	}
	fakes.Stream.ResponseHeaderMap = [][2]string{{":status", "200"}, {"content-type", contentType}}
	h.ResponseHeaders()
	return h
}

// deliver hands the stream a body callback as a host does: body is what
// the callback may read (the chunk, or all buffered so far).
func deliver(fakes *hosttest.Fakes, h *Stream, body string, end bool) Verdict {
	fakes.Stream.ResponseBodyBytes = []byte(body)
	return h.ResponseBody(len(body), end)
}

func wantMetric(t *testing.T, fakes *hosttest.Fakes, name string, want uint64) {
	t.Helper()
	if got := fakes.Metrics.Values["sluice.limit.tokens."+name]; got != want {
		t.Errorf("%s = %d, want %d", name, got, want)
	}
}

// remaining is what the bucket has left at the
// plugin's clock, without taking anything.
func remaining(t *testing.T, p *Plugin, fakes *hosttest.Fakes) int64 {
	t.Helper()
	l := p.limits[0]
	res, err := l.def.Peek("", fakes.Clock.Now.UnixNano(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return res.Remaining
}

func TestJSONBodyIsBufferedThenCharged(t *testing.T) {
	p, fakes := newNativePlugin(t, bodyLimits)
	h := bodyStream(t, p, fakes, "application/json")
	// The host buffers on Pause and calls again with everything so far.
	if v := deliver(fakes, h, `{"usage":{"total`, false); v != Pause {
		t.Fatalf("first chunk: %v, want Pause (buffer)", v)
	}
	if v := deliver(fakes, h, `{"usage":{"total_tokens":300}}`, true); v != Continue {
		t.Fatalf("last chunk: %v", v)
	}
	wantMetric(t, fakes, "response_cost", 300)
	if got := remaining(t, p, fakes); got != 700 {
		t.Fatalf("remaining %d, want 700", got)
	}
	h.Done()
	wantMetric(t, fakes, "response_cost", 300) // not charged again
}

func TestJSONBodyOverTheBoundIsChargedDefault(t *testing.T) {
	p, fakes := newNativePlugin(t, bodyLimits)
	h := bodyStream(t, p, fakes, "application/json")
	big := `{"pad":"` + strings.Repeat("x", 64) + `",`
	if v := deliver(fakes, h, big, false); v != Continue {
		t.Fatalf("over the bound: %v, want Continue (stop buffering)", v)
	}
	reads := fakes.Stream.BodyReads
	if v := deliver(fakes, h, `"usage":{"total_tokens":5}}`, true); v != Continue {
		t.Fatalf("last chunk: %v", v)
	}
	if fakes.Stream.BodyReads != reads {
		t.Fatal("a body past its bound was read")
	}
	wantMetric(t, fakes, "response_body_too_large", 1)
	wantMetric(t, fakes, "response_cost", 50)
}

func TestBodyWithoutUsableUsageIsChargedDefault(t *testing.T) {
	for _, tc := range []struct {
		body, counter string
	}{
		{`{"id":"x"}`, "response_usage_missing"},
		{`<html>bad gateway</html>`, "response_usage_missing"},
		{`{"usage":{"total_tokens":"many"}}`, "invalid_response_cost"},
		{`{"usage":{"total_tokens":-9}}`, "invalid_response_cost"},
	} {
		p, fakes := newNativePlugin(t, bodyLimits)
		h := bodyStream(t, p, fakes, "application/json")
		deliver(fakes, h, tc.body, true)
		wantMetric(t, fakes, tc.counter, 1)
		wantMetric(t, fakes, "response_cost", 50)
	}
}

func TestEventStreamIsScannedWithoutHoldingIt(t *testing.T) {
	p, fakes := newNativePlugin(t, bodyLimits)
	h := bodyStream(t, p, fakes, "Text/Event-Stream; charset=utf-8")
	for _, chunk := range []string{
		"data: {\"choices\":[],\"usage\":null}\n\n",
		"data: {\"usage\":{\"total_tokens\":7}}\n\ndata: {\"usage\":{\"total_",
		"tokens\":420}}\n\n: the last event with the path counts\n\n",
		"data: [DONE]\n\n",
	} {
		if v := deliver(fakes, h, chunk, false); v != Continue {
			t.Fatalf("chunk %q: %v, want Continue", chunk, v)
		}
	}
	wantMetric(t, fakes, "response_cost", 0)
	deliver(fakes, h, "", true)
	wantMetric(t, fakes, "response_cost", 420)
	wantMetric(t, fakes, "response_usage_missing", 0)
	if got := remaining(t, p, fakes); got != 580 {
		t.Fatalf("remaining %d, want 580", got)
	}
}

func TestEventStreamResetMidwayChargesWhatItSaw(t *testing.T) {
	p, fakes := newNativePlugin(t, bodyLimits)
	h := bodyStream(t, p, fakes, "text/event-stream")
	deliver(fakes, h, "data: {\"usage\":{\"total_tokens\":30}}\n\ndata: {\"usage\":{\"total_tokens\":99", false)
	h.Done() // reset before the end of the body
	wantMetric(t, fakes, "response_cost", 30)

	// A stream that saw nothing is charged default.
	h = bodyStream(t, p, fakes, "text/event-stream")
	h.Done()
	wantMetric(t, fakes, "response_usage_missing", 1)
	wantMetric(t, fakes, "response_cost", 80)
}

func TestEventStreamOverlongEventIsCounted(t *testing.T) {
	p, fakes := newNativePlugin(t, bodyLimits)
	h := bodyStream(t, p, fakes, "text/event-stream")
	deliver(fakes, h, "data: "+strings.Repeat("x", maxSSEEvent)+"\n\n", false)
	deliver(fakes, h, "data: {\"usage\":{\"total_tokens\":12}}\n\n", true)
	wantMetric(t, fakes, "response_event_too_large", 1)
	wantMetric(t, fakes, "response_cost", 12)
}

// Limits that do not read usage from the body cost the body callback
// nothing: it returns without reading the body.
func TestBodyIsNotReadWithoutAJSONLimit(t *testing.T) {
	for _, cfg := range []string{
		`{"limits":[{"name":"tokens","key":[],"limit":100,"window":"10s","cost_from_response":{"header":"x-tokens-used"}}]}`,
		`{"limits":[{"name":"tokens","key":[],"requests_per_second":10}]}`,
	} {
		p, fakes := newNativePlugin(t, cfg)
		h := bodyStream(t, p, fakes, "text/event-stream")
		if v := deliver(fakes, h, "data: {\"usage\":{\"total_tokens\":1}}\n\n", false); v != Continue {
			t.Fatalf("%v", v)
		}
		deliver(fakes, h, `{"usage":{"total_tokens":1}}`, true)
		h.Done()
		if fakes.Stream.BodyReads != 0 {
			t.Fatalf("%s: %d body reads", cfg, fakes.Stream.BodyReads)
		}
	}
}

func TestBodyCallbackWithoutScanDoesNotAllocate(t *testing.T) {
	h := &Stream{}
	if n := testing.AllocsPerRun(100, func() { h.ResponseBody(1<<20, false) }); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

// The body callback of a stream no limit reads usage for, and the
// parsers on a typical answer.
func BenchmarkResponseBodyWithoutScan(b *testing.B) {
	h := &Stream{}
	for b.Loop() {
		h.ResponseBody(16<<10, false)
	}
}

func BenchmarkJSONUsage(b *testing.B) {
	doc := []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("lorem ipsum ", 300) + `"}}],"usage":{"prompt_tokens":12,"completion_tokens":900,"total_tokens":912}}`)
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if n, _ := jsonUsage(doc, totalTokens); n != 912 {
			b.Fatal(n)
		}
	}
}

func BenchmarkSSEFramer(b *testing.B) {
	event := "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"delta\":{\"content\":\"lorem ipsum\"}}],\"usage\":null}\n\n"
	chunk := []byte(strings.Repeat(event, 100))
	var f sseFramer
	n := 0
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		f.feed(chunk, func(data []byte) {
			if _, fault := jsonUsage(data, totalTokens); fault == usageMissing {
				n++
			}
		})
	}
}
