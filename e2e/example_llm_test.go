package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
	"github.com/sluice-proxy/sluice/internal/fixtures/llm"
)

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
