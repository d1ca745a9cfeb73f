package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/internal/fixtures/bootstrap"
)

// TestECDSShippedConfigServes runs envoy/envoy-ecds.yaml as shipped, from
// the repository root where its relative paths point: the wasm filter's
// config comes from envoy/sluice-filter.yaml and the plugin filters traffic.
func TestECDSShippedConfigServes(t *testing.T) {
	builtWasm(t)
	backend := echoBackend(t)
	t.Chdir("..")
	cfg, err := envoy.LoadFile("envoy/envoy-ecds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	onFreePorts(cfg, backend)
	f := cfg.Listeners[0].HTTPFilters[0]
	if f.Wasm == nil || f.Name != "sluice" || !strings.HasSuffix(filepath.ToSlash(f.ConfigFile), "envoy/sluice-filter.yaml") {
		t.Fatalf("first http filter = %+v, want the wasm filter from envoy/sluice-filter.yaml", f)
	}
	want, err := envoy.LoadExtensionConfigFile("envoy/sluice-filter.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(f.Wasm.Configuration) != string(want[0].Wasm.Configuration) {
		t.Errorf("plugin configuration differs from the ECDS file's:\n%s\nvs\n%s", f.Wasm.Configuration, want[0].Wasm.Configuration)
	}
	srv, err := startConfig(t, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	checkPluginServes(t, srv, cfg.Listeners[0].Name, "the ECDS-configured plugin")
}

// ecdsBootstrap is a bootstrap whose only wasm filter, named filter, is
// configured by ECDS from file, accepting typeURLs. The path is always
// double-quoted: TestECDSRejects swaps it by its quotes.
func ecdsBootstrap(file, filter, typeURLs string) string {
	return bootstrap.Bootstrap{
		Listener: bootstrap.Listener{
			UseRemoteAddress: true,
			VirtualHosts: []bootstrap.VirtualHost{{Name: "all", Domains: []string{"*"}, Routes: []bootstrap.Route{
				{Match: `prefix: "/"`, Action: "cluster: backend"},
			}}},
			HTTPFilters: []string{fmt.Sprintf(`- name: %s
  config_discovery:
    config_source:
      path_config_source: { path: %s }
    type_urls: [%s]`, filter, strconv.Quote(filepath.ToSlash(file)), typeURLs)},
		},
		Clusters: []bootstrap.Cluster{{Name: "backend", Type: "STATIC", Endpoints: []string{"127.0.0.1:1"}}},
	}.YAML()
}

// ecdsWasmResourceWith is one TypedExtensionConfig holding a wasm filter
// config, as an item of a resources list.
func ecdsWasmResourceWith(name, wasm, config string) string {
	w := bootstrap.Wasm{Name: "from-file", Code: wasm, Configuration: config}
	return "\n- \"@type\": type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig\n  name: " + name +
		"\n  typed_config:\n    " + indentYAML(w.TypedConfig(), "    ") + "\n"
}

// onePerHour lets each client through once an hour, so a second request
// shows which configuration is running.
const onePerHour = `{"client_ip": {"source": "xff", "trusted_hops": 1}, "limits": [{"name": "one-per-hour", "key": ["client_ip"], "limit": 1, "window": "1h"}]}`

func indentYAML(s, by string) string {
	return strings.ReplaceAll(s, "\n", "\n"+by)
}

// writeECDS writes an ECDS file with the given resources section and a
// bootstrap pointing at it, returning the bootstrap text.
func writeECDS(t *testing.T, resources, filter, typeURLs string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "filter.yaml")
	if err := os.WriteFile(file, []byte("version_info: \"7\"\n"+resources), 0o644); err != nil {
		t.Fatal(err)
	}
	return ecdsBootstrap(file, filter, typeURLs)
}

func ecdsWasmResource(name, wasm string) string {
	return ecdsWasmResourceWith(name, wasm, onePerHour)
}

// TestECDSConfigIsWhatRuns proves the plugin runs the configuration from the
// ECDS file, not something else: that file's one-request-per-hour limit
// lets the first request through and stops the second.
func TestECDSConfigIsWhatRuns(t *testing.T) {
	wasm := builtWasm(t)
	y := writeECDS(t, "resources:"+indentYAML(ecdsWasmResource("sluice", wasm), "  "), "sluice", envoy.WasmTypeURL)
	cfg, err := envoy.Load([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	onFreePorts(cfg, echoBackend(t))
	if got := cfg.Listeners[0].HTTPFilters[0].Wasm.Name; got != "from-file" {
		t.Fatalf("plugin name %q, want the file's from-file", got)
	}
	srv, err := startConfig(t, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	base := "http://" + srv.ListenerAddr("main")
	if status, body := httpGet(t, base+"/first"); status != 200 {
		t.Fatalf("first request: %d %q", status, body)
	}
	if status, body := httpGet(t, base+"/second"); status != 429 {
		t.Fatalf("second request: %d %q, want 429 from the file's one-per-hour limit", status, body)
	}
}

// TestECDSRejects covers the checks Envoy applies to an ECDS resource, plus
// the file being absent. Each one stops the load with the reason.
func TestECDSRejects(t *testing.T) {
	const wasm = "/nonexistent/sluice.wasm" // never read: loading fails first or does not read code
	router := `
- "@type": type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig
  name: sluice
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`
	tests := []struct {
		name      string
		bootstrap func(t *testing.T) string
		wantErr   []string
	}{
		{
			name: "resource named differently from the filter",
			bootstrap: func(t *testing.T) string {
				return writeECDS(t, "resources:"+indentYAML(ecdsWasmResource("other", wasm), "  "), "sluice", envoy.WasmTypeURL)
			},
			wantErr: []string{"Unexpected resource name in ExtensionConfigDS response: other"},
		},
		{
			name: "two resources",
			bootstrap: func(t *testing.T) string {
				return writeECDS(t, "resources:"+indentYAML(ecdsWasmResource("sluice", wasm)+ecdsWasmResource("sluice", wasm), "  "), "sluice", envoy.WasmTypeURL)
			},
			wantErr: []string{"Unexpected number of resources in ExtensionConfigDS response: 2"},
		},
		{
			name: "no resources",
			bootstrap: func(t *testing.T) string {
				return writeECDS(t, "resources: []\n", "sluice", envoy.WasmTypeURL)
			},
			wantErr: []string{"no resources"},
		},
		{
			name: "resource of a type the filter does not accept",
			bootstrap: func(t *testing.T) string {
				return writeECDS(t, "resources:"+indentYAML(router, "  "), "sluice", envoy.WasmTypeURL)
			},
			wantErr: []string{"filter config has type URL", "Router"},
		},
		{
			name: "type_urls naming another filter",
			bootstrap: func(t *testing.T) string {
				return writeECDS(t, "resources:"+indentYAML(ecdsWasmResource("sluice", wasm), "  "), "sluice", "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router")
			},
			wantErr: []string{"type_urls[0]", "not supported"},
		},
		{
			name: "unknown field in the file",
			bootstrap: func(t *testing.T) string {
				return writeECDS(t, "nonce: x\nresources:"+indentYAML(ecdsWasmResource("sluice", wasm), "  "), "sluice", envoy.WasmTypeURL)
			},
			wantErr: []string{"nonce", "not supported"},
		},
		{
			name: "file absent",
			bootstrap: func(t *testing.T) string {
				y := writeECDS(t, "resources:"+indentYAML(ecdsWasmResource("sluice", wasm), "  "), "sluice", envoy.WasmTypeURL)
				return strings.Replace(y, "filter.yaml", "absent.yaml", 1)
			},
			wantErr: []string{"absent.yaml", "does not exist"},
		},
		{
			name: "path to a device",
			bootstrap: func(t *testing.T) string {
				y := writeECDS(t, "resources: []\n", "sluice", envoy.WasmTypeURL)
				return regexp.MustCompile(`path: "[^"]*"`).ReplaceAllString(y, `path: "/dev/zero"`)
			},
			wantErr: []string{"/dev/zero", "not a regular file"},
		},
		{
			name: "not YAML",
			bootstrap: func(t *testing.T) string {
				return writeECDS(t, "resources: [unclosed\n", "sluice", envoy.WasmTypeURL)
			},
			wantErr: []string{"ECDS file"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := envoy.Load([]byte(tc.bootstrap(t)))
			if err == nil {
				t.Fatal("Load accepted the config")
			}
			for _, want := range append(tc.wantErr, "http_filters[0].config_discovery") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// TestECDSReloadOnMove follows Envoy's filesystem ECDS: a new version moved
// over the file replaces the filter config for new requests, a rejected
// version leaves the running one in force, and writing the file in place is
// not an update.
func TestECDSReloadOnMove(t *testing.T) {
	wasm := builtWasm(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "filter.yaml")
	version := func(v, name, config string) string {
		return "version_info: \"" + v + "\"\nresources:" + indentYAML(ecdsWasmResourceWith(name, wasm, config), "  ")
	}
	// moveInto writes a version next to the file and renames it over the
	// file, as Envoy's docs prescribe for atomic updates.
	moveInto := func(content string) {
		t.Helper()
		tmp := filepath.Join(dir, "next.yaml")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	const unlimited = `{}`
	moveInto(version("1", "sluice", unlimited))

	y := ecdsBootstrap(file, "sluice", envoy.WasmTypeURL)
	cfg, err := envoy.Load([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	onFreePorts(cfg, echoBackend(t))
	updates := make(chan envoy.ConfigUpdate, 16)
	srv, err := startConfigWith(t, cfg, envoy.Options{
		ECDSPollInterval: 5 * time.Millisecond,
		OnConfigUpdate:   func(u envoy.ConfigUpdate) { updates <- u },
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	next := func() envoy.ConfigUpdate {
		t.Helper()
		select {
		case u := <-updates:
			return u
		case <-time.After(30 * time.Second):
			t.Fatal("no ECDS update seen within 30s")
			return envoy.ConfigUpdate{}
		}
	}
	base := "http://" + srv.ListenerAddr("main")
	for i := 0; i < 3; i++ {
		if status, body := httpGet(t, base+"/v1"); status != 200 {
			t.Fatalf("version 1 has no limits, yet request %d got %d %q", i, status, body)
		}
	}
	first := srv.Plugins()[0]

	moveInto(version("2", "sluice", onePerHour))
	if u := next(); u.Err != nil || u.Version != "2" || u.Filter != "sluice" || u.File != file {
		t.Fatalf("update to version 2: %+v", u)
	}
	if srv.Plugins()[0] == first {
		t.Fatal("version 2 applied but the same plugin still serves")
	}
	if status, _ := httpGet(t, base+"/v2"); status != 200 {
		t.Fatalf("first request under version 2: %d", status)
	}
	if status, _ := httpGet(t, base+"/v2"); status != 429 {
		t.Fatalf("second request under version 2: %d, want 429 from its one-per-hour limit", status)
	}

	// A resource named for another filter is rejected; version 2 keeps
	// running with its state, so the client stays limited.
	moveInto(version("3", "other", unlimited))
	if u := next(); u.Err == nil || !strings.Contains(u.Err.Error(), "Unexpected resource name in ExtensionConfigDS response: other") || u.Version != "3" {
		t.Fatalf("update to a misnamed version 3: %+v", u)
	}
	if status, _ := httpGet(t, base+"/v3"); status != 429 {
		t.Fatalf("after the rejected version 3: %d, want version 2's 429", status)
	}

	// An in-place write is not an update: the next update seen is the
	// moved version 5, never version 4.
	if err := os.WriteFile(file, []byte(version("4", "sluice", unlimited)), 0o644); err != nil {
		t.Fatal(err)
	}
	moveInto(version("5", "sluice", unlimited))
	if u := next(); u.Err != nil || u.Version != "5" {
		t.Fatalf("after an in-place write of version 4 and a move of version 5, the update seen was %+v", u)
	}
	if status, _ := httpGet(t, base+"/v5"); status != 200 {
		t.Fatalf("version 5 has no limits, yet the request got %d", status)
	}
}
