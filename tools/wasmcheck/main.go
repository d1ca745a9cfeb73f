// Command wasmcheck fails the build when a module is not loadable as a
// proxy-wasm filter. A standard-Go build that misses the bridge compiles
// without error yet exports none of the ABI, so the build checks the
// artifact itself rather than trusting the compiler.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/tetratelabs/wazero"
)

// requiredExports are what Envoy looks for when it loads and drives an HTTP
// filter; alternatives are separated by "|".
var requiredExports = []string{
	"_initialize",
	"proxy_abi_version_0_2_0|proxy_abi_version_0_2_1",
	"proxy_on_memory_allocate|malloc",
	"proxy_on_context_create",
	"proxy_on_request_headers",
	"proxy_on_response_headers",
	"proxy_on_http_call_response",
	"proxy_on_tick",
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: wasmcheck module.wasm...")
		os.Exit(2)
	}
	failed := false
	for _, path := range os.Args[1:] {
		if err := check(path); err != nil {
			fmt.Fprintf(os.Stderr, "wasmcheck: %s: %v\n", path, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func check(path string) error {
	code, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	mod, err := rt.CompileModule(ctx, code)
	if err != nil {
		return fmt.Errorf("not a valid wasm module: %w", err)
	}
	exports := mod.ExportedFunctions()
	var missing []string
	for _, want := range requiredExports {
		found := false
		for _, name := range strings.Split(want, "|") {
			if _, ok := exports[name]; ok {
				found = true
			}
		}
		if !found {
			missing = append(missing, strings.ReplaceAll(want, "|", " or "))
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("missing proxy-wasm exports: %s (was it built with -tags sluice_bridge through build/sdk?)", strings.Join(missing, ", "))
	}
	fmt.Printf("wasmcheck: %s: ok (%d bytes, %d exports, %d imports)\n", path, len(code), len(exports), len(mod.ImportedFunctions()))
	return nil
}
