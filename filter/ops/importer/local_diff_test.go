package importer_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/ops/importer"
	"github.com/sluice-proxy/sluice/filter/ops/importer/importtest"
)

// TestImportedLocalRatelimitAdmitsAsEnvoysModel runs traffic through a
// model of Envoy's documented local_ratelimit and through the engine
// configured by sluicectl import from the same Envoy YAML, and compares
// every request's answer. Requests arrive at the fill ticks, where
// Envoy's stepped fills and Sluice's continuous refill hold the same
// tokens; between ticks they differ, as the import reports. Both draw
// the rollout fractions from the same random numbers. e2e's
// TestImportedLocalRatelimitOnWasm runs the same on build/sluice.wasm.
func TestImportedLocalRatelimitAdmitsAsEnvoysModel(t *testing.T) {
	for _, sc := range importtest.LocalScenarios {
		t.Run(sc.Name, func(t *testing.T) {
			res := importer.Import([]importer.Input{{Name: "envoy.yaml", Data: []byte(sc.EnvoyYAML())}}, importer.Options{})
			if len(res.Errors) > 0 {
				t.Fatalf("import errors: %v\n%s", res.Errors, sc.EnvoyYAML())
			}
			start := time.Unix(1_800_000_000, 0)
			sl := newSluiceRun(t, res.Config, start, rand.New(rand.NewPCG(1, 2)).Uint64)
			m := importtest.NewModel(sc, start, importtest.Draws(rand.New(rand.NewPCG(1, 2)).Uint64))
			var mismatches []string
			limited, admitted := 0, 0
			for _, req := range importtest.Traffic() {
				now := start.Add(time.Duration(req.Tick) * sc.TickInterval())
				want := m.Admit(now, req)
				got := sl.admitAt(t, now, sc.RouteName(req), req.Path, req.Headers())
				if want {
					admitted++
				} else {
					limited++
				}
				if got != want {
					mismatches = append(mismatches, fmt.Sprintf("%+v: Envoy's model admits %v, Sluice %v", req, want, got))
				}
			}
			if len(mismatches) > 0 {
				t.Errorf("%d requests decided differently:\n%s\n%s", len(mismatches), strings.Join(mismatches[:min(10, len(mismatches))], "\n"), res.Config)
			}
			if sc.Enabled > 0 && (limited == 0 || admitted == 0) {
				t.Errorf("the model admitted %d and limited %d: the traffic does not exercise the limit", admitted, limited)
			}
		})
	}
}
