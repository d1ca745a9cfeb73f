package e2e_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
	"github.com/sluice-proxy/sluice/internal/fixtures/redistest"
)

// The observability pack (envoy/observability/) is checked two ways: by
// Prometheus's own promtool, and against the metrics a real run exports,
// so a renamed metric cannot leave a rule or a panel reading nothing.

var packFiles = []string{"../envoy/observability/rules.yml", "../envoy/observability/dashboard.json"}

func TestObservabilityRulesPassPromtool(t *testing.T) {
	promtool := redistest.Binary(t, "promtool")
	out, err := exec.Command(promtool, "check", "rules", "../envoy/observability/rules.yml").CombinedOutput()
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

// TestPrometheusSeesBreakerOpenAlertFire runs Debian's Prometheus with the
// pack's rules, scraping our host's admin, opens a breaker with a failing
// upstream and waits, through Prometheus's HTTP API, for SluiceBreakerOpen
// to fire. The rule holds for a minute, so this takes over a minute of
// real time: it is skipped with -short.
func TestPrometheusSeesBreakerOpenAlertFire(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the alert's for: 1m")
	}
	bin := redistest.Binary(t, "prometheus")
	env := startExample(t, "observability")
	c := clientFrom("127.0.0.1")
	for range 3 {
		if r := env.send(t, c, "GET", "/status/503", nil); r.status != 503 {
			t.Fatalf("failing upstream answered %d", r.status)
		}
	}
	if r := env.send(t, c, "GET", "/", nil); r.status != 503 || !strings.Contains(string(r.body), "circuit_open") {
		t.Fatalf("breaker not open: %d %s", r.status, r.body)
	}

	dir := t.TempDir()
	rules, err := filepath.Abs("../envoy/observability/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimPrefix(env.admin, "http://")
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: sluice
    metrics_path: /stats/prometheus
    static_configs:
      - targets: [%q]
`, rules, admin)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	web := l.Addr().String()
	l.Close()
	var logs strings.Builder
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	type alerts struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	deadline := time.Now().Add(3 * time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		// Polling Prometheus's API is the only way to learn the alert's
		// state; the pause only spaces the polls.
		time.Sleep(time.Second)
		resp, err := http.Get("http://" + web + "/api/v1/alerts")
		if err != nil {
			continue // not listening yet
		}
		var a alerts
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for _, al := range a.Data.Alerts {
			if al.Labels["alertname"] != "SluiceBreakerOpen" {
				continue
			}
			last = al.State
			if al.State == "firing" {
				if al.Labels["sluice_breaker"] != "upstream" || al.Labels["sluice_breaker_instance"] != "backend" {
					t.Fatalf("firing with labels %v, want breaker upstream, instance backend", al.Labels)
				}
				return
			}
		}
	}
	t.Fatalf("SluiceBreakerOpen never fired (last state %q); prometheus logs:\n%s", last, logs.String())
}
