package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
	"github.com/sluice-proxy/sluice/internal/fixtures/bootstrap"
	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
)

// envoy/envoy.yaml's access log line names the limit that refused a
// request, the outcome and the rule, from the filter state the wasm set,
// and "-" for the requests it let through.
func TestAccessLogNamesTheDecidingLimit(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "access.log")
	env := startBootstrap(t, filepath.Join("..", "envoy", "envoy.yaml"), echo.Handler("default"), nil, func(cfg *envoy.Config) {
		if len(cfg.Listeners[0].AccessLogs) != 1 {
			t.Fatalf("envoy/envoy.yaml has %d access logs, want 1", len(cfg.Listeners[0].AccessLogs))
		}
		cfg.Listeners[0].AccessLogs[0].Path = logPath
	})
	c := clientFrom("127.0.0.1")
	// per-ip holds 30 tokens and refills 20 a second: the client is
	// refused once it outruns the refill.
	var statuses []int
	for len(statuses) < 500 {
		r := env.send(t, c, "GET", "/hello", nil)
		statuses = append(statuses, r.status)
		if r.status == 429 {
			break
		}
	}
	if statuses[len(statuses)-1] != 429 {
		t.Fatalf("no 429 in %d requests", len(statuses))
	}
	// Shutdown waits for every handler, and with it every log line.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := env.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != len(statuses) {
		t.Fatalf("%d log lines for %d requests:\n%s", len(lines), len(statuses), data)
	}
	for i, line := range lines {
		admitted := ` "GET /hello HTTP/1.1" 200 via_upstream `
		refused := ` "GET /hello HTTP/1.1" 429 `
		switch statuses[i] {
		case 200:
			if !strings.Contains(line, admitted) || !strings.HasSuffix(line, ` sluice=- limit=- rule="-"`) {
				t.Fatalf("line %d of an admitted request: %q", i, line)
			}
		case 429:
			if !strings.Contains(line, refused) || !strings.HasSuffix(line, ` sluice=rate_limited limit=per-ip rule="token_bucket 20/1s burst 10"`) {
				t.Fatalf("line %d of a refused request: %q", i, line)
			}
		default:
			t.Fatalf("request %d: status %d", i, statuses[i])
		}
		if !strings.HasPrefix(line, "[") {
			t.Fatalf("line %d has no start time: %q", i, line)
		}
	}
}

// The stand-in refuses what it would not log as Envoy does, at the
// field's path.
func TestAccessLogConfigRefused(t *testing.T) {
	for _, c := range []struct{ format, want string }{
		{`"%REQ(:PATH)% %BYTES_SENT%"`, "command operator %BYTES_SENT% is not supported"},
		{`"%FILTER_STATE(wasm.sluice_limit)%"`, "only as :PLAIN"},
		{`"%REQ(:PATH)"`, "not closed"},
		{`"%REQ(:PATH):10%"`, "no length limit"},
	} {
		_, err := envoy.Load([]byte(accessLogBootstrap(c.format)))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "access_log[0].typed_config.log_format.text_format_source.inline_string") {
			t.Errorf("format %s: error %v, want %q at the format's path", c.format, err, c.want)
		}
	}
}

// accessLogBootstrap is a listener whose file access log writes format
// to /dev/null.
func accessLogBootstrap(format string) string {
	return bootstrap.Bootstrap{
		Listener: bootstrap.Listener{
			VirtualHosts: []bootstrap.VirtualHost{{Name: "backend", Domains: []string{"*"},
				Routes: []bootstrap.Route{{Match: `prefix: "/"`, Action: "cluster: backend"}}}},
			AccessLogs: []string{`- name: envoy.access_loggers.file
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
    path: /dev/null
    log_format:
      text_format_source:
        inline_string: ` + format},
		},
		Clusters: []bootstrap.Cluster{{Name: "backend", Endpoints: []string{"127.0.0.1:8081"}}},
	}.YAML()
}
