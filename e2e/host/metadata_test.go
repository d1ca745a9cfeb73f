package host

import (
	"encoding/binary"
	"math"
	"testing"
)

func TestMetadataProperty(t *testing.T) {
	md := map[string]map[string]any{
		"envoy.filters.http.jwt_authn": {"jwt_payload": map[string]any{"sub": "alice", "n": 42.0, "admin": true, "obj": map[string]any{}}},
		"flat":                         {"a.b": "dotted field"},
	}
	num := make([]byte, 8)
	binary.LittleEndian.PutUint64(num, math.Float64bits(42))
	for _, tc := range []struct {
		segs []string
		want string
		ok   bool
	}{
		{[]string{"envoy.filters.http.jwt_authn", "jwt_payload", "sub"}, "alice", true},
		{[]string{"envoy.filters.http.jwt_authn", "jwt_payload", "n"}, string(num), true},
		{[]string{"envoy.filters.http.jwt_authn", "jwt_payload", "admin"}, "\x01", true},
		{[]string{"envoy.filters.http.jwt_authn", "jwt_payload", "obj"}, "", false},
		{[]string{"envoy.filters.http.jwt_authn", "jwt_payload"}, "", false},
		{[]string{"envoy.filters.http.jwt_authn", "jwt_payload", "sub", "x"}, "", false},
		{[]string{"envoy.filters.http.jwt_authn", "missing"}, "", false},
		{[]string{"flat", "a.b"}, "dotted field", true},
		{[]string{"flat", "a", "b"}, "", false},
		{[]string{"nope", "a"}, "", false},
		{[]string{"flat"}, "", false},
	} {
		got, ok := metadataProperty(md, tc.segs)
		if ok != tc.ok || string(got) != tc.want {
			t.Errorf("%q: got %q, %v; want %q, %v", tc.segs, got, ok, tc.want, tc.ok)
		}
	}
}
