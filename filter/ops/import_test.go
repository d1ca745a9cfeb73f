package ops

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
)

const importRatelimit = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
`

const importEnvoy = `virtual_hosts:
- name: v
  rate_limits:
  - actions: [{remote_address: {}}]
  routes: [{name: r, match: {prefix: /}, route: {cluster: c}}]
`

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestImportCommandWritesAConfigAndItsFindings: the config goes to
// stdout, every inexact construct to stderr with its file, and the exit
// status says the import was not exact.
func TestImportCommandWritesAConfigAndItsFindings(t *testing.T) {
	rl, envoy := writeTemp(t, "rl.yaml", importRatelimit), writeTemp(t, "envoy.yaml", importEnvoy)
	var out, errOut bytes.Buffer
	if code := Main([]string{"import", rl, envoy}, &out, &errOut); code != exitProblems {
		t.Fatalf("exit %d, want %d (inexact constructs); stderr:\n%s", code, exitProblems, errOut.String())
	}
	if _, err := config.Parse(out.Bytes()); err != nil {
		t.Fatalf("stdout is not a config: %v\n%s", err, out.String())
	}
	if !strings.Contains(errOut.String(), envoy+":4 (virtual_hosts[0].rate_limits[0].actions[0]): inexact: remote_address") {
		t.Errorf("stderr lacks the remote_address finding at its path:\n%s", errOut.String())
	}

	out.Reset()
	if code := Main([]string{"import", "--json", "--backend-cluster", "redis", rl, envoy}, &out, &errOut); code != exitProblems {
		t.Fatalf("--json: exit %d", code)
	}
	var rep ImportReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(rep.Config, []byte(`"mode": "global"`)) || len(rep.Findings) == 0 || len(rep.Errors) != 0 {
		t.Errorf("--json report: %s", out.String())
	}
}

// TestImportCommandRefusesWhatIsNotARegularFile: like check, import reads
// only regular files of bounded size, never a device or a directory.
func TestImportCommandRefusesWhatIsNotARegularFile(t *testing.T) {
	for _, f := range []string{os.DevNull, t.TempDir()} {
		var out, errOut bytes.Buffer
		if code := Main([]string{"import", f}, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "not a regular file") {
			t.Errorf("%s: exit %d, stderr %q", f, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := Main([]string{"import", "--domain"}, &out, &errOut); code != exitUsage {
		t.Errorf("--domain without a value: exit %d", code)
	}
	if code := Main([]string{"help"}, &out, &errOut); code != exitOK || !strings.Contains(errOut.String(), "import") {
		t.Errorf("usage does not list import:\n%s", errOut.String())
	}
}
