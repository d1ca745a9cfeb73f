package wasmimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

var testModule = moduleWithExports("proxy_abi_version_0_2_1", "proxy_on_memory_allocate")

// imageDigests names every blob of an image, so reproducibility is checked
// for each of them rather than only for the manifest that summarises them.
func imageDigests(t *testing.T, img v1.Image) []string {
	t.Helper()
	m, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	c, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"manifest " + m.String(), "config " + c.String()}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, "layer "+d.String())
	}
	return out
}

// openLayer opens layer i of img through open, Compressed or Uncompressed,
// and closes it when the test ends.
func openLayer(t *testing.T, img v1.Image, i int, open func(v1.Layer) (io.ReadCloser, error)) io.Reader {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if i >= len(layers) {
		t.Fatalf("image has %d layers, want layer %d", len(layers), i)
	}
	rc, err := open(layers[i])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc
}

func mustBuild(t *testing.T, wasm []byte, v Variant, opts Options) v1.Image {
	t.Helper()
	img, err := Build(wasm, v, opts)
	if err != nil {
		t.Fatalf("Build(%s): %v", v, err)
	}
	return img
}

func TestBuildIsReproducible(t *testing.T) {
	for _, v := range Variants {
		t.Run(string(v), func(t *testing.T) {
			// A fresh copy of the module, so no state can be shared
			// between the two builds through the slice.
			first := imageDigests(t, mustBuild(t, testModule, v, Options{}))
			second := imageDigests(t, mustBuild(t, bytes.Clone(testModule), v, Options{}))
			if !reflect.DeepEqual(first, second) {
				t.Fatalf("two builds differ:\n%q\n%q", first, second)
			}

			otherModule := append(bytes.Clone(testModule), 0x00, 0x01, 0x00) // extra empty custom section
			changed := imageDigests(t, mustBuild(t, otherModule, v, Options{}))
			if changed[0] == first[0] {
				t.Fatalf("a different module gave the same manifest digest %s", first[0])
			}

			stamped := imageDigests(t, mustBuild(t, testModule, v, Options{Created: time.Unix(1700000000, 0)}))
			if stamped[0] == first[0] {
				t.Fatalf("a different creation time gave the same manifest digest %s", first[0])
			}
		})
	}
}

func TestBuildCompat(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	img := mustBuild(t, testModule, Compat, Options{Created: created})

	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Fatalf("manifest %s with config %s, want an OCI image manifest and config", m.MediaType, m.Config.MediaType)
	}
	if got := m.Annotations[VariantAnnotation]; got != "compat" {
		t.Fatalf("annotation %s = %q, want compat", VariantAnnotation, got)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Fatalf("layers %+v, want exactly one %s", m.Layers, types.OCILayer)
	}

	zr, err := gzip.NewReader(openLayer(t, img, 0, (v1.Layer).Compressed))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Fatalf("gzip header carries mtime %v name %q; both break reproducibility", zr.ModTime, zr.Name)
	}
	tr := tar.NewReader(zr)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	content := testkit.ReadAll(t, tr)
	if h.Name != PluginFileName || !bytes.Equal(content, testModule) {
		t.Fatalf("tar entry %q with %d bytes, want %s with the module", h.Name, len(content), PluginFileName)
	}
	if !h.ModTime.Equal(created.Truncate(time.Second)) || h.Uid != 0 || h.Gid != 0 || h.Mode != 0o644 {
		t.Fatalf("tar header mtime %v uid %d gid %d mode %o", h.ModTime, h.Uid, h.Gid, h.Mode)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Fatalf("second tar entry: err = %v, want EOF: the layer holds only %s", err, PluginFileName)
	}

	// The config's diff_id must be the digest of the uncompressed tarball,
	// or registries and runtimes that verify it reject the image.
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	raw := testkit.ReadAll(t, openLayer(t, img, 0, (v1.Layer).Uncompressed))
	if want := sha256Hash(raw); len(cf.RootFS.DiffIDs) != 1 || cf.RootFS.DiffIDs[0] != want {
		t.Fatalf("diff_ids %v, want [%v]", cf.RootFS.DiffIDs, want)
	}
	if !cf.Created.Time.Equal(created.Truncate(time.Second)) || cf.OS != "wasip1" || cf.Architecture != "wasm" {
		t.Fatalf("config created %v os %q arch %q", cf.Created.Time, cf.OS, cf.Architecture)
	}

	got, variant, err := ExtractWasm(img)
	if err != nil || variant != Compat || !bytes.Equal(got, testModule) {
		t.Fatalf("ExtractWasm = %d bytes, %q, %v; want the module as compat", len(got), variant, err)
	}
}

func TestBuildOCI(t *testing.T) {
	img := mustBuild(t, testModule, OCI, Options{RootIDs: []string{"sluice"}})
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 2 {
		t.Fatalf("%d layers, want exactly 2", len(m.Layers))
	}
	if m.Layers[0].MediaType != RuntimeConfigMediaType || m.Layers[1].MediaType != WasmLayerMediaType {
		t.Fatalf("layer media types %s, %s", m.Layers[0].MediaType, m.Layers[1].MediaType)
	}
	if _, ok := m.Annotations[VariantAnnotation]; ok {
		t.Fatalf("the oci variant must not claim to be compat: %v", m.Annotations)
	}

	dec := json.NewDecoder(openLayer(t, img, 0, (v1.Layer).Compressed))
	dec.DisallowUnknownFields()
	var runtime RuntimeConfig
	if err := dec.Decode(&runtime); err != nil {
		t.Fatalf("runtime config: %v", err)
	}
	want := RuntimeConfig{
		Type:        RuntimeTypeEnvoy,
		ABIVersions: []string{"proxy_abi_version_0_2_1"},
		Config:      RuntimeConfigDetail{RootIDs: []string{"sluice"}},
	}
	if !reflect.DeepEqual(runtime, want) {
		t.Fatalf("runtime config %+v, want %+v", runtime, want)
	}

	got, variant, err := ExtractWasm(img)
	if err != nil || variant != OCI || !bytes.Equal(got, testModule) {
		t.Fatalf("ExtractWasm = %d bytes, %q, %v; want the module as oci", len(got), variant, err)
	}
}

func TestBuildABIVersionsOverride(t *testing.T) {
	img := mustBuild(t, testModule, OCI, Options{ABIVersions: []string{}})
	b := testkit.ReadAll(t, openLayer(t, img, 0, (v1.Layer).Compressed))
	if string(b) != `{"type":"envoy_proxy","config":{}}` {
		t.Fatalf("runtime config %s, want no abiVersions", b)
	}
}

func TestBuildRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wasm    []byte
		variant Variant
		wantErr string
	}{
		{"not wasm", []byte("#!/bin/sh\n"), Compat, "magic"},
		{"empty", nil, OCI, "0 bytes"},
		{"unknown variant", testModule, "docker", "unknown variant"},
		{"malformed exports for runtime config", append(append([]byte{}, wasmHeader...), exportSectionID, 0x09), OCI, "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, err := Build(tc.wasm, tc.variant, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Build error = %v, want it to mention %q", err, tc.wantErr)
			}
			if img != nil {
				t.Fatal("Build returned an image with its error")
			}
		})
	}
}

func TestParseVariant(t *testing.T) {
	for _, s := range []string{"compat", "oci"} {
		if v, err := ParseVariant(s); err != nil || string(v) != s {
			t.Fatalf("ParseVariant(%q) = %q, %v", s, v, err)
		}
	}
	for _, s := range []string{"", "OCI", "docker"} {
		if _, err := ParseVariant(s); err == nil {
			t.Fatalf("ParseVariant(%q) succeeded", s)
		}
	}
}

func tarGz(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for n, c := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Size: int64(len(c)), Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func imageOf(t *testing.T, layers ...v1.Layer) v1.Image {
	t.Helper()
	img := empty.Image
	for _, l := range layers {
		var err error
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// TestExtractWasmFollowsIstio pins the decisions Istio's fetcher makes, so
// that an image ExtractWasm accepts is one Istio accepts and vice versa.
func TestExtractWasmFollowsIstio(t *testing.T) {
	wasmLayer := static.NewLayer(testModule, WasmLayerMediaType)
	cfgLayer := static.NewLayer([]byte(`{"type":"envoy_proxy"}`), RuntimeConfigMediaType)
	pluginInSubdir := static.NewLayer(tarGz(t, map[string][]byte{"filters/plugin.wasm": testModule}), types.OCILayer)
	noPlugin := static.NewLayer(tarGz(t, map[string][]byte{"filter.wasm": testModule}), types.OCILayer)
	notGzip := static.NewLayer([]byte("plain bytes"), types.OCILayer)

	for _, tc := range []struct {
		name        string
		img         v1.Image
		wantVariant Variant
		wantErr     string
	}{
		{name: "no layers", img: empty.Image, wantErr: "no layers"},
		{name: "compat with plugin in a subdirectory", img: imageOf(t, pluginInSubdir), wantVariant: Compat},
		{name: "compat reads only the last layer", img: imageOf(t, pluginInSubdir, noPlugin), wantErr: "plugin.wasm not found"},
		{name: "compat layer not gzip", img: imageOf(t, notGzip), wantErr: "not gzip"},
		{name: "oci with wasm layer first", img: imageOf(t, wasmLayer, cfgLayer), wantVariant: OCI},
		{name: "oci with one layer", img: imageOf(t, wasmLayer), wantErr: "1 layers, want 2"},
		{name: "oci with three layers", img: imageOf(t, cfgLayer, wasmLayer, cfgLayer), wantErr: "3 layers, want 2"},
		{name: "oci without wasm layer", img: imageOf(t, cfgLayer, cfgLayer), wantErr: "no layer of media type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, variant, err := ExtractWasm(tc.img)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ExtractWasm error = %v, want it to mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || variant != tc.wantVariant || !bytes.Equal(got, testModule) {
				t.Fatalf("ExtractWasm = %d bytes, %q, %v; want the module as %s", len(got), variant, err, tc.wantVariant)
			}
		})
	}
}

func TestWriteLayoutRoundTripAndBytes(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	for _, v := range Variants {
		img := mustBuild(t, testModule, v, Options{})
		for _, dir := range []string{dirA, dirB} {
			d, err := WriteLayout(filepath.Join(dir, string(v)), img, "v1")
			if err != nil {
				t.Fatal(err)
			}
			want, _ := img.Digest()
			if d != want {
				t.Fatalf("WriteLayout digest %v, want %v", d, want)
			}
		}
		back, err := ReadLayout(filepath.Join(dirA, string(v)))
		if err != nil {
			t.Fatal(err)
		}
		if got, variant, err := ExtractWasm(back); err != nil || variant != v || !bytes.Equal(got, testModule) {
			t.Fatalf("module read back from layout: %d bytes, %q, %v", len(got), variant, err)
		}
	}
	// Byte-identical trees, not only equal digests: the layout is what make
	// oci leaves on disk and what release tooling would checksum.
	if a, b := treeOf(t, dirA), treeOf(t, dirB); !reflect.DeepEqual(a, b) {
		t.Fatalf("two layout writes differ:\n%v\n%v", a, b)
	}
	index, err := os.ReadFile(filepath.Join(dirA, "compat", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(index), `"org.opencontainers.image.ref.name": "v1"`) {
		t.Fatalf("index.json does not record the tag:\n%s", index)
	}
}

func treeOf(t *testing.T, root string) map[string][32]byte {
	t.Helper()
	files := map[string][32]byte{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestWriteLayoutReplacesOnlyLayouts(t *testing.T) {
	img := mustBuild(t, testModule, Compat, Options{})
	dir := filepath.Join(t.TempDir(), "compat")
	if _, err := WriteLayout(dir, img, ""); err != nil {
		t.Fatal(err)
	}
	// A stale blob from an older build must not survive a rebuild.
	stale := filepath.Join(dir, "blobs", "sha256", strings.Repeat("0", 64))
	if err := os.WriteFile(stale, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteLayout(dir, img, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale blob still present after rebuild: %v", err)
	}

	notLayout := t.TempDir()
	precious := filepath.Join(notLayout, "precious.txt")
	if err := os.WriteFile(precious, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteLayout(notLayout, img, ""); err == nil || !strings.Contains(err.Error(), "not an OCI image layout") {
		t.Fatalf("WriteLayout over a non-layout dir: err = %v", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("unrelated file was touched: %v", err)
	}
}

// TestPushPull goes through go-containerregistry's in-memory registry; the
// end-to-end test in e2e/oci does the same against Debian's docker-registry.
func TestPushPull(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(nilLogger())))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	for _, v := range Variants {
		ref := host + "/sluice/" + string(v) + ":test"
		img := mustBuild(t, testModule, v, Options{})
		pushed, err := Push(ctx, img, ref, RemoteOptions{Insecure: true})
		if err != nil {
			t.Fatal(err)
		}
		pulled, err := Pull(ctx, ref, RemoteOptions{Insecure: true})
		if err != nil {
			t.Fatal(err)
		}
		if d, err := pulled.Digest(); err != nil || d != pushed {
			t.Fatalf("pulled digest %v (%v), pushed %v", d, err, pushed)
		}
		if got, variant, err := ExtractWasm(pulled); err != nil || variant != v || !bytes.Equal(got, testModule) {
			t.Fatalf("module pulled back: %d bytes, %q, %v", len(got), variant, err)
		}
	}

	if _, err := Pull(ctx, host+"/sluice/missing:test", RemoteOptions{Insecure: true}); err == nil {
		t.Fatal("pulling a missing image succeeded")
	}
	if _, err := Push(ctx, empty.Image, "Not A Ref!", RemoteOptions{}); err == nil || !strings.Contains(err.Error(), "image reference") {
		t.Fatalf("bad reference: err = %v", err)
	}
}

func nilLogger() *log.Logger { return log.New(io.Discard, "", 0) }
