package envoy

import (
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

func testListener(t *testing.T, useRemote bool) *listener {
	t.Helper()
	cfg, err := Load([]byte(routerOnly{aPort: "1", bPort: "2", downPort: "3", useRemote: useRemote}.yaml()))
	if err != nil {
		t.Fatal(err)
	}
	return &listener{cfg: cfg.Listeners[0]}
}

// TestRequestView checks what the host (and so the wasm properties) sees:
// pseudo headers, the downstream address Envoy would report, and the route.
func TestRequestView(t *testing.T) {
	tests := []struct {
		name       string
		useRemote  bool
		xff        string
		wantSource string
	}{
		{"connection address without XFF", false, "", "192.0.2.1:1234"},
		{"last XFF entry when use_remote_address is false", false, "10.0.0.1, 198.51.100.9", "198.51.100.9:0"},
		{"garbage XFF falls back to the connection", false, "not-an-ip", "192.0.2.1:1234"},
		{"connection address when use_remote_address is true", true, "198.51.100.9", "192.0.2.1:1234"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := testListener(t, tc.useRemote)
			r := httptest.NewRequest("GET", "/delay/1s?x=y", nil)
			r.Host = "svc.local:8080"
			r.RemoteAddr = "192.0.2.1:1234"
			if tc.xff != "" {
				r.Header.Set("X-Forwarded-For", tc.xff)
			}
			req := l.request(r, 1, nil)
			if req.SourceAddress != tc.wantSource {
				t.Errorf("SourceAddress = %q, want %q", req.SourceAddress, tc.wantSource)
			}
			if req.Worker != 1 || req.RouteName != "slow" || req.ClusterName != "a" {
				t.Errorf("worker/route/cluster = %d/%q/%q, want 1/slow/a", req.Worker, req.RouteName, req.ClusterName)
			}
			for k, want := range map[string]string{":authority": "svc.local:8080", ":path": "/delay/1s?x=y", ":method": "GET", ":scheme": "http"} {
				if got := headerValue(req.Headers, k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if req.RequestID == "" || headerValue(req.Headers, "x-request-id") != req.RequestID {
				t.Errorf("request id %q vs header %q", req.RequestID, headerValue(req.Headers, "x-request-id"))
			}
		})
	}
}

func TestVirtualHostSelection(t *testing.T) {
	l := &listener{cfg: &Listener{VirtualHosts: []*VirtualHost{
		{Name: "any", Domains: []string{"*"}},
		{Name: "suffix", Domains: []string{"*.example.com"}},
		{Name: "longer-suffix", Domains: []string{"*.api.example.com"}},
		{Name: "prefix", Domains: []string{"example.*"}},
		{Name: "exact", Domains: []string{"www.example.com"}},
	}}}
	for authority, want := range map[string]string{
		"www.example.com":   "exact",
		"a.example.com":     "suffix",
		"x.api.example.com": "longer-suffix",
		"example.org":       "prefix",
		"other":             "any",
		"example.com:80":    "prefix",
	} {
		vh := l.virtualHost(authority)
		if vh == nil || vh.Name != want {
			t.Errorf("%s → %v, want %s", authority, vh, want)
		}
	}
}

// TestCaller checks the cluster table as proxy_http_call sees it.
func TestCaller(t *testing.T) {
	ts := httptest.NewServer(echo.Handler("webdis"))
	defer ts.Close()
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	cm := newClusterManager([]*Cluster{
		{Name: "webdis", Type: "STATIC", ConnectTimeout: time.Second, Network: "tcp", Endpoints: []string{"127.0.0.1:" + port}},
		{Name: "down", Type: "STATIC", ConnectTimeout: time.Second, Network: "tcp", Endpoints: []string{testkit.ClosedAddr(t)}},
	})
	defer cm.close()
	if !cm.HasCluster("webdis") || cm.HasCluster("nope") {
		t.Fatal("HasCluster disagrees with the table")
	}
	hdrs := [][2]string{{":method", "POST"}, {":path", "/INCR/k?x=1"}, {":authority", "webdis"}, {"x-a", "1"}}
	resp, err := cm.Call(context.Background(), "webdis", hdrs, []byte("b"), nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep echo.Reply
	if err := json.Unmarshal(resp.Body, &rep); err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || rep.Method != "POST" || rep.Path != "/INCR/k?x=1" || rep.Host != "webdis" || rep.Body != "b" || rep.Headers["x-a"][0] != "1" {
		t.Errorf("call = %d %+v", resp.Status, rep)
	}
	if _, ok := rep.Headers["user-agent"]; ok {
		t.Errorf("a user-agent was invented: %v", rep.Headers["user-agent"])
	}
	if _, err := cm.Call(context.Background(), "webdis", [][2]string{{":method", "GET"}, {":path", "/delay/10s"}, {":authority", "w"}}, nil, nil, 50*time.Millisecond); err == nil {
		t.Error("timeout not honoured")
	}
	if _, err := cm.Call(context.Background(), "down", hdrs, nil, nil, time.Second); err == nil {
		t.Error("connection refused gave no error")
	}
	if _, err := cm.Call(context.Background(), "nope", hdrs, nil, nil, time.Second); err == nil {
		t.Error("unknown cluster gave no error")
	}
}

// TestGrpcEndpoint checks the endpoints gRPC callouts go to: each of the
// cluster's in turn, and none for an unknown cluster.
func TestGrpcEndpoint(t *testing.T) {
	cm := newClusterManager([]*Cluster{{Name: "limits", Type: "STATIC", Network: "tcp", Endpoints: []string{"127.0.0.1:1", "127.0.0.1:2"}}})
	defer cm.close()
	var got []string
	for range 3 {
		network, addr, ok := cm.GrpcEndpoint("limits")
		if !ok || network != "tcp" {
			t.Fatalf("GrpcEndpoint = %q %q %v", network, addr, ok)
		}
		got = append(got, addr)
	}
	if strings.Join(got, " ") != "127.0.0.1:1 127.0.0.1:2 127.0.0.1:1" {
		t.Errorf("endpoints in turn = %v", got)
	}
	if _, _, ok := cm.GrpcEndpoint("nope"); ok {
		t.Error("an unknown cluster has an endpoint")
	}
}
