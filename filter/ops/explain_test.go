package ops

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/limiter"
)

var explainNow = time.Unix(1_800_000_000, 0)

// explainArgs runs explain's argument parsing and Explain, as the command
// does.
func explainArgs(t *testing.T, cfg string, args ...string) *Explanation {
	t.Helper()
	a, err := parseRequestArgs(append([]string{"--config", "unused"}, args...))
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	ex, err := Explain([]byte(cfg), a.req, explainNow, a.showKeys)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	return ex
}

const hierarchy = `{"limits": [
	{"name": "default", "key": [], "requests_per_second": 20, "burst": 5},
	{"name": "api", "match": {"path_prefix": "/api/"}, "key": [], "requests_per_second": 10, "burst": 2, "replaces": ["default"]},
	{"name": "api-users", "match": {"path_prefix": "/api/users", "methods": ["POST"]}, "key": ["header:x-user"], "requests_per_second": 2, "burst": 1, "replaces": ["api"]}]}`

func TestExplainReplacesAndConditions(t *testing.T) {
	ex := explainArgs(t, hierarchy, "POST", "http://example.com/api/users/7?x=1", "-H", "X-User: alice")
	if ex.Outcome != "admitted" {
		t.Fatalf("outcome %q", ex.Outcome)
	}
	states := []string{}
	for _, l := range ex.Limits {
		states = append(states, l.Name+"="+l.State+strings.Join(l.ReplacedBy, ","))
	}
	if got := strings.Join(states, " "); got != "default=replacedapi api=replacedapi-users api-users=applies" {
		t.Fatalf("states %s", got)
	}
	u := ex.Limits[2]
	want := []Condition{{"path_prefix", `{"path_prefix":"/api/users"}`, true}, {"methods", `{"methods":["POST"]}`, true}}
	if !reflect.DeepEqual(u.Conditions, want) {
		t.Fatalf("conditions %+v", u.Conditions)
	}
	if len(u.Key) != 1 || u.Key[0] != (KeyValue{"header:x-user", redact("alice")}) || u.Rate == nil || *u.Rate != (Rate{2, "1s", 1}) ||
		u.Cost != 1 || u.Decision != "allowed" || *u.Remaining != 2 || u.Mode != "local" {
		t.Fatalf("api-users: %+v", u)
	}

	// GET: api-users' methods condition fails, so api applies again.
	ex = explainArgs(t, hierarchy, "http://example.com/api/users/7")
	if ex.Limits[2].State != "not_matched" || !ex.Limits[2].Conditions[0].Held || ex.Limits[2].Conditions[1].Held ||
		ex.Limits[1].State != "applies" || ex.Limits[0].State != "replaced" {
		t.Fatalf("GET: %+v", ex.Limits)
	}
}

func TestExplainRedactsKeys(t *testing.T) {
	cfg := `{"limits": [{"name": "k", "key": ["header:x-api-key", "client_ip"], "requests_per_second": 1}]}`
	var stdout, stderr bytes.Buffer
	file := writeFiles(t, t.TempDir(), map[string]string{"c.json": cfg})["c.json"]
	args := []string{"explain", "--config", file, "-H", "x-api-key: s3cret", "--client", "203.0.113.9", "/"}
	if code := Main(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if out := stdout.String(); strings.Contains(out, "s3cret") || strings.Contains(out, "203.0.113.9 ") ||
		!strings.Contains(out, "key: header:x-api-key="+redact("s3cret")+" client_ip="+redact("203.0.113.9")) {
		t.Fatalf("redacted output:\n%s", out)
	}
	stdout.Reset()
	if code := Main(append(args, "--show-keys"), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "key: header:x-api-key=s3cret client_ip=203.0.113.9") {
		t.Fatalf("--show-keys output:\n%s", out)
	}
}

func TestExplainRejections(t *testing.T) {
	cases := []struct {
		name, cfg string
		args      []string
		outcome   string
		status    int
		check     func(t *testing.T, ex *Explanation)
	}{
		{name: "missing key denied", cfg: `{"limits": [{"name": "t", "key": ["header:x-tenant"], "requests_per_second": 1, "on_missing_key": "deny"}]}`,
			args: []string{"/"}, outcome: "rejected", status: 429,
			check: func(t *testing.T, ex *Explanation) {
				if !ex.Limits[0].MissingKey || !strings.Contains(ex.Body, `"t"`) {
					t.Fatalf("%+v body %s", ex.Limits[0], ex.Body)
				}
			}},
		{name: "missing key skipped", cfg: `{"limits": [{"name": "t", "key": ["header:x-tenant"], "requests_per_second": 1}]}`,
			args: []string{"/"}, outcome: "admitted",
			check: func(t *testing.T, ex *Explanation) {
				if !ex.Limits[0].MissingKey || ex.Limits[0].Decision != "" {
					t.Fatalf("%+v", ex.Limits[0])
				}
			}},
		{name: "blocked override", cfg: `{"limits": [{"name": "t", "key": ["header:x-tenant"], "requests_per_second": 1, "overrides": {"bad": {"block": true}, "vip": {"unlimited": true}, "gold": {"requests_per_second": 50}}}]}`,
			args: []string{"-H", "x-tenant: bad", "/"}, outcome: "rejected", status: 429,
			check: func(t *testing.T, ex *Explanation) {
				if ex.Limits[0].Action != "block" || ex.Limits[0].Override != "bad" {
					t.Fatalf("%+v", ex.Limits[0])
				}
			}},
		{name: "unlimited override", cfg: `{"limits": [{"name": "t", "key": ["header:x-tenant"], "requests_per_second": 1, "overrides": {"vip": {"unlimited": true}}}]}`,
			args: []string{"-H", "x-tenant: vip", "/"}, outcome: "admitted",
			check: func(t *testing.T, ex *Explanation) {
				if ex.Limits[0].Action != "unlimited" || ex.Limits[0].Decision != "" {
					t.Fatalf("%+v", ex.Limits[0])
				}
			}},
		{name: "rate override", cfg: `{"limits": [{"name": "t", "key": ["header:x-tenant"], "requests_per_second": 1, "overrides": {"gold": {"requests_per_second": 50}}}]}`,
			args: []string{"-H", "x-tenant: gold", "/"}, outcome: "admitted",
			check: func(t *testing.T, ex *Explanation) {
				if l := ex.Limits[0]; l.Override != "gold" || *l.Rate != (Rate{50, "1s", 0}) || *l.Remaining != 49 {
					t.Fatalf("%+v", l)
				}
			}},
		{name: "cost over its max", cfg: `{"limits": [{"name": "c", "key": [], "requests_per_second": 5, "cost": {"header": "x-cost", "max": 5}}]}`,
			args: []string{"-H", "x-cost: 6", "/"}, outcome: "rejected", status: 400,
			check: func(t *testing.T, ex *Explanation) {
				if l := ex.Limits[0]; !strings.Contains(ex.Body, "invalid_cost") || l.Decision != "" {
					t.Fatalf("%+v", l)
				}
			}},
		{name: "cost within", cfg: `{"limits": [{"name": "c", "key": [], "requests_per_second": 5, "cost": {"header": "x-cost", "max": 5}}]}`,
			args: []string{"-H", "x-cost: 3", "/"}, outcome: "admitted",
			check: func(t *testing.T, ex *Explanation) {
				if l := ex.Limits[0]; l.Cost != 3 || *l.Remaining != 2 {
					t.Fatalf("%+v", l)
				}
			}},
		{name: "first limit rejects, the next is not reached", cfg: `{"limits": [{"name": "b", "key": ["header:x-t"], "requests_per_second": 1, "overrides": {"x": {"block": true}}}, {"name": "n", "key": [], "requests_per_second": 1}]}`,
			args: []string{"-H", "x-t: x", "/"}, outcome: "rejected", status: 429,
			check: func(t *testing.T, ex *Explanation) {
				if ex.Limits[1].State != "applies" || ex.Limits[1].Evaluated {
					t.Fatalf("%+v", ex.Limits[1])
				}
			}},
		{name: "global limit waits for Redis, with its key", cfg: `{"backend": {"cluster": "webdis"}, "limits": [{"name": "g", "key": ["header:x-k"], "requests_per_second": 5, "mode": "global"}]}`,
			args: []string{"-H", "x-k: alice", "/"}, outcome: "waits",
			check: func(t *testing.T, ex *Explanation) {
				if l := ex.Limits[0]; ex.WaitsFor != "redis" || l.RedisKey != backend.Key("g", limiter.TokenBucket, "alice") || l.Mode != "global" || l.Decision != "" {
					t.Fatalf("%s %+v", ex.WaitsFor, l)
				}
			}},
		{name: "hybrid limit waits for its lease", cfg: `{"backend": {"cluster": "webdis"}, "limits": [{"name": "l", "key": [], "requests_per_second": 1},
			{"name": "h", "key": ["header:x-k"], "requests_per_second": 5, "mode": "hybrid"}]}`,
			args: []string{"-H", "x-k: bob", "/"}, outcome: "waits",
			check: func(t *testing.T, ex *Explanation) {
				if ex.WaitsFor != "redis" || ex.Limits[1].RedisKey != backend.Key("h", limiter.TokenBucket, "bob") || ex.Limits[0].Decision != "" {
					t.Fatalf("%s %+v", ex.WaitsFor, ex.Limits)
				}
			}},
		{name: "external limit waits for the service", cfg: `{"external": {"cluster": "limits", "path": "/limits", "fallback": {"requests_per_second": 1}}}`,
			args: []string{"/"}, outcome: "waits",
			check: func(t *testing.T, ex *Explanation) {
				if ex.WaitsFor != "limits_service" || len(ex.Limits) != 1 || ex.Limits[0].State != "applies" {
					t.Fatalf("%s %+v", ex.WaitsFor, ex.Limits)
				}
			}},
		{name: "external limit over gRPC waits for the service", cfg: `{"external": {"grpc": {"cluster": "limits-grpc",
			"initial_metadata": {"x-team": "payments"}, "codec": "json"}, "fallback": {"requests_per_second": 1}}}`,
			args: []string{"/"}, outcome: "waits",
			check: func(t *testing.T, ex *Explanation) {
				if ex.WaitsFor != "limits_service" || len(ex.Limits) != 1 || ex.Limits[0].State != "applies" {
					t.Fatalf("%s %+v", ex.WaitsFor, ex.Limits)
				}
			}},
		{name: "an admin call is answered by the filter", cfg: `{"admin": {"path_prefix": "/.sluice/", "client_cidrs": ["10.0.0.0/8"],
			"token_sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}, "limits": [{"name": "t", "key": ["header:x-t"], "requests_per_second": 1}]}`,
			args: []string{"-H", "authorization: Bearer test", "/.sluice/quota?limit=t&key=a"}, outcome: "answered", status: 200,
			check: func(t *testing.T, ex *Explanation) {
				if !strings.Contains(ex.Body, `"remaining":1`) {
					t.Fatalf("body %s", ex.Body)
				}
			}},
		{name: "metadata key and match", cfg: `{"limits": [{"name": "m", "key": ["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"], "requests_per_second": 1,
			"match": {"metadata": [{"namespace": "envoy.filters.http.jwt_authn", "path": "jwt_payload.plan", "value": "free"}]}}]}`,
			args:    []string{"--metadata", "envoy.filters.http.jwt_authn:jwt_payload.sub=alice", "--metadata", "envoy.filters.http.jwt_authn:jwt_payload.plan=free", "--show-keys", "/"},
			outcome: "admitted",
			check: func(t *testing.T, ex *Explanation) {
				if l := ex.Limits[0]; l.State != "applies" || l.Key[0].Value != "alice" {
					t.Fatalf("%+v", l)
				}
			}},
		{name: "breaker and concurrency", cfg: `{"breakers": [{"name": "b", "per": "route"}, {"name": "other", "match": {"routes": ["x"]}}],
			"concurrency": [{"name": "c", "key": ["route", "header:x-t"], "max_in_flight": 1}, {"name": "none", "key": ["header:absent"], "max_in_flight": 1}]}`,
			args: []string{"--route", "search", "--cluster", "svc", "-H", "x-t: t1", "--show-keys", "/"}, outcome: "admitted",
			check: func(t *testing.T, ex *Explanation) {
				wantB := []BreakerExplanation{{"b", "search", true}}
				wantC := []ConcurrencyExplanation{{Name: "c", Key: []KeyValue{{"route", "search"}, {"header:x-t", "t1"}}, Allowed: true}, {Name: "none", MissingKey: true, Allowed: false}}
				if !reflect.DeepEqual(ex.Breakers, wantB) || !reflect.DeepEqual(ex.Concurrency, wantC) {
					t.Fatalf("%+v %+v", ex.Breakers, ex.Concurrency)
				}
			}},
		{name: "xff client", cfg: `{"client_ip": {"source": "xff", "trusted_hops": 1}, "limits": [{"name": "ip", "requests_per_second": 1, "match": {"client_cidrs": ["198.51.100.0/24"]}}]}`,
			args: []string{"-H", "X-Forwarded-For: 198.51.100.4", "--client", "10.9.9.9:1234", "--show-keys", "/"}, outcome: "admitted",
			check: func(t *testing.T, ex *Explanation) {
				if l := ex.Limits[0]; l.State != "applies" || l.Key[0].Value != "198.51.100.4" {
					t.Fatalf("%+v", l)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ex := explainArgs(t, c.cfg, c.args...)
			if ex.Outcome != c.outcome || ex.Status != c.status {
				t.Fatalf("outcome %s %d, want %s %d (body %s)", ex.Outcome, ex.Status, c.outcome, c.status, ex.Body)
			}
			c.check(t, ex)
		})
	}
}

func TestExplainCommand(t *testing.T) {
	f := writeFiles(t, t.TempDir(), map[string]string{"c.json": hierarchy, "bad.json": `{"limits": 1}`,
		"envoy.yaml": bootstrap(true, inlineSluice(`{"limits": [{"name": "y", "requests_per_second": 1}]}`)),
		"two.yaml":   bootstrap(true, inlineSluice(`{}`)+"\n"+inlineSluice(`{}`))})
	good, bad, yamlFile, two := f["c.json"], f["bad.json"], f["envoy.yaml"], f["two.yaml"]
	cases := []struct {
		args []string
		exit int
		out  string
	}{
		{[]string{"--config", good, "-X", "post", "http://h/api/users", "-H", "x-user: u"}, 0, "  3. api-users: applies\n     match {\"path_prefix\":\"/api/users\"}: held\n"},
		{[]string{"--config", yamlFile, "/"}, 0, "  1. y: applies"},
		{[]string{"--config", good, "--json", "/"}, 0, `"outcome": "admitted"`},
		{[]string{"--config", bad, "/"}, 1, ""},
		{[]string{"--config", two, "/"}, 2, ""},
		{[]string{"/"}, 2, ""},
		{[]string{"--config", good}, 2, ""},
		{[]string{"--config", good, "-H", "no colon", "/"}, 2, ""},
		{[]string{"--config", good, "--metadata", "nopath=1", "/"}, 2, ""},
		{[]string{"--config", good, "GET", "POST", "/"}, 2, ""},
		{[]string{"--config", good, "-X", "GET", "PUT", "/"}, 2, ""},
		{[]string{"--config", good, "--bogus", "/"}, 2, ""},
		{[]string{"--config", good, "relative"}, 2, ""},
		{[]string{"--config", good, "/a b"}, 2, ""},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"explain"}, c.args...), &stdout, &stderr)
		if code != c.exit || !strings.Contains(stdout.String(), c.out) {
			t.Fatalf("%v: exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", c.args, code, c.exit, stdout.String(), stderr.String())
		}
		if len(c.args) > 2 && c.args[2] == "--json" {
			var ex Explanation
			if err := json.Unmarshal(stdout.Bytes(), &ex); err != nil || len(ex.Limits) != 3 {
				t.Fatalf("--json: %v %+v", err, ex)
			}
		}
	}
}

func TestParseRequestArgs(t *testing.T) {
	a, err := parseRequestArgs([]string{"--config=c.json", "--client=2001:db8::1", "-H", "Host: api.example.com:8443", "-H", "X-A: 1 ",
		"--route", "r", "--cluster=c", "--metadata", "ns.x:a.b=c=d", "delete", "https://ignored/p/q?x=1#frag"})
	if err != nil {
		t.Fatal(err)
	}
	want := Request{Method: "DELETE", Authority: "api.example.com:8443", Path: "/p/q?x=1", Headers: [][2]string{{"x-a", "1"}},
		Client: "2001:db8::1", Route: "r", Cluster: "c", Metadata: []Metadatum{{"ns.x", "a.b", "c=d"}}}
	if a.config != "c.json" || !reflect.DeepEqual(a.req, want) {
		t.Fatalf("%+v", a)
	}
	a, err = parseRequestArgs([]string{"--config", "c", "http://h:80?q"})
	if err != nil || a.req.Authority != "h:80" || a.req.Path != "/?q" || a.req.Method != "GET" || a.req.Client != defaultClient {
		t.Fatalf("%v %+v", err, a.req)
	}
}

// TestExplainSplitsEscapedKeys: a value holding the key separator or the
// escape byte is shown as the request carried it, and redacted from it.
func TestExplainSplitsEscapedKeys(t *testing.T) {
	cfg := `{"limits": [{"name": "qq", "key": ["query:a", "query:b"], "requests_per_second": 1}]}`
	ex := explainArgs(t, cfg, "--show-keys", "/d?a=k1%00y&b=z%01")
	if k := ex.Limits[0].Key; len(k) != 2 || k[0].Value != "k1\x00y" || k[1].Value != "z\x01" {
		t.Fatalf("--show-keys: %+v", k)
	}
	ex = explainArgs(t, cfg, "/d?a=k1%00y&b=z%01")
	if k := ex.Limits[0].Key; len(k) != 2 || k[0].Value != redact("k1\x00y") || k[1].Value != redact("z\x01") {
		t.Fatalf("redacted: %+v", k)
	}
}
