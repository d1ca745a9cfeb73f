package filtertest

import (
	"strconv"
	"testing"
	"time"
)

// Deadline propagation: a request held by a delay reaches the upstream
// with grpc-timeout and x-envoy-upstream-rq-timeout-ms lowered by the time
// it was held, or is answered 504 (DEADLINE_EXCEEDED for gRPC) when that
// time is spent. Every case holds its request with one token per second
// and a delay: the first request passes at once, the second waits a second.

func init() { Cases = append(Cases, deadlineCases...) }

const deadlineConfig = `{"limits":[{"name":"shaped","key":[],"requests_per_second":1,"on_limit":{"action":"delay","max_delay":"2s"}}]}`

// held sends one request that takes the token, then req, which the delay
// holds, and returns req's response.
func held(t *testing.T, h Harness, req Request) Response {
	t.Helper()
	if resp := h.Do(t, get("/")); resp.Status != 200 || resp.Waited != 0 {
		t.Fatalf("first request: status %d after %v", resp.Status, resp.Waited)
	}
	resp := h.Do(t, req)
	if resp.Waited < 900*time.Millisecond {
		t.Fatalf("second request waited %v, want it held for about a second", resp.Waited)
	}
	return resp
}

var deadlineCases = []Case{
	{
		Name:    "a held request reaches the upstream with x-envoy-upstream-rq-timeout-ms lowered by the time held",
		Config:  deadlineConfig,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			resp := held(t, h, get("/").with("x-envoy-upstream-rq-timeout-ms", "5000"))
			if resp.Status != 200 || resp.Local {
				t.Fatalf("status %d local %v", resp.Status, resp.Local)
			}
			want := strconv.FormatInt(int64((5*time.Second-resp.Waited)/time.Millisecond), 10)
			if got := resp.UpstreamHeaders.Get("x-envoy-upstream-rq-timeout-ms"); got != want {
				t.Fatalf("upstream got x-envoy-upstream-rq-timeout-ms %q after %v held, want %s", got, resp.Waited, want)
			}
			wantCounter(t, h, "sluice.deadline.lowered", 1)
		},
	},
	{
		Name:    "a held request reaches the upstream with grpc-timeout lowered by the time held",
		Config:  deadlineConfig,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			resp := held(t, h, get("/").with("content-type", "application/grpc").with("grpc-timeout", "3S"))
			if resp.Status != 200 || resp.Local {
				t.Fatalf("status %d local %v", resp.Status, resp.Local)
			}
			// About 2s left: 2,000,000µs is the finest unit within 8 digits.
			want := strconv.FormatInt(int64((3*time.Second-resp.Waited)/time.Microsecond), 10) + "u"
			if got := resp.UpstreamHeaders.Get("grpc-timeout"); got != want {
				t.Fatalf("upstream got grpc-timeout %q after %v held, want %s", got, resp.Waited, want)
			}
		},
	},
	{
		Name:    "a request whose deadline passed while held is answered 504, or DEADLINE_EXCEEDED for gRPC",
		Config:  deadlineConfig,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			resp := held(t, h, get("/").with("x-envoy-upstream-rq-timeout-ms", "500"))
			if resp.Status != 504 || !resp.Local {
				t.Fatalf("status %d local %v, want a local 504", resp.Status, resp.Local)
			}
			h.Advance(t, 2*time.Second)
			resp = held(t, h, get("/").with("content-type", "application/grpc").with("grpc-timeout", "100m"))
			if resp.Status != 200 || !resp.Local || resp.Headers.Get("grpc-status") != "4" {
				t.Fatalf("gRPC: status %d local %v grpc-status %q, want a local trailers-only DEADLINE_EXCEEDED (4)",
					resp.Status, resp.Local, resp.Headers.Get("grpc-status"))
			}
			wantCounter(t, h, "sluice.deadline.exceeded", 2)
		},
	},
	{
		Name:    "an invalid grpc-timeout is counted and forwarded untouched; a request not held is never changed",
		Config:  deadlineConfig,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			resp := held(t, h, get("/").with("grpc-timeout", "10x"))
			if resp.Status != 200 || resp.UpstreamHeaders.Get("grpc-timeout") != "10x" {
				t.Fatalf("status %d, upstream grpc-timeout %q, want 200 and 10x untouched", resp.Status, resp.UpstreamHeaders.Get("grpc-timeout"))
			}
			wantCounter(t, h, "sluice.deadline.invalid", 1)
			h.Advance(t, 2*time.Second)
			resp = h.Do(t, get("/").with("x-envoy-upstream-rq-timeout-ms", "5000"))
			if resp.Waited != 0 || resp.UpstreamHeaders.Get("x-envoy-upstream-rq-timeout-ms") != "5000" {
				t.Fatalf("a request not held: waited %v, upstream timeout %q, want 5000 untouched",
					resp.Waited, resp.UpstreamHeaders.Get("x-envoy-upstream-rq-timeout-ms"))
			}
			wantCounter(t, h, "sluice.deadline.lowered", 0)
		},
	},
}
