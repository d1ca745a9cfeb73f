package engine

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
)

func TestRetryAfterSeconds(t *testing.T) {
	for _, tt := range []struct {
		in   time.Duration
		want int64
	}{
		{0, 1}, {time.Nanosecond, 1}, {time.Second, 1}, {time.Second + 1, 2}, {1500 * time.Millisecond, 2}, {30 * time.Second, 30},
	} {
		if got := retryAfterSeconds(tt.in); got != tt.want {
			t.Errorf("retryAfterSeconds(%v) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestRateLimitHeaders(t *testing.T) {
	now := time.Unix(1700000000, 250_000_000)
	q := quota{name: "api-per-ip", limit: 100, window: time.Second, remaining: 0, retryAfter: 10 * time.Millisecond, resetAfter: 1200 * time.Millisecond}
	got, _ := appendRateLimitHeaders(nil, nil, config.AllHeaderFamilies, q, now, true)
	want := [][2]string{
		{"retry-after", "1"},
		{"x-ratelimit-limit", "100"},
		{"x-ratelimit-remaining", "0"},
		{"x-ratelimit-reset", "1700000002"}, // 1700000001.45 rounded up
		{"ratelimit-policy", `"api-per-ip";q=100;w=1`},
		{"ratelimit", `"api-per-ip";r=0;t=2`},
	}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("header %d = %q, want %q", i, got[i], want[i])
		}
	}
	allowed, _ := appendRateLimitHeaders(nil, nil, config.AllHeaderFamilies, q, now, false)
	for _, h := range allowed {
		if h[0] == "retry-after" {
			t.Fatal("retry-after on an allowed response")
		}
	}
	if hs, _ := appendRateLimitHeaders(nil, nil, config.HeadersXRateLimit, q, now, true); len(hs) != 3 {
		t.Fatalf("x-ratelimit family alone gave %d headers, want 3", len(hs))
	}
	if hs, _ := appendRateLimitHeaders(nil, nil, 0, q, now, true); len(hs) != 0 {
		t.Fatalf("no families gave %d headers", len(hs))
	}
}

func TestBodies(t *testing.T) {
	ct, body := rateLimitedBody(config.BodyJSON, "api", 429, 1500*time.Millisecond)
	if ct != "application/json" || string(body) != `{"error":"rate_limited","message":"Too many requests","limit":"api","retry_after":2}` {
		t.Fatalf("json rate-limited body: %s %s", ct, body)
	}
	ct, body = circuitOpenBody(config.BodyJSON, "outbound|80||svc\"x", 503, 30*time.Second)
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil || ct != "application/json" {
		t.Fatalf("circuit body not JSON: %v %s", err, body)
	}
	if m["error"] != "circuit_open" || m["upstream"] != "outbound|80||svc\"x" || m["retry_after"] != 30.0 {
		t.Fatalf("circuit body fields: %v", m)
	}
	ct, body = rateLimitedBody(config.BodyProblemJSON, "api", 429, time.Second)
	if err := json.Unmarshal(body, &m); err != nil || ct != "application/problem+json" {
		t.Fatalf("problem body: %v %s %s", err, ct, body)
	}
	if m["type"] != problemQuotaExceeded || m["status"] != 429.0 {
		t.Fatalf("problem fields: %v", m)
	}
	ct, body = circuitOpenBody(config.BodyProblemJSON, "backend", 503, time.Second)
	if err := json.Unmarshal(body, &m); err != nil || m["type"] != problemReducedCapacity || ct != "application/problem+json" {
		t.Fatalf("problem circuit body: %v %s", err, body)
	}
	if ct, body := rateLimitedBody(config.BodyNone, "api", 429, time.Second); ct != "" || body != nil {
		t.Fatal("body none must be empty")
	}
	ct, body = concurrencyLimitedBody(config.BodyJSON, "search", 503)
	if ct != "application/json" || string(body) != `{"error":"concurrency_limited","message":"Too many concurrent requests","limit":"search"}` {
		t.Fatalf("json concurrency body: %s %s", ct, body)
	}
	if ct, body := concurrencyLimitedBody(config.BodyNone, "search", 503); ct != "" || body != nil {
		t.Fatal("body none must be empty")
	}
}

func TestAppendJSONStringAlwaysValid(t *testing.T) {
	for _, s := range []string{"", "plain", "quote\"back\\slash", "ctl\x00\x1f", "bad\xffutf8", "ünïcödé"} {
		var out string
		if err := json.Unmarshal(appendJSONString(nil, s), &out); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
	}
}

func TestRateLimitHeadersAllocationFree(t *testing.T) {
	q := quota{name: "api", limit: 100, window: time.Second, remaining: 7, resetAfter: time.Second}
	now := time.Unix(1700000000, 0)
	dst, buf := appendRateLimitHeaders(nil, nil, config.AllHeaderFamilies, q, now, true)
	allocs := testing.AllocsPerRun(100, func() {
		dst, buf = appendRateLimitHeaders(dst[:0], buf, config.AllHeaderFamilies, q, now, true)
	})
	if allocs != 0 {
		t.Fatalf("rendering headers into a grown buffer allocated %.0f times", allocs)
	}
	if dst[1] != [2]string{"x-ratelimit-limit", "100"} || dst[5] != [2]string{"ratelimit", `"api";r=7;t=1`} {
		t.Fatalf("headers %q", dst)
	}
}

func TestAppendIntMatchesStrconv(t *testing.T) {
	vals := []int64{0, 1, -1, 9, 10, 99, 100, 1795305600, math.MaxInt64, math.MinInt64, math.MinInt64 + 1}
	for v := int64(-1000); v < 1000; v += 7 {
		vals = append(vals, v)
	}
	for _, v := range vals {
		if got, want := string(appendInt([]byte("x"), v)), "x"+strconv.FormatInt(v, 10); got != want {
			t.Errorf("appendInt(%d) = %q, want %q", v, got, want)
		}
	}
}

// The values rendered at configure time are exactly the per-request ones,
// and a decision at another rate (an override's) renders its own: a stale
// constant would advertise the wrong quota.
func TestRateLimitHeadersFromConstants(t *testing.T) {
	now := time.Unix(1700000000, 250_000_000)
	consts := renderQuotaConsts("api-per-ip", 100, time.Second)
	for _, q := range []quota{
		{name: "api-per-ip", limit: 100, window: time.Second, remaining: 7, retryAfter: time.Second, resetAfter: 1200 * time.Millisecond},
		{name: "api-per-ip", limit: 5, window: time.Second, remaining: 3, resetAfter: 200 * time.Millisecond},
		{name: "api-per-ip", limit: 100, window: time.Minute, remaining: 99, resetAfter: 600 * time.Millisecond},
	} {
		want, _ := appendRateLimitHeaders(nil, nil, config.AllHeaderFamilies, q, now, true)
		q.consts = consts
		got, _ := appendRateLimitHeaders(nil, nil, config.AllHeaderFamilies, q, now, true)
		if len(got) != len(want) {
			t.Fatalf("limit %d per %v: got %q, want %q", q.limit, q.window, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("limit %d per %v: header %d = %q, want %q", q.limit, q.window, i, got[i], want[i])
			}
		}
	}
}
