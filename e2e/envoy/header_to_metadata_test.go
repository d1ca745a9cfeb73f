package envoy

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
	"github.com/sluice-proxy/sluice/internal/fixtures/bootstrap"
)

// h2mYAML is a bootstrap whose chain is header_to_metadata with rules,
// then the wasm filter, then the router.
func h2mYAML(rules string) string {
	return bootstrap.Bootstrap{
		Listener: bootstrap.Listener{
			CodecType: "AUTO", RouteConfigName: "local_route",
			VirtualHosts: []bootstrap.VirtualHost{{Name: "all", Domains: []string{"*"}, Routes: []bootstrap.Route{
				{Match: `prefix: "/"`, Action: "cluster: backend"}}}},
			HTTPFilters: []string{
				"- name: envoy.filters.http.header_to_metadata\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config\n    request_rules:\n" + rules,
				bootstrap.Wasm{Code: "build/sluice.wasm", Configuration: `{}`}.Filter(),
			},
		},
		Clusters: []bootstrap.Cluster{{Name: "backend", Type: "STATIC", ConnectTimeout: time.Second, Endpoints: []string{"127.0.0.1:8081"}}},
	}.YAML()
}

func loadH2M(t *testing.T, rules string) *HeaderToMetadata {
	t.Helper()
	cfg, err := Load([]byte(h2mYAML(rules)))
	if err != nil {
		t.Fatal(err)
	}
	fs := cfg.Listeners[0].HTTPFilters
	if len(fs) != 3 || fs[0].HeaderToMetadata == nil || fs[1].Wasm == nil || !fs[2].Router {
		t.Fatalf("chain %+v", fs)
	}
	return fs[0].HeaderToMetadata
}

func TestHeaderToMetadataRules(t *testing.T) {
	h := loadH2M(t, `
    - header: X-JWT-Sub
      on_header_present: {metadata_namespace: envoy.filters.http.jwt_authn, key: sub, type: STRING}
      on_header_missing: {metadata_namespace: envoy.filters.http.jwt_authn, key: sub, value: anonymous}
      remove: true
    - header: x-version
      on_header_present: {key: version, type: NUMBER}
    - header: x-flag
      on_header_present: {metadata_namespace: flags, key: flag, value: "on"}
    - header: x-empty
      on_header_present: {metadata_namespace: flags, key: empty}
`)
	const defaultNS = "envoy.filters.http.header_to_metadata"
	for _, tc := range []struct {
		name        string
		headers     [][2]string
		want        map[string]map[string]any
		wantHeaders [][2]string
	}{
		{
			name:    "present headers copied, the removed one gone",
			headers: [][2]string{{":path", "/"}, {"x-jwt-sub", "alice"}, {"x-version", " 2.5 "}, {"x-flag", "whatever"}, {"x-empty", ""}},
			want: map[string]map[string]any{
				"envoy.filters.http.jwt_authn": {"sub": "alice"},
				defaultNS:                      {"version": 2.5},
				"flags":                        {"flag": "on"},
			},
			wantHeaders: [][2]string{{":path", "/"}, {"x-version", " 2.5 "}, {"x-flag", "whatever"}, {"x-empty", ""}},
		},
		{
			name:        "missing header takes on_header_missing's value",
			headers:     [][2]string{{":path", "/"}},
			want:        map[string]map[string]any{"envoy.filters.http.jwt_authn": {"sub": "anonymous"}},
			wantHeaders: [][2]string{{":path", "/"}},
		},
		{
			name:        "repeats joined with a comma; a number that does not parse is skipped",
			headers:     [][2]string{{"x-jwt-sub", "a"}, {"x-jwt-sub", "b"}, {"x-version", "v2"}},
			want:        map[string]map[string]any{"envoy.filters.http.jwt_authn": {"sub": "a,b"}},
			wantHeaders: [][2]string{{"x-version", "v2"}},
		},
		{
			name:    "a value of 8 KiB is skipped, the header still removed",
			headers: [][2]string{{"x-jwt-sub", strings.Repeat("a", 8192)}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &host.Request{Headers: tc.headers}
			h.apply(req)
			if !reflect.DeepEqual(req.DynamicMetadata, tc.want) && (len(req.DynamicMetadata) != 0 || len(tc.want) != 0) {
				t.Errorf("metadata %v, want %v", req.DynamicMetadata, tc.want)
			}
			if !reflect.DeepEqual(req.Headers, tc.wantHeaders) && (len(req.Headers) != 0 || len(tc.wantHeaders) != 0) {
				t.Errorf("headers %q, want %q", req.Headers, tc.wantHeaders)
			}
		})
	}
}

func TestHeaderToMetadataConfigErrors(t *testing.T) {
	const rule = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config"
	for _, tc := range []struct{ name, rules, want string }{
		{"missing without value", `
    - header: x-a
      on_header_missing: {key: a}`, rule + ".request_rules[0].on_header_missing.value: Cannot specify on_header_missing rule with empty value"},
		{"no header", `
    - on_header_present: {key: a}`, "One of Cookie or Header option needs to be specified"},
		{"no action", `
    - header: x-a
      remove: true`, "one of on_header_present or on_header_missing"},
		{"no key", `
    - header: x-a
      on_header_present: {value: v}`, "Config_KeyValuePair.Key: value length must be at least 1"},
		{"protobuf value", `
    - header: x-a
      on_header_present: {key: a, type: PROTOBUF_VALUE}`, "PROTOBUF_VALUE is not supported"},
		{"cookie", `
    - cookie: c
      on_header_present: {key: a}`, "Rule.cookie is not supported by sluice-envoy"},
		{"regex rewrite", `
    - header: x-a
      on_header_present: {key: a, regex_value_rewrite: {pattern: {regex: a}, substitution: b}}`, "regex_value_rewrite"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(h2mYAML(tc.rules)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
