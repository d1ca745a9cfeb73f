package wasmimage

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// wasmHeader is the magic number followed by binary format version 1; every
// module Envoy's runtimes accept starts with exactly these eight bytes.
var wasmHeader = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// abiExportPrefix is how a proxy-wasm module announces the host ABI it was
// built against; Envoy looks these exports up by name before starting a VM.
const abiExportPrefix = "proxy_abi_version_"

// exportSectionID is the section id of the export section in the binary format.
const exportSectionID = 7

// CheckModule reports whether wasm looks like a WebAssembly binary module.
// It only checks the header: packaging something that is not a module would
// otherwise surface much later, as a VM load failure inside a user's proxy.
func CheckModule(wasm []byte) error {
	if len(wasm) < len(wasmHeader) {
		return fmt.Errorf("not a wasm module: %d bytes, need at least %d", len(wasm), len(wasmHeader))
	}
	if !bytes.Equal(wasm[:4], wasmHeader[:4]) {
		return fmt.Errorf("not a wasm module: magic %x, want %x", wasm[:4], wasmHeader[:4])
	}
	if !bytes.Equal(wasm[4:8], wasmHeader[4:8]) {
		return fmt.Errorf("unsupported wasm binary version %x, want %x", wasm[4:8], wasmHeader[4:8])
	}
	return nil
}

// ABIVersions returns the names of the proxy_abi_version_* exports of a
// module, sorted. They go into the image's runtime config so that a
// registry user can tell which proxy-wasm ABI an image needs without
// instantiating it. A module without such exports yields an empty list and
// no error; a truncated or inconsistent module yields an error.
func ABIVersions(wasm []byte) ([]string, error) {
	if err := CheckModule(wasm); err != nil {
		return nil, err
	}
	r := &byteReader{b: wasm, off: len(wasmHeader)}
	var versions []string
	for r.off < len(r.b) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		body, err := r.sized(fmt.Sprintf("section %d", id))
		if err != nil {
			return nil, err
		}
		if id != exportSectionID {
			continue
		}
		names, err := exportNames(body)
		if err != nil {
			return nil, fmt.Errorf("export section: %w", err)
		}
		for _, n := range names {
			if strings.HasPrefix(n, abiExportPrefix) {
				versions = append(versions, n)
			}
		}
	}
	sort.Strings(versions)
	return versions, nil
}

func exportNames(section []byte) ([]string, error) {
	r := &byteReader{b: section}
	count, err := r.u32()
	if err != nil {
		return nil, err
	}
	// Each export takes at least three bytes, which bounds count before we
	// allocate anything sized by it.
	if int64(count)*3 > int64(len(section)) {
		return nil, fmt.Errorf("%d exports cannot fit in %d bytes", count, len(section))
	}
	names := make([]string, 0, count)
	for i := uint32(0); i < count; i++ {
		name, err := r.sized(fmt.Sprintf("export %d name", i))
		if err != nil {
			return nil, err
		}
		if _, err := r.byte(); err != nil {
			return nil, fmt.Errorf("export %d kind: %w", i, err)
		}
		if _, err := r.u32(); err != nil {
			return nil, fmt.Errorf("export %d index: %w", i, err)
		}
		names = append(names, string(name))
	}
	if r.off != len(section) {
		return nil, fmt.Errorf("%d trailing bytes", len(section)-r.off)
	}
	return names, nil
}

var errTruncated = errors.New("truncated module")

type byteReader struct {
	b   []byte
	off int
}

func (r *byteReader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *byteReader) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, errTruncated
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}

// sized reads a u32 size and then that many bytes, as the binary format
// writes a section's body and a name; what names them in errors.
func (r *byteReader) sized(what string) ([]byte, error) {
	n, err := r.u32()
	if err != nil {
		return nil, fmt.Errorf("%s size: %w", what, err)
	}
	b, err := r.bytes(int(n))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return b, nil
}

// u32 decodes an unsigned LEB128 value of at most 32 bits, the encoding the
// binary format uses for every size, count and index.
func (r *byteReader) u32() (uint32, error) {
	var v uint32
	for shift := uint(0); shift < 35; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift == 28 && c&0x70 != 0 {
			return 0, errors.New("LEB128 value overflows 32 bits")
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, errors.New("LEB128 value longer than 5 bytes")
}
