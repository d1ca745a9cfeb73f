package wasmimage

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// MaxModuleSize bounds how much ExtractWasm reads from one layer, so that a
// hostile or corrupt image cannot exhaust memory. Real filters are a few MiB.
const MaxModuleSize = 256 << 20

// ExtractWasm returns the module in img and the variant it was found as,
// following the same steps as Istio's image fetcher: first the compat
// reading (the last layer is tar+gzip and holds plugin.wasm), then the oci
// reading (exactly two layers, one with the wasm media type, whose blob is
// the module itself). It reads only manifests and layers, never the config,
// because Istio does not either.
func ExtractWasm(img v1.Image) ([]byte, Variant, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, "", fmt.Errorf("listing layers: %w", err)
	}
	wasm, errCompat := extractCompat(layers)
	if errCompat == nil {
		return wasm, Compat, nil
	}
	wasm, errOCI := extractOCI(layers)
	if errOCI == nil {
		return wasm, OCI, nil
	}
	return nil, "", fmt.Errorf("not a wasm image: as compat: %v; as oci: %v", errCompat, errOCI)
}

func extractCompat(layers []v1.Layer) ([]byte, error) {
	if len(layers) == 0 {
		return nil, errors.New("image has no layers")
	}
	last := layers[len(layers)-1]
	mt, err := last.MediaType()
	if err != nil {
		return nil, err
	}
	if mt != types.OCILayer {
		return nil, fmt.Errorf("last layer media type %s, want %s", mt, types.OCILayer)
	}
	rc, err := last.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		return nil, fmt.Errorf("layer is not gzip: %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%s not found in the layer", PluginFileName)
		}
		if err != nil {
			return nil, fmt.Errorf("reading layer tarball: %w", err)
		}
		// Istio matches on the base name, so a plugin.wasm in a
		// subdirectory counts; matching the same way keeps us honest.
		if h.Typeflag != tar.TypeReg || path.Base(h.Name) != PluginFileName {
			continue
		}
		return readBounded(tr)
	}
}

func extractOCI(layers []v1.Layer) ([]byte, error) {
	if len(layers) != 2 {
		return nil, fmt.Errorf("%d layers, want 2", len(layers))
	}
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			return nil, err
		}
		if mt != WasmLayerMediaType {
			continue
		}
		// Compressed, not Uncompressed: the blob is the raw module, and
		// go-containerregistry would try to gunzip it otherwise.
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return readBounded(rc)
	}
	return nil, fmt.Errorf("no layer of media type %s", WasmLayerMediaType)
}

func readBounded(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxModuleSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxModuleSize {
		return nil, fmt.Errorf("module larger than %d bytes", MaxModuleSize)
	}
	return b, nil
}
