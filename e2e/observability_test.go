package e2e_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
	"github.com/sluice-proxy/sluice/internal/fixtures/redistest"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

// The observability pack (envoy/observability/) is checked two ways: by
// Prometheus's own promtool, and against the metrics a real run exports,
// so a renamed metric cannot leave a rule or a panel reading nothing.

var packFiles = []string{packRules, "../envoy/observability/dashboard.json"}

func TestObservabilityRulesPassPromtool(t *testing.T) {
	promtool := redistest.Binary(t, "promtool")
	out, err := exec.Command(promtool, "check", "rules", packRules).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// packLabels are the labels stats_tags make; everything else named
// sluice_* in the pack is a metric.
var packLabels = map[string]bool{"sluice_limit": true, "sluice_breaker": true, "sluice_breaker_instance": true, "sluice_concurrency": true}

// packMetrics are the metric names the pack reads: sluice_* identifiers
// that are not labels nor recording rules (which have colons).
func packMetrics(t *testing.T) []string {
	t.Helper()
	ident := regexp.MustCompile(`sluice_[a-z_]+[:a-z0-9_]*`)
	seen := map[string]bool{}
	for _, f := range packFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ident.FindAllString(string(b), -1) {
			if strings.Contains(m, ":") || packLabels[m] {
				continue
			}
			seen[m] = true
		}
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) < 20 {
		t.Fatalf("found only %d metric names in the pack: %v", len(names), names)
	}
	return names
}

func TestObservabilityPackMetricsAreEmitted(t *testing.T) {
	// The limits backend points at a port nothing listens on, so its
	// errors and fallbacks are real.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	env := startExampleWith(t, "observability", echo.Handler("observability"), map[string]string{"webdis": dead})
	c := clientFrom("127.0.0.1")
	for range 12 {
		env.send(t, c, "GET", "/", nil) // per-ip: admitted, near limit, limited
	}
	other := clientFrom("127.0.0.2") // per-ip has not limited this one
	for range 3 {
		env.send(t, other, "GET", "/api/x", nil) // global: backend errors, fallback allow
	}
	env.send(t, other, "GET", "/upload", nil)
	prom := env.prometheus(t)
	for _, name := range packMetrics(t) {
		if !regexp.MustCompile(`(?m)^` + name + `[{ ]`).MatchString(prom) {
			t.Errorf("the pack reads %s, which /stats/prometheus does not have", name)
		}
	}
	// The labels the rules group and filter by come out too.
	for _, sample := range []string{`sluice_limit_near_limit{sluice_limit="per-ip"}`, `sluice_concurrency_max_in_flight{sluice_concurrency="uploads"}`,
		`sluice_breaker_state{sluice_breaker_instance="backend",sluice_breaker="upstream"}`} {
		if !strings.Contains(prom, sample+" ") {
			t.Errorf("no sample %s", sample)
		}
	}
	if metric(t, prom, `sluice_limit_near_limit{sluice_limit="per-ip"}`) < 1 || metric(t, prom, `sluice_backend_fallback_allow`) < 1 {
		t.Errorf("near_limit or fallback did not count:\n%s", prom)
	}
	if t.Failed() {
		t.Logf("/stats/prometheus:\n%s", prom)
	}
}

// packRules is the shipped rules file; its promtool unit tests are beside
// it.
const packRules = "../envoy/observability/rules.yml"

// ruleFile is a Prometheus rules file, each rule kept as its fields.
type ruleFile struct {
	Groups []struct {
		Name  string           `yaml:"name"`
		Rules []map[string]any `yaml:"rules"`
	} `yaml:"groups"`
}

func parseRules(t *testing.T, b []byte) ruleFile {
	t.Helper()
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("rules: %v", err)
	}
	return rf
}

// alertNames are the alerts of a rules file, in file order.
func alertNames(rf ruleFile) []string {
	var names []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if a, ok := r["alert"].(string); ok {
				names = append(names, a)
			}
		}
	}
	return names
}

// TestObservabilityRulesUnitTests runs promtool's unit tests of the rules
// (envoy/observability/rules_test.yml), and fails when an alert of the
// rules has no case there that fires it and none that keeps it quiet.
func TestObservabilityRulesUnitTests(t *testing.T) {
	promtool := redistest.Binary(t, "promtool")
	cmd := exec.Command(promtool, "test", "rules", "rules_test.yml")
	cmd.Dir = filepath.Dir(packRules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}

	b, err := os.ReadFile(filepath.Join(filepath.Dir(packRules), "rules_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var unit struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &unit); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range unit.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	rules, err := os.ReadFile(packRules)
	if err != nil {
		t.Fatal(err)
	}
	names := alertNames(parseRules(t, rules))
	if len(names) == 0 {
		t.Fatal("no alerts in the rules")
	}
	for _, name := range names {
		if !fires[name] || !quiet[name] {
			t.Errorf("alert %s: rules_test.yml has a case that fires it: %v, one that keeps it quiet: %v", name, fires[name], quiet[name])
		}
	}
}

// forEvery matches an alert's for: line.
var forEvery = regexp.MustCompile(`(?m)^([ \t]+for:[ \t]*)\S+[ \t]*$`)

// shortenFor returns the rules with every alert's for: set to d, after
// checking that nothing else differs and that every alert had a for:.
func shortenFor(t *testing.T, rules []byte, d string) []byte {
	t.Helper()
	out := forEvery.ReplaceAll(rules, []byte("${1}"+d))
	orig, short := parseRules(t, rules), parseRules(t, out)
	if len(orig.Groups) != len(short.Groups) {
		t.Fatal("rewriting for: changed the groups")
	}
	for gi, g := range short.Groups {
		if len(g.Rules) != len(orig.Groups[gi].Rules) {
			t.Fatalf("rewriting for: changed the rules of group %s", g.Name)
		}
		for ri, r := range g.Rules {
			if _, alert := r["alert"]; alert && r["for"] != d {
				t.Fatalf("alert %v: for is %v after the rewrite, want %s", r["alert"], r["for"], d)
			}
			delete(r, "for")
			delete(orig.Groups[gi].Rules[ri], "for")
		}
	}
	if !reflect.DeepEqual(orig, short) {
		t.Fatalf("rewriting for: changed more than for:\n%s", out)
	}
	return out
}

// startPrometheus runs Debian's Prometheus on a free loopback port with
// rules, scraping target's /stats/prometheus and evaluating the rules
// every second, until the test ends. It returns its base URL and its log.
func startPrometheus(t *testing.T, rules []byte, target string) (string, *testkit.SyncBuffer) {
	t.Helper()
	bin := redistest.Binary(t, "prometheus")
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(rulesPath, rules, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: sluice
    metrics_path: /stats/prometheus
    static_configs:
      - targets: [%q]
`, rulesPath, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	web := testkit.ClosedAddr(t)
	logs := &testkit.SyncBuffer{}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return "http://" + web, logs
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// promAlerts asks Prometheus for its pending and firing alerts.
func promAlerts(base string) ([]promAlert, error) {
	resp, err := http.Get(base + "/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var a struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return nil, err
	}
	return a.Data.Alerts, nil
}

// TestPrometheusSeesAlertsFire runs Debian's Prometheus with the pack's
// rules, scraping examples/observability on our host in front of a real
// echo backend and a real webdis, and drives what the breaker, backend and
// near-limit alerts are for: an upstream failing until the breaker opens,
// Redis killed under a global limit, and one client held at its per-IP
// limit. It polls Prometheus's alerts API until each of them fires.
//
// Two things differ from what ships, both checked here: the rules' for:
// durations (1 to 15 minutes, longer than a test waits) are rewritten to
// 2s, and nothing else in them; and the example's backend breaker opens
// after 1000 failed calls instead of 2, because an open backend breaker
// makes no calls, so with the example's setting SluiceBackendErrors
// (a rate over 5 minutes) would need minutes of outage to fire.
// SluiceBackendFallback fires either way.
func TestPrometheusSeesAlertsFire(t *testing.T) {
	rules, err := os.ReadFile(packRules)
	if err != nil {
		t.Fatal(err)
	}
	rules = shortenFor(t, rules, "2s")

	redis := redistest.StartRedis(t)
	webdis := redistest.StartWebdis(t, redis.Addr())
	env := startExampleEdited(t, "observability", echo.Handler("observability"), map[string]string{"webdis": webdis.Addr()},
		func(cfg *envoy.Config) {
			for _, f := range cfg.Listeners[0].HTTPFilters {
				if f.Wasm != nil {
					f.Wasm.Configuration = raiseBackendBreaker(t, f.Wasm.Configuration)
				}
			}
		})
	// The global limit works while Redis is up.
	other := clientFrom("127.0.0.3")
	if r := env.send(t, other, "GET", "/api/ping", nil); r.status != 200 {
		t.Fatalf("/api with Redis up: %d %s", r.status, r.body)
	}
	prom := env.prometheus(t)
	// A fresh Redis answers the first call NOSCRIPT, which is no error
	// the rules count.
	if metric(t, prom, "sluice_backend_calls") < 1 || metric(t, prom, "sluice_backend_errors_unavailable")+metric(t, prom, "sluice_backend_errors_timeout") != 0 {
		t.Fatalf("good backend calls expected:\n%s", prom)
	}
	redis.Kill()

	base, logs := startPrometheus(t, rules, strings.TrimPrefix(env.admin, "http://"))
	want := map[string]map[string]string{
		"SluiceBreakerOpen":     {"sluice_breaker": "upstream", "sluice_breaker_instance": "backend"},
		"SluiceBackendErrors":   {},
		"SluiceBackendFallback": {},
		"SluiceNearLimit":       {"sluice_limit": "per-ip"},
	}
	fired := map[string]bool{}
	failing, saturating := clientFrom("127.0.0.2"), clientFrom("127.0.0.1")
	started := time.Now()
	deadline := started.Add(2 * time.Minute)
	var last []promAlert
	for len(fired) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("fired %v of %d alerts; last seen %+v\nprometheus logs:\n%s", fired, len(want), last, logs)
		}
		// Keep the breaker open: the upstream fails until it is (a
		// half-open probe re-opens it).
		if metric(t, env.prometheus(t), `sluice_breaker_state{sluice_breaker_instance="backend",sluice_breaker="upstream"}`) != 1 {
			for range 3 {
				env.send(t, failing, "GET", "/status/503", nil)
			}
		}
		// One client over its per-IP limit: once its burst is spent every
		// admission leaves nothing, and each admitted /api request asks
		// the dead Redis and falls back to allow.
		for range 3 {
			if r := env.send(t, saturating, "GET", "/api/orders", nil); r.status != 429 && r.status != 503 && r.status != 200 {
				t.Fatalf("/api with Redis down: %d %s", r.status, r.body)
			}
		}
		alerts, err := promAlerts(base)
		if err == nil { // before Prometheus listens, there is nothing to read
			last = alerts
		}
		for _, a := range alerts {
			labels, ok := want[a.Labels["alertname"]]
			if !ok || a.State != "firing" {
				continue
			}
			for k, v := range labels {
				if a.Labels[k] != v {
					t.Fatalf("%s fired with labels %v, want %v", a.Labels["alertname"], a.Labels, labels)
				}
			}
			if !fired[a.Labels["alertname"]] {
				t.Logf("%s firing %v after the traffic started", a.Labels["alertname"], time.Since(started).Round(time.Second))
			}
			fired[a.Labels["alertname"]] = true
		}
		// Prometheus's API is the only way to learn an alert's state; the
		// pause only spaces the polls and the rounds of traffic.
		time.Sleep(250 * time.Millisecond)
	}
}

// raiseBackendBreaker sets backend.breaker.failure_threshold to 1000 in a
// plugin configuration.
func raiseBackendBreaker(t *testing.T, pluginJSON []byte) []byte {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(pluginJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	be, ok := cfg["backend"].(map[string]any)
	if !ok {
		t.Fatal("the example has no backend")
	}
	br, ok := be["breaker"].(map[string]any)
	if !ok {
		t.Fatal("the example's backend has no breaker")
	}
	br["failure_threshold"] = 1000
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
