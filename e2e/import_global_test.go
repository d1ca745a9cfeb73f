package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/ops/importer"
	"github.com/sluice-proxy/sluice/filter/ops/importer/importtest"
	"github.com/sluice-proxy/sluice/internal/fixtures/ratelimitsvc"
	"github.com/sluice-proxy/sluice/internal/fixtures/redistest"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

// globalScenarios are the documented examples this test runs: those that
// do not key on the client address (every request here comes from
// 127.0.0.1) and are short enough to fit a window.
var globalScenarios = map[string]bool{"example2": true, "example6": true, "example7": true, "example8": true}

// TestImportedRatelimitGlobalOnWasm is the import's differential test in
// its deployed form: the config imported with --backend-cluster (mode
// global) runs on build/sluice.wasm in two Envoy stand-ins that share a
// real redis-server through webdis, and each request, sent to the two in
// turn, is also asked of the real envoyproxy/ratelimit with the
// descriptors Envoy's actions make for it. Both count in the wall clock's
// windows (Sluice in Redis's TIME), so no clock is stepped; a run in
// which a request straddled a window edge is repeated on fresh state.
func TestImportedRatelimitGlobalOnWasm(t *testing.T) {
	bin, err := ratelimitsvc.Binary(t)
	testkit.Need(t, err == nil, fmt.Sprintf("envoyproxy/ratelimit (%v)", err))
	svcRedis := redistest.StartRedis(t)
	configs := map[string]string{}
	for _, sc := range importtest.RatelimitScenarios {
		if globalScenarios[sc.Name] {
			configs[sc.Domain+".yaml"] = sc.Config // a domain once: the service refuses two
		}
	}
	svc := ratelimitsvc.Start(t, bin, svcRedis.Addr(), configs,
		[]byte(`{"domain":"example8","descriptors":[{"entries":[{"key":"key1","value":"probe"}]}]}`))
	rc := svcRedis.Client()
	for _, sc := range importtest.RatelimitScenarios {
		if !globalScenarios[sc.Name] {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			res := importer.Import([]importer.Input{{Name: sc.Name + ".yaml", Data: []byte(sc.Config)},
				{Name: "envoy.yaml", Data: []byte(importtest.EnvoyYAML(sc.Domain, sc.RateLimits))}},
				importer.Options{BackendCluster: "redis"})
			if len(res.Errors) > 0 {
				t.Fatalf("import errors: %v", res.Errors)
			}
			cfg := withBackendTimeout(t, res.Config)
			for attempt := 0; ; attempt++ {
				if attempt == 3 {
					t.Fatal("three runs straddled a window edge")
				}
				if err := rc.FlushAll(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				be := startDistBackend(t, viaWebdis)
				insts := startDistInstances(t, 2, cfg, be.addr)
				if importtest.Compare(t, sc, svc, func(i int, req *importtest.RatelimitRequest, _ time.Time) bool {
					return sendVia(t, insts[i%len(insts)], req) == http.StatusOK
				}) {
					if n := sumMetric(insts, "sluice.backend.fallback.deny"); n != 0 {
						t.Fatalf("%d decisions fell back: Redis did not answer every call", n)
					}
					return
				}
			}
		})
	}
}

// withBackendTimeout gives the imported backend a timeout a loaded
// machine meets, and makes a call Redis did not answer a refusal the
// test sees (fallback.deny) rather than an admission it would take for
// Sluice's.
func withBackendTimeout(t *testing.T, cfg []byte) string {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(cfg, &doc); err != nil {
		t.Fatal(err)
	}
	be, _ := doc["backend"].(map[string]any)
	if be == nil || be["cluster"] != "redis" {
		t.Fatalf("the import with --backend-cluster has no backend: %s", cfg)
	}
	be["timeout"], be["retries"], be["failure_policy"] = "2s", 1, "deny"
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// sendVia sends r through the Envoy stand-in in: 200 or 429.
func sendVia(t *testing.T, in *distInstance, r *importtest.RatelimitRequest) int {
	t.Helper()
	req, err := http.NewRequest(r.Method, in.base+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range r.Headers {
		req.Header.Add(h[0], h[1])
	}
	resp, err := distClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("%s %v: status %d", r.Method, r.Headers, resp.StatusCode)
	}
	return resp.StatusCode
}
