// Package wasmimage packages a proxy-wasm module as an OCI image in the two
// layouts that Istio's image fetcher (istio.io/istio pkg/wasm) accepts, as
// described by the Wasm image specification
// (github.com/solo-io/wasm/tree/master/spec):
//
//   - Compat: one application/vnd.oci.image.layer.v1.tar+gzip layer whose
//     tarball holds plugin.wasm, and the manifest annotation
//     module.wasm.image/variant=compat. Ordinary registries and tools
//     (docker, skopeo, crane) handle it like any image.
//   - OCI: exactly two layers, the runtime config
//     (application/vnd.module.wasm.config.v1+json) and the raw module
//     (application/vnd.module.wasm.content.layer.v1+wasm).
//
// Images are reproducible: every timestamp comes from Options.Created and
// gzip output carries no name or time, so the same module bytes built with
// the same Go toolchain give the same digests.
package wasmimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Media types and names fixed by the Wasm image specification and Istio's
// fetcher; changing any of them makes the image unpullable by Istio.
const (
	// WasmLayerMediaType is the layer holding the raw module in the oci variant.
	WasmLayerMediaType types.MediaType = "application/vnd.module.wasm.content.layer.v1+wasm"
	// RuntimeConfigMediaType is the layer holding RuntimeConfig in the oci variant.
	RuntimeConfigMediaType types.MediaType = "application/vnd.module.wasm.config.v1+json"
	// VariantAnnotation is the manifest annotation that marks a compat image.
	VariantAnnotation = "module.wasm.image/variant"
	// PluginFileName is the file Istio looks for inside the compat layer.
	PluginFileName = "plugin.wasm"
	// RuntimeConfigFileName names the runtime config layer (OCI title annotation).
	RuntimeConfigFileName = "runtime-config.json"
	// RuntimeTypeEnvoy is RuntimeConfig.Type for Envoy proxy-wasm filters.
	RuntimeTypeEnvoy = "envoy_proxy"

	titleAnnotation   = "org.opencontainers.image.title"
	createdAnnotation = "org.opencontainers.image.created"
)

// Variant selects one of the two image layouts.
type Variant string

const (
	// Compat is the single tar+gzip layer variant with plugin.wasm inside.
	Compat Variant = "compat"
	// OCI is the two-layer artifact variant with custom media types.
	OCI Variant = "oci"
)

// Variants lists every variant, in the order the command builds them.
var Variants = []Variant{Compat, OCI}

// ParseVariant turns a command-line value into a Variant.
func ParseVariant(s string) (Variant, error) {
	switch v := Variant(s); v {
	case Compat, OCI:
		return v, nil
	}
	return "", fmt.Errorf("unknown variant %q: want %q or %q", s, Compat, OCI)
}

// Options tunes a build. The zero value is valid and reproducible.
type Options struct {
	// Created stamps the image config, its history and the tar entry of the
	// compat layer. Zero means the Unix epoch, so builds that do not set it
	// still reproduce; set it from SOURCE_DATE_EPOCH to record release time.
	Created time.Time
	// RootIDs goes into the runtime config as config.rootIds. Nil or empty
	// leaves the list out: the Go SDK serves any root id.
	RootIDs []string
	// ABIVersions goes into the runtime config as abiVersions. Nil means
	// "detect from the module's proxy_abi_version_* exports"; an empty
	// non-nil slice means "record none".
	ABIVersions []string
}

// RuntimeConfig is the JSON document of the oci variant's config layer, with
// the field names of the specification's Runtime message.
type RuntimeConfig struct {
	Type        string              `json:"type"`
	ABIVersions []string            `json:"abiVersions,omitempty"`
	Config      RuntimeConfigDetail `json:"config"`
}

// RuntimeConfigDetail is the runtime-specific part of RuntimeConfig.
type RuntimeConfigDetail struct {
	RootIDs []string `json:"rootIds,omitempty"`
}

func (o Options) created() time.Time {
	if o.Created.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	// The tar header stores whole seconds; truncating here keeps the config,
	// history and tar entry in agreement.
	return o.Created.UTC().Truncate(time.Second)
}

// Build packages wasm as the given variant. It rejects bytes that are not a
// wasm binary module.
func Build(wasm []byte, variant Variant, opts Options) (v1.Image, error) {
	if err := CheckModule(wasm); err != nil {
		return nil, err
	}
	switch variant {
	case Compat:
		return buildCompat(wasm, opts)
	case OCI:
		return buildOCI(wasm, opts)
	}
	return nil, fmt.Errorf("unknown variant %q", variant)
}

// baseImage is an empty OCI image whose config names the wasm platform. The
// config is a regular image config (not an artifact config) on purpose:
// skopeo and other image tools refuse to inspect artifacts, and Istio does
// not read the config at all.
func baseImage(created time.Time) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	return mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: "wasm",
		OS:           "wasip1",
		Created:      v1.Time{Time: created},
		RootFS:       v1.RootFS{Type: "layers"},
	})
}

func buildCompat(wasm []byte, opts Options) (v1.Image, error) {
	created := opts.created()
	layer, err := newTarGzipLayer(PluginFileName, wasm, created)
	if err != nil {
		return nil, err
	}
	base, err := baseImage(created)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "sluice ocibuild: add " + PluginFileName,
		},
	})
	if err != nil {
		return nil, err
	}
	return annotate(img, map[string]string{
		VariantAnnotation: string(Compat),
		createdAnnotation: created.Format(time.RFC3339),
	})
}

func buildOCI(wasm []byte, opts Options) (v1.Image, error) {
	created := opts.created()
	abi := opts.ABIVersions
	if abi == nil {
		var err error
		if abi, err = ABIVersions(wasm); err != nil {
			return nil, err
		}
	}
	rc, err := json.Marshal(RuntimeConfig{
		Type:        RuntimeTypeEnvoy,
		ABIVersions: abi,
		Config:      RuntimeConfigDetail{RootIDs: opts.RootIDs},
	})
	if err != nil {
		return nil, err
	}
	base, err := baseImage(created)
	if err != nil {
		return nil, err
	}
	history := v1.History{Created: v1.Time{Time: created}, CreatedBy: "sluice ocibuild"}
	// Config first, module second: the order of the specification's example.
	// Istio finds the module by media type, so the order is not load-bearing.
	img, err := mutate.Append(base,
		mutate.Addendum{
			Layer:       static.NewLayer(rc, RuntimeConfigMediaType),
			History:     history,
			Annotations: map[string]string{titleAnnotation: RuntimeConfigFileName},
		},
		mutate.Addendum{
			Layer:       static.NewLayer(wasm, WasmLayerMediaType),
			History:     history,
			Annotations: map[string]string{titleAnnotation: PluginFileName},
		},
	)
	if err != nil {
		return nil, err
	}
	return annotate(img, map[string]string{createdAnnotation: created.Format(time.RFC3339)})
}

func annotate(img v1.Image, anns map[string]string) (v1.Image, error) {
	out, ok := mutate.Annotations(img, anns).(v1.Image)
	if !ok {
		return nil, fmt.Errorf("annotating an image did not return an image")
	}
	return out, nil
}

// newTarGzipLayer builds a one-file tar+gzip layer byte for byte
// reproducibly: fixed mode, owner and time in the tar header, and a gzip
// header with no name and a zero mtime.
func newTarGzipLayer(name string, content []byte, modTime time.Time) (v1.Layer, error) {
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Size:     int64(len(content)),
		Mode:     0o644,
		ModTime:  modTime,
		Format:   tar.FormatPAX,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(content); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}

	var gzBuf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gzBuf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(tarBuf.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &tarGzipLayer{
		compressed: gzBuf.Bytes(),
		digest:     sha256Hash(gzBuf.Bytes()),
		diffID:     sha256Hash(tarBuf.Bytes()),
		tarball:    tarBuf.Bytes(),
	}, nil
}

// tarGzipLayer keeps both forms in memory so that Digest and DiffID never
// depend on re-compressing, which is where reproducibility usually breaks.
type tarGzipLayer struct {
	compressed, tarball []byte
	digest, diffID      v1.Hash
}

func (l *tarGzipLayer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *tarGzipLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *tarGzipLayer) Size() (int64, error)     { return int64(len(l.compressed)), nil }
func (l *tarGzipLayer) MediaType() (types.MediaType, error) {
	return types.OCILayer, nil
}
func (l *tarGzipLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.compressed)), nil
}
func (l *tarGzipLayer) Uncompressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.tarball)), nil
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sum)}
}
