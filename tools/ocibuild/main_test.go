package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/sluice-proxy/sluice/tools/ocibuild/wasmimage"
)

// tinyModule is the smallest valid module: the header and no sections.
var tinyModule = []byte("\x00asm\x01\x00\x00\x00")

func writeModule(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "plugin.wasm")
	if err := os.WriteFile(p, tinyModule, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunWritesBothLayouts(t *testing.T) {
	wasm := writeModule(t)
	out := filepath.Join(t.TempDir(), "oci")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-wasm", wasm, "-out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "exports no proxy_abi_version_") {
		t.Fatalf("no warning about the missing ABI export; stderr: %q", stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != len(wasmimage.Variants) {
		t.Fatalf("stdout %q, want one line per variant", stdout.String())
	}
	for i, v := range wasmimage.Variants {
		img, err := wasmimage.ReadLayout(filepath.Join(out, string(v)))
		if err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		if want := string(v) + "\t" + filepath.Join(out, string(v)) + "\t" + d.String(); lines[i] != want {
			t.Fatalf("stdout line %q, want %q", lines[i], want)
		}
		got, variant, err := wasmimage.ExtractWasm(img)
		if err != nil || variant != v || !bytes.Equal(got, tinyModule) {
			t.Fatalf("%s layout holds %d bytes as %q (%v)", v, len(got), variant, err)
		}
	}
}

func TestRunRejects(t *testing.T) {
	wasm := writeModule(t)
	notWasm := filepath.Join(t.TempDir(), "x.wasm")
	if err := os.WriteFile(notWasm, []byte("not wasm at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"nothing to do", []string{"-wasm", wasm}, "nothing to do"},
		{"push without variant", []string{"-wasm", wasm, "-push", "127.0.0.1:1/x:y"}, "-push needs -variant"},
		{"bad variant", []string{"-wasm", wasm, "-out", out, "-variant", "docker"}, "unknown variant"},
		{"missing module", []string{"-wasm", filepath.Join(out, "nope.wasm"), "-out", out}, "no such file"},
		{"not a module", []string{"-wasm", notWasm, "-out", out}, "magic"},
		{"stray argument", []string{"-out", out, "extra"}, "unexpected arguments"},
		{"unknown flag", []string{"-outt", out}, "not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("run error = %v, want it to mention %q", err, tc.wantErr)
			}
		})
	}
}

func TestBuildOptions(t *testing.T) {
	opts, err := buildOptions(config{rootIDs: " sluice, ,other"}, "1700000000")
	if err != nil {
		t.Fatal(err)
	}
	if !opts.Created.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("Created = %v", opts.Created)
	}
	if strings.Join(opts.RootIDs, "|") != "sluice|other" {
		t.Fatalf("RootIDs = %q", opts.RootIDs)
	}
	for _, bad := range []string{"yesterday", "-1", "1.5"} {
		if _, err := buildOptions(config{}, bad); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
			t.Fatalf("SOURCE_DATE_EPOCH=%q: err = %v", bad, err)
		}
	}
}

func TestRunPushes(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/sluice:test-oci"
	wasm := writeModule(t)
	var stdout, stderr bytes.Buffer
	args := []string{"-wasm", wasm, "-push", ref, "-variant", "oci", "--insecure"}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	img, err := wasmimage.Pull(context.Background(), ref, wasmimage.RemoteOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	if want := "oci\t" + ref + "@" + d.String() + "\n"; stdout.String() != want {
		t.Fatalf("stdout %q, want %q", stdout.String(), want)
	}
	if got, variant, err := wasmimage.ExtractWasm(img); err != nil || variant != wasmimage.OCI || !bytes.Equal(got, tinyModule) {
		t.Fatalf("pushed image holds %d bytes as %q (%v)", len(got), variant, err)
	}
}
