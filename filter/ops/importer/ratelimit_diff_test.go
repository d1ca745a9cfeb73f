package importer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/engine"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
	"github.com/sluice-proxy/sluice/filter/ops/importer"
	"github.com/sluice-proxy/sluice/filter/ops/importer/importtest"
	"github.com/sluice-proxy/sluice/internal/fixtures/ratelimitsvc"
	"github.com/sluice-proxy/sluice/internal/fixtures/redistest"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

// sluiceRun runs requests through the filter's engine configured with
// cfg, on one plugin whose clock the test sets per request.
type sluiceRun struct {
	p     *engine.Plugin
	fakes *hosttest.Fakes
	id    uint32
}

// newSluiceRun starts a plugin at start; rand, when not nil, is its
// random source (the rollout draws).
func newSluiceRun(t *testing.T, cfg []byte, start time.Time, rand func() uint64) *sluiceRun {
	t.Helper()
	hc, fakes := hosttest.New(start)
	hc.Rand = rand
	p := engine.NewVM(hc).NewPlugin()
	if !p.Start(cfg) {
		t.Fatalf("the filter refused the imported config: %s\n%s", strings.Join(fakes.Log.Lines, "; "), cfg)
	}
	return &sluiceRun{p: p, fakes: fakes}
}

// admit runs one request at now: true when the filter lets it through.
func (s *sluiceRun) admit(t *testing.T, now time.Time, method, client, route string, headers [][2]string) bool {
	t.Helper()
	s.fakes.Clock.Now = now
	s.id++
	s.fakes.Stream.Headers = append([][2]string{{":method", method}, {":path", "/"}, {":authority", "example.com"}, {":scheme", "http"}}, headers...)
	s.fakes.Stream.Properties = map[string]string{"source.address": client, "xds.route_name": route, "xds.cluster_name": "backend"}
	return s.decide(t)
}

// decide runs the request set up in the fakes: true when the filter
// lets it through.
func (s *sluiceRun) decide(t *testing.T) bool {
	t.Helper()
	replies := len(s.fakes.Stream.Replies)
	var st engine.Stream
	s.p.Begin(&st, s.id)
	v := st.RequestHeaders()
	rejected := len(s.fakes.Stream.Replies) > replies
	if !rejected && v != engine.Continue {
		t.Fatalf("request %d paused (%v): a local config never waits", s.id, v)
	}
	st.Done()
	return !rejected
}

// admitAt runs a GET of path on route from 10.0.0.1 at now.
func (s *sluiceRun) admitAt(t *testing.T, now time.Time, route, path string, headers [][2]string) bool {
	t.Helper()
	s.fakes.Clock.Now = now
	s.id++
	s.fakes.Stream.Headers = append([][2]string{{":method", "GET"}, {":path", path}, {":authority", "example.com"}, {":scheme", "http"}}, headers...)
	s.fakes.Stream.Properties = map[string]string{"source.address": "10.0.0.1:40000", "xds.route_name": route, "xds.cluster_name": "backend"}
	return s.decide(t)
}

func peer(ip string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]:40000"
	}
	return ip + ":40000"
}

// TestImportedRatelimitAdmitsAsTheService runs each of envoyproxy/
// ratelimit's documented examples twice: through the real service, asked
// with the descriptors Envoy's rate_limits actions make for each request,
// and through the filter's engine configured by sluicectl import from the
// same two configs. Every request must get the same answer. The service
// counts in the wall clock's windows, so each request's Sluice clock is
// the time it was sent to the service; a run in which a request straddled
// a window edge is repeated on a fresh Redis.
func TestImportedRatelimitAdmitsAsTheService(t *testing.T) {
	bin, err := ratelimitsvc.Binary(t)
	testkit.Need(t, err == nil, fmt.Sprintf("envoyproxy/ratelimit (%v)", err))
	redis := redistest.StartRedis(t)
	configs := map[string]string{}
	for _, sc := range importtest.RatelimitScenarios {
		configs[sc.Domain+".yaml"] = sc.Config // a domain once: the service refuses two
	}
	svc := ratelimitsvc.Start(t, bin, redis.Addr(), configs,
		[]byte(`{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`))
	rc := redis.Client()

	for _, sc := range importtest.RatelimitScenarios {
		t.Run(sc.Name, func(t *testing.T) {
			res := importer.Import([]importer.Input{{Name: sc.Name + ".yaml", Data: []byte(sc.Config)},
				{Name: "envoy.yaml", Data: []byte(importtest.EnvoyYAML(sc.Domain, sc.RateLimits))}}, importer.Options{})
			if len(res.Errors) > 0 {
				t.Fatalf("import errors: %v", res.Errors)
			}
			if sc.Overcounts {
				finding(t, res.Findings, importer.Inexact, "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config", "several descriptors")
			}
			for attempt := 0; ; attempt++ {
				if attempt == 3 {
					t.Fatal("three runs straddled a window edge")
				}
				if err := rc.FlushAll(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				sl := newSluiceRun(t, res.Config, time.Now(), nil)
				if importtest.Compare(t, sc, svc, func(_ int, req *importtest.RatelimitRequest, at time.Time) bool {
					return sl.admit(t, at, req.Method, peer(req.Client), "r", req.Headers)
				}) {
					return
				}
			}
		})
	}
}
