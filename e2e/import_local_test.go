package e2e_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/filtertest"
	"github.com/sluice-proxy/sluice/filter/ops/importer"
	"github.com/sluice-proxy/sluice/filter/ops/importer/importtest"
)

// TestImportedLocalRatelimitOnWasm runs the local_ratelimit scenarios of
// sluicectl import's differential test on build/sluice.wasm in our host:
// the imported config admits, request by request, what the model of
// Envoy's documented local_ratelimit admits at the fill ticks. Scenarios
// with partial fractions need the random source the native test injects,
// so only those whose fractions are whole run here.
func TestImportedLocalRatelimitOnWasm(t *testing.T) {
	code := wasmModule(t, "sluice")
	for _, sc := range importtest.LocalScenarios {
		if !sc.Whole() {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			res := importer.Import([]importer.Input{{Name: "envoy.yaml", Data: []byte(sc.EnvoyYAML())}}, importer.Options{})
			if len(res.Errors) > 0 {
				t.Fatalf("import errors: %v", res.Errors)
			}
			h := newWasmHarness(t, code, filtertest.Case{Config: string(res.Config), Workers: 1})
			m := importtest.NewModel(sc, filtertest.Epoch, importtest.Draws(nil))
			var mismatches []string
			elapsed := time.Duration(0)
			for _, req := range importtest.Traffic() {
				at := time.Duration(req.Tick) * sc.TickInterval()
				if at > elapsed {
					h.Advance(t, at-elapsed)
					elapsed = at
				}
				want := m.Admit(filtertest.Epoch.Add(at), req)
				resp := h.Do(t, filtertest.Request{Method: "GET", Path: req.Path, Host: "example.com", Route: sc.RouteName(req), Headers: req.Headers()})
				got := !(resp.Local && resp.Status == 429)
				if got && resp.Local {
					t.Fatalf("%+v: an unexpected local reply %d %s", req, resp.Status, resp.Body)
				}
				if !got && (string(resp.Body) != "local_rate_limited" || resp.Headers.Get("x-envoy-ratelimited") != "true") {
					t.Errorf("%+v: the 429 is not Envoy's: %q %v", req, resp.Body, resp.Headers)
				}
				if got != want {
					mismatches = append(mismatches, fmt.Sprintf("%+v: Envoy's model admits %v, the wasm %v", req, want, got))
				}
			}
			if len(mismatches) > 0 {
				t.Errorf("%d requests decided differently:\n%s", len(mismatches), strings.Join(mismatches[:min(10, len(mismatches))], "\n"))
			}
			if n := h.plugin.Traps(); n != 0 {
				t.Fatalf("%d traps", n)
			}
		})
	}
}
