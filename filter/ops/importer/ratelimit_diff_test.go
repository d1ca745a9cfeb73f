package importer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-proxy/sluice/filter/engine"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
	"github.com/sluice-proxy/sluice/filter/ops/importer"
	"github.com/sluice-proxy/sluice/filter/ops/importer/importtest"
	"github.com/sluice-proxy/sluice/internal/fixtures/ratelimitsvc"
	"github.com/sluice-proxy/sluice/internal/fixtures/redistest"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

// rlScenario is one of envoyproxy/ratelimit's documented examples (its
// README, "Examples"), the route rate_limits that make its descriptors,
// and traffic for it.
type rlScenario struct {
	name   string
	domain string
	config string // the service's YAML
	// rateLimits is the route's rate_limits, indented for the route.
	rateLimits string
	// traffic is sent in order; a nil request waits for the next second.
	traffic []*rlRequest
	// units are the windows the config counts in, to see a request that
	// straddled a window edge.
	units []time.Duration
	// wantDenials: the traffic must make the service refuse some.
	wantDenials bool
}

type rlRequest struct {
	method  string
	headers [][2]string
	client  string
}

func reqs(n int, method, client string, headers ...string) []*rlRequest {
	var hs [][2]string
	for i := 0; i+1 < len(headers); i += 2 {
		hs = append(hs, [2]string{headers[i], headers[i+1]})
	}
	out := make([]*rlRequest, n)
	for i := range out {
		out[i] = &rlRequest{method: method, headers: hs, client: client}
	}
	return out
}

func cat(parts ...[]*rlRequest) []*rlRequest {
	var out []*rlRequest
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

const client = "10.0.0.1"

var rlScenarios = []rlScenario{
	{
		name: "example1", domain: "mongo_cps", units: []time.Duration{time.Second}, wantDenials: true,
		config: `domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`,
		rateLimits: `
- actions:
  - request_headers: {header_name: x-database, descriptor_key: database}`,
		traffic: cat(reqs(503, "GET", client, "x-database", "users"), reqs(3, "GET", client, "x-database", "default"),
			reqs(3, "GET", client, "x-database", "other"), reqs(2, "GET", client), []*rlRequest{nil},
			reqs(3, "GET", client, "x-database", "users")),
	},
	{
		name: "example2", domain: "messaging", units: []time.Duration{24 * time.Hour}, wantDenials: true,
		config: `domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`,
		rateLimits: `
- actions:
  - request_headers: {header_name: x-message-type, descriptor_key: message_type}
  - request_headers: {header_name: x-to, descriptor_key: to_number}
- actions:
  - request_headers: {header_name: x-to, descriptor_key: to_number}`,
		traffic: cat(reqs(7, "POST", client, "x-message-type", "marketing", "x-to", "2061111111"),
			reqs(3, "POST", client, "x-message-type", "marketing", "x-to", "2062222222"),
			reqs(4, "POST", client, "x-message-type", "transactional", "x-to", "2061111111"),
			reqs(2, "POST", client, "x-message-type", "marketing")),
	},
	{
		name: "example3", domain: "edge_proxy_per_ip", units: []time.Duration{time.Second}, wantDenials: true,
		config: `domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`,
		rateLimits: `
- actions:
  - remote_address: {}`,
		traffic: cat(reqs(12, "GET", "50.0.0.1"), reqs(3, "GET", "50.0.0.5"), reqs(11, "GET", "2001:db8::1"), reqs(2, "GET", "50.0.0.2")),
	},
	{
		name: "example4", domain: "example4", units: []time.Duration{time.Second}, wantDenials: true,
		config: `domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`,
		rateLimits: `
- actions:
  - generic_key: {descriptor_key: key, descriptor_value: value}
  - request_headers: {header_name: x-subkey, descriptor_key: subkey}`,
		traffic: cat(reqs(303, "GET", client, "x-subkey", "subvalue"), reqs(2, "GET", client, "x-subkey", "other")),
	},
	{
		// The README's first configuration of example 4, under a domain
		// of its own: a two-entry descriptor never matches it.
		name: "example4-flat", domain: "example4_flat", units: []time.Duration{time.Second},
		config: `domain: example4_flat
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`,
		rateLimits: `
- actions:
  - generic_key: {descriptor_key: key, descriptor_value: value}
  - request_headers: {header_name: x-subkey, descriptor_key: subkey}`,
		traffic: reqs(303, "GET", client, "x-subkey", "subvalue"),
	},
	{
		name: "example5", domain: "internal", units: []time.Duration{time.Minute}, wantDenials: true,
		config: `domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`,
		rateLimits: `
- actions:
  - request_headers: {header_name: x-ldap, descriptor_key: ldap}
- actions:
  - request_headers: {header_name: x-azure, descriptor_key: azure}`,
		traffic: cat(reqs(103, "GET", client, "x-azure", "a"), reqs(5, "GET", client, "x-ldap", "u"), reqs(3, "GET", client, "x-azure", "b")),
	},
	{
		name: "example6", domain: "example6", units: []time.Duration{time.Second}, wantDenials: true,
		config: `domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`,
		rateLimits: `
- actions:
  - request_headers: {header_name: x-service, descriptor_key: service}
  - request_headers: {header_name: x-user, descriptor_key: user}`,
		traffic: cat(reqs(15, "GET", client, "x-service", "auth-service", "x-user", "user-a"),
			reqs(23, "GET", client, "x-service", "auth-service", "x-user", "user-b"),
			reqs(3, "GET", client, "x-service", "auth-service", "x-user", "user-c")),
	},
	{
		name: "example7", domain: "example7", units: []time.Duration{time.Second}, wantDenials: true,
		config: `domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`,
		rateLimits: `
- actions:
  - header_value_match: {descriptor_key: key_1, descriptor_value: value_1, headers: [{name: x-k1, present_match: true}]}
  - request_headers: {header_name: x-user, descriptor_key: user}
- actions:
  - header_value_match: {descriptor_key: key_2, descriptor_value: value_2, headers: [{name: x-k2, present_match: true}]}
  - request_headers: {header_name: x-user, descriptor_key: user}`,
		traffic: cat(reqs(7, "GET", client, "x-k1", "1", "x-user", "bkthomps"),
			reqs(12, "GET", client, "x-k1", "1", "x-k2", "1", "x-user", "bkthomps"),
			reqs(3, "GET", client, "x-k2", "1", "x-user", "bkthomps")),
	},
	{
		name: "example8", domain: "example8", units: []time.Duration{time.Minute}, wantDenials: true,
		config: `domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
`,
		rateLimits: `
- actions:
  - request_headers: {header_name: x-key1, descriptor_key: key1}`,
		traffic: cat(reqs(22, "GET", client, "x-key1", "value1"), reqs(12, "GET", client, "x-key1", "other"), reqs(11, "GET", client, "x-key1", "another")),
	},
	{
		name: "example10", domain: "example10", units: []time.Duration{time.Minute}, wantDenials: true,
		config: `domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
`,
		rateLimits: `
- actions:
  - request_headers: {header_name: x-route, descriptor_key: route}
  - request_headers: {header_name: ":method", descriptor_key: http_method}
  - request_headers: {header_name: x-subject, descriptor_key: subject_id}`,
		traffic: cat(reqs(62, "GET", client, "x-route", "api", "x-subject", "123"),
			reqs(3, "POST", client, "x-route", "api", "x-subject", "123"),
			reqs(2, "GET", client, "x-route", "web", "x-subject", "456")),
	},
}

// envoyYAML is a listener whose one route, r, has rateLimits, with
// Envoy's ratelimit filter for domain.
func envoyYAML(domain, rateLimits string) string {
	return importtest.Listener("envoy.filters.http.ratelimit", `              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: `+domain, `              - name: r
                match: {prefix: /}
                route:
                  cluster: backend
                  rate_limits:`+strings.ReplaceAll(rateLimits, "\n", "\n                  ")+"\n")
}

// envoyAction is the part of Envoy's RateLimit.Action the scenarios use,
// read by the test's own model of how Envoy makes descriptors.
type envoyAction struct {
	RequestHeaders *struct {
		HeaderName    string `yaml:"header_name"`
		DescriptorKey string `yaml:"descriptor_key"`
		SkipIfAbsent  bool   `yaml:"skip_if_absent"`
	} `yaml:"request_headers"`
	RemoteAddress *struct{} `yaml:"remote_address"`
	GenericKey    *struct {
		DescriptorKey   string `yaml:"descriptor_key"`
		DescriptorValue string `yaml:"descriptor_value"`
	} `yaml:"generic_key"`
	HeaderValueMatch *struct {
		DescriptorKey   string `yaml:"descriptor_key"`
		DescriptorValue string `yaml:"descriptor_value"`
		Headers         []struct {
			Name         string `yaml:"name"`
			PresentMatch bool   `yaml:"present_match"`
		} `yaml:"headers"`
	} `yaml:"header_value_match"`
}

// envoyDescriptors is what Envoy sends the service for req: per entry of
// rate_limits, the entries of its actions, or no descriptor when an
// action cannot produce its entry (a header absent without
// skip_if_absent, a header match that fails).
func envoyDescriptors(t *testing.T, rateLimits string, req *rlRequest) []ratelimitsvc.Descriptor {
	var entries []struct {
		Actions []envoyAction `yaml:"actions"`
	}
	if err := yaml.Unmarshal([]byte(rateLimits), &entries); err != nil {
		t.Fatal(err)
	}
	header := func(name string) (string, bool) {
		if name == ":method" {
			return req.method, true
		}
		for _, h := range req.headers {
			if h[0] == name {
				return h[1], true
			}
		}
		return "", false
	}
	var out []ratelimitsvc.Descriptor
	for _, e := range entries {
		var d ratelimitsvc.Descriptor
		ok := true
		for _, a := range e.Actions {
			switch {
			case a.RequestHeaders != nil:
				v, present := header(a.RequestHeaders.HeaderName)
				if !present {
					ok = a.RequestHeaders.SkipIfAbsent
				} else {
					d.Entries = append(d.Entries, ratelimitsvc.Entry{Key: a.RequestHeaders.DescriptorKey, Value: v})
				}
			case a.RemoteAddress != nil:
				d.Entries = append(d.Entries, ratelimitsvc.Entry{Key: "remote_address", Value: req.client})
			case a.GenericKey != nil:
				d.Entries = append(d.Entries, ratelimitsvc.Entry{Key: a.GenericKey.DescriptorKey, Value: a.GenericKey.DescriptorValue})
			case a.HeaderValueMatch != nil:
				for _, h := range a.HeaderValueMatch.Headers {
					if _, present := header(h.Name); present != h.PresentMatch {
						ok = false
					}
				}
				if ok {
					d.Entries = append(d.Entries, ratelimitsvc.Entry{Key: a.HeaderValueMatch.DescriptorKey, Value: a.HeaderValueMatch.DescriptorValue})
				}
			default:
				t.Fatalf("the test's Envoy model lacks an action of %s", rateLimits)
			}
			if !ok {
				break
			}
		}
		if ok {
			out = append(out, d)
		}
	}
	return out
}

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
	for _, sc := range rlScenarios {
		configs[sc.name+".yaml"] = sc.config
	}
	svc := ratelimitsvc.Start(t, bin, redis.Addr(), configs,
		[]byte(`{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`))
	rc := redis.Client()

	for _, sc := range rlScenarios {
		t.Run(sc.name, func(t *testing.T) {
			res := importer.Import([]importer.Input{{Name: sc.name + ".yaml", Data: []byte(sc.config)},
				{Name: "envoy.yaml", Data: []byte(envoyYAML(sc.domain, sc.rateLimits))}}, importer.Options{})
			if len(res.Errors) > 0 {
				t.Fatalf("import errors: %v", res.Errors)
			}
			for attempt := 0; ; attempt++ {
				if attempt == 3 {
					t.Fatal("three runs straddled a window edge")
				}
				if err := rc.FlushAll(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				if compareRatelimit(t, sc, svc, newSluiceRun(t, res.Config, time.Now(), nil)) {
					return
				}
			}
		})
	}
}

// compareRatelimit sends the scenario's traffic to both; false when a
// request straddled a window edge, so the run proves nothing.
func compareRatelimit(t *testing.T, sc rlScenario, svc *ratelimitsvc.Service, sl *sluiceRun) bool {
	t.Helper()
	// Start well inside a second, so that a run of a few hundred
	// requests rarely straddles one.
	if ms := time.Now().Nanosecond() / 1e6; ms > 600 {
		time.Sleep(time.Duration(1000-ms+5) * time.Millisecond)
	}
	var mismatches []string
	denials := 0
	for i, req := range sc.traffic {
		if req == nil {
			// The next window of a per-second rule.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 5*time.Millisecond)))
			continue
		}
		descs := envoyDescriptors(t, sc.rateLimits, req)
		t0 := time.Now()
		over, err := svc.ShouldRateLimit(sc.domain, descs)
		t1 := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range sc.units {
			if t0.UnixNano()/int64(u) != t1.UnixNano()/int64(u) {
				t.Logf("request %d straddled a %v window edge; running again", i, u)
				return false
			}
		}
		admitted := sl.admit(t, t0, req.method, peer(req.client), "r", req.headers)
		if over {
			denials++
		}
		if admitted == over {
			mismatches = append(mismatches, fmt.Sprintf("request %d %v %v: service over limit %v, Sluice admitted %v", i, req.client, req.headers, over, admitted))
		}
	}
	if len(mismatches) > 0 {
		t.Errorf("%d of %d requests decided differently:\n%s", len(mismatches), len(sc.traffic), strings.Join(mismatches[:min(len(mismatches), 10)], "\n"))
	}
	if sc.wantDenials && denials == 0 {
		t.Errorf("the service refused nothing: the traffic does not reach the limits")
	}
	if !sc.wantDenials && denials > 0 {
		t.Errorf("the service refused %d requests of a config that should never apply", denials)
	}
	return true
}
