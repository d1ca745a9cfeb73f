package config

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func init() {
	goodConfigs = append(goodConfigs,
		ext(`, "route_header": "x-sluice-backend", "allowed_routes": ["backend_a", "backend-b.v2"]`))
	badCases = append(badCases,
		badCase{name: "route header without allowed routes", in: ext(`, "route_header": "x-backend"`),
			want: []string{"external.allowed_routes: required with route_header: only listed backend_url values may route a request"}},
		badCase{name: "allowed routes without route header", in: ext(`, "allowed_routes": ["a"]`),
			want: []string{"external.route_header: required with allowed_routes: the header that carries the route"}},
		badCase{name: "route header upper case", in: ext(`, "route_header": "X-Backend", "allowed_routes": ["a"]`),
			want: []string{"external.route_header: must be lower case, as Envoy's header maps and cluster_header are"}},
		badCase{name: "route header pseudo", in: ext(`, "route_header": ":authority", "allowed_routes": ["a"]`),
			want: []string{"external.route_header: must be a header name (not a pseudo-header)"}},
		badCase{name: "route header host", in: ext(`, "route_header": "host", "allowed_routes": ["a"]`),
			want: []string{`external.route_header: "host" cannot carry a route: it is hop-by-hop or the :authority`}},
		badCase{name: "route header hop by hop", in: ext(`, "route_header": "connection", "allowed_routes": ["a"]`),
			want: []string{`external.route_header: "connection" cannot carry a route: it is hop-by-hop or the :authority`}},
		badCase{name: "route header forwarded", in: `{"external": {"cluster": "limits", "forward_headers": ["x-tenant-id", "x-backend"],
			"route_header": "x-backend", "allowed_routes": ["a"], "fallback": {"requests_per_second": 5}}}`,
			want:          []string{`external.route_header: "x-backend" is also in forward_headers, which would always send it empty: the client's value is removed first`},
			schemaAccepts: true},
		badCase{name: "route header not string", in: ext(`, "route_header": 7, "allowed_routes": ["a"]`),
			want: []string{"external.route_header: must be a string"}},
		badCase{name: "allowed routes empty", in: ext(`, "route_header": "x-backend", "allowed_routes": []`),
			want: []string{"external.allowed_routes: must name at least one route"}},
		// Every wrong entry is reported at once, each with its path.
		badCase{name: "allowed routes entries", in: ext(`, "route_header": "x-backend", "allowed_routes": ["a", "", 3, "a", "b c", "` + strings.Repeat("r", MaxRouteLen+1) + `"]`),
			want: []string{"external.allowed_routes[1]: must be a non-empty string", "external.allowed_routes[2]: must be a non-empty string",
				`external.allowed_routes[3]: duplicate route "a"`,
				"external.allowed_routes[4]: must be visible ASCII without spaces: it becomes a header value and a cluster name",
				"external.allowed_routes[5]: longer than 256 bytes"}},
		badCase{name: "allowed routes too many", in: ext(`, "route_header": "x-backend", "allowed_routes": [` + manyRoutes(MaxAllowedRoutes+1) + `]`),
			want: []string{"external.allowed_routes: at most 256 routes"}},
		// Both wrong at once: both paths are named.
		badCase{name: "route header and routes both wrong", in: ext(`, "route_header": "te", "allowed_routes": [""]`),
			want: []string{`external.route_header: "te" cannot carry a route: it is hop-by-hop or the :authority`,
				"external.allowed_routes[0]: must be a non-empty string"}},
	)
}

func manyRoutes(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = `"r` + strconv.Itoa(i) + `"`
	}
	return strings.Join(items, ",")
}

func TestParseRoutes(t *testing.T) {
	e := mustParse(t, ext(`, "route_header": "x-sluice-backend", "allowed_routes": ["backend_a", "backend_b"]`)).External
	if e.RouteHeader != "x-sluice-backend" || !reflect.DeepEqual(e.AllowedRoutes, []string{"backend_a", "backend_b"}) {
		t.Fatalf("RouteHeader %q, AllowedRoutes %q", e.RouteHeader, e.AllowedRoutes)
	}
	for v, want := range map[string]bool{"backend_a": true, "backend_b": true, "": false, "backend_c": false,
		"BACKEND_A": false, "backend_a ": false, "backend": false, "http://backend_a": false} {
		if got := e.RouteAllowed(v); got != want {
			t.Errorf("RouteAllowed(%q) = %v, want %v", v, got, want)
		}
	}
	if d := mustParse(t, ext("")).External; d.RouteHeader != "" || d.AllowedRoutes != nil || d.RouteAllowed("backend_a") {
		t.Errorf("default: RouteHeader %q, AllowedRoutes %q; want no routing", d.RouteHeader, d.AllowedRoutes)
	}
}
