package importer_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/ops/importer"
)

// lrlBucket is an Envoy token bucket: it starts with max tokens and gets
// perFill more (up to max) at every tick of interval.
type lrlBucket struct {
	max, perFill int
	interval     time.Duration
}

func (b lrlBucket) yaml(indent string) string {
	return fmt.Sprintf("%stoken_bucket: {max_tokens: %d, tokens_per_fill: %d, fill_interval: %gs}\n",
		indent, b.max, b.perFill, b.interval.Seconds())
}

// lrlDescriptor is a configured descriptor of one entry, client_id:
// value, or any value (a bucket per value) when value is empty.
type lrlDescriptor struct {
	value  string
	bucket lrlBucket
}

// lrlScenario is a local_ratelimit config. Its route "limited" has a
// request_headers action making the descriptor client_id from the header
// x-client-id; perRoute puts the config on that route only, and a second
// route, "open", has none.
type lrlScenario struct {
	name              string
	bucket            lrlBucket
	enabled, enforced float64
	alwaysConsume     bool
	descriptors       []lrlDescriptor
	perRoute          bool
}

func fraction(p float64) string {
	return fmt.Sprintf("{default_value: {numerator: %d, denominator: MILLION}}", int(p*10000))
}

func (sc lrlScenario) envoyYAML() string {
	var cfg strings.Builder
	cfg.WriteString(`"@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
stat_prefix: local
`)
	cfg.WriteString(sc.bucket.yaml(""))
	fmt.Fprintf(&cfg, "filter_enabled: %s\nfilter_enforced: %s\n", fraction(sc.enabled), fraction(sc.enforced))
	fmt.Fprintf(&cfg, "always_consume_default_token_bucket: %v\n", sc.alwaysConsume)
	if len(sc.descriptors) > 0 {
		cfg.WriteString("descriptors:\n")
		for _, d := range sc.descriptors {
			fmt.Fprintf(&cfg, "- entries: [{key: client_id, value: %q}]\n", d.value)
			cfg.WriteString(d.bucket.yaml("  "))
		}
	}
	indent := func(s, pad string) string {
		return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad)
	}
	filterCfg, routeCfg := indent(cfg.String(), "              "), ""
	if sc.perRoute {
		filterCfg = `              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: local`
		routeCfg = "\n                typed_per_filter_config:\n                  envoy.filters.http.local_ratelimit:\n" + indent(cfg.String(), "                    ")
	}
	return listener("envoy.filters.http.local_ratelimit", filterCfg, `              - name: limited
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
}

// envoyLocal is a model of Envoy's local_ratelimit as its documentation
// describes it: buckets filled at fixed ticks; a request is limited only
// for filter_enabled of the requests and refused for filter_enforced of
// those; its descriptors select the configured descriptors with the same
// entries (an empty value: any, with a bucket per value), and it takes a
// token from each selected bucket and from the default one, which it
// uses when none is selected or always_consume_default_token_bucket.
type envoyLocal struct {
	sc      lrlScenario
	start   time.Time
	buckets map[string]*modelBucket
	draw    func(percent float64) bool
}

type modelBucket struct {
	lrlBucket
	tokens int
	ticks  int64
}

// at brings the bucket to now: one fill per tick passed since start.
func (b *modelBucket) at(start, now time.Time) {
	ticks := int64(now.Sub(start) / b.interval)
	for ; b.ticks < ticks; b.ticks++ {
		b.tokens = min(b.max, b.tokens+b.perFill)
	}
}

func (m *envoyLocal) bucket(name string, spec lrlBucket, now time.Time) *modelBucket {
	b := m.buckets[name]
	if b == nil {
		b = &modelBucket{lrlBucket: spec, tokens: spec.max, ticks: int64(now.Sub(m.start) / spec.interval)}
		m.buckets[name] = b
	}
	b.at(m.start, now)
	return b
}

func (m *envoyLocal) admit(now time.Time, route, clientID string, hasID bool) bool {
	if m.sc.perRoute && route != "limited" {
		return true
	}
	// Both fractions are drawn up front, independently, in Sluice's
	// order, so the two see the same random numbers.
	if !m.draw(m.sc.enabled) {
		return true
	}
	enforced := m.draw(m.sc.enforced)
	var use []*modelBucket
	if route == "limited" && hasID {
		// A descriptor naming the value wins over one for any value.
		for i, d := range m.sc.descriptors {
			if d.value == clientID {
				use = append(use, m.bucket(fmt.Sprint("d", i), d.bucket, now))
				break
			}
		}
		for i, d := range m.sc.descriptors {
			if len(use) == 0 && d.value == "" {
				use = append(use, m.bucket(fmt.Sprint("d", i, "/", clientID), d.bucket, now))
			}
		}
	}
	if len(use) == 0 || m.sc.alwaysConsume {
		use = append(use, m.bucket("default", m.sc.bucket, now))
	}
	for _, b := range use {
		if b.tokens == 0 {
			return !enforced
		}
		b.tokens--
	}
	return true
}

// perMillion draws as Sluice does: nothing for 0 and 100 percent, else a
// draw from r under the fraction.
func perMillion(r func() uint64) func(float64) bool {
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

var lrlScenarios = []lrlScenario{
	{name: "default-bucket", bucket: lrlBucket{5, 2, time.Second}, enabled: 100, enforced: 100, alwaysConsume: true},
	{name: "descriptors-without-default", bucket: lrlBucket{6, 3, time.Second}, enabled: 100, enforced: 100,
		descriptors: []lrlDescriptor{{"gold", lrlBucket{4, 2, 500 * time.Millisecond}}, {"", lrlBucket{2, 1, time.Second}}}},
	{name: "fractions", bucket: lrlBucket{3, 1, 200 * time.Millisecond}, enabled: 50, enforced: 70, alwaysConsume: true},
	{name: "per-route", bucket: lrlBucket{2, 1, 250 * time.Millisecond}, enabled: 100, enforced: 100, alwaysConsume: true, perRoute: true},
	{name: "disabled-by-default-fractions", bucket: lrlBucket{1, 1, time.Second}, enabled: 0, enforced: 0, alwaysConsume: true},
}

// TestImportedLocalRatelimitAdmitsAsEnvoysModel runs random traffic
// through a model of Envoy's local_ratelimit and through the engine
// configured by sluicectl import from the same Envoy YAML, and compares
// every request's answer. Requests arrive at the fill ticks (bursts of
// up to 6), where Envoy's stepped fills and Sluice's continuous refill
// hold the same tokens; between ticks they differ, as the import
// reports. Both draw the rollout fractions from the same random numbers.
func TestImportedLocalRatelimitAdmitsAsEnvoysModel(t *testing.T) {
	for _, sc := range lrlScenarios {
		t.Run(sc.name, func(t *testing.T) {
			res := importer.Import([]importer.Input{{Name: "envoy.yaml", Data: []byte(sc.envoyYAML())}}, importer.Options{})
			if len(res.Errors) > 0 {
				t.Fatalf("import errors: %v\n%s", res.Errors, sc.envoyYAML())
			}
			start := time.Unix(1_800_000_000, 0)
			sluiceRand := rand.New(rand.NewPCG(1, 2))
			modelRand := rand.New(rand.NewPCG(1, 2))
			sl := newSluiceRun(t, res.Config, start, sluiceRand.Uint64)
			m := &envoyLocal{sc: sc, start: start, buckets: map[string]*modelBucket{}, draw: perMillion(modelRand.Uint64)}
			traffic := rand.New(rand.NewPCG(3, 4))
			// A tick of every bucket (the scenarios' intervals divide the
			// largest).
			tick := sc.bucket.interval
			for _, d := range sc.descriptors {
				tick = max(tick, d.bucket.interval)
			}
			var mismatches []string
			limited, admitted := 0, 0
			ids := []string{"gold", "silver", "bronze"}
			for k := 0; k < 60; k++ {
				now := start.Add(time.Duration(k) * tick)
				for range traffic.IntN(7) {
					route, path := "limited", "/limited"
					if traffic.IntN(4) == 0 {
						route, path = "open", "/"
					}
					id, hasID := ids[traffic.IntN(len(ids))], traffic.IntN(5) != 0
					var hs [][2]string
					if hasID {
						hs = [][2]string{{"x-client-id", id}}
					}
					want := m.admit(now, route, id, hasID)
					got := sl.admitAt(t, now, route, path, hs)
					if want {
						admitted++
					} else {
						limited++
					}
					if got != want {
						mismatches = append(mismatches, fmt.Sprintf("tick %d %s %v: Envoy's model admits %v, Sluice %v", k, route, hs, want, got))
					}
				}
			}
			if len(mismatches) > 0 {
				t.Errorf("%d requests decided differently:\n%s\n%s", len(mismatches), strings.Join(mismatches[:min(10, len(mismatches))], "\n"), res.Config)
			}
			if sc.enabled > 0 && (limited == 0 || admitted == 0) {
				t.Errorf("the model admitted %d and limited %d: the traffic does not exercise the limit", admitted, limited)
			}
		})
	}
}
