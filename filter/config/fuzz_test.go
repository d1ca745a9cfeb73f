package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// roundTrip checks that an accepted config re-validates: its effective form
// parses back to an equal Config and is valid against the schema.
func roundTrip(t *testing.T, c *Config) {
	t.Helper()
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatalf("MarshalJSON: %v", err)
	}
	c2, err := Parse(out)
	if err != nil {
		t.Fatalf("effective config %s does not parse:\n%v", out, err)
	}
	if !reflect.DeepEqual(c, c2) {
		t.Fatalf("round trip changed the config:\n%+v\n%+v\nvia %s", c, c2, out)
	}
}

func TestRoundTrip(t *testing.T) {
	sch := compileSchema(t)
	inputs := append([]string(nil), goodConfigs...)
	for _, f := range exampleConfigs(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs {
		c := mustParse(t, in)
		roundTrip(t, c)
		out, _ := json.Marshal(c)
		if err := schemaValidate(sch, out); err != nil {
			t.Errorf("schema rejects effective config %s: %v", out, err)
		}
	}
	// TestParseEverything's config sets every field; it must survive too.
	c := mustParse(t, `{"client_ip": {"source": "header", "header": "X-Real-IP"},
	  "backend": {"cluster": "r", "protocol": "upstash", "token": "t", "failure_policy": "deny"},
	  "limits": [{"name": "a", "key": ["header:x", "path"], "override_by": "header:x", "algorithm": "sliding_window",
	    "limit": 3, "window": "1.5s", "overrides": {"<&>": {"requests_per_second": 9}}, "mode": "global",
	    "on_limit": {"action": "delay", "max_delay": "1ms"}, "replaces": ["b"],
	    "match": {"headers": [{"name": "h", "value": ""}, {"name": "g", "present": false}], "hosts": ["*.x.y"]}},
	    {"name": "b", "requests_per_second": 1, "shadow": true}],
	  "breakers": [{"name": "b", "failure_rate": {"window_type": "time"}, "slow_call": {"duration": "1h"}}]}`)
	roundTrip(t, c)
}

func FuzzParse(f *testing.F) {
	for _, in := range goodConfigs {
		f.Add([]byte(in))
	}
	for _, tc := range badCases {
		f.Add([]byte(tc.in))
	}
	if files, _ := filepath.Glob("../../examples/*/config.json"); len(files) > 0 {
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	sch := compileSchema(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if c != nil {
				t.Fatal("config returned with an error")
			}
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %v is not a non-empty Errors", err)
			}
			for _, e := range errs {
				if e.Message == "" || strings.Contains(e.Error(), "\n") {
					t.Fatalf("malformed error %q", e.Error())
				}
			}
			return
		}
		roundTrip(t, c)
		// What Parse accepts, the breaker core must accept too, or the
		// plugin would fail to start on a config that checked clean.
		for i := range c.Breakers {
			set := c.Breakers[i].Settings()
			if err := set.Validate(); err != nil {
				t.Fatalf("Parse accepts breakers[%d] of %q but the breaker core refuses it: %v", i, data, err)
			}
		}
		// The schema is a superset of the parser: anything Parse accepts,
		// the published schema must accept, or operators' editors would
		// flag working configs.
		if err := schemaValidate(sch, data); err != nil {
			t.Fatalf("Parse accepts but the schema rejects %q: %v", data, err)
		}
	})
}
