package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/bootstrap"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

// routerOnly needs no wasm build, so the command's own behaviour is tested
// whatever state build/ is in.
var routerOnly = bootstrap.Bootstrap{
	Listener: bootstrap.Listener{VirtualHosts: []bootstrap.VirtualHost{{Name: "all", Domains: []string{"*"}, Routes: []bootstrap.Route{
		{Match: `prefix: "/"`, Action: "cluster: backend"},
	}}}},
	Clusters: []bootstrap.Cluster{{Name: "backend", Endpoints: []string{"127.0.0.1:1"}}},
}.YAML()

func writeConfig(t *testing.T, y string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidateMode(t *testing.T) {
	var out, errOut bytes.Buffer
	p := writeConfig(t, routerOnly)
	if code := run([]string{"-c", p, "--mode", "validate"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "OK") {
		t.Errorf("stdout %q", out.String())
	}

	bad := writeConfig(t, strings.Replace(routerOnly, "stat_prefix", "stat_prefx", 1))
	out.Reset()
	errOut.Reset()
	if code := run([]string{"--config-path", bad, "--mode", "validate"}, &out, &errOut); code != 1 {
		t.Fatalf("bad config exit %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "stat_prefx") || !strings.Contains(errOut.String(), "[critical][main]") {
		t.Errorf("stderr %q does not name the field in an Envoy-style line", errOut.String())
	}
}

func TestFlagErrors(t *testing.T) {
	p := writeConfig(t, routerOnly)
	for _, args := range [][]string{
		{"-c", p, "--wasm-profile", "envoy-1.0"},
		{"-c", p, "-l", "loud"},
		{"-c", p, "--concurrency", "0"},
		{"-c", p, "--mode", "fly"},
		{},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 1 {
			t.Errorf("%v: exit %d, want 1", args, code)
		}
	}
}

var adminRE = regexp.MustCompile(`admin address: (\S+)`)

// TestServeAndQuit runs the command in serve mode, merges --config-yaml over
// the file like Envoy, stops it through /quitquitquit and leaves the CPU
// profile --cpu-profile asked for.
func TestServeAndQuit(t *testing.T) {
	p := writeConfig(t, routerOnly)
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	var out testkit.SyncBuffer
	errOut := &testkit.SyncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"-c", p, "--concurrency", "2", "-l", "debug",
			"--config-yaml", "node: { id: from-flag }", "--cpu-profile", prof}, &out, errOut)
	}()
	var admin string
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := adminRE.FindStringSubmatch(errOut.String()); m != nil && strings.Contains(errOut.String(), "starting workers") {
			admin = m[1]
			break
		}
		select {
		case code := <-done:
			t.Fatalf("exited early with %d: %s", code, errOut.String())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server never started: %s", errOut.String())
		}
	}
	resp, err := http.Get("http://" + admin + "/ready")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/ready: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Post("http://"+admin+"/quitquitquit", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after /quitquitquit: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("command did not exit after /quitquitquit")
	}
	if !strings.Contains(errOut.String(), "exiting") {
		t.Errorf("no shutdown log: %s", errOut.String())
	}
	// A profile is a gzipped protocol buffer, written out on exit.
	if b, err := os.ReadFile(prof); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("--cpu-profile left no profile: %d bytes, %v", len(b), err)
	}
}
