package filtertest

import (
	"os"
	"testing"
	"time"
)

// The response contract: reply_headers, body templates (the examples that
// reproduce seeds 002 and 004 byte for byte) and gRPC replies.
func init() { Cases = append(Cases, contractCases...) }

// exampleConfig reads examples/<name>/config.json. Both harnesses run one
// directory below the repository root (filter/ and e2e/).
func exampleConfig(name string) string {
	b, err := os.ReadFile("../examples/" + name + "/config.json")
	if err != nil {
		panic("filtertest: " + err.Error())
	}
	return string(b)
}

// seed002Router429 is seed 002's "Router 429" body, verbatim.
const seed002Router429 = `{
  "ok": false,
  "error": {
    "code": "rate_limit_exceeded",
    "message": "Rate limit exceeded for policy default",
    "details": {
      "scope": "policy",
      "policy_id": "default",
      "tenant_id": "tenant_123",
      "limit": 100,
      "window_seconds": 60,
      "retry_after_seconds": 30
    }
  }
}`

// seed004Gateway429 is seed 004's 429 body, verbatim.
const seed004Gateway429 = `{
  "ok": false,
  "error": {
    "code": "rate_limit_exceeded",
    "message": "Too many requests",
    "endpoint": "/api/v1/routes/decide",
    "retry_after_seconds": 1
  }
}`

func grpcCall(path string) Request {
	return Request{Method: "POST", Path: path, Host: "example.com",
		Headers: [][2]string{{"content-type", "application/grpc+proto"}, {"te", "trailers"}}}
}

var contractCases = []Case{
	{
		Name:    "example response-templates answers seed 002's Router 429 byte for byte, with its reply header",
		Config:  exampleConfig("response-templates"),
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			req := get("/api/v1/messages").with("x-tenant-id", "tenant_123")
			if got := admitted(t, h, 100, func(int) Request { return req }); got != 100 {
				t.Fatalf("admitted %d of the window's 100", got)
			}
			// Epoch starts a minute: 30s in, the window has 30s left.
			h.Advance(t, 30*time.Second)
			resp := h.Do(t, req)
			if resp.Status != 429 || !resp.Local {
				t.Fatalf("status %d, want a local 429", resp.Status)
			}
			if string(resp.Body) != seed002Router429 {
				t.Fatalf("body:\n%s\nwant:\n%s", resp.Body, seed002Router429)
			}
			if ct, ra, x := resp.Headers.Get("content-type"), resp.Headers.Get("retry-after"), resp.Headers.Get("x-envoy-ratelimited"); ct != "application/json" || ra != "30" || x != "true" {
				t.Fatalf("content-type %q retry-after %q x-envoy-ratelimited %q", ct, ra, x)
			}
			// An admitted response carries no reply header: it is not a
			// local reply.
			if resp := h.Do(t, get("/other")); resp.Status != 200 || resp.Headers.Get("x-envoy-ratelimited") != "" {
				t.Fatalf("allowed response: %d %v", resp.Status, resp.Headers)
			}
		},
	},
	{
		Name:    "example gateway-429 answers seed 004's 429 byte for byte",
		Config:  exampleConfig("gateway-429"),
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			req := Request{Method: "POST", Path: "/api/v1/routes/decide?x=1", Host: "example.com"}
			if got := admitted(t, h, 201, func(int) Request { return req }); got != 200 {
				t.Fatalf("admitted %d, want 200", got)
			}
			h.Advance(t, 10*time.Millisecond)
			resp := h.Do(t, req)
			if resp.Status != 429 || string(resp.Body) != seed004Gateway429 {
				t.Fatalf("status %d body:\n%s\nwant:\n%s", resp.Status, resp.Body, seed004Gateway429)
			}
		},
	},
	{
		Name: "template values are JSON-escaped, and other kinds keep the json body",
		Config: `{"limits":[{"name":"l","key":["header:x-t"],"requests_per_second":1}],
			"breakers":[{"name":"b","failure_threshold":1,"open_timeout":"10s"}],
			"response":{"body":"template","templates":{"rate_limited":"{\"t\": \"{header:x-t}\", \"route\": \"{route}\", \"s\": {status}}"}}}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			req := get("/").with("x-t", "a\"b\\c")
			h.Do(t, req)
			resp := h.Do(t, req)
			if want := `{"t": "a\"b\\c", "route": "default", "s": 429}`; resp.Status != 429 || string(resp.Body) != want {
				t.Fatalf("%d %s, want 429 %s", resp.Status, resp.Body, want)
			}
			h.Do(t, get("/").with("x-t", "other").status(503))
			resp = h.Do(t, get("/").with("x-t", "third"))
			if resp.Status != 503 || resp.Headers.Get("content-type") != "application/json" || len(resp.Body) == 0 || resp.Body[0] != '{' {
				t.Fatalf("circuit open without a template: %d %q %s", resp.Status, resp.Headers.Get("content-type"), resp.Body)
			}
		},
	},
	{
		Name: "an HTML template escapes its values for HTML, and {header:} gives the header's first value",
		Config: `{"limits":[{"name":"l","key":[],"requests_per_second":1}],
			"response":{"body":"template","templates":{"content_type":"text/html; charset=utf-8",
			"rate_limited":"<p title=\"{header:x-name}\">{header:x-name} ({limit})</p>"}}}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			h.Do(t, get("/"))
			resp := h.Do(t, get("/").with("x-name", `<script>"it's" & co</script>`).with("x-name", "second"))
			v := `&lt;script&gt;&#34;it&#39;s&#34; &amp; co&lt;/script&gt;`
			if want := `<p title="` + v + `">` + v + ` (l)</p>`; resp.Status != 429 || string(resp.Body) != want {
				t.Fatalf("%d %s, want 429 %s", resp.Status, resp.Body, want)
			}
			if ct := resp.Headers.Get("content-type"); ct != "text/html; charset=utf-8" {
				t.Fatalf("content-type %q", ct)
			}
		},
	},
	{
		Name: "gRPC requests get trailers-only replies: 8 for limits, 14 for an open circuit",
		Config: `{"limits":[{"name":"l","key":["path"],"match":{"path_prefix":"/svc.A"},"requests_per_second":1},{"name":"p","key":[],"match":{"path":"/plain"},"requests_per_second":1}],
			"concurrency":[{"name":"c","key":[],"match":{"path":"/slow"},"max_in_flight":1}],
			"breakers":[{"name":"b","match":{"path_prefix":"/svc.Broken"},"failure_threshold":1,"open_timeout":"10s"}],
			"response":{"reply_headers":{"x-envoy-ratelimited":"true"}}}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			h.Do(t, grpcCall("/svc.A/Get"))
			resp := h.Do(t, grpcCall("/svc.A/Get"))
			wantGRPC(t, resp, "8", "Too many requests")
			if resp.Headers.Get("x-envoy-ratelimited") != "true" {
				t.Fatalf("reply headers missing from the gRPC reply: %v", resp.Headers)
			}
			f, first := h.Start(t, grpcCall("/slow"))
			if f == nil {
				t.Fatalf("first /slow answered locally: %d", first.Status)
			}
			wantGRPC(t, h.Do(t, grpcCall("/slow")), "8", "Too many requests in flight")
			f.Finish(t)
			h.Do(t, grpcCall("/svc.Broken/Get").status(503))
			wantGRPC(t, h.Do(t, grpcCall("/svc.Broken/Get")), "14", "Service temporarily unavailable")
			// Plain HTTP requests still get plain replies.
			h.Do(t, get("/plain"))
			if resp := h.Do(t, get("/plain")); resp.Status != 429 || resp.Headers.Get("grpc-status") != "" {
				t.Fatalf("plain request: %d %v", resp.Status, resp.Headers)
			}
		},
	},
	{
		Name:    "response.grpc false answers gRPC requests as plain HTTP",
		Config:  `{"limits":[{"name":"l","key":[],"requests_per_second":1}],"response":{"grpc":false}}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			h.Do(t, grpcCall("/svc.A/Get"))
			if resp := h.Do(t, grpcCall("/svc.A/Get")); resp.Status != 429 || resp.Headers.Get("grpc-status") != "" {
				t.Fatalf("%d %v, want a plain 429", resp.Status, resp.Headers)
			}
		},
	},
}

func wantGRPC(t *testing.T, resp Response, status, message string) {
	t.Helper()
	if resp.Status != 200 || !resp.Local || len(resp.Body) != 0 {
		t.Fatalf("HTTP %d local %v body %q, want a local 200 without a body", resp.Status, resp.Local, resp.Body)
	}
	if got := resp.Headers.Get("grpc-status"); got != status {
		t.Fatalf("grpc-status %q, want %s (headers %v)", got, status, resp.Headers)
	}
	if got := resp.Headers.Get("grpc-message"); got != message {
		t.Fatalf("grpc-message %q, want %q", got, message)
	}
	if got := resp.Headers.Get("content-type"); got != "application/grpc" {
		t.Fatalf("content-type %q", got)
	}
}

func init() { Cases = append(Cases, metricCases...) }

var metricCases = []Case{
	{
		Name: "near_limit counts admissions leaving at most 20% of the capacity; capacity and refill gauges are set",
		Config: `{"limits":[{"name":"l","key":[],"limit":10,"window":"1m","algorithm":"fixed_window"},
			{"name":"tb","key":[],"requests_per_second":50,"burst":50,"match":{"path":"/tb"}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			// Remaining after each: 9..0; near at 2, 1, 0.
			if got := admitted(t, h, 10, func(int) Request { return get("/") }); got != 10 {
				t.Fatalf("admitted %d", got)
			}
			wantCounter(t, h, "sluice.limit.l.near_limit", 3)
			wantCounter(t, h, "sluice.limit.l.allowed", 10)
			if c, r := h.Gauge(t, "sluice.limit.l.capacity"), h.Gauge(t, "sluice.limit.tb.capacity"); c != 10 || r != 100 {
				t.Fatalf("capacity gauges %d and %d, want 10 and 100", c, r)
			}
			if r1, r2 := h.Gauge(t, "sluice.limit.l.refill_per_second"), h.Gauge(t, "sluice.limit.tb.refill_per_second"); r1 != 0 || r2 != 50 {
				t.Fatalf("refill gauges %d and %d, want 0 (10/min rounds down) and 50", r1, r2)
			}
		},
	},
	{
		Name:    "near_limit_ratio sets the share",
		Config:  `{"limits":[{"name":"l","key":[],"limit":10,"window":"1m","algorithm":"fixed_window"}],"response":{"near_limit_ratio":0.5}}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			admitted(t, h, 10, func(int) Request { return get("/") })
			wantCounter(t, h, "sluice.limit.l.near_limit", 6)
		},
	},
	{
		Name:    "a breaker per cluster has a state gauge per cluster",
		Config:  `{"breakers":[{"name":"b","failure_threshold":1,"open_timeout":"10s"}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			bad, good := get("/").status(503), get("/")
			bad.Cluster, good.Cluster = "flaky", "steady"
			h.Do(t, bad)
			h.Do(t, good)
			wantBreakerState(t, h, "b.flaky", 1)
			wantBreakerState(t, h, "b.steady", 0)
			if resp := h.Do(t, good); resp.Status != 200 {
				t.Fatalf("steady cluster answered %d", resp.Status)
			}
		},
	},
}
