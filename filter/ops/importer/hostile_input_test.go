package importer_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/ops/importer"
	"github.com/sluice-proxy/sluice/filter/ops/importer/importtest"
)

const routes0 = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes[0]"

// wantError fails unless res has an error in file at path whose message
// has text, with a line.
func wantError(t *testing.T, res *importer.Result, file, path, text string) {
	t.Helper()
	for _, e := range res.Errors {
		if e.File == file && e.Path == path && strings.Contains(e.Message, text) && e.Line > 0 {
			return
		}
	}
	t.Errorf("no error in %s at %q saying %q among %v", file, path, text, res.Errors)
}

// TestImportErrorsAtInputPaths: input the service or Envoy refuses, or
// reads differently from the importer, is an error at its input path,
// never one about the generated configuration or without a path.
func TestImportErrorsAtInputPaths(t *testing.T) {
	rl := "domain: d\ndescriptors:\n  - key: key1\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	// The service (yaml.v2) takes the last of two equal keys, the
	// importer read the first: an error, whichever wins.
	res := importOne(t, "domain: d\ndescriptors:\n  - key: key1\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000\n      requests_per_unit: 5\n",
		importtest.EnvoyYAML("d", headerAction), importer.Options{})
	wantError(t, res, "rl.yaml", "descriptors[0].rate_limit.requests_per_unit", "given twice")

	// A descriptor without a key names where.
	res = importOne(t, "domain: d\ndescriptors:\n  - key: x\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - rate_limit: {unit: hour, requests_per_unit: 1}\n",
		importtest.EnvoyYAML("d", headerAction), importer.Options{})
	wantError(t, res, "rl.yaml", "descriptors[1].key", "must not be empty")

	// Envoy refuses an empty contains (and prefix, suffix), a number
	// for a string, a route match that is no mapping, a header name
	// that is no token.
	res = importOne(t, rl, importtest.EnvoyYAML("d", `
- actions:
  - header_value_match: {descriptor_value: v, headers: [{name: x-a, string_match: {contains: ""}}]}
- actions:
  - header_value_match: {descriptor_value: v, headers: [{name: x-a, prefix_match: ""}]}
- actions:
  - request_headers: {header_name: "x a", descriptor_key: key1}
- actions:
  - header_value_match: {descriptor_value: v, headers: [{name: "x\ta", present_match: true}]}`), importer.Options{})
	rls := routes0 + ".route.rate_limits"
	wantError(t, res, "envoy.yaml", rls+"[0].actions[0].header_value_match.headers[0].string_match.contains", "must not be empty")
	wantError(t, res, "envoy.yaml", rls+"[1].actions[0].header_value_match.headers[0].prefix_match", "must not be empty")
	wantError(t, res, "envoy.yaml", rls+"[2].actions[0].request_headers.header_name", "not a header name")
	wantError(t, res, "envoy.yaml", rls+"[3].actions[0].header_value_match.headers[0].name", "not a header name")

	envoy := strings.Replace(importtest.EnvoyYAML("d", headerAction), "- name: r\n                match: {prefix: /}", "- name: 5\n                match: []", 1)
	res = importOne(t, rl, envoy, importer.Options{})
	wantError(t, res, "envoy.yaml", routes0+".name", "must be a string")
	wantError(t, res, "envoy.yaml", routes0+".match", "must be a mapping")

	// The service's YAML is read as leniently as yaml.v2 reads it.
	if res := importOne(t, "domain: d\ndescriptors:\n  - key: key1\n    value: 5\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		importtest.EnvoyYAML("d", headerAction), importer.Options{}); len(res.Errors) > 0 {
		t.Errorf("a number as a descriptor value: %v", res.Errors)
	}

	// Empty inputs: the error names them.
	res = importer.Import([]importer.Input{{Name: "empty.yaml"}}, importer.Options{})
	if len(res.Errors) != 1 || res.Errors[0].File != "empty.yaml" {
		t.Errorf("want one error naming empty.yaml, got %v", res.Errors)
	}
}

// TestImportReportsWhatOnlyTheServiceAccepts: inputs the service takes
// and the filter refuses are findings at their input paths, and the
// rest is imported.
func TestImportReportsWhatOnlyTheServiceAccepts(t *testing.T) {
	res := importOne(t, `domain: d
descriptors:
  - key: generic_key
    value: h
    rate_limit: {unit: second, requests_per_unit: 3, name: A, replaces: [{name: B}]}
  - key: generic_key
    value: i
    rate_limit: {unit: second, requests_per_unit: 4, name: B, replaces: [{name: A}]}
  - key: generic_key
    value: j
    rate_limit: {unit: second, requests_per_unit: 4294967295}
`, importtest.EnvoyYAML("d", `
- actions:
  - generic_key: {descriptor_value: h}
- actions:
  - generic_key: {descriptor_value: i}
- actions:
  - generic_key: {descriptor_value: j}`), importer.Options{})
	if len(res.Errors) > 0 {
		t.Fatal(res.Errors)
	}
	finding(t, res.Findings, importer.Unsupported, "descriptors[0].rate_limit.replaces", "cycle")
	finding(t, res.Findings, importer.Unsupported, "descriptors[1].rate_limit.replaces", "cycle")
	finding(t, res.Findings, importer.Unsupported, "descriptors[2].rate_limit.requests_per_unit", "at most")
	cfg, err := config.Parse(res.Config)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Limits) != 2 {
		t.Errorf("want A and B, each on its own:\n%s", res.Config)
	}
}

// TestImportRemoteAddressValues: only a value that is the canonical text
// of one address becomes an exact override; the others are reported.
func TestImportRemoteAddressValues(t *testing.T) {
	sc := scenario(t, "remote-address-values")
	res := importOne(t, sc.Config, importtest.EnvoyYAML(sc.Domain, sc.RateLimits), importer.Options{})
	if len(res.Errors) > 0 {
		t.Fatal(res.Errors)
	}
	for i := 1; i <= 4; i++ {
		finding(t, res.Findings, importer.Unsupported, "descriptors["+string(rune('0'+i))+"]", "canonical")
	}
	for _, v := range []string{"10.0.0.0/8", "10.0.0.1/32", "2001:DB8::1", "::ffff:10.0.0.2"} {
		if strings.Contains(string(res.Config), `"`+v+`"`) {
			t.Errorf("%s was imported:\n%s", v, res.Config)
		}
	}
	if !strings.Contains(string(res.Config), `"2001:db8::2"`) {
		t.Errorf("the canonical 2001:db8::2 is not exempt:\n%s", res.Config)
	}
}

// TestImportIgnoreCaseIsASCII: ignore_case folds ASCII letters only, as
// Envoy's absl::EqualsIgnoreCase, for every string_match kind.
func TestImportIgnoreCaseIsASCII(t *testing.T) {
	for _, kind := range []string{"exact", "prefix", "suffix", "contains"} {
		res := importOne(t, "domain: d\ndescriptors:\n  - key: header_match\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			importtest.EnvoyYAML("d", `
- actions:
  - header_value_match: {descriptor_value: v, headers: [{name: x-class, string_match: {`+kind+`: "sk.", ignore_case: true}}]}`), importer.Options{})
		cfg, err := config.Parse(res.Config)
		if err != nil {
			t.Fatal(kind, err, res.Errors)
		}
		re := cfg.Limits[0].Match.Headers[0].Regex
		for value, want := range map[string]bool{"sk.": true, "SK.": true, "sK.": true, "\u017fk.": false, "s\u212a.": false, "skx": false} {
			if re.MatchString(value) != want {
				t.Errorf("%s: %q matched %v, want %v (regex %s)", kind, value, !want, want, re.Source)
			}
		}
	}
}

// TestImportReportsNormalisedRequestParts: an unnamed route scoped by
// its path, unless the connection manager normalises paths as Sluice
// does, and an :authority key, which Sluice reads normalised.
func TestImportReportsNormalisedRequestParts(t *testing.T) {
	rl := "domain: d\ndescriptors:\n  - key: authority\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: authority\n    value: api.example.com\n    rate_limit: {unit: second, requests_per_unit: 9}\n"
	env := strings.Replace(importtest.EnvoyYAML("d", `
- actions:
  - request_headers: {header_name: ":authority", descriptor_key: authority}`), "- name: r\n                match: {prefix: /}", "- match: {prefix: /api}", 1) +
		"              - name: other\n                match: {prefix: /}\n                route: {cluster: backend}\n"
	res := importOne(t, rl, env, importer.Options{})
	if len(res.Errors) > 0 {
		t.Fatal(res.Errors)
	}
	finding(t, res.Findings, importer.Inexact, routes0, "normalize_path")
	finding(t, res.Findings, importer.Inexact, routes0+".route.rate_limits[0].actions[0]", "normalised")
	finding(t, res.Findings, importer.Unsupported, "descriptors[1]", "raw authority")
	if strings.Contains(string(res.Config), "api.example.com") {
		t.Errorf("api.example.com exempts every spelling of it:\n%s", res.Config)
	}

	normal := strings.Replace(env, "          http_filters:\n", "          normalize_path: true\n          merge_slashes: true\n          http_filters:\n", 1)
	res = importOne(t, rl, normal, importer.Options{})
	for _, f := range res.Findings {
		if strings.Contains(f.Message, "normalize_path") {
			t.Errorf("reported though the connection manager normalises: %v", f)
		}
	}
}

func scenario(t *testing.T, name string) importtest.RatelimitScenario {
	t.Helper()
	for _, sc := range importtest.RatelimitScenarios {
		if sc.Name == name {
			return sc
		}
	}
	t.Fatalf("no scenario %s", name)
	return importtest.RatelimitScenario{}
}

// TestImportBoundsWhatYAMLExpandsTo: the shapes that once took gigabytes
// (a 1 MiB string named 2,000 times, which yaml.v3 counts as a few
// nodes, and a flow sequence just under the 16 MiB file bound) are
// refused before they are expanded or parsed, with little memory.
func TestImportBoundsWhatYAMLExpandsTo(t *testing.T) {
	big := strings.Repeat("y", 1<<20)
	bomb := "domain: d\ndescriptors:\n- {key: k, value: &v \"" + big + "\"}\n" +
		strings.Repeat("- {key: *v}\n", 2000)
	flow := "x: [" + strings.Repeat("1,", 15<<19) + "1]\n"
	for _, tc := range []struct {
		name, data, want string
	}{
		{"alias bomb", bomb, "too large or too deep with aliases expanded"},
		{"flow sequence", flow, "is too large to import"},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		res := importer.Import([]importer.Input{{Name: "in.yaml", Data: []byte(tc.data)}}, importer.Options{})
		runtime.ReadMemStats(&after)
		if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Message, tc.want) || res.Errors[0].File != "in.yaml" {
			t.Errorf("%s: errors %v, want one for in.yaml saying %q", tc.name, res.Errors, tc.want)
		}
		// The input itself is a few MiB; what the import allocates on top
		// stays within a small multiple of it, not the gigabytes the
		// expansion would take.
		if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
			t.Errorf("%s: allocated %d MiB", tc.name, got>>20)
		}
	}
}
