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
// waiting forever for a writer (a FIFO); on Linux also the files of /proc
// and /sys, which stat as regular.
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
	for _, tc := range append([]refusal{
		{[]string{"check", fifo}, "2", "not a regular file"},
		{[]string{"check", zero}, "2", "not a regular file"},
		{[]string{"check", ecdsNaming(t, dir, fifo)}, "1", "cannot read the ECDS file"},
		{[]string{"explain", "--config", fifo, "/"}, "2", "not a regular file"},
		{[]string{"quota", "get", "--config", zero, "--limit", "a", "--envoy", "http://127.0.0.1:1"}, "2", "not a regular file"},
	}, kernelFileRefusals(t, dir)...) {
		done := make(chan string, 1)
		go func() {
			var stdout, stderr bytes.Buffer
			code := Main(tc.args, &stdout, &stderr)
			done <- string(rune('0'+code)) + stdout.String() + stderr.String()
		}()
		select {
		case out := <-done:
			// Nothing a refused file holds is quoted (/proc/self/status
			// has VmRSS, /proc/self/environ PATH).
			if out[:1] != tc.code || !strings.Contains(out, tc.want) || strings.Contains(out, "VmRSS") || strings.Contains(out, "PATH=") {
				t.Errorf("%v: exit %s, output %q; want exit %s and %q", tc.args, out[:1], out[1:], tc.code, tc.want)
			}
		case <-time.After(30 * time.Second):
			// Not a timing assertion: the old check never returns here.
			t.Fatalf("%v: still reading after 30s", tc.args)
		}
	}
}

// refusal is a sluicectl command line and what it must answer: the exit
// status and a part of the output.
type refusal struct {
	args       []string
	code, want string
}

// ecdsNaming writes a bootstrap into dir whose Sluice filter's
// config_discovery names file, and returns its name.
func ecdsNaming(t *testing.T, dir, file string) string {
	return writeFiles(t, dir, map[string]string{"envoy.yaml": bootstrap(false, `                  - name: sluice
                    config_discovery:
                      config_source: {path_config_source: {path: `+file+`}}
                      type_urls: [type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm]`)})["envoy.yaml"]
}
