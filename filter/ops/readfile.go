package ops

import (
	"fmt"
	"io"
	"os"

	"github.com/sluice-proxy/sluice/filter/ops/yamlbound"
)

// Bounds on what check reads, before anything is parsed. Envoy
// bootstraps, ECDS files and WasmPlugins are a few KiB; these leave
// room for big ones while keeping a hostile file from costing
// gigabytes: yaml.v3 builds its whole node tree before anything can
// count it, at a few hundred bytes per node.
const (
	// maxConfigFile bounds every file check reads, named on the command
	// line or by a config_discovery.
	maxConfigFile = 16 << 20
	// maxYAMLStarts bounds the lines and node-starting indicator bytes
	// (see yamlbound.Starts) of a YAML file and the ECDS files it names,
	// together, counted before each is parsed.
	maxYAMLStarts = 1 << 18
	// maxYAMLBytes bounds the bytes of a YAML file and the ECDS files
	// it names, together.
	maxYAMLBytes = 4 * maxConfigFile
)

// readRegular reads a regular file of at most maxConfigFile bytes, not
// one of /proc or /sys. A
// name may be a device, a FIFO or a symbolic link to one (/dev/zero,
// /dev/stdin), which would never end: the file is opened without
// blocking (a FIFO with no writer would otherwise hang the open), and
// what is read is the file the descriptor holds, so it cannot be
// swapped between the check and the read.
func readRegular(name string) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", name, st.Mode().Type())
	}
	// /proc and /sys files stat as regular, but the kernel writes them
	// as they are read: a configuration is never one, and check would
	// quote what it read (/proc/self/environ holds the environment's
	// secrets) in its errors.
	if fs := kernelFS(f); fs != "" {
		return nil, fmt.Errorf("%s: a file of the kernel's %s, not a configuration file", name, fs)
	}
	if st.Size() > maxConfigFile {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d bytes a configuration file may have", name, st.Size(), maxConfigFile)
	}
	// The file may grow after the Stat; read one byte past the bound to
	// see it.
	data, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxConfigFile {
		return nil, fmt.Errorf("%s: more than the %d bytes a configuration file may have", name, maxConfigFile)
	}
	return data, nil
}

// chargeYAML takes the starts of data, the YAML of file, from what is
// left to the walk, and refuses it when they are more: its tree could
// be too large to build.
func (w *walker) chargeYAML(file string, data []byte) error {
	if w.starts -= yamlbound.Starts(data); w.starts < 0 {
		return fmt.Errorf("%s: YAML with more than %d lines and indicators (-, ?, :, ',', [, {, *), with the ECDS files it names, is too large to check", file, maxYAMLStarts)
	}
	if w.bytes -= len(data); w.bytes < 0 {
		return fmt.Errorf("%s: YAML of more than %d bytes, with the ECDS files it names, is too large to check", file, maxYAMLBytes)
	}
	return nil
}
