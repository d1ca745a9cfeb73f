// Package importtest holds what sluicectl import's tests share with the
// end-to-end tests that run its output on the wasm: Envoy listeners as
// YAML, local_ratelimit scenarios, a model of Envoy's documented
// local_ratelimit and traffic for it. It is test support only.
package importtest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Listener is an Envoy bootstrap whose connection manager has the HTTP
// filter name (its typed_config's lines, indented for it) and the router,
// and one virtual host with routes (list items, indented for it).
func Listener(name, typedConfig, routes string) string {
	return `static_resources:
  listeners:
  - filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          http_filters:
          - name: ` + name + `
            typed_config:
` + typedConfig + `
          - name: envoy.filters.http.router
          route_config:
            virtual_hosts:
            - name: vh
              domains: ["*"]
              routes:
` + routes
}

// Bucket is an Envoy token bucket: it starts with Max tokens and gets
// PerFill more (up to Max) at every tick of Interval.
type Bucket struct {
	Max, PerFill int
	Interval     time.Duration
}

func (b Bucket) yaml(indent string) string {
	return fmt.Sprintf("%stoken_bucket: {max_tokens: %d, tokens_per_fill: %d, fill_interval: %gs}\n",
		indent, b.Max, b.PerFill, b.Interval.Seconds())
}

// Descriptor is a configured descriptor of one entry, client_id: Value,
// or any value (a bucket per value) when Value is empty.
type Descriptor struct {
	Value  string
	Bucket Bucket
}

// LocalScenario is a local_ratelimit config. Its route "limited" has a
// request_headers action making the descriptor client_id from the header
// x-client-id; PerRoute puts the config on that route only, and a second
// route, "open", has none.
type LocalScenario struct {
	Name              string
	Bucket            Bucket
	Enabled, Enforced float64
	AlwaysConsume     bool
	Descriptors       []Descriptor
	PerRoute          bool
	// Unnamed leaves the routes without names, so the import scopes by
	// their paths.
	Unnamed bool
}

// LocalScenarios are the scenarios the tests run.
var LocalScenarios = []LocalScenario{
	{Name: "default-bucket", Bucket: Bucket{5, 2, time.Second}, Enabled: 100, Enforced: 100, AlwaysConsume: true},
	{Name: "descriptors-without-default", Bucket: Bucket{6, 3, time.Second}, Enabled: 100, Enforced: 100,
		Descriptors: []Descriptor{{"gold", Bucket{4, 2, 500 * time.Millisecond}}, {"", Bucket{2, 1, time.Second}}}},
	{Name: "fractions", Bucket: Bucket{3, 1, 200 * time.Millisecond}, Enabled: 50, Enforced: 70, AlwaysConsume: true},
	{Name: "per-route", Bucket: Bucket{2, 1, 250 * time.Millisecond}, Enabled: 100, Enforced: 100, AlwaysConsume: true, PerRoute: true},
	{Name: "unnamed-routes", Bucket: Bucket{2, 1, 250 * time.Millisecond}, Enabled: 100, Enforced: 100, PerRoute: true, Unnamed: true,
		Descriptors: []Descriptor{{"gold", Bucket{3, 1, 250 * time.Millisecond}}}},
	{Name: "disabled-by-default-fractions", Bucket: Bucket{1, 1, time.Second}, Enabled: 0, Enforced: 0, AlwaysConsume: true},
}

// Whole reports that the scenario's fractions draw nothing (0 or 100%),
// so a harness without a random source of its own can run it.
func (sc LocalScenario) Whole() bool {
	whole := func(p float64) bool { return p == 0 || p == 100 }
	return whole(sc.Enabled) && whole(sc.Enforced)
}

func fraction(p float64) string {
	return fmt.Sprintf("{default_value: {numerator: %d, denominator: MILLION}}", int(p*10000))
}

// EnvoyYAML is the scenario as an Envoy bootstrap.
func (sc LocalScenario) EnvoyYAML() string {
	var cfg strings.Builder
	cfg.WriteString(`"@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
stat_prefix: local
`)
	cfg.WriteString(sc.Bucket.yaml(""))
	fmt.Fprintf(&cfg, "filter_enabled: %s\nfilter_enforced: %s\n", fraction(sc.Enabled), fraction(sc.Enforced))
	fmt.Fprintf(&cfg, "always_consume_default_token_bucket: %v\n", sc.AlwaysConsume)
	if len(sc.Descriptors) > 0 {
		cfg.WriteString("descriptors:\n")
		for _, d := range sc.Descriptors {
			fmt.Fprintf(&cfg, "- entries: [{key: client_id, value: %q}]\n", d.Value)
			cfg.WriteString(d.Bucket.yaml("  "))
		}
	}
	indent := func(s, pad string) string {
		return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad)
	}
	filterCfg, routeCfg := indent(cfg.String(), "              "), ""
	if sc.PerRoute {
		filterCfg = `              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: local`
		routeCfg = "\n                typed_per_filter_config:\n                  envoy.filters.http.local_ratelimit:\n" + indent(cfg.String(), "                    ")
	}
	routes := Listener("envoy.filters.http.local_ratelimit", filterCfg, `              - name: limited
                match: {prefix: /limited}
                route:
                  cluster: backend
                  rate_limits:
                  - actions:
                    - request_headers: {header_name: x-client-id, descriptor_key: client_id}`+routeCfg+`
              - name: open
                match: {prefix: /}
                route: {cluster: backend}
`)
	if sc.Unnamed {
		routes = strings.NewReplacer("- name: limited\n                ", "- ", "- name: open\n                ", "- ").Replace(routes)
	}
	return routes
}

// RouteName is the route name Envoy gives the filter for r.
func (sc LocalScenario) RouteName(r Request) string {
	if sc.Unnamed {
		return ""
	}
	return r.Route
}

// Model is Envoy's local_ratelimit as its documentation describes it:
// buckets filled at fixed ticks from the filter's start; a request is
// limited only for filter_enabled of the requests and refused for
// filter_enforced of those; its descriptors select the configured
// descriptor with the same entries (one naming the value first, else one
// for any value, with a bucket per value), and it takes a token from that
// bucket and from the default one, which it uses when none is selected
// or always_consume_default_token_bucket. Both fractions are drawn up
// front, enabled then enforced, as Sluice draws them, so the two can be
// given the same random numbers.
type Model struct {
	sc      LocalScenario
	start   time.Time
	buckets map[string]*modelBucket
	draw    func(percent float64) bool
}

// NewModel starts the scenario's filter at start; draw decides a
// fraction (Draws).
func NewModel(sc LocalScenario, start time.Time, draw func(percent float64) bool) *Model {
	return &Model{sc: sc, start: start, buckets: map[string]*modelBucket{}, draw: draw}
}

type modelBucket struct {
	Bucket
	tokens int
	ticks  int64
}

// at brings the bucket to now: one fill per tick passed since start.
func (b *modelBucket) at(start, now time.Time) {
	ticks := int64(now.Sub(start) / b.Interval)
	for ; b.ticks < ticks; b.ticks++ {
		b.tokens = min(b.Max, b.tokens+b.PerFill)
	}
}

func (m *Model) bucket(name string, spec Bucket, now time.Time) *modelBucket {
	b := m.buckets[name]
	if b == nil {
		b = &modelBucket{Bucket: spec, tokens: spec.Max, ticks: int64(now.Sub(m.start) / spec.Interval)}
		m.buckets[name] = b
	}
	b.at(m.start, now)
	return b
}

// Admit decides a request at now.
func (m *Model) Admit(now time.Time, r Request) bool {
	if m.sc.PerRoute && r.Route != "limited" {
		return true
	}
	if !m.draw(m.sc.Enabled) {
		return true
	}
	enforced := m.draw(m.sc.Enforced)
	var use []*modelBucket
	if r.Route == "limited" && r.HasID {
		for i, d := range m.sc.Descriptors {
			if d.Value == r.ClientID {
				use = append(use, m.bucket(fmt.Sprint("d", i), d.Bucket, now))
				break
			}
		}
		for i, d := range m.sc.Descriptors {
			if len(use) == 0 && d.Value == "" {
				use = append(use, m.bucket(fmt.Sprint("d", i, "/", r.ClientID), d.Bucket, now))
			}
		}
	}
	if len(use) == 0 || m.sc.AlwaysConsume {
		use = append(use, m.bucket("default", m.sc.Bucket, now))
	}
	for _, b := range use {
		if b.tokens == 0 {
			return !enforced
		}
		b.tokens--
	}
	return true
}

// Draws decides fractions as Sluice does: nothing drawn for 0 and 100
// percent, else a draw from r under the fraction.
func Draws(r func() uint64) func(float64) bool {
	return func(p float64) bool {
		n := uint64(p*10000 + 0.5)
		switch n {
		case 0:
			return false
		case 1_000_000:
			return true
		}
		return r()%1_000_000 < n
	}
}

// Request is one request of the traffic.
type Request struct {
	// Tick is the fill tick it arrives at.
	Tick        int
	Route, Path string
	ClientID    string
	HasID       bool
}

// Headers are the request's headers besides the pseudo-headers.
func (r Request) Headers() [][2]string {
	if !r.HasID {
		return nil
	}
	return [][2]string{{"x-client-id", r.ClientID}}
}

// TickInterval is the spacing of the traffic's ticks: a tick of every
// bucket (the scenarios' intervals divide the largest), where Envoy's
// stepped fills and Sluice's continuous refill hold the same tokens.
func (sc LocalScenario) TickInterval() time.Duration {
	tick := sc.Bucket.Interval
	for _, d := range sc.Descriptors {
		tick = max(tick, d.Bucket.Interval)
	}
	return tick
}

// Traffic is 60 ticks of bursts of up to 6 requests, on either route,
// with or without a client id, from a fixed seed.
func Traffic() []Request {
	r := rand.New(rand.NewPCG(3, 4))
	ids := []string{"gold", "silver", "bronze"}
	var out []Request
	for k := 0; k < 60; k++ {
		for range r.IntN(7) {
			req := Request{Tick: k, Route: "limited", Path: "/limited"}
			if r.IntN(4) == 0 {
				req.Route, req.Path = "open", "/"
			}
			req.ClientID, req.HasID = ids[r.IntN(len(ids))], r.IntN(5) != 0
			out = append(out, req)
		}
	}
	return out
}
