package engine

import "testing"

// TestCraftedKeyValuesGetTheirOwnBucket: the tester's pair through the
// request path: three requests exhaust (k1\0y, z), and (k1, y\0z) still
// has a full bucket of its own.
func TestCraftedKeyValuesGetTheirOwnBucket(t *testing.T) {
	p, fk := newNativePlugin(t, `{"limits":[{"name":"qq","key":["query:a","query:b"],"limit":3,"window":"1h"}]}`)
	send := func(id uint32, path string) Verdict {
		s := begin(p, fk, id)
		fk.Stream.Headers = [][2]string{{":method", "GET"}, {":path", path}, {":authority", "a"}}
		return s.RequestHeaders()
	}
	for i := range 3 {
		if v := send(uint32(i+1), "/d?a=k1%00y&b=z"); v != Continue {
			t.Fatalf("request %d of (k1\\0y, z) refused", i+1)
		}
	}
	if v := send(4, "/d?a=k1%00y&b=z"); v == Continue {
		t.Fatal("a fourth request of (k1\\0y, z) admitted past burst 3")
	}
	for i := range 3 {
		if v := send(uint32(i+5), "/d?a=k1&b=y%00z"); v != Continue {
			t.Fatalf("request %d of (k1, y\\0z) refused: it shares the bucket of (k1\\0y, z)", i+1)
		}
	}
}
