package engine

import "testing"

// TestAmbiguousKeyIsRefusedUnderSkip: on_missing_key skip does not let
// an ambiguous key through unlimited.
func TestAmbiguousKeyIsRefusedUnderSkip(t *testing.T) {
	p, fk := newNativePlugin(t, `{"limits":[{"name":"l","key":["query:api_key"],"requests_per_second":1,"burst":0}]}`)
	for i := range 3 {
		s := begin(p, fk, uint32(i+1))
		fk.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/?api_key=alice&api_key=junk" + string(rune('0'+i))}, {":authority", "a"}}
		if v := s.RequestHeaders(); v == Continue {
			t.Fatalf("request %d with two api keys admitted", i)
		}
	}
}
