//go:build unix

package ops

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sluicectl refuses what is not a regular file, named on the command
// line or by a config_discovery, instead of reading forever (/dev/zero) or
// waiting forever for a writer (a FIFO).
func TestCheckRefusesFilesThatAreNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	ecds := writeFiles(t, dir, map[string]string{"envoy.yaml": bootstrap(false, `                  - name: sluice
                    config_discovery:
                      config_source: {path_config_source: {path: `+fifo+`}}
                      type_urls: [type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm]`)})["envoy.yaml"]
	for _, tc := range []struct {
		args       []string
		code, want string
	}{
		{[]string{"check", fifo}, "2", "not a regular file"},
		{[]string{"check", zero}, "2", "not a regular file"},
		{[]string{"check", ecds}, "1", "cannot read the ECDS file"},
		{[]string{"explain", "--config", fifo, "/"}, "2", "not a regular file"},
		{[]string{"quota", "get", "--config", zero, "--limit", "a", "--envoy", "http://127.0.0.1:1"}, "2", "not a regular file"},
	} {
		done := make(chan string, 1)
		go func() {
			var stdout, stderr bytes.Buffer
			code := Main(tc.args, &stdout, &stderr)
			done <- string(rune('0'+code)) + stdout.String() + stderr.String()
		}()
		select {
		case out := <-done:
			if out[:1] != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("%v: exit %s, output %q; want exit %s and %q", tc.args, out[:1], out[1:], tc.code, tc.want)
			}
		case <-time.After(30 * time.Second):
			// Not a timing assertion: the old check never returns here.
			t.Fatalf("%v: still reading after 30s", tc.args)
		}
	}
}
