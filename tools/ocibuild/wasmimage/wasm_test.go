package wasmimage

import (
	"reflect"
	"strings"
	"testing"
)

// moduleWithExports assembles a module header plus one export section
// naming the given functions. It is not instantiable (there are no
// functions), which is fine: ABIVersions only reads the export section.
func moduleWithExports(names ...string) []byte {
	var sec []byte
	sec = appendU32(sec, uint32(len(names)))
	for _, n := range names {
		sec = appendU32(sec, uint32(len(n)))
		sec = append(sec, n...)
		sec = append(sec, 0x00) // func
		sec = appendU32(sec, 0)
	}
	m := append([]byte{}, wasmHeader...)
	// A custom section first, so the walk has to skip something.
	m = append(m, 0x00, 0x03, 0x01, 'x', 0xff)
	m = append(m, exportSectionID)
	m = appendU32(m, uint32(len(sec)))
	return append(m, sec...)
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func TestCheckModule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []byte
		wantErr string
	}{
		{"header only", wasmHeader, ""},
		{"empty", nil, "0 bytes"},
		{"short", []byte("\x00asm"), "4 bytes"},
		{"gzip", []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0}, "magic"},
		{"text format", []byte("(module)"), "magic"},
		{"version 2", []byte("\x00asm\x02\x00\x00\x00"), "version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckModule(tc.in)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckModule: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CheckModule error = %v, want it to mention %q", err, tc.wantErr)
			}
		})
	}
}

func TestABIVersions(t *testing.T) {
	longName := strings.Repeat("n", 200) // two-byte LEB128 length
	for _, tc := range []struct {
		name    string
		in      []byte
		want    []string
		wantErr string
	}{
		{name: "no sections", in: wasmHeader, want: nil},
		{
			name: "proxy-wasm exports",
			in: moduleWithExports("proxy_on_context_create", "proxy_abi_version_0_2_1",
				"memory", "proxy_abi_version_0_2_0", longName),
			want: []string{"proxy_abi_version_0_2_0", "proxy_abi_version_0_2_1"},
		},
		{name: "no abi export", in: moduleWithExports("_start", "memory"), want: nil},
		{
			name:    "section overruns module",
			in:      append(append([]byte{}, wasmHeader...), exportSectionID, 0x10, 0x00),
			wantErr: "truncated",
		},
		{
			name:    "section size LEB128 too long",
			in:      append(append([]byte{}, wasmHeader...), 0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01),
			wantErr: "longer than 5 bytes",
		},
		{
			name:    "section size overflows 32 bits",
			in:      append(append([]byte{}, wasmHeader...), 0x01, 0xff, 0xff, 0xff, 0xff, 0x7f),
			wantErr: "overflows",
		},
		{
			name:    "export count larger than section",
			in:      append(append([]byte{}, wasmHeader...), exportSectionID, 0x02, 0xff, 0x01),
			wantErr: "cannot fit",
		},
		{
			name:    "export name overruns section",
			in:      append(append([]byte{}, wasmHeader...), exportSectionID, 0x04, 0x01, 0x20, 'a', 0x00),
			wantErr: "export 0 name",
		},
		{
			name: "trailing bytes in export section",
			in: append(append([]byte{}, wasmHeader...), exportSectionID, 0x06,
				0x01, 0x01, 'a', 0x00, 0x00, 0xee),
			wantErr: "trailing",
		},
		{name: "not wasm", in: []byte("PK\x03\x04zipfile"), wantErr: "magic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ABIVersions(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ABIVersions error = %v, want it to mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ABIVersions: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ABIVersions = %q, want %q", got, tc.want)
			}
		})
	}
}

func FuzzABIVersions(f *testing.F) {
	f.Add(wasmHeader)
	f.Add(moduleWithExports("proxy_abi_version_0_2_1", "memory"))
	f.Add(append(append([]byte{}, wasmHeader...), exportSectionID, 0x02, 0xff, 0x01))
	f.Fuzz(func(t *testing.T, in []byte) {
		versions, err := ABIVersions(in)
		if err != nil && versions != nil {
			t.Fatalf("error %v came with versions %q", err, versions)
		}
		for _, v := range versions {
			if !strings.HasPrefix(v, abiExportPrefix) {
				t.Fatalf("returned non-ABI export %q", v)
			}
		}
	})
}
