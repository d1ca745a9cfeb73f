package request

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
)

func double(f float64) string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], math.Float64bits(f))
	return string(b[:])
}

func TestAppendMetadata(t *testing.T) {
	for _, tc := range []struct {
		name, raw, want string
		ok              bool
	}{
		{"string", "alice", "alice", true},
		{"eight-byte text is a string", "user-123", "user-123", true},
		{"utf-8 string", "zoë", "zoë", true},
		{"integer", double(42), "42", true},
		{"negative integer", double(-7), "-7", true},
		{"zero", double(0), "0", true},
		{"fraction", double(0.5), "0.5", true},
		{"large", double(1e300), "1e+300", true},
		{"beyond 2^53", double(1 << 60), "1.152921504606847e+18", true},
		// A number a client may control never makes its request unlimited.
		{"NaN", double(math.NaN()), "NaN", true},
		{"another NaN", "\x01\x00\x00\x00\x00\x00\xf8\xff", "NaN", true},
		{"infinity", double(math.Inf(1)), "+Inf", true},
		{"minus infinity", double(math.Inf(-1)), "-Inf", true},
		// Strings are used as they are, UTF-8 or not.
		{"latin-1 string", "zo\xeb", "zo\xeb", true},
		{"invalid utf-8", "\xff\xfe-alice!", "\xff\xfe-alice!", true},
		{"tab inside", "a\tb", "a\tb", true},
		{"absent", "", "", false},
		{"bool", "\x01", "", false},
		{"struct bytes", "\x0a\x03sub\x12\x02\x1a\x00", "", false},
		{"NUL inside text", "a\x00b", "", false},
	} {
		got, ok := appendMetadata([]byte("p:"), tc.raw)
		if ok != tc.ok || (ok && string(got) != "p:"+tc.want) || (!ok && string(got) != "p:") {
			t.Errorf("%s: appendMetadata(%q) = %q, %v; want %q, %v", tc.name, tc.raw, got, ok, tc.want, tc.ok)
		}
	}
}

func TestMetadataKeyAndMatch(t *testing.T) {
	host := &fakeHost{props: map[string]string{
		"metadata.filter_metadata.envoy.filters.http.jwt_authn.jwt_payload.sub": "alice",
		"metadata.filter_metadata.ns.n":                                         double(3),
	}}
	r := &Info{src: host}
	parts := []config.KeyPart{
		{Kind: config.KeyMetadata, Name: "envoy.filters.http.jwt_authn", MetaPath: "jwt_payload.sub",
			Property: config.MetadataProperty("envoy.filters.http.jwt_authn", "jwt_payload.sub")},
		{Kind: config.KeyMetadata, Name: "ns", MetaPath: "n", Property: config.MetadataProperty("ns", "n")},
	}
	key, _, ok := r.AppendKey(nil, parts, &config.ClientIP{}, -1)
	if !ok || string(key) != "alice\x003" {
		t.Fatalf("key %q, %v", key, ok)
	}
	missing := []config.KeyPart{{Kind: config.KeyMetadata, Name: "ns", MetaPath: "x", Property: config.MetadataProperty("ns", "x")}}
	if key, _, ok := r.AppendKey([]byte("k"), missing, &config.ClientIP{}, -1); ok || string(key) != "k" {
		t.Fatalf("absent metadata gave key %q, %v", key, ok)
	}
	if v, ok := r.Metadata(config.MetadataProperty("ns", "n")); !ok || v != "3" {
		t.Fatalf("Metadata = %q, %v", v, ok)
	}
	// The fake host joins paths, which allocates; the count is of the
	// engine's own allocations through a host that does not.
	r = &Info{src: lastSegmentHost{fakeHost: host}}
	if allocs := testing.AllocsPerRun(100, func() {
		var buf [64]byte
		if _, _, ok := r.AppendKey(buf[:0], parts, &config.ClientIP{}, -1); !ok {
			t.Fatal("no key")
		}
	}); allocs != 0 {
		t.Fatalf("a metadata key allocates %v times", allocs)
	}
}

// lastSegmentHost serves a property by its last segment without
// allocating.
type lastSegmentHost struct{ *fakeHost }

func (h lastSegmentHost) Property(path []string) string {
	switch path[len(path)-1] {
	case "sub":
		return "alice"
	case "n":
		return "\x00\x00\x00\x00\x00\x00\x08@"
	}
	return ""
}
