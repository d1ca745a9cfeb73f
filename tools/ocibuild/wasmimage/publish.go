package wasmimage

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// refNameAnnotation is the index annotation OCI layout tools (skopeo
// oci:DIR:TAG, crane) use to find an image by tag.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout writes img as the only image of a fresh OCI image layout in
// dir, tagged tag in index.json (empty tag: no ref name). An existing dir is
// replaced only if it is itself an OCI layout, so a mistyped path can never
// wipe unrelated files. It returns the manifest digest.
func WriteLayout(dir string, img v1.Image, tag string) (v1.Hash, error) {
	if err := clearLayout(dir); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	var opts []layout.Option
	if tag != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{refNameAnnotation: tag}))
	}
	if err := p.AppendImage(img, opts...); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

func clearLayout(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("%s exists and is not an OCI image layout; refusing to replace it", dir)
	}
	return os.RemoveAll(dir)
}

// ReadLayout returns the first image of the OCI layout in dir.
func ReadLayout(dir string) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) == 0 {
		return nil, fmt.Errorf("%s: layout holds no image", dir)
	}
	return idx.Image(m.Manifests[0].Digest)
}

// RemoteOptions configures Push and Pull. The zero value talks TLS with
// verification and uses the Docker config keychain, as Istio does when no
// pull secret is given.
type RemoteOptions struct {
	// Insecure allows plain HTTP and skips TLS verification. Registries on
	// loopback and RFC 1918 addresses already get plain HTTP without it.
	Insecure bool
}

func (o RemoteOptions) parse(ref string) (name.Reference, []remote.Option, error) {
	var nameOpts []name.Option
	if o.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return nil, nil, fmt.Errorf("image reference %q: %w", ref, err)
	}
	opts := []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if o.Insecure {
		t := remote.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // #nosec G402 -- opted into by the user
		opts = append(opts, remote.WithTransport(t))
	}
	return r, opts, nil
}

// Push uploads img to ref (REGISTRY/REPO:TAG) and returns the pushed
// manifest digest.
func Push(ctx context.Context, img v1.Image, ref string, o RemoteOptions) (v1.Hash, error) {
	r, opts, err := o.parse(ref)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.Write(r, img, append(opts, remote.WithContext(ctx))...); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing %s: %w", ref, err)
	}
	return img.Digest()
}

// Pull fetches ref the way Istio's fetcher does (remote.Get, then Image).
// Layers are fetched lazily, when the caller reads them.
func Pull(ctx context.Context, ref string, o RemoteOptions) (v1.Image, error) {
	r, opts, err := o.parse(ref)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(r, append(opts, remote.WithContext(ctx))...)
	if err != nil {
		return nil, fmt.Errorf("fetching manifest of %s: %w", ref, err)
	}
	return desc.Image()
}
