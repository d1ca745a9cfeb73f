package request

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
)

// fakeAttributes serves client_cidrs, query and metadata conditions.
type fakeAttributes struct {
	client string
	query  map[string]string
	meta   map[string]string
}

func (e fakeAttributes) ClientAddr() (netip.Addr, bool) {
	a, err := netip.ParseAddr(e.client)
	return a, err == nil
}

// MatchQuery tests c against the parameter's one reading.
func (e fakeAttributes) MatchQuery(name string, c *config.ValueCondition, every bool) bool {
	v, ok := e.query[name]
	return HeaderFunc(func(string) (string, bool) { return v, ok }).MatchHeader(name, c, every)
}

func (e fakeAttributes) Metadata(prop []string) (string, bool) {
	v, ok := e.meta[strings.Join(prop, ".")]
	return v, ok
}

// TestConditionsAreTheMatch checks that a match holds exactly when each of
// its conditions, taken alone, holds: what sluicectl explain reports per
// condition then adds up to the engine's decision.
func TestConditionsAreTheMatch(t *testing.T) {
	cfg, err := config.Parse([]byte(`{"limits": [{"name": "a", "requests_per_second": 1, "match": {
		"path_prefix": "/api", "methods": ["GET", "POST"], "hosts": ["*.example.com"], "routes": ["r1"],
		"headers": [{"name": "x-a", "prefix": "p"}, {"name": "x-b", "present": false}],
		"path_regex": ".*/v[0-9]+/.*", "client_cidrs": ["10.0.0.0/8"],
		"query": [{"name": "q", "value": "1"}],
		"metadata": [{"namespace": "ns", "path": "a.b", "value": "v"}],
		"not": {"headers": [{"name": "x-plan", "value": "internal"}]}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := &cfg.Limits[0].Match
	conds := m.Conditions()
	var paths []string
	for _, c := range conds {
		paths = append(paths, c.Path)
	}
	want := "path_prefix methods hosts routes headers[0] headers[1] path_regex client_cidrs query[0] metadata[0] not"
	if got := strings.Join(paths, " "); got != want {
		t.Fatalf("condition paths %q, want %q", got, want)
	}
	if conds[4].JSON != `{"headers":[{"name":"x-a","prefix":"p"}]}` {
		t.Fatalf("headers[0] JSON %s", conds[4].JSON)
	}
	base := func() (View, map[string]string, *fakeAttributes) {
		h := map[string]string{"x-a": "pp"}
		e := &fakeAttributes{client: "10.1.2.3", query: map[string]string{"q": "1"}, meta: map[string]string{"metadata.filter_metadata.ns.a.b": "v"}}
		r := View{Method: "GET", Path: "/api/v1/x?q=1", Host: "a.example.com:8080", Route: "r1",
			Header: HeaderFunc(func(n string) (string, bool) { v, ok := h[n]; return v, ok }), Attributes: e}
		return r, h, e
	}
	// Each mutation breaks exactly one condition.
	mutations := []func(r *View, h map[string]string, e *fakeAttributes){
		func(r *View, _ map[string]string, _ *fakeAttributes) { r.Path = "/apx/v1/x" },
		func(r *View, _ map[string]string, _ *fakeAttributes) { r.Method = "PUT" },
		func(r *View, _ map[string]string, _ *fakeAttributes) { r.Host = "example.org" },
		func(r *View, _ map[string]string, _ *fakeAttributes) { r.Route = "r2" },
		func(_ *View, h map[string]string, _ *fakeAttributes) { h["x-a"] = "q" },
		func(_ *View, h map[string]string, _ *fakeAttributes) { h["x-b"] = "" },
		func(r *View, _ map[string]string, _ *fakeAttributes) { r.Path = "/api/x" },
		func(_ *View, _ map[string]string, e *fakeAttributes) { e.client = "192.0.2.1" },
		func(_ *View, _ map[string]string, e *fakeAttributes) { e.query["q"] = "2" },
		func(_ *View, _ map[string]string, e *fakeAttributes) {
			delete(e.meta, "metadata.filter_metadata.ns.a.b")
		},
		func(_ *View, h map[string]string, _ *fakeAttributes) { h["x-plan"] = "internal" },
	}
	r, _, _ := base()
	if !Matches(m, r) {
		t.Fatal("the base request does not match")
	}
	for i, mutate := range mutations {
		r, h, e := base()
		mutate(&r, h, e)
		if Matches(m, r) {
			t.Fatalf("mutation %d: still matches", i)
		}
		for j, c := range conds {
			if held := Matches(&c.Only, r); held != (i != j) {
				t.Fatalf("mutation %d: condition %s held=%v", i, c.Path, held)
			}
		}
	}
	if empty := (&config.Match{}).Conditions(); len(empty) != 0 {
		t.Fatalf("an empty match has conditions %v", empty)
	}
}
