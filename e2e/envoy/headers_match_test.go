package envoy

import "testing"

// TestHeadersMatch: presence, exact values of repeated headers joined by
// ",", and inversion, as Envoy's HeaderUtility::matchHeaders.
func TestHeadersMatch(t *testing.T) {
	hs := [][2]string{{":path", "/"}, {"x-a", "1"}, {"x-b", "2"}, {"x-a", "3"}}
	tests := []struct {
		m    HeaderMatch
		want bool
	}{
		{HeaderMatch{Name: "x-b", Present: true}, true},
		{HeaderMatch{Name: "x-c", Present: true}, false},
		{HeaderMatch{Name: "x-c", Present: false}, true},
		{HeaderMatch{Name: "x-b", Present: false}, false},
		{HeaderMatch{Name: "x-c", Present: true, Invert: true}, true},
		{HeaderMatch{Name: "x-b", Exact: "2", HasExact: true}, true},
		{HeaderMatch{Name: "x-a", Exact: "1,3", HasExact: true}, true},
		{HeaderMatch{Name: "x-a", Exact: "1", HasExact: true}, false},
		{HeaderMatch{Name: "x-a", Exact: "1", HasExact: true, Invert: true}, true},
		{HeaderMatch{Name: "x-c", Exact: "", HasExact: true}, false},
		{HeaderMatch{Name: "x-c", Exact: "", HasExact: true, Invert: true}, false},
	}
	for _, tt := range tests {
		if got := headersMatch([]HeaderMatch{tt.m}, hs); got != tt.want {
			t.Errorf("headersMatch(%+v) = %v, want %v", tt.m, got, tt.want)
		}
	}
	if !headersMatch(nil, hs) {
		t.Error("no matchers must match")
	}
}

func BenchmarkHeadersMatch(b *testing.B) {
	hs := [][2]string{{":authority", "example.com"}, {":path", "/api/v1"}, {":method", "GET"},
		{"user-agent", "bench"}, {"x-tenant", "acme"}, {"x-pick", "b"}, {"accept", "*/*"}}
	ms := []HeaderMatch{
		{Name: "x-tenant", Exact: "acme", HasExact: true},
		{Name: "x-pick", Present: true},
		{Name: "x-debug", Present: false},
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if !headersMatch(ms, hs) {
			b.Fatal("no match")
		}
	}
}
