package echo

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHandler(t *testing.T) {
	ts := httptest.NewServer(Handler("one"))
	defer ts.Close()
	tests := []struct {
		method, path, body string
		status             int
		echoed             bool
	}{
		{"GET", "/anything?q=1", "", 200, true},
		{"POST", "/post", "data", 200, true},
		{"GET", "/status/429", "", 429, true},
		{"GET", "/status/204", "", 204, false},
		{"GET", "/status/abc", "", 400, false},
		{"GET", "/status/99", "", 400, false},
		{"GET", "/delay/1ms", "", 200, true},
		{"GET", "/delay/0.001", "", 200, true},
		{"GET", "/delay/-1s", "", 400, false},
		{"GET", "/delay/1h", "", 400, false},
		{"GET", "/delay/soon", "", 400, false},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set("X-Test", "v")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
			continue
		}
		if !tc.echoed {
			continue
		}
		var r Reply
		if err := json.Unmarshal(b, &r); err != nil {
			t.Errorf("%s: %v (%q)", tc.path, err, b)
			continue
		}
		if r.Name != "one" || r.Method != tc.method || r.Path != tc.path || r.Body != tc.body || r.Headers["x-test"][0] != "v" {
			t.Errorf("%s: echo %+v", tc.path, r)
		}
	}
}

func TestEchoResponseHeader(t *testing.T) {
	ts := httptest.NewServer(Handler("one"))
	defer ts.Close()
	req, _ := http.NewRequest("GET", ts.URL+"/v1/chat", nil)
	req.Header.Add("Echo-Response-Header", "X-Tokens-Used: 250")
	req.Header.Add("Echo-Response-Header", "x-other:a:b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Tokens-Used") != "250" || resp.Header.Get("X-Other") != "a:b" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	for _, bad := range []string{"no colon", ": value", "two words: x"} {
		req, _ := http.NewRequest("GET", ts.URL+"/", nil)
		req.Header.Set("Echo-Response-Header", bad)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("Echo-Response-Header %q: status %d, want 400", bad, resp.StatusCode)
		}
	}
}

// TestDelayStopsWhenClientLeaves makes sure an abandoned /delay does not
// pin the handler for its whole duration.
func TestDelayStopsWhenClientLeaves(t *testing.T) {
	done := make(chan struct{})
	h := Handler("x")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		close(done)
	}))
	defer ts.Close()
	client := &http.Client{Timeout: 50 * time.Millisecond}
	if _, err := client.Get(ts.URL + "/delay/5m"); err == nil {
		t.Fatal("expected a client timeout")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("handler still waiting after the client left")
	}
}
