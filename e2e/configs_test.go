package e2e_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/filter/config"
)

// ecdsFiles are the shipped ECDS resource files (DiscoveryResponses named by
// a bootstrap's path_config_source). They sit next to the bootstraps but are
// not bootstraps, so they are validated on their own.
var ecdsFiles = map[string]bool{"envoy/sluice-filter.yaml": true}

// envoyYAMLs are every Envoy bootstrap we ship, relative to the repository
// root. envoy/istio holds Kubernetes manifests, validated against Istio's
// types in that package.
func envoyYAMLs(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"envoy/*.yaml", "examples/*/envoy.yaml"} {
		m, err := filepath.Glob(filepath.Join("..", pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel := filepath.ToSlash(strings.TrimPrefix(f, ".."+string(filepath.Separator)))
			if !ecdsFiles[rel] {
				files = append(files, rel)
			}
		}
	}
	if len(files) < 8 {
		t.Fatalf("found only %d Envoy YAML files: %v", len(files), files)
	}
	return files
}

// TestShippedEnvoyConfigs validates every shipped bootstrap with Envoy's own
// protos (every typed_config unpacked) and checks every plugin
// configuration inside it with the parser the wasm runs.
func TestShippedEnvoyConfigs(t *testing.T) {
	files := envoyYAMLs(t)
	// Paths inside the configs (ECDS files, wasm code) are relative to the
	// repository root, where Envoy is meant to be started.
	t.Chdir("..")
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := envoy.ValidateYAML(data); err != nil {
				t.Fatalf("Envoy validation: %v", err)
			}
			refs, err := envoy.PluginConfigurations(data)
			if err != nil {
				t.Fatal(err)
			}
			if len(refs) == 0 {
				t.Fatal("no Sluice plugin configuration found")
			}
			for _, ref := range refs {
				if _, err := config.Parse([]byte(ref.Configuration)); err != nil {
					t.Errorf("%s: plugin configuration rejected by the filter's parser:\n%v", ref.Path, err)
				}
			}
		})
	}
}

// TestShippedECDSFiles validates each ECDS file as the DiscoveryResponse of
// TypedExtensionConfigs Envoy reads, and its plugin configuration with the
// filter's parser.
func TestShippedECDSFiles(t *testing.T) {
	for file := range ecdsFiles {
		t.Run(file, func(t *testing.T) {
			refs, err := envoy.ExtensionConfigPluginConfigurations(mustRead(t, filepath.Join("..", file)))
			if err != nil {
				t.Fatalf("ECDS validation: %v", err)
			}
			if len(refs) != 1 {
				t.Fatalf("%d resources; Envoy accepts exactly one per ECDS file", len(refs))
			}
			if _, err := config.Parse([]byte(refs[0].Configuration)); err != nil {
				t.Errorf("%s: plugin configuration rejected by the filter's parser:\n%v", refs[0].Path, err)
			}
		})
	}
}

// TestExampleConfigsInSync keeps examples/<name>/envoy.yaml's inline plugin
// configuration identical to examples/<name>/config.json, which is the one
// the schema test and the README point at.
func TestExampleConfigsInSync(t *testing.T) {
	dirs, err := filepath.Glob("../examples/*/config.json")
	if err != nil || len(dirs) < 7 {
		t.Fatalf("examples: %v %v", dirs, err)
	}
	for _, cfgFile := range dirs {
		dir := filepath.Dir(cfgFile)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			want := readJSON(t, mustRead(t, cfgFile))
			data := mustRead(t, filepath.Join(dir, "envoy.yaml"))
			refs, err := envoy.PluginConfigurations(data)
			if err != nil || len(refs) != 1 {
				t.Fatalf("want one plugin configuration, got %d (%v)", len(refs), err)
			}
			if got := readJSON(t, []byte(refs[0].Configuration)); !reflect.DeepEqual(got, want) {
				t.Fatalf("envoy.yaml's plugin configuration differs from config.json")
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.NewDecoder(strings.NewReader(string(b))).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
