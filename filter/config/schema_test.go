package config

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func compileSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema()))
	if err != nil {
		t.Fatalf("schema.json is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatalf("schema.json does not compile: %v", err)
	}
	return sch
}

// schemaValidate returns nil when the document is valid against the schema.
// Documents that are not JSON are reported as invalid.
func schemaValidate(sch *jsonschema.Schema, data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		// Envoy's "no configuration" is not a JSON document; Parse treats it
		// as {} and so does the agreement check.
		data = []byte("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

func exampleConfigs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../examples/*/config.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 7 {
		t.Fatalf("found %d example configs, want at least 7: %v", len(files), files)
	}
	return files
}

func TestExamplesValidateAndParse(t *testing.T) {
	sch := compileSchema(t)
	for _, f := range exampleConfigs(t) {
		t.Run(filepath.Base(filepath.Dir(f)), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := schemaValidate(sch, data); err != nil {
				t.Errorf("schema rejects %s: %v", f, err)
			}
			c, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse rejects %s:\n%v", f, err)
			}
			if len(c.Limits)+len(c.Breakers)+len(c.Concurrency) == 0 && c.External == nil {
				t.Errorf("%s configures nothing", f)
			}
		})
	}
}

// goodConfigs are accepted by both the parser and the schema.
var goodConfigs = []string{
	``,
	`{}`,
	`{"limits": [{"name": "a", "requests_per_second": 5, "burst": 2}]}`,
	`{"limits": [{"name": "a", "requests_per_second": 5, "forget_max_used": 0}, {"name": "b", "requests_per_second": 5, "forget_max_used": 4294967295}]}`,
	`{"limits": [{"name": "a", "algorithm": "fixed_window", "limit": 100, "window": "1m"}]}`,
	`{"limits": [{"name": "a", "algorithm": "sliding_window", "limit": 100, "window": "1m30s", "cost": 2}]}`,
	`{"limits": [{"name": "a", "key": [], "requests_per_second": 1, "on_limit": {"action": "delay"}}]}`,
	`{"limits": [{"name": "a", "requests_per_second": 1, "on_limit": {"action": "delay", "max_delay": "2s", "status": 503}}]}`,
	`{"limits": [{"name": "a", "requests_per_second": 1, "shadow": true, "on_limit": {"action": "reject"}}]}`,
	`{"limits": [{"name": "a", "key": ["header:X-Key", "path"], "override_by": "path", "requests_per_second": 1,
	  "overrides": {"/x": {"limit": 5, "window": "10s", "burst": 1}}}]}`,
	`{"limits": [{"name": "a", "requests_per_second": 1}, {"name": "b", "requests_per_second": 1, "replaces": ["a"]}]}`,
	`{"limits": [{"name": "a", "requests_per_second": 1, "mode": "hybrid", "failure_policy": "local", "instances": 3}],
	  "backend": {"cluster": "webdis", "basic_auth": "u:p", "timeout": "100ms", "retries": 0}}`,
	`{"backend": {"cluster": "upstash", "protocol": "upstash", "token": "abc"}}`,
	`{"client_ip": {"source": "header", "header": "X-Real-IP"}}`,
	`{"client_ip": {"source": "xff", "trusted_hops": 3}}`,
	`{"client_ip": {"source": "peer"}}`,
	`{"breakers": [{"name": "b", "failure_threshold": 0, "failure_rate": {"window_type": "time"},
	  "slow_call": {"duration": "2s", "threshold_percent": 50}}]}`,
	`{"breakers": [{"name": "b", "match": {"path": "/x", "methods": ["DELETE"], "hosts": ["a.b"]}, "failure_statuses": []}]}`,
	`{"response": {"headers": [], "headers_on_allowed": false, "body": "none"}}`,
	`{"concurrency": [{"name": "search", "max_in_flight": 50}]}`,
	`{"concurrency": [{"name": "c", "match": {"routes": ["search"]}, "key": ["route", "cluster"], "max_in_flight": 1, "status": 429, "shadow": true}],
	  "limits": [{"name": "c", "key": ["cluster"], "requests_per_second": 1}]}`,
	`{"limits": [{"name": "a", "requests_per_second": 100, "cost": {"header": "X-Cost", "max": 50}}]}`,
	`{"limits": [{"name": "a", "requests_per_second": 100, "cost": {"header": "x-cost", "default": 5, "max": 5}}]}`,
	`{"limits": [{"name": "a", "limit": 10000, "window": "1m", "key": ["header:x-api-key"],
	  "cost_from_response": {"header": "x-tokens-used", "default": 100}}]}`,
	`{"limits": [{"name": "a", "requests_per_second": 1000, "mode": "hybrid", "cost_from_response": {"header": "x-tokens-used"}}],
	  "backend": {"cluster": "webdis"}}`,
}

func TestGoodConfigsAgree(t *testing.T) {
	sch := compileSchema(t)
	for _, in := range goodConfigs {
		if _, err := Parse([]byte(in)); err != nil {
			t.Errorf("Parse rejects %s:\n%v", in, err)
		}
		if err := schemaValidate(sch, []byte(in)); err != nil {
			t.Errorf("schema rejects %s:\n%v", in, err)
		}
	}
}

// TestBadConfigsAgree checks that the schema rejects every bad config whose
// rule it can express, and accepts (leaving the rule to Parse) exactly the
// ones marked schemaAccepts, so the marks cannot go stale.
func TestBadConfigsAgree(t *testing.T) {
	sch := compileSchema(t)
	for _, tc := range badCases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse([]byte(tc.in)); err == nil {
				t.Fatal("Parse accepts it")
			}
			err := schemaValidate(sch, []byte(tc.in))
			if tc.schemaAccepts && err != nil {
				t.Errorf("marked schemaAccepts but the schema rejects it: %v", err)
			}
			if !tc.schemaAccepts && err == nil {
				t.Errorf("schema accepts a config Parse rejects (%s)", strings.Join(tc.want, "; "))
			}
		})
	}
}

// schemaDefault is the "default" annotation of property prop of the
// schema's $defs entry def, as JSON decodes it (numbers are float64).
func schemaDefault(t *testing.T, def, prop string) any {
	t.Helper()
	var s struct {
		Defs map[string]struct {
			Properties map[string]struct {
				Default any `json:"default"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(Schema(), &s); err != nil {
		t.Fatal(err)
	}
	return s.Defs[def].Properties[prop].Default
}

// TestSchemaDefaultsMatchParser keeps the "default" annotations in
// schema.json, which editors show to operators, equal to what Parse fills.
func TestSchemaDefaultsMatchParser(t *testing.T) {
	def := func(d, p string) string {
		b, _ := json.Marshal(schemaDefault(t, d, p))
		return string(b)
	}
	// durDef normalises a duration default, which the schema spells as an
	// operator would ("60s") and Go prints as "1m0s".
	durDef := func(d, p string) string {
		s, _ := schemaDefault(t, d, p).(string)
		v, err := time.ParseDuration(s)
		if err != nil {
			return "not a duration: " + s
		}
		return v.String()
	}
	c := mustParse(t, `{"limits": [{"name": "a", "requests_per_second": 1}], "breakers": [{"name": "b"}], "backend": {"cluster": "c"},
		"external": {"cluster": "limits", "fallback": {"requests_per_second": 1}},
		"concurrency": [{"name": "c", "max_in_flight": 1}]}`)
	l, b, be, ex, cc := c.Limits[0], c.Breakers[0], c.Backend, c.External, c.Concurrency[0]
	checks := []struct{ schema, parser string }{
		{def("limit", "algorithm"), `"` + l.Algorithm.String() + `"`},
		{def("admin", "path_prefix"), `"` + DefaultAdminPathPrefix + `"`},
		{def("limit", "cost"), "1"},
		{def("limit", "slots"), strconv.Itoa(l.Slots)},
		{def("external", "slots"), strconv.Itoa(ex.Limit.Slots)},
		{def("limit", "mode"), `"` + l.Mode.String() + `"`},
		{def("limit", "on_missing_key"), `"` + l.OnMissingKey.String() + `"`},
		{def("limit", "key"), `["` + l.Key[0].String() + `"]`},
		{def("breaker", "per"), `"` + b.Per.String() + `"`},
		{def("breaker", "failure_statuses"), "[500,502,503,504]"},
		{def("breaker", "failure_threshold"), "5"},
		{def("breaker", "success_threshold"), "2"},
		{def("breaker", "half_open_max_requests"), "1"},
		{def("breaker", "mode"), `"` + b.Mode.String() + `"`},
		{def("breaker", "status"), "503"},
		{def("backend", "protocol"), `"` + be.Protocol.String() + `"`},
		{def("backend", "retries"), "1"},
		{def("backend", "failure_policy"), `"` + be.FailurePolicy.String() + `"`},
		{def("backend", "failure_status"), "429"},
		{def("concurrency", "key"), keyJSON(cc.Key)},
		{def("concurrency", "status"), strconv.Itoa(cc.Status)},
		{def("concurrency", "shadow"), strconv.FormatBool(cc.Shadow)},
		{def("external", "name"), `"` + ex.Limit.Name + `"`},
		{def("external", "path"), `"` + ex.Path + `"`},
		{durDef("external", "timeout"), ex.Timeout.String()},
		{durDef("external", "cache_ttl"), ex.CacheTTL.String()},
		{durDef("external", "stale_ttl"), ex.StaleTTL.String()},
		{def("external", "max_cached"), strconv.Itoa(ex.MaxCached)},
		{def("external", "mode"), `"` + ex.Limit.Mode.String() + `"`},
		{def("external", "on_missing_key"), `"` + ex.Limit.OnMissingKey.String() + `"`},
	}
	for _, ch := range checks {
		if ch.schema != ch.parser {
			t.Errorf("schema default %s, parser default %s", ch.schema, ch.parser)
		}
	}
}

func keyJSON(parts []KeyPart) string {
	names := []string{}
	for _, p := range parts {
		names = append(names, p.String())
	}
	b, _ := json.Marshal(names)
	return string(b)
}
