package e2e_test

import (
	"net"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"

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
