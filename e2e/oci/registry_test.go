// Package oci checks that the images tools/ocibuild produces survive a real
// registry and come back the way Istio's image fetcher reads them.
package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
	"github.com/sluice-proxy/sluice/tools/ocibuild/wasmimage"
)

const registryBinary = "/usr/bin/docker-registry"

// inCI reports whether missing tools must fail rather than skip: CI
// installs all of them, so a missing one there is a broken pipeline.
func inCI() bool { return os.Getenv("CI") == "true" }

func requireTool(t *testing.T, path string) string {
	t.Helper()
	p, err := exec.LookPath(path)
	testkit.Need(t, err == nil, path)
	return p
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// pluginModule returns build/sluice.wasm, the module make build produces.
// Outside CI a header-only module stands in for it: packaging and transport
// do not depend on what the module does.
func pluginModule(t *testing.T) []byte {
	t.Helper()
	p := filepath.Join(repoRoot(t), "build", "sluice.wasm")
	b, err := os.ReadFile(p)
	if err == nil {
		t.Logf("packaging %s (%d bytes)", p, len(b))
		return b
	}
	if inCI() {
		t.Fatalf("%s is missing; run make build first (CI=true): %v", p, err)
	}
	t.Logf("%s not found (%v); using a header-only stand-in module", p, err)
	return []byte("\x00asm\x01\x00\x00\x00")
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRegistry runs Debian's docker-registry on a free loopback port with
// filesystem storage in a temporary directory, and returns host:port once
// /v2/ answers.
func startRegistry(t *testing.T) string {
	t.Helper()
	bin := requireTool(t, registryBinary)
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, "storage"), addr)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	var logs bytes.Buffer
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout = &logs
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("docker-registry output:\n%s", logs.String())
		}
	})

	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			// Put the result back so the cleanup's receive does not block.
			exited <- err
			t.Fatalf("docker-registry exited before serving: %v\n%s", err, logs.String())
		default:
		}
		resp, err := client.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not answer /v2/ within 30s (last error %v)\n%s", err, logs.String())
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("docker-registry exited before serving: %v\n%s", err, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fetchLikeIstio mirrors istio.io/istio pkg/wasm/imagefetcher.go: parse the
// reference, remote.Get the manifest, turn it into an image. The registry
// is on loopback, for which go-containerregistry already uses plain HTTP,
// the same outcome as Istio's insecure fallback.
func fetchLikeIstio(t *testing.T, ref string) v1.Image {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(r, remote.WithContext(context.Background()))
	if err != nil {
		t.Fatalf("fetching manifest of %s: %v", ref, err)
	}
	img, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func imageLayers(t *testing.T, img v1.Image) []v1.Layer {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return layers
}

// compressedBlob is a layer's blob as the registry stores it.
func compressedBlob(t *testing.T, l v1.Layer) []byte {
	t.Helper()
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return testkit.ReadAll(t, rc)
}

// compatModule applies Istio's compat reading by hand, independently of
// wasmimage.ExtractWasm: the last layer must be tar+gzip and hold plugin.wasm.
func compatModule(t *testing.T, img v1.Image) []byte {
	t.Helper()
	layers := imageLayers(t, img)
	if len(layers) == 0 {
		t.Fatal("compat image has no layers")
	}
	last := layers[len(layers)-1]
	if mt, err := last.MediaType(); err != nil || mt != types.OCILayer {
		t.Fatalf("last layer media type %s (%v), want %s", mt, err, types.OCILayer)
	}
	zr, err := gzip.NewReader(bytes.NewReader(compressedBlob(t, last)))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatal("plugin.wasm not in the compat layer")
		}
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(h.Name) == "plugin.wasm" {
			return testkit.ReadAll(t, tr)
		}
	}
}

// ociModule applies Istio's oci reading by hand: exactly two layers, one of
// them the wasm content type, whose blob is the module.
func ociModule(t *testing.T, img v1.Image) []byte {
	t.Helper()
	layers := imageLayers(t, img)
	if len(layers) != 2 {
		t.Fatalf("oci image has %d layers, want 2", len(layers))
	}
	var found []byte
	var mediaTypes []string
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			t.Fatal(err)
		}
		mediaTypes = append(mediaTypes, string(mt))
		if mt != wasmimage.WasmLayerMediaType {
			continue
		}
		found = compressedBlob(t, l)
	}
	if found == nil {
		t.Fatalf("no %s layer among %q", wasmimage.WasmLayerMediaType, mediaTypes)
	}
	if !strings.Contains(strings.Join(mediaTypes, " "), string(wasmimage.RuntimeConfigMediaType)) {
		t.Fatalf("no runtime config layer among %q", mediaTypes)
	}
	return found
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestPushAndFetchLikeIstio(t *testing.T) {
	addr := startRegistry(t)
	module := pluginModule(t)
	want := sha256Hex(module)
	ctx := context.Background()

	pushed := map[wasmimage.Variant]v1.Hash{}
	for _, v := range wasmimage.Variants {
		img, err := wasmimage.Build(module, v, wasmimage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ref := addr + "/sluice/plugin:" + string(v)
		d, err := wasmimage.Push(ctx, img, ref, wasmimage.RemoteOptions{Insecure: true})
		if err != nil {
			t.Fatal(err)
		}
		pushed[v] = d
		size, _ := img.Size()
		t.Logf("pushed %s as %s@%s (manifest %d bytes)", v, ref, d, size)

		fetched := fetchLikeIstio(t, ref)
		if fd, err := fetched.Digest(); err != nil || fd != d {
			t.Fatalf("%s: registry serves digest %v (%v), pushed %v", v, fd, err, d)
		}
		var got []byte
		switch v {
		case wasmimage.Compat:
			got = compatModule(t, fetched)
			m, err := fetched.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			if m.Annotations[wasmimage.VariantAnnotation] != "compat" {
				t.Fatalf("compat manifest annotations %v lack %s=compat", m.Annotations, wasmimage.VariantAnnotation)
			}
		case wasmimage.OCI:
			got = ociModule(t, fetched)
		}
		if sha := sha256Hex(got); sha != want {
			t.Fatalf("%s: extracted module sha256 %s, want %s", v, sha, want)
		}
		// The package's own reader must agree with the by-hand reading.
		viaPkg, variant, err := wasmimage.ExtractWasm(fetched)
		if err != nil || variant != v || sha256Hex(viaPkg) != want {
			t.Fatalf("%s: ExtractWasm = %q, %v", v, variant, err)
		}
	}

	skopeo := requireTool(t, "skopeo")
	for _, v := range wasmimage.Variants {
		ref := "docker://" + addr + "/sluice/plugin:" + string(v)
		out, err := exec.Command(skopeo, "inspect", "--tls-verify=false", ref).CombinedOutput()
		if err != nil {
			t.Fatalf("skopeo inspect %s: %v\n%s", ref, err, out)
		}
		var inspected struct {
			Digest string
			Layers []string
			Os     string
		}
		if err := json.Unmarshal(out, &inspected); err != nil {
			t.Fatalf("skopeo inspect output: %v\n%s", err, out)
		}
		wantLayers := map[wasmimage.Variant]int{wasmimage.Compat: 1, wasmimage.OCI: 2}[v]
		if inspected.Digest != pushed[v].String() || len(inspected.Layers) != wantLayers || inspected.Os != "wasip1" {
			t.Fatalf("skopeo inspect %s: digest %s, %d layers, os %q; want %s, %d layers, wasip1",
				v, inspected.Digest, len(inspected.Layers), inspected.Os, pushed[v], wantLayers)
		}
	}
}

// TestLayoutCopiesWithSkopeo pushes the on-disk layouts (what make oci
// leaves in build/) with a standard tool, and checks that the registry then
// serves the same digest ocibuild would have pushed itself.
func TestLayoutCopiesWithSkopeo(t *testing.T) {
	addr := startRegistry(t)
	skopeo := requireTool(t, "skopeo")
	module := pluginModule(t)
	out := t.TempDir()
	for _, v := range wasmimage.Variants {
		img, err := wasmimage.Build(module, v, wasmimage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(out, string(v))
		d, err := wasmimage.WriteLayout(dir, img, "dev")
		if err != nil {
			t.Fatal(err)
		}
		dst := "docker://" + addr + "/sluice/layout:" + string(v)
		cmd := exec.Command(skopeo, "copy", "--dest-tls-verify=false", "oci:"+dir+":dev", dst)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("skopeo copy %s: %v\n%s", v, err, b)
		}
		fetched := fetchLikeIstio(t, addr+"/sluice/layout:"+string(v))
		if fd, err := fetched.Digest(); err != nil || fd != d {
			t.Fatalf("%s: skopeo-copied image has digest %v (%v), layout has %v", v, fd, err, d)
		}
		got, variant, err := wasmimage.ExtractWasm(fetched)
		if err != nil || variant != v || !bytes.Equal(got, module) {
			t.Fatalf("%s: module after skopeo copy: %q, %v", v, variant, err)
		}
	}
}
