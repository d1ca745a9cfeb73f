package importer_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/ops/importer"
	"github.com/sluice-proxy/sluice/filter/ops/importer/importtest"
)

func importOne(t *testing.T, rl, envoy string, opt importer.Options) *importer.Result {
	t.Helper()
	var in []importer.Input
	if rl != "" {
		in = append(in, importer.Input{Name: "rl.yaml", Data: []byte(rl)})
	}
	if envoy != "" {
		in = append(in, importer.Input{Name: "envoy.yaml", Data: []byte(envoy)})
	}
	return importer.Import(in, opt)
}

// finding returns the first finding of code at path whose message has
// text, or fails.
func finding(t *testing.T, fs []importer.Finding, code, path, text string) {
	t.Helper()
	for _, f := range fs {
		if f.Code == code && f.Path == path && strings.Contains(f.Message, text) {
			return
		}
	}
	t.Errorf("no %s finding at %q saying %q among:\n%v", code, path, text, fs)
}

const headerAction = `
- actions:
  - request_headers: {header_name: x-k, descriptor_key: key1}`

// TestImportReportsWhatItCannotExpress: each construct the import cannot
// express exactly is a finding at its path, never dropped silently.
func TestImportReportsWhatItCannotExpress(t *testing.T) {
	res := importOne(t, `domain: d
descriptors:
  - key: key1
    value: value*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key1
    value: v2
    quota_mode: true
    rate_limit: {unit: month, requests_per_unit: 20}
  - key: key1
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 5}
`, importtest.EnvoyYAML("d", headerAction), importer.Options{})
	if len(res.Errors) > 0 {
		t.Fatal(res.Errors)
	}
	finding(t, res.Findings, importer.Unsupported, "descriptors[0]", "wildcard")
	finding(t, res.Findings, importer.Unsupported, "descriptors[1].quota_mode", "quota_mode")
	finding(t, res.Findings, importer.Unsupported, "descriptors[1].rate_limit.unit", "month")
	finding(t, res.Findings, importer.Inexact, "descriptors[2].detailed_metric", "per limit")
	finding(t, res.Findings, importer.Inexact, "", "each Envoy counts alone")
	finding(t, res.Findings, importer.Inexact,
		"static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes[0].route.rate_limits[0].actions[0]",
		"first value")
	if bytes.Contains(res.Config, []byte("month")) {
		t.Errorf("a monthly limit was imported:\n%s", res.Config)
	}
}

// TestImportReportsEnvoyConstructs: route and action constructs Sluice
// has no counterpart for.
func TestImportReportsEnvoyConstructs(t *testing.T) {
	rl := "domain: d\ndescriptors:\n  - key: source_cluster\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	envoy := strings.Replace(importtest.EnvoyYAML("d", `
- actions:
  - source_cluster: {}
- actions:
  - header_value_match: {descriptor_value: x, headers: [{name: x-a, range_match: {start: 1, end: 2}}]}
- actions:
  - remote_address: {}
  disable_key: off`), "- name: r\n", "- match: {prefix: /, grpc: {}}\n                route: {cluster: c, rate_limits: [{actions: [{remote_address: {}}]}]}\n              - name: r\n", 1)
	res := importOne(t, rl, envoy, importer.Options{})
	if len(res.Errors) > 0 {
		t.Fatal(res.Errors)
	}
	routes := "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes"
	finding(t, res.Findings, importer.Unsupported, routes+"[0]", "no name and matches on grpc")
	finding(t, res.Findings, importer.Unsupported, routes+"[1].route.rate_limits[0].actions[0]", "service-cluster")
	finding(t, res.Findings, importer.Unsupported, routes+"[1].route.rate_limits[1].actions[0].header_value_match.headers[0].range_match", "range_match")
	finding(t, res.Findings, importer.Unsupported, routes+"[1].route.rate_limits[2].disable_key", "disable_key")
	finding(t, res.Findings, importer.Inexact, routes+"[1].route.rate_limits[2].actions[0]", "client_ip")
}

// TestImportErrorsNameTheirPaths: input the service or Envoy would refuse
// is an error at its path, all at once, and no configuration is written.
func TestImportErrorsNameTheirPaths(t *testing.T) {
	res := importOne(t, `domain: d
descriptors:
  - key: a
    rate_limit: {unit: fortnight, requests_per_unit: 1}
  - key: b
    colour: red
  - key: a
    rate_limit: {unlimited: true, unit: second}
`, importtest.EnvoyYAML("d", headerAction), importer.Options{})
	if res.Config != nil {
		t.Errorf("a configuration was written despite errors:\n%s", res.Config)
	}
	want := map[string]string{
		"descriptors[0].rate_limit.unit": "fortnight",
		"descriptors[1].colour":          "unknown key",
		"descriptors[2]":                 "duplicate",
	}
	for path, text := range want {
		found := false
		for _, e := range res.Errors {
			found = found || e.Path == path && strings.Contains(e.Message, text) && e.File == "rl.yaml" && e.Line > 0
		}
		if !found {
			t.Errorf("no error at %s saying %q among %v", path, text, res.Errors)
		}
	}
	for _, in := range []string{"domain: [", "domain: d\ndescriptors: 5\n", "a: &x [*x, *x]\n", ""} {
		if res := importOne(t, in, "", importer.Options{}); len(res.Errors) == 0 {
			t.Errorf("%q: no error", in)
		}
	}
}

// TestImportIsDeterministic: the same inputs give the same bytes, and the
// output is a configuration the filter accepts.
func TestImportIsDeterministic(t *testing.T) {
	for _, sc := range importtest.RatelimitScenarios {
		a := importOne(t, sc.Config, importtest.EnvoyYAML(sc.Domain, sc.RateLimits), importer.Options{BackendCluster: "redis"})
		for range 5 {
			b := importOne(t, sc.Config, importtest.EnvoyYAML(sc.Domain, sc.RateLimits), importer.Options{BackendCluster: "redis"})
			if !bytes.Equal(a.Config, b.Config) || len(a.Findings) != len(b.Findings) {
				t.Fatalf("%s: two imports differ:\n%s\n%s", sc.Name, a.Config, b.Config)
			}
			for i := range a.Findings {
				if a.Findings[i] != b.Findings[i] {
					t.Fatalf("%s: findings differ: %v vs %v", sc.Name, a.Findings[i], b.Findings[i])
				}
			}
		}
		cfg, err := config.Parse(a.Config)
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		for _, l := range cfg.Limits {
			if l.Mode != config.ModeGlobal {
				t.Errorf("%s: limit %s is %s with --backend-cluster", sc.Name, l.Name, l.Mode)
			}
		}
	}
}

// TestImportExample3BlocksTheListedAddress: a rule of 0 requests under a
// per-value default becomes a block of that value.
func TestImportExample3BlocksTheListedAddress(t *testing.T) {
	sc := importtest.RatelimitScenarios[2]
	res := importOne(t, sc.Config, importtest.EnvoyYAML(sc.Domain, sc.RateLimits), importer.Options{})
	if !bytes.Contains(res.Config, []byte(`"50.0.0.5": {
          "block": true`)) || !bytes.Contains(res.Config, []byte(`"50.0.0.5": {
          "unlimited": true`)) {
		t.Errorf("50.0.0.5 is not blocked and exempt from the default:\n%s", res.Config)
	}
}

// TestImportSharesOneBucketAcrossRoutes: two routes whose own entries
// make the same descriptor reach one counter in the service, so they get
// one limit, scoped to both.
func TestImportSharesOneBucketAcrossRoutes(t *testing.T) {
	res := importOne(t, "domain: e\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
		`virtual_hosts:
- name: v
  routes:
  - {name: a, route: {cluster: c, rate_limits: [{actions: [{remote_address: {}}]}]}}
  - {name: b, route: {cluster: c, rate_limits: [{actions: [{remote_address: {}}]}]}}
  - {name: c, route: {cluster: c}}
`, importer.Options{})
	cfg, err := config.Parse(res.Config)
	if err != nil {
		t.Fatal(err, res.Errors)
	}
	if len(cfg.Limits) != 1 || strings.Join(cfg.Limits[0].Match.Routes, ",") != "a,b" {
		t.Fatalf("want one limit on routes a and b:\n%s", res.Config)
	}
}

// TestImportReportsUnusedDomains: a domain no filter names, or whose
// limits no route reaches, is reported rather than silently left out.
func TestImportReportsUnusedDomains(t *testing.T) {
	res := importer.Import([]importer.Input{
		{Name: "a.yaml", Data: []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
		{Name: "b.yaml", Data: []byte("domain: b\ndescriptors:\n  - key: j\n    rate_limit: {unit: second, requests_per_unit: 1}\n")},
		{Name: "envoy.yaml", Data: []byte(importtest.EnvoyYAML("a", headerAction))},
	}, importer.Options{})
	if len(res.Errors) > 0 {
		t.Fatal(res.Errors)
	}
	finding(t, res.Findings, importer.Unsupported, "", `names domain "b"`)
	finding(t, res.Findings, importer.Unsupported, "", `reach a limit of domain "a"`)

	// A filter whose domain's config is not given: reported, and the
	// rest (here nothing) still imported.
	res = importer.Import([]importer.Input{{Name: "envoy.yaml", Data: []byte(importtest.EnvoyYAML("missing", headerAction))}}, importer.Options{})
	if len(res.Errors) > 0 || res.Config == nil {
		t.Fatalf("errors %v, config %s", res.Errors, res.Config)
	}
	finding(t, res.Findings, importer.Unsupported, "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config.domain", `domain "missing"`)
}

// TestImportReportsUnknownFilterFields: a ratelimit filter field the
// importer does not read is reported, not ignored.
func TestImportReportsUnknownFilterFields(t *testing.T) {
	envoy := strings.Replace(importtest.EnvoyYAML("d", headerAction), "              domain: d\n",
		"              domain: d\n              request_type: external\n              filter_enabled: {default_value: {numerator: 50}}\n", 1)
	res := importOne(t, "domain: d\ndescriptors:\n  - key: key1\n    rate_limit: {unit: second, requests_per_unit: 1}\n", envoy, importer.Options{})
	filter := "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config."
	finding(t, res.Findings, importer.Unsupported, filter+"filter_enabled", "not imported")
	finding(t, res.Findings, importer.Unsupported, filter+"request_type", "external")
}

// TestImportScopesEachRoutesOwnEntries: an entry of one route applies to
// that route only, though every route has entries; an unnamed route is
// scoped by its path, less the routes before it.
func TestImportScopesEachRoutesOwnEntries(t *testing.T) {
	res := importOne(t, "domain: e\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
		`virtual_hosts:
- name: v
  routes:
  - {name: ra, match: {prefix: /a}, route: {cluster: c, rate_limits: [{actions: [{generic_key: {descriptor_key: a, descriptor_value: x}}]}]}}
  - {match: {prefix: /}, route: {cluster: c, rate_limits: [{actions: [{generic_key: {descriptor_key: b, descriptor_value: x}}]}]}}
`, importer.Options{})
	cfg, err := config.Parse(res.Config)
	if err != nil {
		t.Fatal(err, res.Errors)
	}
	if len(cfg.Limits) != 2 || !bytes.Contains(res.Config, []byte(`"routes": [
          "ra"
        ]`)) || !bytes.Contains(res.Config, []byte(`"not": {
          "path_prefix": "/a"
        }`)) {
		t.Fatalf("want the first limit on route ra and the second on / but not /a:\n%s", res.Config)
	}
}
