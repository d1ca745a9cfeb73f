// Command ocibuild packages the Sluice wasm module as OCI images that Istio
// and Envoy image fetchers can pull.
//
// Write both variants as OCI image layouts (OUT/compat and OUT/oci):
//
//	go run ./tools/ocibuild -wasm build/sluice.wasm -out build/oci
//
// Push one variant to a registry:
//
//	go run ./tools/ocibuild -wasm build/sluice.wasm -push REGISTRY/REPO:TAG -variant compat [-insecure]
//
// SOURCE_DATE_EPOCH, if set, stamps the images; otherwise they carry the
// Unix epoch. Either way the same module gives the same digests.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/tools/ocibuild/wasmimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ocibuild:", err)
		os.Exit(1)
	}
}

type config struct {
	wasmPath string
	outDir   string
	tag      string
	pushRef  string
	variant  string
	insecure bool
	rootIDs  string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ocibuild", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.StringVar(&c.wasmPath, "wasm", "build/sluice.wasm", "wasm module to package")
	fs.StringVar(&c.outDir, "out", "", "write OCI image layouts to `DIR`/compat and DIR/oci")
	fs.StringVar(&c.tag, "tag", "latest", "tag recorded in each layout's index.json")
	fs.StringVar(&c.pushRef, "push", "", "push to `REGISTRY/REPO:TAG` (needs -variant)")
	fs.StringVar(&c.variant, "variant", "", "image variant: compat or oci (layouts: default both)")
	fs.BoolVar(&c.insecure, "insecure", false, "allow plain HTTP and unverified TLS when pushing")
	fs.StringVar(&c.rootIDs, "root-ids", "", "comma-separated root ids for the oci runtime config")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.outDir == "" && c.pushRef == "" {
		return errors.New("nothing to do: give -out DIR, -push REF, or both")
	}
	variants := wasmimage.Variants
	if c.variant != "" {
		v, err := wasmimage.ParseVariant(c.variant)
		if err != nil {
			return err
		}
		variants = []wasmimage.Variant{v}
	} else if c.pushRef != "" {
		return errors.New("-push needs -variant compat or -variant oci: one tag holds one image")
	}

	opts, err := buildOptions(c, os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return err
	}
	wasm, err := os.ReadFile(c.wasmPath)
	if err != nil {
		return err
	}
	if abi, err := wasmimage.ABIVersions(wasm); err != nil {
		return fmt.Errorf("%s: %w", c.wasmPath, err)
	} else if len(abi) == 0 {
		fmt.Fprintf(stderr, "ocibuild: warning: %s exports no proxy_abi_version_*; Envoy will refuse to load it\n", c.wasmPath)
	}

	for _, v := range variants {
		img, err := wasmimage.Build(wasm, v, opts)
		if err != nil {
			return fmt.Errorf("building %s image: %w", v, err)
		}
		if c.outDir != "" {
			dir := filepath.Join(c.outDir, string(v))
			d, err := wasmimage.WriteLayout(dir, img, c.tag)
			if err != nil {
				return fmt.Errorf("writing %s: %w", dir, err)
			}
			fmt.Fprintf(stdout, "%s\t%s\t%s\n", v, dir, d)
		}
		if c.pushRef != "" {
			d, err := wasmimage.Push(ctx, img, c.pushRef, wasmimage.RemoteOptions{Insecure: c.insecure})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s\t%s@%s\n", v, c.pushRef, d)
		}
	}
	return nil
}

func buildOptions(c config, sourceDateEpoch string) (wasmimage.Options, error) {
	var opts wasmimage.Options
	if sourceDateEpoch != "" {
		secs, err := strconv.ParseInt(sourceDateEpoch, 10, 64)
		if err != nil || secs < 0 {
			return opts, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want a non-negative integer of seconds", sourceDateEpoch)
		}
		opts.Created = time.Unix(secs, 0).UTC()
	}
	for _, id := range strings.Split(c.rootIDs, ",") {
		if id = strings.TrimSpace(id); id != "" {
			opts.RootIDs = append(opts.RootIDs, id)
		}
	}
	return opts, nil
}
