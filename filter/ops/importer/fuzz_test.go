package importer_test

import (
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/ops/importer"
	"github.com/sluice-proxy/sluice/filter/ops/importer/importtest"
)

// FuzzImport gives the importer hostile pairs of files: it never panics,
// and whatever configuration it writes, the filter accepts.
func FuzzImport(f *testing.F) {
	for _, sc := range importtest.RatelimitScenarios {
		f.Add([]byte(sc.Config), []byte(importtest.EnvoyYAML(sc.Domain, sc.RateLimits)))
	}
	for _, sc := range importtest.LocalScenarios {
		f.Add([]byte("{}"), []byte(sc.EnvoyYAML()))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		res := importer.Import([]importer.Input{{Name: "a", Data: a}, {Name: "b", Data: b}}, importer.Options{})
		if res.Config == nil {
			return
		}
		if _, err := config.Parse(res.Config); err != nil {
			t.Fatalf("wrote a configuration the filter refuses: %v\n%s", err, res.Config)
		}
	})
}
