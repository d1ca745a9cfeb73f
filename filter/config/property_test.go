package config

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// genConfig builds a random, mostly plausible configuration from pools of
// valid and borderline values, so that a good share of documents get past
// the parser and exercise the agreement rules the byte-level fuzzer rarely
// reaches.
func genConfig(r *rand.Rand) map[string]any {
	pick := func(vs ...any) any { return vs[r.IntN(len(vs))] }
	// mostly returns a good value four times in five, so most documents
	// carry few mistakes and a fair share is valid.
	mostly := func(good []any, bad ...any) any {
		if r.IntN(5) > 0 || len(bad) == 0 {
			return good[r.IntN(len(good))]
		}
		return bad[r.IntN(len(bad))]
	}
	maybe := func(m map[string]any, k string, v func() any) {
		if r.IntN(4) == 0 {
			m[k] = v()
		}
	}
	// maybeObject sometimes sets m[k] to an object that fill fills.
	maybeObject := func(m map[string]any, k string, fill func(o map[string]any)) {
		maybe(m, k, func() any {
			o := map[string]any{}
			fill(o)
			return o
		})
	}
	dur := func() any {
		return mostly([]any{"1s", "500ms", "1m", "1m30s", "1.5s", "20ms"}, "0s", "200h", "5", 5, "-1s", "1µs")
	}
	count := func() any { return mostly([]any{1, 2, 5, 100, 5.0}, 0, -1, 1.5, "3", 1e10) }
	status := func() any { return mostly([]any{429, 503, 599}, 200, 600, 99) }
	names := []string{"a", "b", "c"}
	match := func() any {
		m := map[string]any{}
		maybe(m, "path", func() any { return pick("/x", "x", "/a?b") })
		maybe(m, "path_prefix", func() any { return pick("/api", "api") })
		maybe(m, "methods", func() any {
			return pick([]any{"GET"}, []any{"get", "POST"}, []any{}, []any{"GETT"}, []any{"GET", "get"})
		})
		maybe(m, "hosts", func() any { return pick([]any{"a.com"}, []any{"*.a.com"}, []any{"a.com:80"}, []any{}) })
		maybe(m, "headers", func() any {
			return pick([]any{map[string]any{"name": "x", "value": "1"}}, []any{map[string]any{"name": "x", "present": false}},
				[]any{map[string]any{"name": "x"}}, []any{map[string]any{"name": "x", "value": "1", "present": true}})
		})
		maybe(m, "routes", func() any { return pick([]any{"r"}, []any{""}) })
		maybe(m, "client_cidrs", func() any {
			return pick([]any{"10.0.0.0/8"}, []any{"2001:db8::/32", "192.0.2.1"}, []any{}, []any{"10.0.0.0/33"}, []any{"fe80::%1/64"})
		})
		maybe(m, "query", func() any {
			return pick([]any{map[string]any{"name": "a", "value": "1"}}, []any{map[string]any{"name": "a", "regex": "[0-9]+"}},
				[]any{map[string]any{"name": "a", "present": true}}, []any{map[string]any{"name": "a", "prefix": ""}},
				[]any{map[string]any{"name": "a", "suffix": "x"}}, []any{map[string]any{"name": "a b", "value": "1"}})
		})
		maybe(m, "metadata", func() any {
			return pick([]any{map[string]any{"namespace": "envoy.filters.http.jwt_authn", "path": "jwt_payload.sub", "value": "a"}},
				[]any{map[string]any{"namespace": "n", "path": "p", "present": false}}, []any{map[string]any{"namespace": "n", "path": "a..b", "present": true}},
				[]any{map[string]any{"namespace": "n", "path": "p"}}, []any{map[string]any{"path": "p", "value": "1"}},
				[]any{map[string]any{"namespace": "n", "path": "p", "value": "1", "present": true}}, []any{})
		})
		maybe(m, "path_regex", func() any { return pick("/api/.*", "(", "") })
		maybe(m, "headers", func() any {
			return pick([]any{map[string]any{"name": "x", "prefix": "a"}}, []any{map[string]any{"name": "x", "regex": "a|b"}},
				[]any{map[string]any{"name": "x", "contains": "a", "suffix": "b"}}, []any{map[string]any{"name": "x", "regex": "(?P<"}})
		})
		maybe(m, "not", func() any {
			return pick(map[string]any{"client_cidrs": []any{"10.0.0.0/8"}}, map[string]any{}, map[string]any{"bogus": 1})
		})
		return m
	}
	rateFields := func(m map[string]any) {
		switch r.IntN(10) {
		case 0, 1, 2, 3:
			m["requests_per_second"] = count()
		case 4, 5, 6, 7:
			m["limit"], m["window"] = count(), dur()
		case 8:
			m["requests_per_second"], m["limit"] = count(), count()
		}
		maybe(m, "burst", count)
	}
	limit := func() any {
		m := map[string]any{"name": mostly([]any{"a", "b", "c"}, "a.b")}
		rateFields(m)
		maybe(m, "match", match)
		maybe(m, "key", func() any {
			return pick([]any{}, []any{"client_ip"}, []any{"header:x", "path"}, []any{"route", "method", "host"}, []any{"cluster"}, []any{"bogus"}, []any{"path", "path"},
				[]any{"query:user", "cookie:sid"}, []any{"path_segment:1", "client_ip/24/56"}, []any{"query:a&b"}, []any{"path_segment:0"},
				[]any{"client_ip/33/64"}, []any{"cookie:"},
				[]any{"metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"}, []any{"metadata:ns:"}, []any{"metadata:ns:a..b"}, []any{"metadata:ns"})
		})
		maybe(m, "algorithm", func() any {
			return mostly([]any{"token_bucket", "fixed_window", "sliding_window", "sliding_log"}, "leaky")
		})
		maybe(m, "cost", func() any {
			if r.IntN(2) == 0 {
				return count()
			}
			o := map[string]any{}
			if r.IntN(5) > 0 {
				o["header"] = mostly([]any{"x-cost", "X-Cost"}, "x cost", 5)
			}
			maybe(o, "default", count)
			maybe(o, "max", count)
			maybe(o, "maximum", count)
			return o
		})
		maybeObject(m, "rollout", func(o map[string]any) {
			maybe(o, "enabled_percent", func() any { return mostly([]any{0, 12.5, 100, 99.9999}, 100.5, -1, "50") })
			maybe(o, "enforced_percent", func() any { return mostly([]any{0, 50, 100}, 101) })
		})
		maybe(m, "upstream_headers_when_limited", func() any {
			return mostly([]any{map[string]any{"x-would": "true"}, map[string]any{}, map[string]any{"X-A": "1", "b": "two words"}},
				map[string]any{"x a": "1"}, map[string]any{"x": "a\nb"}, map[string]any{"host": "h"}, map[string]any{"x": " pad"}, []any{})
		})
		maybe(m, "cost_from_response", func() any {
			o := map[string]any{}
			if r.IntN(5) > 0 {
				o["header"] = mostly([]any{"x-tokens-used"}, "x:tokens", "")
			}
			maybe(o, "default", count)
			return mostly([]any{o}, "x-tokens-used")
		})
		maybeObject(m, "overrides", func(o map[string]any) {
			for i := 1 + r.IntN(2); i > 0; i-- {
				ov := map[string]any{}
				rateFields(ov)
				o[mostly([]any{"gold", "silver"}, "").(string)] = ov
			}
		})
		if _, ok := m["overrides"]; ok || r.IntN(5) == 0 {
			maybe(m, "override_by", func() any { return pick("client_ip", "path", "header:x", "host", "query:user", "client_ip/24/56") })
		}
		maybe(m, "mode", func() any { return pick("local", "global", "hybrid") })
		if mode := m["mode"]; mode == "global" || mode == "hybrid" || r.IntN(5) == 0 {
			maybe(m, "failure_policy", func() any { return pick("allow", "deny", "local") })
			maybe(m, "instances", count)
		}
		maybe(m, "on_missing_key", func() any { return pick("skip", "deny") })
		maybeObject(m, "on_limit", func(o map[string]any) {
			maybe(o, "action", func() any { return pick("reject", "delay") })
			if o["action"] == "delay" || r.IntN(5) == 0 {
				maybe(o, "max_delay", dur)
			}
			maybe(o, "status", status)
		})
		maybe(m, "shadow", func() any { return pick(true, false) })
		maybe(m, "replaces", func() any { return []any{mostly([]any{names[0], names[1], names[2]}, "z")} })
		return m
	}
	breaker := func() any {
		m := map[string]any{"name": mostly([]any{"b1", "b2", "b3", "b4"}, "b1")}
		maybe(m, "match", match)
		maybe(m, "per", func() any { return pick("cluster", "route") })
		maybe(m, "failure_statuses", func() any { return pick([]any{}, []any{500}, []any{500, 500}, []any{99}) })
		maybe(m, "failure_on_timeout", func() any { return pick(true, false) })
		maybe(m, "failure_threshold", count)
		maybeObject(m, "failure_rate", func(o map[string]any) {
			maybe(o, "threshold_percent", func() any { return pick(1, 50, 100, 101) })
			maybe(o, "window_type", func() any { return pick("count", "time") })
			maybe(o, "window", count)
			maybe(o, "window_duration", dur)
			maybe(o, "minimum_calls", count)
		})
		maybeObject(m, "slow_call", func(o map[string]any) {
			if r.IntN(5) > 0 {
				o["duration"] = dur()
			}
			maybe(o, "threshold_percent", func() any { return pick(1, 100, 0) })
		})
		maybe(m, "success_threshold", count)
		maybe(m, "open_timeout", dur)
		maybe(m, "half_open_max_requests", count)
		maybe(m, "mode", func() any { return pick("enforce", "metrics_only", "forced_open", "disabled") })
		maybe(m, "status", status)
		return m
	}
	concurrency := func() any {
		m := map[string]any{"name": mostly([]any{"c1", "c2"}, "c 1")}
		if r.IntN(6) > 0 {
			m["max_in_flight"] = count()
		}
		maybe(m, "match", match)
		maybe(m, "key", func() any {
			return pick([]any{}, []any{"route"}, []any{"cluster", "header:x-tenant"}, []any{"tenant"}, []any{"route", "route"})
		})
		maybe(m, "status", status)
		maybe(m, "shadow", func() any { return pick(true, false, "no") })
		return m
	}
	cfg := map[string]any{}
	maybeObject(cfg, "client_ip", func(o map[string]any) {
		maybe(o, "source", func() any { return pick("peer", "xff", "header") })
		maybe(o, "trusted_hops", count)
		maybe(o, "header", func() any { return pick("x-real-ip", "bad header") })
		maybe(o, "sources", func() any {
			return pick([]any{"xff", "header:x-real-ip", "peer"}, []any{"peer"}, []any{}, []any{"peer", "peer"}, []any{"header:"})
		})
	})
	maybeObject(cfg, "backend", func(o map[string]any) {
		maybe(o, "cluster", func() any { return pick("webdis", "") })
		if r.IntN(2) == 0 {
			o["cluster"] = "webdis"
		}
		maybe(o, "protocol", func() any { return pick("webdis", "upstash") })
		maybe(o, "token", func() any { return pick("t", "") })
		maybe(o, "basic_auth", func() any { return pick("u:p", "u") })
		maybe(o, "timeout", dur)
		maybe(o, "retries", count)
		maybe(o, "failure_policy", func() any { return pick("allow", "deny", "local") })
		maybe(o, "path_prefix", func() any { return pick("/", "/r", "r") })
	})
	maybeObject(cfg, "external", func(o map[string]any) {
		if r.IntN(5) > 0 {
			o["cluster"] = "limits"
		}
		if r.IntN(5) > 0 {
			fb := map[string]any{}
			rateFields(fb)
			maybe(fb, "key", func() any { return pick([]any{}, []any{"header:x"}, []any{"bogus"}) })
			o["fallback"] = fb
		}
		maybe(o, "name", func() any { return mostly([]any{"external", "tenant", "a"}, "a.b") })
		maybe(o, "path", func() any { return pick("/limits", "limits") })
		maybe(o, "timeout", dur)
		maybe(o, "forward_headers", func() any {
			return pick([]any{}, []any{"x-tenant"}, []any{"*"}, []any{"*", "cookie"}, []any{"X", "x"}, []any{"bad header"})
		})
		maybe(o, "cache_key", func() any { return pick([]any{}, []any{"header:x-tenant", "path"}, []any{"tenant"}) })
		maybe(o, "cache_ttl", dur)
		maybe(o, "stale_ttl", dur)
		maybe(o, "max_cached", count)
		maybe(o, "mode", func() any { return pick("local", "global", "hybrid") })
		if mode := o["mode"]; mode == "global" || mode == "hybrid" || r.IntN(5) == 0 {
			maybe(o, "failure_policy", func() any { return pick("allow", "deny", "local") })
			maybe(o, "instances", count)
		}
		maybe(o, "on_missing_key", func() any { return pick("skip", "deny") })
		maybe(o, "on_limit", func() any { return map[string]any{"status": status()} })
	})
	var limits []any
	for i := r.IntN(4); i > 0; i-- {
		limits = append(limits, limit())
	}
	if limits != nil {
		cfg["limits"] = limits
	}
	var breakers []any
	for i := r.IntN(3); i > 0; i-- {
		breakers = append(breakers, breaker())
	}
	if breakers != nil {
		cfg["breakers"] = breakers
	}
	// One entry in a third of the documents keeps the share of accepted
	// documents (every field is another chance of a mistake) useful.
	if r.IntN(3) == 0 {
		cfg["concurrency"] = []any{concurrency()}
	}
	maybeObject(cfg, "response", func(o map[string]any) {
		maybe(o, "headers", func() any { return pick([]any{}, []any{"ratelimit"}, []any{"ratelimit", "ratelimit"}, []any{"x"}) })
		maybe(o, "headers_on_allowed", func() any { return pick(true, false, 1) })
		maybe(o, "body", func() any { return pick("json", "problem+json", "none", "xml") })
	})
	return cfg
}

// TestParserWithinSchema checks on generated documents that Parse never
// accepts what the schema rejects, and that accepted configs round-trip.
func TestParserWithinSchema(t *testing.T) {
	sch := compileSchema(t)
	r := rand.New(rand.NewPCG(1, 2))
	n := 6000
	if testing.Short() {
		n = 500
	}
	accepted := 0
	for i := 0; i < n; i++ {
		data, err := json.Marshal(genConfig(r))
		if err != nil {
			t.Fatal(err)
		}
		c, err := Parse(data)
		if err != nil {
			continue
		}
		accepted++
		if schemaErr := schemaValidate(sch, data); schemaErr != nil {
			t.Fatalf("Parse accepts but the schema rejects %s:\n%v", data, schemaErr)
		}
		roundTrip(t, c)
	}
	// A generator that only produces rejected documents tests nothing.
	if accepted < n/20 {
		t.Fatalf("only %d of %d generated configs were accepted", accepted, n)
	}
	t.Logf("%d of %d generated configs accepted", accepted, n)
}
