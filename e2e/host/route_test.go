package host

import (
	"context"
	"testing"
)

// pickRoute stands in for e2e/envoy's route table: x-pick names the
// cluster of route "picked", and a request without it takes route
// "default" to cluster "backend". It counts its calls.
type pickRoute struct{ calls int }

func (p *pickRoute) route(hs [][2]string) (string, string) {
	p.calls++
	for _, h := range hs {
		if h[0] == "x-pick" {
			return "picked", h[1]
		}
	}
	return "default", "backend"
}

// routeModule writes x-pick (unless write is empty) with the header map
// call write names, then logs xds.cluster_name and xds.route_name.
func routeModule(t *testing.T, write string) []byte {
	t.Helper()
	return watModule{
		imports: `(import "env" "proxy_replace_header_map_value" (func $replace (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_add_header_map_value" (func $add (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_remove_header_map_value" (func $remove (param i32 i32 i32) (result i32)))
  (import "env" "proxy_get_property" (func $prop (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_call_foreign_function" (func $foreign (param i32 i32 i32 i32 i32 i32) (result i32)))`,
		reqHdrs: write + `
	(drop (call $prop (i32.const 9300) (i32.const 16) (i32.const 9200) (i32.const 9204)))
	(call $say (i32.load (i32.const 9200)) (i32.load (i32.const 9204)))
	(drop (call $prop (i32.const 9320) (i32.const 14) (i32.const 9200) (i32.const 9204)))
	(call $say (i32.load (i32.const 9200)) (i32.load (i32.const 9204)))`,
		extra: `(data (i32.const 9300) "xds\00cluster_name")
  (data (i32.const 9320) "xds\00route_name")`,
	}.build(t)
}

// TestHeaderWriteReselectsTheRoute: after the wasm writes a request
// header (replace, add or remove) or calls the clear_route_cache foreign
// function, the route is selected again, as Envoy's Wasm filter clears
// the route cache then: both the
// properties the wasm reads next and the names the router gets come from
// the new headers. Without a write the names are the ones the request
// came with, and the route is not selected again.
func TestHeaderWriteReselectsTheRoute(t *testing.T) {
	cases := []struct {
		name, write            string
		initial                [][2]string
		wantRoute, wantCluster string
		wantSelections         int
	}{
		{"replace", `(drop (call $replace (i32.const 0) {{"x-pick"}} {{"tenant_b"}}))`, nil, "picked", "tenant_b", 1},
		{"add", `(drop (call $add (i32.const 0) {{"x-pick"}} {{"tenant_a"}}))`, nil, "picked", "tenant_a", 1},
		{"remove", `(drop (call $remove (i32.const 0) {{"x-pick"}}))`, [][2]string{{"x-pick", "tenant_a"}}, "default", "backend", 1},
		{"no write", ``, [][2]string{{"x-pick", "tenant_a"}}, "default", "backend", 0},
		// The names the request came with are stale until the cache is
		// cleared, here by the foreign function alone.
		{"clear_route_cache", `(if (call $foreign {{"clear_route_cache"}} (i32.const 0) (i32.const 0) (i32.const 9208) (i32.const 9212)) (then unreachable))`,
			[][2]string{{"x-pick", "tenant_a"}}, "picked", "tenant_a", 1},
		{"another foreign function", `(if (i32.ne (call $foreign {{"clear_all"}} (i32.const 0) (i32.const 0) (i32.const 9208) (i32.const 9212)) (i32.const 1)) (then unreachable))`,
			[][2]string{{"x-pick", "tenant_a"}}, "default", "backend", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, sink := newRT(t, "")
			p, err := loadPlugin(t, r, routeModule(t, tc.write))
			if err != nil {
				t.Fatal(err)
			}
			pr := &pickRoute{}
			req := getReq(0, "/")
			req.Headers = append(req.Headers, tc.initial...)
			// The names the request came with: those of the route chosen
			// before the filter ran.
			req.RouteName, req.ClusterName, req.Route = "default", "backend", pr.route
			rc := &recorder{}
			if _, err := p.Serve(context.Background(), req, rc.up); err != nil {
				t.Fatal(err)
			}
			if len(rc.reqs) != 1 {
				t.Fatalf("%d upstream requests", len(rc.reqs))
			}
			up := rc.reqs[0]
			if up.RouteName != tc.wantRoute || up.ClusterName != tc.wantCluster {
				t.Fatalf("router got route %q cluster %q, want %q %q", up.RouteName, up.ClusterName, tc.wantRoute, tc.wantCluster)
			}
			if got := sink.messages(); len(got) != 2 || got[0] != tc.wantCluster || got[1] != tc.wantRoute {
				t.Fatalf("the wasm read cluster and route %q, want [%s %s]", got, tc.wantCluster, tc.wantRoute)
			}
			if pr.calls != tc.wantSelections {
				t.Fatalf("route selected %d times, want %d", pr.calls, tc.wantSelections)
			}
		})
	}
}
