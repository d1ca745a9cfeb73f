package ops

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// /proc files stat as regular files; sluicectl still refuses them,
// named directly, through a symbolic link or by a config_discovery, and
// quotes nothing they hold.
func TestCheckRefusesKernelFiles(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "status.yaml")
	if err := os.Symlink("/proc/self/status", link); err != nil {
		t.Fatal(err)
	}
	ecds := writeFiles(t, dir, map[string]string{"envoy.yaml": bootstrap(false, `                  - name: sluice
                    config_discovery:
                      config_source: {path_config_source: {path: /proc/self/status}}
                      type_urls: [type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm]`)})["envoy.yaml"]
	for _, tc := range []struct {
		args       []string
		code, want string
	}{
		{[]string{"check", "/proc/self/status"}, "2", "/proc/self/status: a file of the kernel's procfs, not a configuration file"},
		{[]string{"check", "/proc/self/environ"}, "2", "a file of the kernel's procfs"},
		{[]string{"check", link}, "2", "a file of the kernel's procfs"},
		{[]string{"check", ecds}, "1", "cannot read the ECDS file"},
		{[]string{"explain", "--config", "/proc/self/status", "/"}, "2", "a file of the kernel's procfs"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(tc.args, &stdout, &stderr)
		out := stdout.String() + stderr.String()
		if string(rune('0'+code)) != tc.code || !strings.Contains(out, tc.want) || strings.Contains(out, "VmRSS") || strings.Contains(out, "PATH=") {
			t.Errorf("%v: exit %d, output %q; want exit %s and %q", tc.args, code, out, tc.code, tc.want)
		}
	}
}
