package ops

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/ops/yamlbound"
)

// bootstrap is an Envoy bootstrap with one HTTP connection manager
// holding filters (YAML list items indented for http_filters).
func bootstrap(useRemoteAddress bool, filters string) string {
	ura := ""
	if useRemoteAddress {
		ura = "\n                use_remote_address: true"
	}
	return `static_resources:
  listeners:
    - name: ingress
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: ingress_http` + ura + `
                http_filters:
` + filters + `
                  - name: envoy.filters.http.router
`
}

// inlineSluice is a wasm filter carrying cfg as a StringValue.
func inlineSluice(cfg string) string {
	return `                  - name: envoy.filters.http.wasm
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
                      config:
                        root_id: sluice
                        vm_config:
                          code: {local: {filename: build/sluice.wasm}}
                        configuration:
                          "@type": type.googleapis.com/google.protobuf.StringValue
                          value: |
                            ` + cfg
}

// writeFiles writes name: content files into dir and returns their
// paths, by name.
func writeFiles(t *testing.T, dir string, files map[string]string) map[string]string {
	t.Helper()
	paths := map[string]string{}
	for name, content := range files {
		paths[name] = filepath.Join(dir, name)
		if err := os.WriteFile(paths[name], []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return paths
}

const grpcConfig = `{"external": {"grpc": {"cluster": "limits-grpc"}, "fallback": {"requests_per_second": 1}}}`

// grpcCluster is a clusters section, to append to bootstrap's, defining
// limits-grpc with extra fields.
func grpcCluster(extra string) string {
	return `  clusters:
    - name: limits-grpc
      type: STATIC` + extra + `
`
}

const xffConfig = `{"client_ip": {"source": "xff", "trusted_hops": 1}, "limits": [{"name": "per-ip", "requests_per_second": 5}]}`

// peerConfig keys two limits and a concurrency limit on the peer's
// address, and one limit on a header.
const peerConfig = `{"limits": [{"name": "per-ip", "requests_per_second": 5}, {"name": "per-subnet", "key": ["client_ip/24/56"], "requests_per_second": 50}, ` +
	`{"name": "per-tenant", "key": ["header:x-tenant"], "requests_per_second": 5}], "concurrency": [{"name": "c", "key": ["client_ip"], "max_in_flight": 2}]}`

// adminOnlyConfig has the admin route and no client_ip key.
const adminOnlyConfig = `{"admin": {"client_cidrs": ["10.0.0.0/8"], "token_sha256": "757224ba37701e155c211a2dc2ed5debaf36faba66aa0cde42587cfc27fa1c30"}}`

// peerAndAdmin keys on the peer and has the admin route: both warnings
// that use_remote_address decides.
const peerAndAdmin = `{"limits": [{"name": "per-ip", "requests_per_second": 5}], ` +
	`"admin": {"client_cidrs": ["10.0.0.0/8"], "token_sha256": "757224ba37701e155c211a2dc2ed5debaf36faba66aa0cde42587cfc27fa1c30"}}`

const ecdsFile = `resources:
  - "@type": type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig
    name: sluice
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
      config:
        name: sluice
        configuration:
          "@type": type.googleapis.com/google.protobuf.Struct
          value:
            client_ip: {source: xff}
            limits:
              - {name: a, requests_per_second: 1, burst: -1}
`

func TestCheck(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		args  []string // file names, in order; default: the only file
		exit  int
		// out are substrings of the text output, in order.
		out []string
		// absent must not appear in the output.
		absent []string
	}{
		{name: "an empty JSON file is the empty configuration", files: map[string]string{"c.json": ""},
			out: []string{"1 configuration(s) checked: 0 error(s)"}},
		{name: "valid JSON", files: map[string]string{"c.json": `{"limits": [{"name": "a", "requests_per_second": 1}]}`},
			out: []string{"1 configuration(s) checked: 0 error(s), 0 warning(s)"}},
		{name: "every JSON error at once, with its path", exit: 1,
			files: map[string]string{"c.json": `{"limits": [{"name": "a", "requests_per_second": 1, "burst": -1}, {"name": "b bad", "requests_per_second": 0}]}`},
			out:   []string{"c.json: error: limits[0].burst: must be >= 0", "c.json: error: limits[1].name:", "c.json: error: limits[1].requests_per_second:", "3 error(s)"}},
		// 150 unknown fields and 49 duplicate names: 100 listed, 99 counted.
		{name: "errors past the listed ones count in the total, not as an error of their own", exit: 1,
			files:  map[string]string{"c.json": `{"limits": [` + strings.TrimSuffix(strings.Repeat(`{"name": "a", "requests_per_second": 1, "x": 1, "y": 2, "z": 3},`, 50), ",") + `]}`},
			out:    []string{"c.json: error: limits[0].x: unknown field", "and 99 more error(s), not listed", "199 error(s)"},
			absent: []string{"error: and"}},
		{name: "external.grpc is known, and errors in it have their paths", exit: 1,
			files: map[string]string{"c.json": `{"external": {"cluster": "limits", "grpc": {"cluster": "limits-grpc", "codec": "xml",
				"initial_metadata": {"te": "trailers"}}, "fallback": {"requests_per_second": 1}}}`},
			out: []string{"c.json: error: external.cluster: the HTTP service's; external.grpc is given",
				`c.json: error: external.grpc.codec: unknown value "xml"; want one of proto, json`,
				"c.json: error: external.grpc.initial_metadata.te: is set by the gRPC client itself", "3 error(s)"}},
		{name: "a gRPC limits cluster without HTTP/2", files: map[string]string{"envoy.yaml": bootstrap(true, inlineSluice(grpcConfig)) + grpcCluster("")},
			out: []string{`warning: external.grpc.cluster: cluster "limits-grpc" (line 25) does not speak HTTP/2 to its endpoints`,
				"[grpc_cluster_without_http2]", "0 error(s), 1 warning(s)"}},
		{name: "a gRPC limits cluster with HTTP/2", files: map[string]string{"envoy.yaml": bootstrap(true, inlineSluice(grpcConfig)) + grpcCluster(`
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config: {http2_protocol_options: {}}`)},
			out: []string{"0 error(s), 0 warning(s)"}},
		{name: "a gRPC limits cluster with the deprecated http2_protocol_options", files: map[string]string{
			"envoy.yaml": bootstrap(true, inlineSluice(grpcConfig)) + grpcCluster("\n      http2_protocol_options: {}")},
			out: []string{"0 error(s), 0 warning(s)"}},
		{name: "an HTTP limits cluster needs no HTTP/2", files: map[string]string{
			"envoy.yaml": bootstrap(true, inlineSluice(`{"external": {"cluster": "limits-grpc", "fallback": {"requests_per_second": 1}}}`)) + grpcCluster("")},
			out: []string{"0 error(s), 0 warning(s)"}},
		{name: "valid external.grpc", files: map[string]string{"c.json": `{"external": {"grpc": {"cluster": "limits-grpc",
				"initial_metadata": {"x-team": "payments"}}, "fallback": {"requests_per_second": 1}}}`},
			out: []string{"1 configuration(s) checked: 0 error(s), 0 warning(s)"}},
		{name: "YAML error names the line and node", exit: 1,
			files: map[string]string{"envoy.yaml": bootstrap(true, inlineSluice(`{"limits": [{"name": "a", "requests_per_second": 1, "burst": -1}]}`))},
			out:   []string{"envoy.yaml:22 (static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config.config.configuration.value): error: limits[0].burst: must be >= 0"}},
		{name: "xff without use_remote_address", files: map[string]string{"envoy.yaml": bootstrap(false, inlineSluice(xffConfig))},
			out: []string{"envoy.yaml:21", "warning: client_ip: reads X-Forwarded-For, but the HTTP connection manager at envoy.yaml:8 does not set use_remote_address: true", "[xff_without_use_remote_address]"}},
		{name: "xff with use_remote_address", files: map[string]string{"envoy.yaml": bootstrap(true, inlineSluice(xffConfig))},
			out: []string{"0 error(s), 0 warning(s)"}},
		{name: "peer keys without use_remote_address", files: map[string]string{"envoy.yaml": bootstrap(false, inlineSluice(peerConfig))},
			out: []string{"warning: client_ip: limits[0].key (per-ip), limits[1].key (per-subnet), concurrency[0].key (c) key on client_ip from the peer (source.address), " +
				"but the HTTP connection manager at envoy.yaml:8 does not set use_remote_address: true, so Envoy takes source.address from the last X-Forwarded-For entry",
				"[peer_without_use_remote_address]", "1 warning(s)"},
			absent: []string{"per-tenant"}},
		{name: "peer keys with use_remote_address", files: map[string]string{"envoy.yaml": bootstrap(true, inlineSluice(peerConfig))},
			out: []string{"0 error(s), 0 warning(s)"}},
		{name: "peer keys in a plain JSON file cannot be judged", files: map[string]string{"c.json": peerConfig},
			out: []string{"0 error(s), 0 warning(s)"}},
		{name: "the admin route without use_remote_address", files: map[string]string{"envoy.yaml": bootstrap(false, inlineSluice(adminOnlyConfig))},
			out: []string{"warning: admin: the HTTP connection manager at envoy.yaml:8 does not set use_remote_address: true", "refuses every such call", "(no X-Forwarded-For, or a last entry Envoy cannot parse as an address)",
				"[admin_without_use_remote_address]", "1 warning(s)"}},
		{name: "the admin route with use_remote_address", files: map[string]string{"envoy.yaml": bootstrap(true, inlineSluice(adminOnlyConfig))},
			out: []string{"0 error(s), 0 warning(s)"}},
		{name: "use_remote_address: True is true, as Envoy reads it", files: map[string]string{"envoy.yaml": strings.Replace(bootstrap(true, inlineSluice(peerAndAdmin)),
			"use_remote_address: true", "use_remote_address: True", 1)},
			out: []string{"0 error(s), 0 warning(s)"}},
		{name: "a quoted use_remote_address is refused, as Envoy refuses it", exit: 1, files: map[string]string{"envoy.yaml": strings.Replace(bootstrap(true, inlineSluice(peerAndAdmin)),
			"use_remote_address: true", `use_remote_address: "true"`, 1)},
			out: []string{`error: the HTTP connection manager at envoy.yaml:10: use_remote_address: the quoted string "true" is not a YAML boolean, which Envoy refuses here: write true or false`,
				"1 error(s), 0 warning(s)"}},
		{name: "xff in a plain JSON file cannot be judged", files: map[string]string{"c.json": xffConfig},
			out: []string{"0 error(s), 0 warning(s)"}},
		{name: "ECDS file named by the bootstrap, in the bootstrap's HCM", exit: 1,
			files: map[string]string{"envoy.yaml": bootstrap(false, `                  - name: sluice
                    config_discovery:
                      config_source: {path_config_source: {path: somewhere/sluice-filter.yaml}}
                      type_urls: [type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm]`), "sluice-filter.yaml": ecdsFile},
			args: []string{"envoy.yaml"},
			out:  []string{"sluice-filter.yaml:11 (resources[0].typed_config.config.configuration.value): error: limits[0].burst: must be >= 0"}},
		{name: "ECDS file on its own", exit: 1, files: map[string]string{"sluice-filter.yaml": ecdsFile},
			out: []string{"sluice-filter.yaml:11", "limits[0].burst: must be >= 0"}, absent: []string{"[xff"}},
		{name: "a missing ECDS file", exit: 1,
			files: map[string]string{"envoy.yaml": bootstrap(true, `                  - name: sluice
                    config_discovery:
                      config_source: {path_config_source: {path: nowhere.yaml}}
                      type_urls: [type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm]`)},
			out: []string{`cannot read the ECDS file "nowhere.yaml"`}},
		{name: "Istio WasmPlugin", exit: 1, files: map[string]string{"wp.yaml": `apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: sluice}
spec:
  url: oci://example/sluice:1
  pluginConfig:
    limits:
      - name: a
        requests_per_second: 0
`}, out: []string{"wp.yaml:7 (spec.pluginConfig): error: limits[0].requests_per_second:"}},
		{name: "no Sluice filter", exit: 1, files: map[string]string{"envoy.yaml": bootstrap(true, `                  - name: other
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
                      config: {root_id: other, configuration: {"@type": type.googleapis.com/google.protobuf.StringValue, value: "not json"}}`)},
			out: []string{"no Sluice filter found"}},
		{name: "a configuration type Envoy does not pass", exit: 1, files: map[string]string{"envoy.yaml": bootstrap(true, `                  - name: s
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
                      config: {root_id: sluice, configuration: {"@type": type.googleapis.com/google.protobuf.Int64Value, value: 3}}`)},
			out: []string{`configuration type "type.googleapis.com/google.protobuf.Int64Value" is not passed to a module`}},
		{name: "YAML syntax error", exit: 1, files: map[string]string{"envoy.yaml": "a: [b\n"}, out: []string{"envoy.yaml: error: envoy.yaml: yaml:"}},
		{name: "a disabled limit never matches", files: map[string]string{"c.json": `{"limits": [{"name": "a", "requests_per_second": 1, "enabled": false}]}`},
			out: []string{`c.json: warning: limits[0]: never matches: "enabled" is false: the limit is never evaluated [never_matches]`}},
		{name: "a header required absent and present", files: map[string]string{"c.json": `{"limits": [{"name": "a", "requests_per_second": 1,
			"match": {"headers": [{"name": "x-a", "present": false}, {"name": "x-a", "prefix": "p"}]}}]}`},
			out: []string{"limits[0]: never matches: header x-a must be absent and also present"}},
		{name: "a query parameter equal to two values", files: map[string]string{"c.json": `{"limits": [{"name": "a", "requests_per_second": 1,
			"match": {"query": [{"name": "q", "value": "1"}, {"name": "q", "value": "2"}]}}]}`},
			out: []string{`limits[0]: never matches: query parameter q must equal both "1" and "2"`}},
		{name: "two different headers are no contradiction", files: map[string]string{"c.json": `{"limits": [{"name": "a", "requests_per_second": 1,
			"match": {"headers": [{"name": "x-a", "present": false}, {"name": "x-b", "value": "1"}], "metadata": [{"namespace": "n", "path": "p", "value": "1"}, {"namespace": "n", "path": "p", "present": true}]}}]}`},
			out: []string{"0 warning(s)"}},
		{name: "metadata required absent and equal", files: map[string]string{"c.json": `{"limits": [{"name": "a", "requests_per_second": 1,
			"match": {"metadata": [{"namespace": "n", "path": "p", "value": "1"}, {"namespace": "n", "path": "p", "present": false}]}}]}`},
			out: []string{"limits[0]: never matches: metadata n:p must be absent and also present"}},
		{name: "a path its own path_regex rejects", files: map[string]string{"c.json": `{"limits": [{"name": "a", "requests_per_second": 1,
			"match": {"path": "/a", "path_regex": "/b.*"}}]}`},
			out: []string{`limits[0]: never matches: path "/a" does not match the path_regex "/b.*"`}},
		{name: "an empty not", files: map[string]string{"c.json": `{"limits": [{"name": "a", "requests_per_second": 1, "match": {"not": {}}}]}`},
			out: []string{"limits[0]: never matches: its not holds whenever the rest of the match does"}},
		{name: "a not repeating the match", files: map[string]string{"c.json": `{"limits": [{"name": "a", "requests_per_second": 1,
			"match": {"path_prefix": "/api", "methods": ["GET"], "not": {"path_prefix": "/api"}}}]}`},
			out: []string{"limits[0]: never matches: its not holds"}},
		{name: "a not narrowing the match is fine", files: map[string]string{"c.json": `{"limits": [{"name": "a", "requests_per_second": 1,
			"match": {"path_prefix": "/api", "not": {"path_prefix": "/api/health"}}}]}`},
			out: []string{"0 warning(s)"}},
		{name: "replaced by a limit matching everything it matches", files: map[string]string{"c.json": `{"limits": [
			{"name": "general", "requests_per_second": 1, "match": {"path_prefix": "/api", "methods": ["GET"]}},
			{"name": "wider", "requests_per_second": 2, "match": {"path_prefix": "/api"}, "replaces": ["general"]}]}`},
			out: []string{"limits[0]: never matches: limits[1] (wider) replaces it and matches every request it matches"}},
		{name: "replaced by a narrower limit is the point of replaces", files: map[string]string{"c.json": `{"limits": [
			{"name": "general", "requests_per_second": 1},
			{"name": "api", "requests_per_second": 2, "match": {"path_prefix": "/api"}, "replaces": ["general"]},
			{"name": "half", "requests_per_second": 2, "replaces": ["api"], "rollout": {"enabled_percent": 50}}]}`},
			out: []string{"0 warning(s)"}},
		{name: "fail open on both sides of replaces", files: map[string]string{"c.json": `{"backend": {"cluster": "webdis"}, "limits": [
			{"name": "general", "requests_per_second": 1, "mode": "global"},
			{"name": "api", "requests_per_second": 2, "match": {"path_prefix": "/api"}, "mode": "global", "replaces": ["general"]}]}`},
			out: []string{"warning: limits[0].failure_policy: general fails open (failure_policy allow) and is named in the replaces of limits[1] (api)",
				"warning: limits[1].failure_policy: api fails open (failure_policy allow) and replaces general", "2 warning(s)"}},
		{name: "deny and local do not fail open", files: map[string]string{"c.json": `{"backend": {"cluster": "webdis"}, "limits": [
			{"name": "general", "requests_per_second": 1, "mode": "global", "failure_policy": "deny"},
			{"name": "api", "requests_per_second": 2, "match": {"path_prefix": "/api"}, "mode": "hybrid", "failure_policy": "local", "replaces": ["general"]}]}`},
			out: []string{"0 warning(s)"}},
		{name: "several files", exit: 1, files: map[string]string{"a.json": `{}`, "b.json": `{"limits": 3}`}, args: []string{"a.json", "b.json"},
			out: []string{"b.json: error: limits:", "2 configuration(s) checked: 1 error(s)"}},
		{name: "a missing file is a usage error", exit: 2, files: map[string]string{"a.json": `{}`}, args: []string{"a.json", "missing.json"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var args []string
			for name := range writeFiles(t, dir, c.files) {
				args = append(args, name)
			}
			if c.args != nil {
				args = c.args
			}
			t.Chdir(dir)
			var stdout, stderr bytes.Buffer
			code := Main(append([]string{"check"}, args...), &stdout, &stderr)
			out := stdout.String()
			if code != c.exit {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.exit, out, stderr.String())
			}
			rest := out
			for _, want := range c.out {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Fatalf("output lacks %q (in order)\n%s", want, out)
				}
				rest = rest[i+len(want):]
			}
			for _, bad := range c.absent {
				if strings.Contains(out, bad) {
					t.Fatalf("output has %q\n%s", bad, out)
				}
			}
		})
	}
}

// TestCheckJSON pins the --json shape CI scripts read.
func TestCheckJSON(t *testing.T) {
	cfg := `{"client_ip": {"source": "xff"}, "limits": [{"name": "a", "requests_per_second": 1, "burst": -1}]}`
	file := writeFiles(t, t.TempDir(), map[string]string{"envoy.yaml": bootstrap(false, inlineSluice(cfg)) + "---\n" + bootstrap(false, inlineSluice(xffConfig))})["envoy.yaml"]
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"check", "--json", file}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, stderr.String())
	}
	var got map[string][]map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout.String())
	}
	yamlPath := "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config.config.configuration.value"
	want := map[string][]map[string]any{
		"configs": {{"file": file, "line": 21.0, "yaml_path": yamlPath}, {"file": file, "line": 44.0, "yaml_path": yamlPath}},
		"errors":  {{"file": file, "line": 21.0, "yaml_path": yamlPath, "path": "limits[0].burst", "message": "must be >= 0"}},
		"warnings": {{"file": file, "line": 44.0, "yaml_path": yamlPath, "path": "client_ip", "code": "xff_without_use_remote_address",
			"message": "reads X-Forwarded-For, but the HTTP connection manager at " + file + ":31 does not set use_remote_address: true, " +
				"so Envoy does not append the peer and the entries trusted_hops counts can be written by the client"}},
	}
	gotJSON, _ := json.MarshalIndent(got, "", " ")
	wantJSON, _ := json.MarshalIndent(want, "", " ")
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("--json:\n%s\nwant:\n%s", gotJSON, wantJSON)
	}
}

func TestCheckUsage(t *testing.T) {
	for _, args := range [][]string{{"check"}, {"check", "--yaml", "x"}} {
		var stdout, stderr bytes.Buffer
		if code := Main(args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage: sluicectl check") {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}

// A file over the size bound is refused before it is read whole, and
// YAML whose node tree could be too large before it is parsed: an 8 MiB
// flow sequence once took 892 MiB and 6 s to reach the walk's bound.
func TestCheckBoundsWhatItReads(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("a: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, maxConfigFile+1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	nodes := "[" + strings.Repeat("a,", maxYAMLStarts) + "a]\n"
	files := writeFiles(t, dir, map[string]string{
		"nodes.yaml": nodes,
		// Under the bound, a large file is checked as usual.
		"many.yaml": bootstrap(false, inlineSluice(xffConfig)) + "---\nx: [" + strings.Repeat("a,", maxYAMLStarts/2) + "a]\n",
	})
	for _, tc := range []struct {
		file, want string
	}{
		{big, "more than the 16777216 bytes a configuration file may have"},
		{files["nodes.yaml"], "too large to check"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main([]string{"check", tc.file}, &stdout, &stderr)
		if out := stdout.String() + stderr.String(); code == 0 || !strings.Contains(out, tc.want) || len(out) > 1000 {
			t.Errorf("%s: exit %d, output %q; want %q", tc.file, code, out, tc.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"check", files["many.yaml"]}, &stdout, &stderr); code != 0 {
		t.Errorf("a large file under the bounds: exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	if n := yamlbound.Starts([]byte(nodes)); n <= maxYAMLStarts {
		t.Fatalf("the flow sequence counts %d starts", n)
	}
}

// The bound on YAML holds for a bootstrap and the ECDS files it names
// together: one large ECDS file named four times is not parsed four times.
func TestCheckBoundsYAMLWithItsECDSFiles(t *testing.T) {
	filter := `                  - name: sluice
                    config_discovery:
                      config_source: {path_config_source: {path: big-filter.yaml}}
                      type_urls: [type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm]
`
	big := ecdsFile + "pad: [" + strings.Repeat("a,", maxYAMLStarts/3) + "a]\n"
	for _, tc := range []struct {
		filters int
		want    string
	}{
		{2, "error: limits[0].burst: must be >= 0"}, // the ECDS file's own error, twice
		{4, "lines and indicators (-, ?, :, ',', [, {, *), with the ECDS files it names, is too large to check"},
		// A long scalar has few starts, but its bytes count.
		{5, "bytes, with the ECDS files it names, is too large to check"},
	} {
		ecds := big
		if tc.filters == 5 {
			ecds = ecdsFile + "pad: " + strings.Repeat("a", maxConfigFile-len(ecdsFile)-10) + "\n"
		}
		files := writeFiles(t, t.TempDir(), map[string]string{"envoy.yaml": bootstrap(false, strings.Repeat(filter, tc.filters)), "big-filter.yaml": ecds})
		var stdout, stderr bytes.Buffer
		Main([]string{"check", files["envoy.yaml"]}, &stdout, &stderr)
		if out := stdout.String() + stderr.String(); !strings.Contains(out, tc.want) {
			t.Errorf("%d filters: %q, want %q", tc.filters, out, tc.want)
		}
	}
}

// Aliases cannot make a small file a large configuration: one long
// string named many times, in an Istio WasmPlugin or an ECDS file's
// Struct, and mappings naming mappings ("billion laughs"), are refused
// before they are expanded, naming where the bound was passed, and cost
// little memory to refuse.
func TestCheckBoundsWhatAliasesExpandTo(t *testing.T) {
	long := strings.Repeat("x", 64<<10)
	refs := "[" + strings.Repeat("*s,", 300) + "*s]" // 301 × 64 KiB: past 16 MiB
	plugin := "kind: WasmPlugin\nspec:\n  pluginConfig:\n    big: &s \"" + long + "\"\n    refs: " + refs + "\n"
	ecds := strings.Replace(ecdsFile, "            client_ip: {source: xff}\n",
		"            big: &s \""+long+"\"\n            refs: "+refs+"\n", 1)
	laughs := "kind: WasmPlugin\nspec:\n  pluginConfig:\n    a: &a {x: \"" + strings.Repeat("y", 1024) + "\"}\n"
	for i, prev := 'b', 'a'; i <= 'h'; i, prev = i+1, i {
		laughs += fmt.Sprintf("    %c: &%c [%s*%c]\n", i, i, strings.Repeat(fmt.Sprintf("*%c,", prev), 9), prev)
	}
	stringValue := bootstrap(false, inlineSluice(xffConfig)) + "x: &s \"" + long + "\"\n"
	for _, tc := range []struct {
		name, file, want string
	}{
		{"a string named 301 times", plugin, "at spec.pluginConfig.refs[254])"},
		{"in an ECDS file's Struct", ecds, "at resources[0].typed_config.config.configuration.value.refs[254])"},
		{"mappings naming mappings", laughs, "at spec.pluginConfig.f[0][5][1][0][5].x)"},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r := Check("alias.yaml", []byte(tc.file))
		runtime.ReadMemStats(&after)
		if len(r.Errors) != 1 || !strings.HasPrefix(r.Errors[0].Message, "with aliases expanded, the plugin configurations would be more than 16777216 bytes of JSON") ||
			!strings.HasSuffix(r.Errors[0].Message, tc.want) {
			t.Errorf("%s: %+v, want one error ending %q", tc.name, r.Errors, tc.want)
		}
		// The old check built the whole expansion: 19 MiB of JSON, and
		// several times that on the way.
		if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
			t.Errorf("%s: %d bytes allocated to refuse a %d-byte file", tc.name, n, len(tc.file))
		}
	}
	// A long scalar under an anchor that the configuration does not name
	// costs nothing.
	if r := Check("envoy.yaml", []byte(stringValue)); len(r.Errors) != 0 || len(r.Configs) != 1 {
		t.Errorf("an unused anchor: %+v", r)
	}
	// explain refuses it too, instead of explaining an empty configuration.
	files := writeFiles(t, t.TempDir(), map[string]string{"plugin.yaml": plugin})
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"explain", "--config", files["plugin.yaml"], "/"}, &stdout, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "(spec.pluginConfig): with aliases expanded") {
		t.Errorf("explain: exit %d, %q", code, stderr.String())
	}
}

// Every message quotes at most a bounded prefix of a bad value, however
// long the value.
func TestCheckQuotesBoundedPrefixes(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	cfg := `{"limits": [{"name": "` + long + `", "requests_per_second": 1, "key": ["header:` + long + `!", "` + long + `"],
	  "match": {"path_regex": "(` + long + `", "methods": ["` + long + `"], "client_cidrs": ["` + long + `"]},
	  "cost_from_response": {"json": "` + long + `..x"}, "` + long + `": 1}],
	  "response": {"near_limit_ratio": 1` + strings.Repeat("0", 1<<20) + `, "body": "template",
	    "templates": {"content_type": "` + long + `", "rate_limited": "x"}}}`
	yml := `static_resources:
  listeners:
    - filter_chains:
        - filters:
            - typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                http_filters:
                  - name: sluice
                    config_discovery:
                      config_source: {path_config_source: {path: ` + long + `}}
                      type_urls: [type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm]
`
	ytype := bootstrap(false, `                  - name: envoy.filters.http.wasm
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
                      config:
                        root_id: sluice
                        configuration:
                          "@type": `+long)
	for name, data := range map[string]string{"long.json": cfg, "ecds.yaml": yml, "type.yaml": ytype} {
		r := Check(name, []byte(data))
		if len(r.Errors) == 0 {
			t.Errorf("%s: no error", name)
		}
		for _, e := range r.Errors {
			if n := len(e.Path) + len(e.Message); n > 1000 {
				t.Errorf("%s: a finding of %d bytes: %.300s…", name, n, e.text())
			}
		}
	}
}

// Every field check reads is read as Envoy reads it: in its protobuf
// JSON spelling too, through merge keys, and refused when given twice.
func TestCheckReadsFieldsInEverySpellingEnvoyTakes(t *testing.T) {
	camel := strings.NewReplacer("root_id:", "rootId:", "vm_config:", "vmConfig:")
	for _, c := range []struct {
		name, yaml string
		errs       []string // each in one error, with its line and path
		configs    int
	}{
		{name: "camelCase wasm fields", yaml: bootstrap(true, camel.Replace(inlineSluice(peerConfig))), configs: 1},
		{name: "useRemoteAddress", yaml: strings.Replace(bootstrap(true, inlineSluice(peerAndAdmin)), "use_remote_address:", "useRemoteAddress:", 1), configs: 1},
		{name: "merge key", yaml: strings.Replace(bootstrap(true, inlineSluice(peerAndAdmin)), "use_remote_address: true", "<<: {use_remote_address: true}", 1), configs: 1},
		{name: "merged wasm config", yaml: strings.Replace(bootstrap(true, inlineSluice(peerConfig)), "                      config:\n", "                      <<: {config: &c {name: other}}\n                      cfg:\n", 1),
			configs: 0, errs: []string{"no Sluice filter found"}},
		{name: "duplicate field", yaml: strings.Replace(bootstrap(true, inlineSluice(peerAndAdmin)), "use_remote_address: true", "use_remote_address: false\n                useRemoteAddress: true", 1),
			errs: []string{"envoy.yaml:11 (static_resources.listeners[0].filter_chains[0].filters[0].typed_config.useRemoteAddress): error: use_remote_address: set twice, as use_remote_address and as useRemoteAddress, which Envoy refuses (duplicate field)"}, configs: 1},
		{name: "duplicate key", yaml: strings.Replace(bootstrap(true, inlineSluice(peerAndAdmin)), "use_remote_address: true", "use_remote_address: true\n                use_remote_address: false", 1),
			errs: []string{`envoy.yaml:11 (static_resources.listeners[0].filter_chains[0].filters[0].typed_config.use_remote_address): error: "use_remote_address": given twice in one mapping, which Envoy refuses (duplicate key)`}, configs: 1},
		{name: "duplicate wasm field in both spellings", yaml: bootstrap(true, strings.Replace(inlineSluice(peerConfig), "root_id: sluice", "root_id: sluice\n                        rootId: other", 1)),
			errs: []string{"config.rootId): error: root_id: set twice, as root_id and as rootId"}, configs: 1},
		{name: "duplicate key inside the wasm config", yaml: bootstrap(true, strings.Replace(inlineSluice(peerConfig), "root_id: sluice", "root_id: sluice\n                        root_id: sluice", 1)),
			errs: []string{`config.root_id): error: "root_id": given twice in one mapping`}, configs: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Check("envoy.yaml", []byte(c.yaml))
			var out strings.Builder
			for _, e := range r.Errors {
				fmt.Fprintf(&out, "%s: error: %s\n", e.where(), e.text())
			}
			if len(r.Configs) != c.configs || len(r.Errors) != len(c.errs) || len(r.Warnings) != 0 {
				t.Fatalf("configs %d errors %s warnings %+v", len(r.Configs), out.String(), r.Warnings)
			}
			for _, want := range c.errs {
				if !strings.Contains(out.String(), want) {
					t.Errorf("no error %q in:\n%s", want, out.String())
				}
			}
		})
	}
}
