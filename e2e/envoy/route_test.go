package envoy

import (
	"net/http/httptest"
	"testing"
)

// TestServeClusterHeader: route.cluster_header sends a request to the
// cluster its header names; a header match chooses between routes; a
// missing header or an unknown cluster is the router's 503 with an empty
// body, or cluster_not_found_response_code.
func TestServeClusterHeader(t *testing.T) {
	env := startEnv(t, routerOnly{}, 1)
	tests := []struct {
		name, path string
		hdr        map[string]string
		status     int
		backend    string
	}{
		{"header names cluster b", "/pick", map[string]string{"X-Pick": "b"}, 200, "b"},
		{"header names cluster a", "/pick/x", map[string]string{"X-Pick": "a"}, 200, "a"},
		{"no header: the next route", "/pick", nil, 200, "a"},
		{"cluster names are case sensitive", "/pick", map[string]string{"X-Pick": "B"}, 503, ""},
		{"missing header", "/nc", nil, 503, ""},
		{"unknown cluster", "/nc", map[string]string{"X-Pick": "nope"}, 503, ""},
		{"cluster_not_found_response_code", "/nf", map[string]string{"X-Pick": "nope"}, 404, ""},
		{"string_match exact", "/env", map[string]string{"X-Env": "canary"}, 200, "b"},
		{"string_match exact, inverted", "/env", map[string]string{"X-Env": "stable"}, 200, "a"},
		{"a missing header matches no string_match, inverted or not", "/env", nil, 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, nil, "GET", env.base+tc.path, tc.hdr, "")
			if r.status != tc.status {
				t.Fatalf("status %d, want %d (body %q)", r.status, tc.status, r.body)
			}
			if tc.backend != "" && r.echo.Name != tc.backend {
				t.Fatalf("served by %q, want %q", r.echo.Name, tc.backend)
			}
			if tc.status != 200 && r.body != "" {
				t.Fatalf("body %q, want the router's empty local reply", r.body)
			}
		})
	}
}

// TestRouteNamesFollowTheHeaders: the names the host reports for
// xds.route_name and xds.cluster_name come from the route the headers
// select, so they change when a filter changes the headers.
func TestRouteNamesFollowTheHeaders(t *testing.T) {
	l := testListener(t, false)
	r := httptest.NewRequest("GET", "/pick", nil)
	r.Header.Set("X-Pick", "b")
	req := l.request(r, 0, nil)
	if req.RouteName != "pick" || req.ClusterName != "b" || req.Route == nil {
		t.Fatalf("route %q cluster %q (Route set: %v), want pick/b", req.RouteName, req.ClusterName, req.Route != nil)
	}
	var without [][2]string
	for _, h := range req.Headers {
		if h[0] != "x-pick" {
			without = append(without, h)
		}
	}
	if rt, c := req.Route(without); rt != "pick-default" || c != "a" {
		t.Fatalf("without x-pick: route %q cluster %q, want pick-default/a", rt, c)
	}
	if rt, c := req.Route(append(without, [2]string{"x-pick", "rr"})); rt != "pick" || c != "rr" {
		t.Fatalf("x-pick rr: route %q cluster %q, want pick/rr", rt, c)
	}
}
