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

// check refuses what is not a regular file, named on the command line
// or by a config_discovery, instead of reading forever (/dev/zero) or
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
		file, code, want string
	}{
		{fifo, "2", "not a regular file"},
		{zero, "2", "not a regular file"},
		{ecds, "1", "cannot read the ECDS file"},
	} {
		done := make(chan string, 1)
		go func() {
			var stdout, stderr bytes.Buffer
			code := Main([]string{"check", tc.file}, &stdout, &stderr)
			done <- string(rune('0'+code)) + stdout.String() + stderr.String()
		}()
		select {
		case out := <-done:
			if out[:1] != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("%s: exit %s, output %q; want exit %s and %q", tc.file, out[:1], out[1:], tc.code, tc.want)
			}
		case <-time.After(30 * time.Second):
			// Not a timing assertion: the old check never returns here.
			t.Fatalf("%s: check still reading after 30s", tc.file)
		}
	}
}
