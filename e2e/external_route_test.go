package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/internal/fixtures/bootstrap"
	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
	"github.com/sluice-proxy/sluice/internal/fixtures/limits"
)

// routeYAML serves the wasm with a route that takes its cluster from
// x-sluice-backend when the header is there (Envoy selects the route
// again after the filter writes it) and the default backend otherwise.
// evil is a real cluster too, so only allowed_routes keeps traffic off
// it.
func routeYAML(wasm, pluginJSON, backendAddr string, clusters map[string]string) string {
	b := bootstrap.Bootstrap{
		Listener: bootstrap.Listener{
			Name:            "ingress",
			RouteConfigName: "local_route",
			VirtualHosts: []bootstrap.VirtualHost{{Name: "backend", Domains: []string{"*"}, Routes: []bootstrap.Route{
				{Name: "tenant", Match: `prefix: "/", headers: [{name: x-sluice-backend, present_match: true}]`, Action: "cluster_header: x-sluice-backend, timeout: 15s"},
				{Name: "default", Match: `prefix: "/"`, Action: "cluster: backend, timeout: 15s"},
			}}},
			HTTPFilters: []string{bootstrap.Wasm{Code: wasm, Configuration: pluginJSON}.Filter()},
		},
		Clusters: []bootstrap.Cluster{{Name: "backend", Type: "STATIC", ConnectTimeout: time.Second, Endpoints: []string{backendAddr}}},
	}
	for _, name := range []string{"backend_a", "backend_b", "evil", "limits"} {
		b.Clusters = append(b.Clusters, bootstrap.Cluster{Name: name, Type: "STATIC", ConnectTimeout: 250 * time.Millisecond, Endpoints: []string{clusters[name]}})
	}
	return b.YAML()
}

func namedBackend(t *testing.T, name string) string {
	t.Helper()
	ts := httptest.NewServer(echo.Handler(name))
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// TestExternalBackendURLRoutesTenants: the limits service's backend_url
// sends acme to backend_a and initech to backend_b, two real servers on
// 127.0.0.1; mallory's answer names a cluster that exists but is not
// allowed, and mallory stays on the default route; a client cannot route
// itself with its own x-sluice-backend. On the wasm in our host, two
// workers.
func TestExternalBackendURLRoutesTenants(t *testing.T) {
	svc := limits.New(map[string]limits.Plan{"plan": {Limit: 1000, Window: "1h"}},
		map[string]string{"acme": "plan", "initech": "plan", "mallory": "plan", "plain": "plan"}, "")
	svc.SetRoute("acme", "backend_a")
	svc.SetRoute("initech", "backend_b")
	svc.SetRoute("mallory", "evil")
	lf := startLimits(t, svc)
	clusters := map[string]string{
		"backend_a": namedBackend(t, "a"), "backend_b": namedBackend(t, "b"), "evil": namedBackend(t, "evil"), "limits": lf.addr,
	}
	pluginJSON := `{"external":{"cluster":"limits","timeout":"2s","forward_headers":["x-tenant-id"],` +
		`"route_header":"x-sluice-backend","allowed_routes":["backend_a","backend_b"],` +
		`"fallback":{"limit":1000,"window":"1h","key":["header:x-tenant-id"]}}}`
	insts := startInstances(t, 1, func(wasm, backendAddr string) string {
		return routeYAML(wasm, pluginJSON, backendAddr, clusters)
	}, envoy.Options{})
	clients := []*http.Client{oneConn(), oneConn()} // one per worker

	send := func(c *http.Client, tenant, clientRoute string) echo.Reply {
		t.Helper()
		req, err := http.NewRequest("GET", insts[0].base+"/orders", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("x-tenant-id", tenant)
		if clientRoute != "" {
			req.Header.Add("x-sluice-backend", clientRoute)
			req.Header.Add("x-sluice-backend", clientRoute)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d %s", tenant, resp.StatusCode, b)
		}
		var r echo.Reply
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v in %s", tenant, err, b)
		}
		return r
	}
	cases := []struct {
		tenant, clientRoute string
		backend             string
		header              []string
	}{
		{"acme", "", "a", []string{"backend_a"}},
		{"initech", "", "b", []string{"backend_b"}},
		{"acme", "backend_b", "a", []string{"backend_a"}}, // the client's value is overwritten
		{"mallory", "", "backend", nil},                   // evil exists but is not allowed
		{"plain", "", "backend", nil},                     // no backend_url: the default route
		{"plain", "evil", "backend", nil},                 // the client's value is removed
		{"mallory", "backend_b", "backend", nil},
	}
	for round := range 2 { // the second round is served from the cache
		for i, tc := range cases {
			r := send(clients[(round+i)%2], tc.tenant, tc.clientRoute)
			if r.Name != tc.backend {
				t.Errorf("round %d: %s (client route %q) served by %q, want %q", round, tc.tenant, tc.clientRoute, r.Name, tc.backend)
			}
			if got := r.Headers["x-sluice-backend"]; len(got) != len(tc.header) || len(got) > 0 && got[0] != tc.header[0] {
				t.Errorf("round %d: %s upstream x-sluice-backend %q, want %q", round, tc.tenant, got, tc.header)
			}
		}
	}
	// Every tenant was looked up once, the rest came from the shared
	// cache, and mallory's one answer was counted.
	for _, tenant := range []string{"acme", "initech", "mallory", "plain"} {
		if n := svc.Count(tenant); n != 1 {
			t.Errorf("%d lookups for %s, want 1", n, tenant)
		}
	}
	if n := insts[0].metric("sluice.external.routes_disallowed"); n != 1 {
		t.Errorf("routes_disallowed %d, want 1 (mallory's answer)", n)
	}
}
