package engine

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
	"github.com/sluice-proxy/sluice/filter/limitsvc"
)

const routeConfig = `{"external":{"cluster":"limits","forward_headers":["x-tenant-id"],
	"match":{"path_prefix":"/api"},
	"route_header":"x-sluice-backend","allowed_routes":["backend_a","backend_b"],
	"fallback":{"limit":100,"window":"1h","key":[]}}}`

// routed runs one request of tenant to /api through the pipeline, the
// client sending clientRoute in the route header unless it is empty;
// answer is the limits service's reply when the request looks up (""
// when the test expects a cache hit). It returns the request headers
// the upstream would see.
func routed(t *testing.T, p *Plugin, f *hosttest.Fakes, id uint32, path, tenant, clientRoute, answer string) [][2]string {
	t.Helper()
	s := begin(p, f, id)
	f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", path}, {":authority", "a"}, {"x-tenant-id", tenant}}
	if clientRoute != "" {
		// Twice: a repeated header must not leave a value behind either.
		f.Stream.Headers = append(f.Stream.Headers, [2]string{"x-sluice-backend", clientRoute}, [2]string{"x-sluice-backend", clientRoute})
	}
	v := s.RequestHeaders()
	if answer == "" {
		if v != Continue {
			t.Fatalf("%s: %v, want a cache hit admitted at once", tenant, v)
		}
		return f.Stream.Headers
	}
	if v != Pause {
		t.Fatalf("%s: %v, want a lookup", tenant, v)
	}
	p.Tick()
	calls := f.Caller.Pending()
	if len(calls) != 1 {
		t.Fatalf("%s: %d lookups", tenant, len(calls))
	}
	f.Stream.Current = 0
	calls[0].Answer(200, []byte(answer), nil)
	if n := len(f.Stream.Resumed); n == 0 || f.Stream.Resumed[n-1] != id {
		t.Fatalf("%s: resumed %v, want %d", tenant, f.Stream.Resumed, id)
	}
	return f.Stream.Headers
}

func routeValues(hs [][2]string) []string {
	var vs []string
	for _, kv := range hs {
		if kv[0] == "x-sluice-backend" {
			vs = append(vs, kv[1])
		}
	}
	return vs
}

func TestBackendURLRoutesTheRequest(t *testing.T) {
	p, f := newNativePlugin(t, routeConfig)
	const allowed = `{"limit":100,"window":"1h","tenant_key":"acme","backend_url":"backend_a"}`

	// An allowed value is written, unchanged, over whatever the client sent.
	if got := routeValues(routed(t, p, f, 1, "/api/x", "acme", "backend_b", allowed)); len(got) != 1 || got[0] != "backend_a" {
		t.Fatalf("allowed backend_url: route header %q, want [backend_a]", got)
	}
	// The route is selected again once the header is written.
	if got := routeValues(f.Stream.RouteClearedAt); len(got) != 1 || got[0] != "backend_a" {
		t.Fatalf("route cache last cleared with route header %q, want [backend_a]", got)
	}
	// It is cached with the answer: the next request of the tenant, a
	// cache hit, is routed too.
	if got := routeValues(routed(t, p, f, 2, "/api/y", "acme", "", "")); len(got) != 1 || got[0] != "backend_a" {
		t.Fatalf("cached answer: route header %q, want [backend_a]", got)
	}
	if n := f.Metrics.Values["sluice.external.routes_disallowed"]; n != 0 {
		t.Fatalf("routes_disallowed %d, want 0", n)
	}
}

func TestDisallowedBackendURLIsIgnoredCountedAndLogged(t *testing.T) {
	p, f := newNativePlugin(t, routeConfig)
	for _, bad := range []string{"evil", "BACKEND_A", "backend_a ", "http://backend_a", "backend_a\r\nx-injected: 1"} {
		f.Log.Lines = nil
		answer := `{"limit":100,"window":"1h","tenant_key":"t","backend_url":` + jsonQuote(bad) + `,"cache_no_store":true}`
		got := routed(t, p, f, 1, "/api", "t-"+bad, "", answer)
		if vs := routeValues(got); len(vs) != 0 {
			t.Fatalf("backend_url %q: route header %q, want none", bad, vs)
		}
		if len(f.Stream.Replies) != 0 {
			t.Fatalf("backend_url %q: the request was answered %+v; the rest of the answer stands", bad, f.Stream.Replies)
		}
		logged := false
		for _, l := range f.Log.Lines {
			logged = logged || strings.HasPrefix(l, "warn ") && strings.Contains(l, "backend_url") && strings.Contains(l, "allowed_routes")
		}
		if !logged {
			t.Fatalf("backend_url %q: not logged: %q", bad, f.Log.Lines)
		}
	}
	if n := f.Metrics.Values["sluice.external.routes_disallowed"]; n != 5 {
		t.Fatalf("routes_disallowed %d, want 5", n)
	}
}

func TestAnswerWithoutBackendURLKeepsTheRouteAndDropsTheClientsHeader(t *testing.T) {
	p, f := newNativePlugin(t, routeConfig)
	got := routed(t, p, f, 1, "/api", "plain", "backend_a", `{"limit":100,"window":"1h","tenant_key":"plain"}`)
	if vs := routeValues(got); len(vs) != 0 {
		t.Fatalf("route header %q: a client routed itself", vs)
	}
	// Envoy chose the route from the client's header before the filter
	// ran: it must choose again without it.
	if f.Stream.RouteClears != 1 || len(routeValues(f.Stream.RouteClearedAt)) != 0 {
		t.Fatalf("%d route cache clears, last with route header %q; want 1, without", f.Stream.RouteClears, routeValues(f.Stream.RouteClearedAt))
	}
	// Without a client header and a backend_url, the route stands and is
	// not selected again.
	routed(t, p, f, 3, "/api", "other", "", `{"limit":100,"window":"1h","tenant_key":"other"}`)
	if f.Stream.RouteClears != 1 {
		t.Fatalf("%d route cache clears, want no new one", f.Stream.RouteClears)
	}
	// A request the external limit does not match is not looked up, and
	// still loses the client's header.
	s := begin(p, f, 2)
	f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/other"}, {":authority", "a"}, {"x-sluice-backend", "backend_b"}}
	if v := s.RequestHeaders(); v != Continue {
		t.Fatalf("unmatched request: %v", v)
	}
	if vs := routeValues(f.Stream.Headers); len(vs) != 0 || len(f.Caller.Calls) != 2 {
		t.Fatalf("unmatched request: route header %q after %d lookups", vs, len(f.Caller.Calls))
	}
}

// A cache entry written under another configuration can hold a route this
// one does not allow: it is not written.
func TestCachedRouteIsCheckedAgain(t *testing.T) {
	p, f := newNativePlugin(t, routeConfig)
	routed(t, p, f, 1, "/api", "acme", "", `{"limit":100,"window":"1h","tenant_key":"acme","backend_url":"backend_a"}`)
	narrower := strings.Replace(routeConfig, `"backend_a",`, "", 1)
	cfg, err := config.Parse([]byte(narrower))
	if err != nil {
		t.Fatal(err)
	}
	q := NewVM(hostOf(f)).NewPlugin()
	if err := q.configure(cfg); err != nil {
		t.Fatal(err)
	}
	if got := routeValues(routed(t, q, f, 2, "/api", "acme", "", "")); len(got) != 0 {
		t.Fatalf("route header %q from an entry the new config does not allow", got)
	}
}

// The two bounds on a route's length are one: a longer backend_url could
// never be allowed.
func TestRouteBoundsAgree(t *testing.T) {
	if config.MaxRouteLen != limitsvc.MaxBackendURL {
		t.Fatalf("config.MaxRouteLen %d, limitsvc.MaxBackendURL %d", config.MaxRouteLen, limitsvc.MaxBackendURL)
	}
}

func jsonQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\r", `\r`, "\n", `\n`).Replace(s) + `"`
}

// hostOf is a host over the same fakes, for a second plugin sharing their
// shared data, as a reconfigured plugin of the same VM does.
func hostOf(f *hosttest.Fakes) host.Host {
	return host.Host{Store: f.Store, Clock: f.Clock.Read, Stream: f.Stream, Caller: f.Caller,
		Ticker: f.Ticker, Metrics: f.Metrics, Log: f.Log}
}
