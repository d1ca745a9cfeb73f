package e2e_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
	"github.com/sluice-proxy/sluice/internal/fixtures/llm"
)

// Cost taken from the response, end to end: charged in Redis across
// instances, read from answers that end with trailers, and the
// llm-token-budget example.

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

// TestResponseTrailersOfStreamedAnswers sends LLM answers whose usage is
// in the body through a limit charged from it, from a real upstream on
// 127.0.0.1 that ends some answers with trailers, as gRPC and HTTP/2 APIs
// do. As in Envoy, the filter then sees the last body chunk without
// end_of_stream and the trailers after it, so what filter/config/README.md
// documents holds: a JSON body followed by trailers is charged `default`
// (response_usage_missing), an event stream with trailers from the events
// seen; and the client gets the trailers after the body.
func TestResponseTrailersOfStreamedAnswers(t *testing.T) {
	answers := llm.Handler(llm.Options{})
	// x-trailers: yes has the upstream announce trailers and send them
	// after its (then chunked) body.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		trailers := r.Header.Get("x-trailers") == "yes"
		if trailers {
			w.Header().Set("Trailer", "Grpc-Status, X-Answer-Digest")
		}
		answers.ServeHTTP(w, r)
		if trailers {
			w.Header().Set("Grpc-Status", "0")
			w.Header().Set("X-Answer-Digest", "d41d8cd9")
		}
	}))
	t.Cleanup(up.Close)
	const limit = 10000
	cfg := `{"limits":[{"name":"tokens","key":["header:x-api-key"],"limit":10000,"window":"1h",
		"cost_from_response":{"json":"usage.total_tokens","default":1}}]}`
	in := startInstances(t, 1, func(wasm, _ string) string {
		return pluginYAML(wasm, cfg, up.Listener.Addr().String(), nil)
	}, envoy.Options{Concurrency: 1})[0]

	// ask sends one answer request for key and returns the response,
	// its body read to the end (so its trailers are in).
	ask := func(key, body string, trailers bool) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", in.base+"/v1/chat/completions", strings.NewReader(body))
		req.Header = http.Header{"X-Api-Key": {key}}
		if trailers {
			req.Header.Set("X-Trailers", "yes")
		}
		resp, err := distClient.Do(req)
		var b []byte
		if err == nil {
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	// charged is what the key's first answer was charged: a second
	// request reports what is left after its own unit. The bucket refills
	// 10000 an hour, so a second may pass and give back up to 3.
	charged := func(key string) int {
		t.Helper()
		resp, _ := ask(key, `{"max_tokens":1}`, false)
		left, err := strconv.Atoi(resp.Header.Get("x-ratelimit-remaining"))
		if resp.StatusCode != 200 || err != nil {
			t.Fatalf("%s: second request %d, remaining %q", key, resp.StatusCode, resp.Header.Get("x-ratelimit-remaining"))
		}
		return limit - 1 - left
	}
	within := func(got, want int) bool { return got <= want && got >= want-3 }

	for _, c := range []struct {
		name     string
		body     string
		tokens   int // what the answer reports
		trailers bool
		charge   int // documented
		missing  bool
	}{
		{name: "JSON, no trailers", body: `{"max_tokens":6000}`, tokens: 6000, charge: 6000},
		{name: "JSON then trailers", body: `{"max_tokens":6000}`, tokens: 6000, trailers: true, charge: 1, missing: true},
		{name: "event stream then trailers", body: `{"max_tokens":3000,"stream":true}`, tokens: 3000, trailers: true, charge: 3000},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := uniqueKey(strings.ReplaceAll(c.name, " ", "-"))
			missingBefore := in.metric("sluice.limit.tokens.response_usage_missing")
			resp, body := ask(key, c.body, c.trailers)
			if resp.StatusCode != 200 || !strings.Contains(body, `"total_tokens":`+strconv.Itoa(c.tokens)) {
				t.Fatalf("answer: %d %q", resp.StatusCode, body)
			}
			if c.trailers {
				if got := resp.Trailer.Get("Grpc-Status") + " " + resp.Trailer.Get("X-Answer-Digest"); got != "0 d41d8cd9" {
					t.Errorf("the client got trailers %v, want the upstream's grpc-status 0 and x-answer-digest", resp.Trailer)
				}
			} else if len(resp.Trailer) != 0 {
				t.Errorf("trailers %v on an answer without any", resp.Trailer)
			}
			if got := charged(key); !within(got, c.charge) {
				t.Errorf("charged %d, want %d", got, c.charge)
			}
			missing := in.metric("sluice.limit.tokens.response_usage_missing") - missingBefore
			if want := map[bool]uint64{true: 1}[c.missing]; missing != want {
				t.Errorf("response_usage_missing went up by %d, want %d", missing, want)
			}
		})
	}
}

// TestExampleLLMTokenBudget serves examples/llm-token-budget: the echo
// backend plays an LLM API that reports the tokens each answer used in a
// header, and the OpenAI-style stand-in one that reports them in its JSON
// body or its event stream.
func TestExampleLLMTokenBudget(t *testing.T) {
	llmServer := httptest.NewServer(llm.Handler(llm.Options{}))
	t.Cleanup(llmServer.Close)
	env := startExampleWith(t, "llm-token-budget", echo.Handler("llm-token-budget"),
		map[string]string{"llm": llmServer.Listener.Addr().String()})
	c := clientFrom("127.0.0.1")
	chat := func(key, tokens string) result {
		h := map[string]string{}
		if key != "" {
			h["x-api-key"] = key
		}
		if tokens != "" {
			h["Echo-Response-Header"] = "x-tokens-used: " + tokens
		}
		return env.send(t, c, "POST", "/v1/chat/completions", h)
	}
	remaining := func(r result) int {
		n, err := strconv.Atoi(r.header.Get("x-ratelimit-remaining"))
		if err != nil {
			t.Fatalf("x-ratelimit-remaining %q", r.header.Get("x-ratelimit-remaining"))
		}
		return n
	}
	// 10000 tokens a minute refill at about 167 a second, so the few
	// milliseconds between decision and charge can add one or two.
	r := chat("k1", "6000")
	if r.status != 200 || remaining(r) < 4000 || remaining(r) > 4010 {
		t.Fatalf("first answer used 6000: status %d, remaining %s; want about 4000", r.status, r.header.Get("x-ratelimit-remaining"))
	}
	// Admitted with about 4000 left; its 6000 leave the key about 2000 in debt.
	if r = chat("k1", "6000"); r.status != 200 || remaining(r) != 0 {
		t.Fatalf("second answer: status %d, remaining %s", r.status, r.header.Get("x-ratelimit-remaining"))
	}
	r = chat("k1", "")
	var body map[string]any
	if r.status != 429 || json.Unmarshal(r.body, &body) != nil || body["limit"] != "tokens-per-minute" {
		t.Fatalf("in debt: %d %s", r.status, r.body)
	}
	// About 2001 tokens at 10000/min: 12 seconds.
	if ra, _ := strconv.Atoi(r.header.Get("retry-after")); ra < 11 || ra > 13 {
		t.Fatalf("retry-after %q, want the ~12s it takes to repay the debt", r.header.Get("retry-after"))
	}
	if r = chat("k2", "10"); r.status != 200 {
		t.Fatalf("another key: %d", r.status)
	}
	if r = chat("", "10"); r.status != 429 {
		t.Fatalf("no API key: %d, want 429 (on_missing_key deny)", r.status)
	}

	embed := func(size string) result {
		return env.send(t, c, "POST", "/v1/embeddings", map[string]string{"x-api-key": "k1", "x-batch-size": size})
	}
	if r = embed("60"); r.status != 200 || remaining(r) > 40 {
		t.Fatalf("a batch of 60: %d, remaining %s", r.status, r.header.Get("x-ratelimit-remaining"))
	}
	if r = embed("60"); r.status != 429 {
		t.Fatalf("a second batch of 60 from about 40 left: %d", r.status)
	}
	for _, bad := range []string{"0", "101", "ten"} {
		body = nil
		if r = embed(bad); r.status != 400 || json.Unmarshal(r.body, &body) != nil || body["error"] != "invalid_cost" || body["limit"] != "embedding-inputs" {
			t.Fatalf("batch size %q: %d %s", bad, r.status, r.body)
		}
	}
	// Usage from the body, JSON or streamed.
	complete := func(body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", env.base+"/llm/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("x-api-key", "k3")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, b := complete(`{"max_tokens":6000}`); resp.StatusCode != 200 || !strings.Contains(b, `"total_tokens":6000`) {
		t.Fatalf("JSON answer: %d %s", resp.StatusCode, b)
	}
	resp, b := complete(`{"max_tokens":3000,"stream":true}`)
	if resp.StatusCode != 200 || resp.Header.Get("content-type") != "text/event-stream" ||
		!strings.Contains(b, `"total_tokens":3000`) || !strings.HasSuffix(b, "data: [DONE]\n\n") {
		t.Fatalf("streamed answer: %d %q", resp.StatusCode, b)
	}
	// About 1000 left: admitted on one unit, then about 4000 in debt.
	if resp, b = complete(`{"max_tokens":5000}`); resp.StatusCode != 200 {
		t.Fatalf("third answer: %d %s", resp.StatusCode, b)
	}
	if resp, b = complete(`{"max_tokens":1}`); resp.StatusCode != 429 || !strings.Contains(b, "llm-tokens-per-minute") {
		t.Fatalf("in debt: %d %s", resp.StatusCode, b)
	}
	prom := env.prometheus(t)
	if got := metric(t, prom, `sluice_limit_response_cost{sluice_limit="llm-tokens-per-minute"}`); got != 6000+3000+5000 {
		t.Fatalf("response_cost %v, want the 14000 tokens the bodies reported", got)
	}
	if got := metric(t, prom, `sluice_limit_response_usage_missing{sluice_limit="llm-tokens-per-minute"}`); got != 0 {
		t.Fatalf("response_usage_missing %v", got)
	}
	if got := metric(t, prom, `sluice_limit_response_cost{sluice_limit="tokens-per-minute"}`); got != 6000+6000+10 {
		t.Fatalf("response_cost %v, want the 12010 tokens the answers reported", got)
	}
	if got := metric(t, prom, `sluice_limit_invalid_cost{sluice_limit="embedding-inputs"}`); got != 3 {
		t.Fatalf("invalid_cost %v, want 3", got)
	}
}
