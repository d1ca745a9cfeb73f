package envoy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/bootstrap"
)

// zeroSHA is a well-formed sha256 that matches no module.
const zeroSHA = "0000000000000000000000000000000000000000000000000000000000000000"

// baseYAML is a small valid bootstrap; cases derive broken variants from it
// by replacing one marked snippet, so each case differs in exactly one way
// (a snippet that stops matching fails its case as a test bug).
var baseYAML = bootstrap.Bootstrap{
	Listener: bootstrap.Listener{
		CodecType:       "AUTO",
		RouteConfigName: "local_route",
		VirtualHosts: []bootstrap.VirtualHost{{Name: "all", Domains: []string{"*"}, Routes: []bootstrap.Route{
			{Name: "api", Match: `prefix: "/api"`, Action: "cluster: backend, timeout: 2s"},
			{Match: `path: "/exact"`, Action: "cluster: backend"},
		}}},
		HTTPFilters: []string{bootstrap.Wasm{
			RootID: "sluice-root", VMID: "sluice-vm", Code: "build/sluice.wasm",
			Env: map[string]string{"MODE": "test"}, Configuration: `{"limits":[]}`,
		}.Filter()},
	},
	Clusters: []bootstrap.Cluster{{Name: "backend", Type: "STATIC", ConnectTimeout: 500 * time.Millisecond, Endpoints: []string{"127.0.0.1:8081"}}},
}.YAML()

func TestLoadValid(t *testing.T) {
	cfg, err := Load([]byte(baseYAML))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(cfg.Listeners) != 1 || cfg.Listeners[0].Address != "127.0.0.1:0" || cfg.Listeners[0].StatPrefix != "ingress_http" {
		t.Fatalf("listeners = %+v", cfg.Listeners)
	}
	l := cfg.Listeners[0]
	if l.UseRemoteAddress || !l.GenerateRequestID {
		t.Errorf("defaults: use_remote_address=%v generate_request_id=%v, want false/true", l.UseRemoteAddress, l.GenerateRequestID)
	}
	routes := l.VirtualHosts[0].Routes
	if routes[0].Name != "api" || routes[0].Prefix != "/api" || routes[0].Timeout != 2*time.Second {
		t.Errorf("route 0 = %+v", routes[0])
	}
	if routes[1].Path != "/exact" || routes[1].Timeout != DefaultRouteTimeout {
		t.Errorf("route 1 = %+v, want exact path and the 15s default timeout", routes[1])
	}
	if len(l.HTTPFilters) != 2 || l.HTTPFilters[0].Wasm == nil || !l.HTTPFilters[1].Router {
		t.Fatalf("http filters = %+v", l.HTTPFilters)
	}
	w := l.HTTPFilters[0].Wasm
	cwd, _ := os.Getwd()
	if w.Name != "sluice" || w.RootID != "sluice-root" || w.VMID != "sluice-vm" || w.Runtime != "envoy.wasm.runtime.v8" {
		t.Errorf("wasm ids = %+v", w)
	}
	if w.CodeFile != filepath.Join(cwd, "build/sluice.wasm") {
		t.Errorf("CodeFile = %q, want it resolved against the working directory", w.CodeFile)
	}
	if string(w.Configuration) != `{"limits":[]}` || w.Environment["MODE"] != "test" {
		t.Errorf("configuration = %q env = %v", w.Configuration, w.Environment)
	}
	if c := cfg.Clusters[0]; c.Name != "backend" || c.Type != "STATIC" || c.ConnectTimeout != 500*time.Millisecond || c.Endpoints[0] != "127.0.0.1:8081" {
		t.Errorf("cluster = %+v", c)
	}
	if cfg.Admin == nil || cfg.Admin.Address != "127.0.0.1:0" {
		t.Errorf("admin = %+v", cfg.Admin)
	}
}

func TestLoadErrors(t *testing.T) {
	const hcmPath = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config"
	tests := []struct {
		name     string
		old, new string // replace old with new in baseYAML
		wantErr  []string
	}{
		{
			name: "unknown top-level field",
			old:  "admin:\n", new: "bogus_field: 1\nadmin:\n",
			wantErr: []string{"bogus_field", `unknown field "bogus_field"`, "line "},
		},
		{
			name: "unknown field inside the HCM Any",
			old:  "stat_prefix: ingress_http", new: "stat_prefx: ingress_http",
			wantErr: []string{hcmPath + ".stat_prefx", "unknown field"},
		},
		{
			name: "unknown field inside the wasm Any inside the HCM Any",
			old:  "root_id: sluice-root", new: "root_idd: sluice-root",
			wantErr: []string{hcmPath + ".http_filters[0].typed_config.config.root_idd", "unknown field"},
		},
		{
			name: "known but unsupported HCM field",
			old:  "codec_type: AUTO", new: "codec_type: AUTO\n          xff_num_trusted_hops: 1",
			wantErr: []string{hcmPath + ".xff_num_trusted_hops", "not supported"},
		},
		{
			name: "known but unsupported cluster field",
			old:  "connect_timeout: 0.5s", new: "connect_timeout: 0.5s\n    per_connection_buffer_limit_bytes: 1024",
			wantErr: []string{"static_resources.clusters[0].per_connection_buffer_limit_bytes", "not supported"},
		},
		{
			name: "unsupported route action",
			old:  "route: { cluster: backend }", new: "direct_response: { status: 200 }",
			wantErr: []string{"routes[1].direct_response", "not supported"},
		},
		{
			name: "remote wasm code with a retry policy",
			old:  "code: { local: { filename: build/sluice.wasm } }", new: "code: { remote: { http_uri: { uri: 'http://x/a.wasm', cluster: backend, timeout: 1s }, sha256: '" + zeroSHA + "', retry_policy: {} } }",
			wantErr: []string{"vm_config.code.remote.retry_policy", "not supported"},
		},
		{
			name: "remote wasm code without sha256",
			old:  "code: { local: { filename: build/sluice.wasm } }", new: "code: { remote: { http_uri: { uri: 'http://x/a.wasm', cluster: backend, timeout: 1s } } }",
			wantErr: []string{"Sha256"},
		},
		{
			name: "remote wasm code with an upper-case sha256",
			old:  "code: { local: { filename: build/sluice.wasm } }", new: "code: { remote: { http_uri: { uri: 'http://x/a.wasm', cluster: backend, timeout: 1s }, sha256: " + strings.ToUpper(zeroSHA[:63]) + "A } }",
			wantErr: []string{"vm_config.code.remote.sha256", "64 lowercase hex digits"},
		},
		{
			name: "remote wasm code through an unknown cluster",
			old:  "code: { local: { filename: build/sluice.wasm } }", new: "code: { remote: { http_uri: { uri: 'http://x/a.wasm', cluster: nowhere, timeout: 1s }, sha256: '" + zeroSHA + "' } }",
			wantErr: []string{"vm_config.code.remote.http_uri.cluster", "unknown cluster 'nowhere'"},
		},
		{
			name: "remote wasm code with a relative URI",
			old:  "code: { local: { filename: build/sluice.wasm } }", new: "code: { remote: { http_uri: { uri: '/a.wasm', cluster: backend, timeout: 1s }, sha256: '" + zeroSHA + "' } }",
			wantErr: []string{"vm_config.code.remote.http_uri.uri", "absolute"},
		},
		{
			name: "remote wasm code without a timeout",
			old:  "code: { local: { filename: build/sluice.wasm } }", new: "code: { remote: { http_uri: { uri: 'http://x/a.wasm', cluster: backend }, sha256: '" + zeroSHA + "' } }",
			wantErr: []string{"HttpUri.Timeout", "required"},
		},
		{
			name: "PGV rule inside an Any",
			old:  "stat_prefix: ingress_http", new: `stat_prefix: ""`,
			wantErr: []string{hcmPath, "HttpConnectionManager", "StatPrefix"},
		},
		{
			name: "PGV rule on the bootstrap",
			old:  "port_value: 8081", new: "port_value: 70000",
			wantErr: []string{"invalid bootstrap", "PortValue"},
		},
		{
			name: "Any of an unsupported type",
			old:  "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router", new: "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors",
			wantErr: []string{"http_filters[1].typed_config.@type", "not supported"},
		},
		{
			name: "wrong scalar type for a message field",
			old:  "route_config:\n", new: "route_config: 7\n          unused_route_config:\n",
			wantErr: []string{hcmPath + ".route_config", "expected a mapping"},
		},
		{
			name: "bad enum value",
			old:  "codec_type: AUTO", new: "codec_type: SPDY",
			wantErr: []string{hcmPath + ".codec_type", `invalid value "SPDY"`, "HTTP1"},
		},
		{
			name: "unsupported codec",
			old:  "codec_type: AUTO", new: "codec_type: HTTP2",
			wantErr: []string{hcmPath + ".codec_type", "not supported"},
		},
		{
			name: "route to an unknown cluster",
			old:  "route: { cluster: backend, timeout: 2s }", new: "route: { cluster: nowhere }",
			wantErr: []string{"routes[0].route.cluster", "unknown cluster 'nowhere'"},
		},
		{
			name: "cluster_header that is no header name",
			old:  "route: { cluster: backend, timeout: 2s }", new: `route: { cluster_header: "x pick" }`,
			wantErr: []string{"routes[0].route.cluster_header", "not a valid header name"},
		},
		{
			name: "header matcher we do not implement",
			old:  `match: { prefix: "/api" }`, new: `match: { prefix: "/api", headers: [{ name: x-a, prefix_match: b }] }`,
			wantErr: []string{"headers[0].prefix_match", "not supported"},
		},
		{
			name: "string_match other than exact",
			old:  `match: { prefix: "/api" }`, new: `match: { prefix: "/api", headers: [{ name: x-a, string_match: { prefix: b } }] }`,
			wantErr: []string{"string_match.prefix", "not supported"},
		},
		{
			name: "router not last",
			old: `          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm`,
			new: `          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm`,
			wantErr: []string{"http_filters[0]", "must be the last filter"},
		},
		{
			name: "wasm filter last",
			old:  "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router", new: "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
			wantErr: []string{"http_filters[1]", "non-terminal filter", "of type " + WasmFilterName, "is the last filter"},
		},
		{
			name: "header_to_metadata filter last",
			old:  "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router", new: "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
			wantErr: []string{"http_filters[1]", "non-terminal filter", "of type " + HeaderToMetadataFilterName, "is the last filter"},
		},
		{
			name: "STATIC cluster with a host name",
			old:  "address: 127.0.0.1, port_value: 8081", new: "address: localhost, port_value: 8081",
			wantErr: []string{"clusters[0].load_assignment.endpoints[0].lb_endpoints[0]", "malformed IP address"},
		},
		{
			name: "null wasm runtime",
			old:  "runtime: envoy.wasm.runtime.v8", new: "runtime: envoy.wasm.runtime.null",
			wantErr: []string{"vm_config.runtime", "not supported"},
		},
		{
			name: "runtime override layer",
			old:  "admin:\n", new: "layered_runtime:\n  layers:\n  - name: static\n    static_layer: { a: 1 }\nadmin:\n",
			wantErr: []string{"layered_runtime.layers[0].static_layer", "not supported"},
		},
		{
			name: "configuration of an unsupported type",
			old:  "type.googleapis.com/google.protobuf.StringValue", new: "type.googleapis.com/google.protobuf.Int32Value",
			wantErr: []string{"config.configuration.@type", "not supported"},
		},
		{
			name: "duplicate cluster",
			old:  "admin:\n", new: "  - name: backend\n    type: STATIC\n    load_assignment: { cluster_name: backend }\nadmin:\n",
			wantErr: []string{"static_resources.clusters[1].name", "duplicate cluster 'backend'"},
		},
		{
			name: "YAML syntax",
			old:  "stat_prefix: ingress_http", new: "stat_prefix: [unclosed",
			wantErr: []string{"envoy config:"},
		},
		{
			name: "duplicate YAML key",
			old:  "stat_prefix: ingress_http", new: "stat_prefix: a\n          stat_prefix: b",
			wantErr: []string{"duplicate key", "stat_prefix"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(baseYAML, tc.old) {
				t.Fatalf("test bug: %q not in baseYAML", tc.old)
			}
			y := strings.Replace(baseYAML, tc.old, tc.new, 1)
			err := ValidateYAML([]byte(y))
			if err == nil {
				t.Fatalf("ValidateYAML accepted the config; want an error containing %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestLoadAccepts(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		check    func(t *testing.T, cfg *Config)
	}{
		{
			// Envoy parses enums case-insensitively; published configs rely
			// on it.
			name: "lower-case enum",
			old:  "codec_type: AUTO", new: "codec_type: auto",
		},
		{
			name: "Struct configuration becomes JSON",
			old: `configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: '{"limits":[]}'`,
			new: `configuration:
                  "@type": type.googleapis.com/google.protobuf.Struct
                  value: { limits: [] }`,
			check: func(t *testing.T, cfg *Config) {
				if got := string(cfg.Listeners[0].HTTPFilters[0].Wasm.Configuration); got != `{"limits":[]}` {
					t.Errorf("configuration = %q", got)
				}
			},
		},
		{
			name: "camelCase field names, as protobuf JSON allows",
			old:  "stat_prefix: ingress_http", new: "statPrefix: ingress_http",
		},
		{
			name: "fail_open and failure_policy are passed through",
			old:  "root_id: sluice-root", new: "root_id: sluice-root\n                fail_open: true\n                failure_policy: FAIL_RELOAD",
			check: func(t *testing.T, cfg *Config) {
				w := cfg.Listeners[0].HTTPFilters[0].Wasm
				if !w.FailOpen || w.FailurePolicy != "FAIL_RELOAD" {
					t.Errorf("fail_open=%v failure_policy=%q", w.FailOpen, w.FailurePolicy)
				}
			},
		},
		{
			name: "safe_regex route",
			old:  `match: { path: "/exact" }`, new: `match: { safe_regex: { regex: "/v[0-9]+/items" } }`,
			check: func(t *testing.T, cfg *Config) {
				re := cfg.Listeners[0].VirtualHosts[0].Routes[1].Regex
				if re == nil || !re.MatchString("/v2/items") || re.MatchString("/v2/items/x") {
					t.Errorf("regex %v must match the whole path", re)
				}
			},
		},
		{
			name: "node is accepted",
			old:  "admin:\n", new: "node: { id: sluice-1, cluster: edge }\nadmin:\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(baseYAML, tc.old) {
				t.Fatalf("test bug: %q not in baseYAML", tc.old)
			}
			cfg, err := Load([]byte(strings.Replace(baseYAML, tc.old, tc.new, 1)))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if tc.check != nil {
				tc.check(t, cfg)
			}
		})
	}
}

func TestYAMLAliasesExpand(t *testing.T) {
	y := strings.Replace(baseYAML,
		"    address:\n      socket_address: { address: 127.0.0.1, port_value: 0 }",
		"    address: &addr { socket_address: &sa { address: 127.0.0.1, port_value: 9 } }", 1)
	y = strings.Replace(y, "admin:\n  address: { socket_address: { address: 127.0.0.1, port_value: 0 } }", "admin:\n  address: *addr", 1)
	// A merge key with an explicit override: explicit keys win.
	y = strings.Replace(y, "- endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8081 } } }",
		"- endpoint: { address: { socket_address: { <<: *sa, port_value: 8082 } } }", 1)
	cfg, err := Load([]byte(y))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := cfg.Admin.Address; got != "127.0.0.1:9" {
		t.Errorf("admin address via alias = %q, want 127.0.0.1:9", got)
	}
	if got := cfg.Clusters[0].Endpoints[0]; got != "127.0.0.1:8082" {
		t.Errorf("endpoint via merge key = %q, want 127.0.0.1:8082", got)
	}
}

func TestPluginConfigurations(t *testing.T) {
	refs, err := PluginConfigurations([]byte(baseYAML))
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 {
		t.Fatalf("got %d refs, want 1", len(refs))
	}
	r := refs[0]
	if r.Configuration != `{"limits":[]}` || r.Listener != "main" || r.RootID != "sluice-root" || r.VMID != "sluice-vm" ||
		r.Path != "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0]" {
		t.Errorf("ref = %+v", r)
	}
}

// TestRepoEnvoyYAML keeps envoy/envoy.yaml loadable and saying what the
// README promises.
func TestRepoEnvoyYAML(t *testing.T) {
	cfg, err := LoadFile("../../envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Listeners) != 1 || cfg.Listeners[0].Address != "127.0.0.1:10000" {
		t.Fatalf("listeners = %+v", cfg.Listeners)
	}
	w := cfg.Listeners[0].HTTPFilters[0].Wasm
	if w == nil || w.VMID != "sluice" || w.RootID != "sluice" || w.Runtime != "envoy.wasm.runtime.v8" || !strings.HasSuffix(w.CodeFile, "build/sluice.wasm") {
		t.Errorf("wasm filter = %+v", w)
	}
	byName := map[string]*Cluster{}
	for _, c := range cfg.Clusters {
		byName[c.Name] = c
	}
	if c := byName["backend"]; c == nil || c.Endpoints[0] != "127.0.0.1:8081" {
		t.Errorf("backend cluster = %+v", c)
	}
	if c := byName["webdis"]; c == nil || c.Type != "STRICT_DNS" || c.Endpoints[0] != "127.0.0.1:7379" {
		t.Errorf("webdis cluster = %+v", c)
	}
	if cfg.Admin == nil || cfg.Admin.Address != "127.0.0.1:9901" {
		t.Errorf("admin = %+v", cfg.Admin)
	}
	// sluice_breaker_instance comes before sluice_breaker, so the instance
	// is cut from a per-instance state gauge's name first
	// (TestExampleBreaker checks the labelled series end to end).
	if len(cfg.StatsTags) != 4 {
		t.Fatalf("stats tags = %+v", cfg.StatsTags)
	}
	// Envoy extracts tags from the full name, which for wasm metrics
	// carries the wasmcustom. namespace; the regexes must work with and
	// without it. Group 1 is cut from the name, group 2 is the value.
	for _, tc := range []struct{ name, tag, value, rest string }{
		{"wasmcustom.sluice.limit.api-per-ip.allowed", "sluice_limit", "api-per-ip", "wasmcustom.sluice.limit.allowed"},
		{"sluice.limit.api-per-ip.allowed", "sluice_limit", "api-per-ip", "sluice.limit.allowed"},
		{"wasmcustom.sluice.breaker.backend.state", "sluice_breaker", "backend", "wasmcustom.sluice.breaker.state"},
		{"wasmcustom.sluice.concurrency.search.in_flight", "sluice_concurrency", "search", "wasmcustom.sluice.concurrency.in_flight"},
	} {
		var hit bool
		for _, ts := range cfg.StatsTags {
			m := regexp.MustCompile(ts.Regex).FindStringSubmatchIndex(tc.name)
			if m == nil {
				continue
			}
			hit = true
			if ts.Name != tc.tag || tc.name[m[4]:m[5]] != tc.value || tc.name[:m[2]]+tc.name[m[3]:] != tc.rest {
				t.Errorf("%s: tag %s=%q rest %q; want %s=%q rest %q", tc.name, ts.Name, tc.name[m[4]:m[5]], tc.name[:m[2]]+tc.name[m[3]:], tc.tag, tc.value, tc.rest)
			}
		}
		if !hit {
			t.Errorf("%s: no stats tag matched", tc.name)
		}
	}
	if m := regexp.MustCompile(cfg.StatsTags[0].Regex).MatchString("wasmcustom.sluice.requests_total"); m {
		t.Errorf("sluice.requests_total must stay unlabelled")
	}
}

// TestLoadMerged follows Envoy's --config-path plus --config-yaml: the YAML
// is merged over the file, repeated fields appended.
func TestLoadMerged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, []byte(baseYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	extra := `
static_resources:
  clusters:
  - name: extra
    type: STATIC
    load_assignment:
      cluster_name: extra
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.2, port_value: 80 } } } }] }]
admin:
  address: { socket_address: { address: 127.0.0.1, port_value: 9902 } }
`
	cfg, err := LoadMerged(path, extra)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Clusters) != 2 || cfg.Clusters[1].Name != "extra" || cfg.Admin.Address != "127.0.0.1:9902" {
		t.Errorf("merged clusters %+v admin %+v", cfg.Clusters, cfg.Admin)
	}
	if _, err := LoadMerged("", extra); err != nil {
		t.Errorf("--config-yaml alone: %v", err)
	}
	if _, err := LoadMerged(path, "bogus: 1"); err == nil || !strings.Contains(err.Error(), "--config-yaml") {
		t.Errorf("bad --config-yaml error = %v, want it attributed to the flag", err)
	}
	if _, err := LoadMerged("", ""); err == nil {
		t.Error("no config at all was accepted")
	}
}

// FuzzLoad feeds arbitrary bytes to the loader: wrong config must come back
// as an error, never a panic.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(baseYAML))
	if b, err := os.ReadFile("../../envoy/envoy.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte("static_resources: {listeners: [{address: {socket_address: {}}}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Load(data)
		if err == nil && cfg == nil {
			t.Fatal("nil config without an error")
		}
	})
}

// TestYAMLBombRejected: aliases that expand exponentially are refused
// quickly instead of exhausting memory.
func TestYAMLBombRejected(t *testing.T) {
	var b strings.Builder
	b.WriteString("l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	err := ValidateYAML([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("err = %v, want the expansion limit", err)
	}
}
