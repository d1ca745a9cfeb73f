package config

import (
	"encoding/json"
	"reflect"
	"testing"
)

func init() {
	addCases(rolloutGoodConfigs, rolloutBadCases)
}

var rolloutGoodConfigs = []string{
	lim(`, "rollout": {"enabled_percent": 12.5, "enforced_percent": 0}`),
	lim(`, "rollout": {}, "upstream_headers_when_limited": {}`),
	lim(`, "shadow": true, "upstream_headers_when_limited": {"x-ratelimit-would-limit": "true", "X-Limit-Name": "a b", "x-empty": ""}`),
}

var rolloutBadCases = []badCase{
	{name: "percent above 100", in: lim(`, "rollout": {"enabled_percent": 100.5, "enforced_percent": -1}`),
		want: []string{"limits[0].rollout.enabled_percent: must be from 0 to 100, got 100.5",
			"limits[0].rollout.enforced_percent: must be from 0 to 100, got -1"}},
	{name: "percent not a number", in: lim(`, "rollout": {"enabled_percent": "50"}`),
		want: []string{"limits[0].rollout.enabled_percent: must be a number from 0 to 100"}},
	{name: "rollout unknown field", in: lim(`, "rollout": {"percent": 5}`),
		want: []string{"limits[0].rollout.percent: unknown field"}},
	{name: "upstream header name not a token", in: lim(`, "upstream_headers_when_limited": {"x bad": "1", "x-ok": "1"}`),
		want: []string{`limits[0].upstream_headers_when_limited["x bad"]: must be a header name (an RFC 9110 token of at most 256 characters)`}},
	{name: "upstream header pseudo and host", in: lim(`, "upstream_headers_when_limited": {":path": "/", "Host": "x"}`),
		want: []string{`limits[0].upstream_headers_when_limited[":path"]: must be a header name (an RFC 9110 token of at most 256 characters)`,
			`limits[0].upstream_headers_when_limited.Host: host is framing, not a header the filter may set`}},
	{name: "upstream header value with newline", in: lim(`, "upstream_headers_when_limited": {"x-a": "1\r\nx-b: 2", "x-c": " padded", "x-d": 5}`),
		want: []string{"limits[0].upstream_headers_when_limited.x-a: must be a header value: at most 4096 visible characters, spaces or tabs, without leading or trailing whitespace",
			"limits[0].upstream_headers_when_limited.x-c: must be a header value: at most 4096 visible characters, spaces or tabs, without leading or trailing whitespace",
			"limits[0].upstream_headers_when_limited.x-d: must be a string"}},
	// JSON Schema cannot compare property names case-insensitively.
	{name: "upstream header twice", in: lim(`, "upstream_headers_when_limited": {"x-a": "1", "X-A": "2"}`),
		want: []string{"limits[0].upstream_headers_when_limited.X-A: duplicate header (names are case-insensitive)"}, schemaAccepts: true},
	{name: "upstream headers not an object", in: lim(`, "upstream_headers_when_limited": ["x-a"]`),
		want: []string{"limits[0].upstream_headers_when_limited: must be an object of header name to value"}},
}

func TestParseRollout(t *testing.T) {
	c := mustParse(t, lim(`, "rollout": {"enabled_percent": 0.5}, "upstream_headers_when_limited": {"X-Would": "true", "a-first": "x"}`))
	l := c.Limits[0]
	if want := (Rollout{EnabledPercent: 0.5, EnforcedPercent: 100}); l.Rollout != want {
		t.Errorf("rollout = %+v, want %+v", l.Rollout, want)
	}
	// Lowercased and sorted, so the effective configuration round-trips.
	if want := [][2]string{{"a-first", "x"}, {"x-would", "true"}}; !reflect.DeepEqual(l.UpstreamHeadersWhenLimited, want) {
		t.Errorf("headers = %q, want %q", l.UpstreamHeadersWhenLimited, want)
	}
	if got := PerMillion(l.Rollout.EnabledPercent); got != 5000 {
		t.Errorf("PerMillion(0.5) = %d", got)
	}
}

// TestRolloutAndResponseSchemaDefaults keeps the schema's defaults of
// rollout's, response's and its templates' fields equal to the parser's.
func TestRolloutAndResponseSchemaDefaults(t *testing.T) {
	var s map[string]any
	if err := json.Unmarshal(Schema(), &s); err != nil {
		t.Fatal(err)
	}
	at := func(path ...string) any {
		var v any = s
		for _, p := range path {
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("schema has no %v", path)
			}
			v = m[p]
		}
		return v
	}
	c := mustParse(t, lim(``))
	r := c.Response
	checks := []struct {
		schema, parser any
	}{
		{at("$defs", "limit", "properties", "rollout", "properties", "enabled_percent", "default"), c.Limits[0].Rollout.EnabledPercent},
		{at("$defs", "limit", "properties", "rollout", "properties", "enforced_percent", "default"), c.Limits[0].Rollout.EnforcedPercent},
		{at("properties", "response", "properties", "near_limit_ratio", "default"), r.NearLimitRatio},
		{at("properties", "response", "properties", "grpc", "default"), !r.PlainGRPC},
		{at("properties", "response", "properties", "templates", "properties", "content_type", "default"), DefaultTemplateContentType},
	}
	for i, ch := range checks {
		if ch.schema != ch.parser {
			t.Errorf("check %d: schema default %v, parser default %v", i, ch.schema, ch.parser)
		}
	}
}
