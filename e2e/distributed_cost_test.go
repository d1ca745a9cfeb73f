package e2e_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/internal/fixtures/llm"
)

// TestDistributedCostFromResponse runs a global token budget over two
// instances and a real Redis: each response's reported cost is charged in
// Redis with the charge script, so the key goes into debt for every
// instance, and the instance that charged it also stops asking Redis.
func TestDistributedCostFromResponse(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		be := startDistBackend(t, p)
		// 100 per hour: nothing refills during the test.
		cfg := `{"limits":[{"name":"tokens","key":["header:x-key"],"limit":100,"window":"1h","mode":"global",
		  "failure_policy":"deny","cost_from_response":{"header":"x-tokens-used"}}],` +
			be.backendBlock(`"timeout":"500ms","retries":1`) + `}`
		insts := startDistInstances(t, 2, cfg, be.addr)
		key := uniqueKey("budget")
		send := func(in *distInstance, tokens string) (int, http.Header) {
			t.Helper()
			req, _ := http.NewRequest("GET", in.base+"/v1/chat", nil)
			req.Header.Set("x-key", key)
			if tokens != "" {
				req.Header.Set("Echo-Response-Header", "x-tokens-used: "+tokens)
			}
			resp, err := distClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, resp.Header
		}
		be.preloadScripts(t)
		// Charges are sent from the tick after the response: wait for
		// Redis to have run them.
		before := be.evalCalls(t)
		waitCalls := func(n int64) { t.Helper(); be.waitEvalCalls(t, before, n) }
		if st, _ := send(insts[0], "60"); st != 200 {
			t.Fatalf("first: %d", st)
		}
		waitCalls(2) // its decision and its charge
		// 40 left: admitted on one unit, then charged 59: 20 past empty.
		if st, _ := send(insts[1], "60"); st != 200 {
			t.Fatalf("second, on the other instance: %d", st)
		}
		waitCalls(4)
		st, h := send(insts[0], "")
		if st != 429 {
			t.Fatalf("in debt: %d", st)
		}
		// 21 units at 100 per hour: 756s.
		if ra, _ := strconv.Atoi(h.Get("retry-after")); ra < 750 || ra > 760 {
			t.Fatalf("retry-after %q, want about 756s", h.Get("retry-after"))
		}
		// The instance that charged the debt knows it: no Redis call.
		if st, _ := send(insts[1], ""); st != 429 {
			t.Fatalf("in debt on the charging instance: %d", st)
		}
		if got := be.evalCalls(t) - before; got != 5 {
			t.Fatalf("%d script calls, want 5 (2 decisions, 2 charges, 1 refusal)", got)
		}
		if got := insts[1].metric("sluice.backend.negative_cache_hits"); got != 1 {
			t.Fatalf("negative cache hits %d, want 1", got)
		}
		if got := sumMetric(insts, "sluice.limit.tokens.response_cost"); got != 120 {
			t.Fatalf("response_cost %d, want 120", got)
		}
	})
}

// TestDistributedUsageFromBody runs a global token budget over two
// instances, a real Redis and a real streaming LLM stand-in: one answer
// streams its usage in its last server-sent event, the other reports it
// in its JSON body. The stream reaches the client as the backend flushes
// it (the first event before the backend sends its usage), and each
// usage is charged in Redis once the body ends.
func TestDistributedUsageFromBody(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		// The backend sends a stream's usage event only once the client
		// has read the first event through the proxy.
		firstRead := make(chan struct{})
		backend := httptest.NewServer(llm.Handler(llm.Options{BeforeUsage: func(r *http.Request) bool {
			if r.Header.Get("x-wait-for-client") == "" {
				return true
			}
			select {
			case <-firstRead:
				return true
			case <-r.Context().Done():
				return false
			}
		}}))
		t.Cleanup(backend.Close)
		be := startDistBackend(t, p)
		// 1000 per hour: nothing refills during the test.
		cfg := `{"limits":[{"name":"tokens","key":["header:x-key"],"limit":1000,"window":"1h","mode":"global",
		  "failure_policy":"deny","cost_from_response":{"json":"usage.total_tokens"}}],` +
			be.backendBlock(`"timeout":"500ms","retries":1`) + `}`
		insts := startInstances(t, 2, func(wasm, _ string) string {
			return distYAML(wasm, cfg, backend.Listener.Addr().String(), be.addr)
		}, envoy.Options{})
		key := uniqueKey("usage")
		chat := func(in *distInstance, body string, wait bool) *http.Response {
			t.Helper()
			req, _ := http.NewRequest("POST", in.base+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("x-key", key)
			if wait {
				req.Header.Set("x-wait-for-client", "1")
			}
			resp, err := distClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { resp.Body.Close() })
			return resp
		}
		be.preloadScripts(t)
		before := be.evalCalls(t)

		resp := chat(insts[0], `{"max_tokens":600,"stream":true}`, true)
		if resp.StatusCode != 200 || resp.Header.Get("content-type") != "text/event-stream" {
			t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("content-type"))
		}
		events := bufio.NewReader(resp.Body)
		first, err := events.ReadString('\n')
		if err != nil || !strings.Contains(first, `"content":"part 0"`) {
			t.Fatalf("first event %q: %v", first, err)
		}
		close(firstRead) // only now does the backend send its usage
		rest, err := io.ReadAll(events)
		if err != nil || !strings.Contains(string(rest), `"total_tokens":600`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
			t.Fatalf("rest of the stream %q: %v", rest, err)
		}
		be.waitEvalCalls(t, before, 2) // its decision and its charge

		// 400 left: admitted on one unit, then charged 499: 100 past empty.
		resp = chat(insts[1], `{"max_tokens":500}`, false)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"total_tokens":500`) {
			t.Fatalf("JSON answer: %d %s", resp.StatusCode, body)
		}
		be.waitEvalCalls(t, before, 4)

		resp = chat(insts[0], `{"max_tokens":1}`, false)
		if resp.StatusCode != 429 {
			t.Fatalf("in debt: %d", resp.StatusCode)
		}
		// 101 units at 1000 per hour: 363.6s.
		if ra, _ := strconv.Atoi(resp.Header.Get("retry-after")); ra < 360 || ra > 368 {
			t.Fatalf("retry-after %q, want about 364s", resp.Header.Get("retry-after"))
		}
		if got := sumMetric(insts, "sluice.limit.tokens.response_cost"); got != 1100 {
			t.Fatalf("response_cost %d, want 1100", got)
		}
		if got := sumMetric(insts, "sluice.limit.tokens.response_usage_missing"); got != 0 {
			t.Fatalf("response_usage_missing %d", got)
		}
	})
}
