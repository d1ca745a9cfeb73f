package e2e_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/limiter"
)

// These tests send what a hostile client or a hostile backend can send
// (issue #13) through build/sluice.wasm in our Envoy stand-in, against a
// real redis-server behind real webdis or our Upstash-protocol server.

// hostileValue is about 40 KiB of characters Webdis needs percent-encoded
// (three bytes each): well within the 60 KiB of headers Envoy accepts,
// and over what Webdis accepts in a URL (about 80 KiB).
func hostileValue(tag string) string {
	return uniqueKey(tag) + strings.Repeat("!$&'()*+,;=:@", 40<<10/13)
}

// statuses sends n requests one after another and counts the statuses.
func statuses(t *testing.T, url, header, value string, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for range n {
		st, _ := hitWith(t, url, header, value)
		got[st]++
	}
	return got
}

// TestDistributedLongKeyIsLimited: a client whose key value (or path, for
// a per-path limit) is tens of KiB is limited exactly like any other,
// under failure_policy allow, in global and in hybrid mode: the value
// reaches Redis as a fixed-length digest, so no call fails.
func TestDistributedLongKeyIsLimited(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		be := startDistBackend(t, p)
		lim := func(name, match, key, mode string) string {
			return `{"name":"` + name + `","match":` + match + `,"key":["` + key + `"],"limit":5,"window":"1h","mode":"` + mode + `","failure_policy":"allow"}`
		}
		cfg := `{"limits":[` +
			lim("global", `{"path":"/global"}`, "header:x-key", "global") + "," +
			lim("hybrid", `{"path":"/hybrid"}`, "header:x-key", "hybrid") + "," +
			lim("perpath", `{"path_prefix":"/p/"}`, "path", "global") +
			`],` + be.backendBlock(`"timeout":"500ms","retries":1`) + `}`
		in := startDistInstances(t, 1, cfg, be.addr)[0]

		for _, path := range []string{"/global", "/hybrid"} {
			got := statuses(t, in.base+path, "x-key", hostileValue("long"), 10)
			if got[200] != 5 || got[429] != 5 {
				t.Errorf("%s with a %d-byte key value: statuses %v, want 5 × 200 and 5 × 429 like any client", path, len(hostileValue("")), got)
			}
		}
		longPath := "/p/" + hostileValue("path")
		got := statuses(t, in.base+longPath, "x-key", "anyone", 10)
		if got[200] != 5 || got[429] != 5 {
			t.Errorf("a %d-byte path on a per-path limit: statuses %v, want 5 × 200 and 5 × 429", len(longPath), got)
		}
		if n := in.metric("sluice.backend.fallback.allow"); n != 0 {
			t.Errorf("%d requests fell back to failure_policy allow on a healthy backend", n)
		}
	})
}

// refusingFront is the HTTP front of be that answers 400 to every call
// that holds one of refused (a Redis key or a key value), as a front
// with a smaller URL or body limit than the call would; every other call
// reaches be unchanged.
func refusingFront(t *testing.T, be *distBackend, refused ...string) string {
	t.Helper()
	target, _ := url.Parse("http://" + be.addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		for _, s := range refused {
			if strings.Contains(r.URL.Path, s) || bytes.Contains(body, []byte(s)) {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// TestDistributedRefusedCallsKeepBreakerClosed: a client whose calls the
// backend refuses with 400 gets its limit's failure policy, and no more:
// backend.breaker stays closed, so another client's limit keeps being
// decided by Redis.
func TestDistributedRefusedCallsKeepBreakerClosed(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		be := startDistBackend(t, p)
		mallory, bob := uniqueKey("mallory"), uniqueKey("bob")
		// The value itself too: before keys were digests it was in the call.
		front := refusingFront(t, be, backend.Key("api", limiter.TokenBucket, mallory), mallory)
		cfg := `{"limits":[{"name":"api","key":["header:x-key"],"limit":5,"window":"1h","mode":"global","failure_policy":"allow"}],` +
			be.backendBlock(`"timeout":"500ms","retries":1,"breaker":{"failure_threshold":3,"window":"10s","open_timeout":"1s","half_open_max_requests":1}`) + `}`
		in := startDistInstances(t, 1, cfg, front)[0]

		if got := statuses(t, in.base+"/", "x-key", mallory, 20); got[200] != 20 {
			t.Fatalf("mallory's refused calls: statuses %v, want 20 × 200 (failure_policy allow)", got)
		}
		if got := statuses(t, in.base+"/", "x-key", bob, 10); got[200] != 5 || got[429] != 5 {
			t.Fatalf("bob after mallory: statuses %v, want his limit's 5 × 200 and 5 × 429", got)
		}
		if n := in.metric("sluice.backend.breaker.opens"); n != 0 {
			t.Fatalf("one client's refused calls opened the backend breaker %d times", n)
		}
		if n := in.metric("sluice.backend.errors.request"); n != 20 {
			t.Fatalf("errors.request = %d, want one per refused call (20)", n)
		}
	})
}

// TestDistributedBinaryKeyOwnBucket: a key value that is not valid UTF-8
// and the plain text that used to name its bucket ("h:" and its hash)
// have separate buckets in Redis.
func TestDistributedBinaryKeyOwnBucket(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		be := startDistBackend(t, p)
		cfg := `{"limits":[{"name":"bin","key":["header:x-key"],"limit":1,"window":"1h","mode":"global","failure_policy":"deny"}],` +
			be.backendBlock(`"timeout":"500ms","retries":1`) + `}`
		in := startDistInstances(t, 1, cfg, be.addr)[0]
		binary := "\xff\xfe" + uniqueKey("bin")
		h := strconv.FormatUint(limiter.Hash(0, binary), 16)
		plain := "h:" + strings.Repeat("0", 16-len(h)) + h // the filter's old name for binary's bucket
		for _, k := range []string{binary, plain} {
			if got := statuses(t, in.base+"/", "x-key", k, 2); got[200] != 1 || got[429] != 1 {
				t.Fatalf("key %q: statuses %v, want its own bucket's one token, then 429", k, got)
			}
		}
		c := be.redis.Client()
		for _, k := range []string{binary, plain} {
			if n, err := c.Exists(context.Background(), backend.Key("bin", limiter.TokenBucket, k)).Result(); err != nil || n != 1 {
				t.Fatalf("Redis bucket %s of %q: exists %d, %v", backend.Key("bin", limiter.TokenBucket, k), k, n, err)
			}
		}
	})
}

// TestDistributedOversizeReplyDenied: a backend that answers a valid
// granting decision padded with whitespace past the 64 KiB read limit and
// then garbage is malformed: under failure_policy deny the request is
// rejected, not admitted by the part that would parse.
func TestDistributedOversizeReplyDenied(t *testing.T) {
	for _, p := range []distProtocol{viaWebdis, viaUpstash} {
		t.Run(string(p), func(t *testing.T) {
			reply := `{"EVALSHA":[1,9,0,1000,0,1]}`
			if p == viaUpstash {
				reply = `{"result":[1,9,0,1000,0,1]}`
			}
			body := reply + strings.Repeat(" ", 64<<10-len(reply)) + strings.Repeat("garbage", 100)
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, body)
			}))
			t.Cleanup(ts.Close)
			be := &distBackend{protocol: p}
			cfg := `{"limits":[{"name":"api","key":["header:x-key"],"limit":100,"window":"1h","mode":"global","failure_policy":"deny"}],` +
				be.backendBlock(`"timeout":"500ms","retries":1,"failure_status":503`) + `}`
			in := startDistInstances(t, 1, cfg, ts.Listener.Addr().String())[0]
			if got := statuses(t, in.base+"/", "x-key", "alice", 3); got[503] != 3 {
				t.Fatalf("statuses %v, want 3 × 503: the reply is malformed", got)
			}
			if n := in.metric("sluice.backend.errors.malformed"); n != 3 {
				t.Fatalf("errors.malformed = %d, want 3", n)
			}
		})
	}
}
