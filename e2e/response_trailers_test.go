package e2e_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/internal/fixtures/llm"
)

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
