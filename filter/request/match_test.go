package request

import (
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
)

func mustParse(t *testing.T, in string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(in))
	if err != nil {
		t.Fatalf("Parse(%s): %v", in, err)
	}
	return c
}

func TestMatch(t *testing.T) {
	c := mustParse(t, `{"limits": [{"name": "a", "requests_per_second": 1, "match": {
		"path_prefix": "/api", "methods": ["get", "POST"], "hosts": ["api.example.com", "*.example.org"],
		"headers": [{"name": "X-Tier", "value": "free"}, {"name": "x-block", "present": false}],
		"routes": ["r1", "r2"]}}]}`)
	m := &c.Limits[0].Match
	headers := map[string]string{"x-tier": "free"}
	base := View{Method: "GET", Path: "/api/users?x=1", Host: "API.example.com:8443", Route: "r2",
		Header: HeaderFunc(func(n string) (string, bool) { v, ok := headers[n]; return v, ok })}
	if !Matches(m, base) {
		t.Fatal("base request does not match")
	}
	tests := []struct {
		name string
		edit func(r *View)
		want bool
	}{
		{"method lower-case", func(r *View) { r.Method = "post" }, true},
		{"other method", func(r *View) { r.Method = "DELETE" }, false},
		{"prefix only in query", func(r *View) { r.Path = "/x?/api" }, false},
		{"other path", func(r *View) { r.Path = "/ap" }, false},
		{"wildcard host", func(r *View) { r.Host = "eu.example.org" }, true},
		{"wildcard needs a label", func(r *View) { r.Host = "example.org" }, false},
		{"suffix trick", func(r *View) { r.Host = "evilexample.org" }, false},
		{"other host", func(r *View) { r.Host = "example.com" }, false},
		{"other route", func(r *View) { r.Route = "r3" }, false},
		{"header value differs", func(r *View) {
			r.Header = HeaderFunc(func(n string) (string, bool) { return map[string]string{"x-tier": "gold"}[n], n == "x-tier" })
		}, false},
		{"forbidden header present", func(r *View) {
			r.Header = HeaderFunc(func(n string) (string, bool) { return "free", n == "x-tier" || n == "x-block" })
		}, false},
		{"no headers at all", func(r *View) { r.Header = nil }, false},
	}
	for _, tt := range tests {
		r := base
		tt.edit(&r)
		if got := Matches(m, r); got != tt.want {
			t.Errorf("%s: Matches = %v, want %v", tt.name, got, tt.want)
		}
	}
	exact := config.Match{Path: "/login"}
	if !Matches(&exact, View{Path: "/login?next=/"}) || Matches(&exact, View{Path: "/login/x"}) {
		t.Error("exact path match wrong")
	}
	var any config.Match
	if !Matches(&any, View{}) {
		t.Error("zero Match must match everything")
	}
}

func TestStripPort(t *testing.T) {
	for in, want := range map[string]string{
		"a.com": "a.com", "a.com:80": "a.com", "[::1]:80": "[::1]", "[::1]": "[::1]", "::1": "",
		"10.0.0.1:9": "10.0.0.1", "": "", "a.com:80:80": "a.com", "a.com:1:2": "a.com", "a.com::": "a.com",
		"a.com:80:": "a.com", "[::1]:80:80": "[::1]", "[::1": "[::1",
	} {
		if got := stripPort(in); got != want {
			t.Errorf("stripPort(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMatchesDoesNotAllocate(t *testing.T) {
	c := mustParse(t, `{"limits": [{"name": "a", "requests_per_second": 1, "match": {
		"path_prefix": "/api", "methods": ["GET"], "hosts": ["*.example.com"],
		"headers": [{"name": "x-tier", "value": "free"}], "routes": ["r"]}}]}`)
	m := &c.Limits[0].Match
	hdr := func(string) (string, bool) { return "free", true }
	r := View{Method: "GET", Path: "/api/x?y", Host: "a.example.com:80", Route: "r", Header: HeaderFunc(hdr)}
	if !Matches(m, r) {
		t.Fatal("no match")
	}
	if n := testing.AllocsPerRun(100, func() { Matches(m, r) }); n != 0 {
		t.Errorf("Matches allocates %v times per call", n)
	}
}

func BenchmarkMatches(b *testing.B) {
	c, _ := config.Parse([]byte(`{"limits": [{"name": "a", "requests_per_second": 1, "match": {
		"path_prefix": "/api", "methods": ["GET", "POST"], "hosts": ["*.example.com"], "headers": [{"name": "x-tier", "value": "free"}]}}]}`))
	m := &c.Limits[0].Match
	r := View{Method: "POST", Path: "/api/x?y", Host: "a.example.com:80",
		Header: HeaderFunc(func(string) (string, bool) { return "free", true })}
	b.ReportAllocs()
	for b.Loop() {
		Matches(m, r)
	}
}
