package host

import (
	"strings"
	"testing"
)

func TestPrometheusNamingAndTags(t *testing.T) {
	s := newStats()
	s.get("wasmcustom.sluice.limit=per_ip.allowed", Counter).value.Add(3)
	s.get("wasmcustom.sluice.limit=per_ip.denied", Counter).value.Add(1)
	s.get("wasmcustom.sluice.limit=tenant.allowed", Counter).value.Add(7)
	s.get("wasmcustom.sluice.inflight", Gauge).value.Store(2)
	s.AddCounter("http.ingress_http.downstream_rq_total", 11)
	s.get("wasmcustom.9lives", Counter).value.Add(1)
	tags := []TagSpecifier{{Name: "limit", Regex: `^wasmcustom\.sluice\.(limit=([^.]+)\.)`}}
	var prom strings.Builder
	s.WritePrometheus(&prom, tags)
	for _, want := range []string{
		"# TYPE sluice_allowed counter\nsluice_allowed{limit=\"per_ip\"} 3\nsluice_allowed{limit=\"tenant\"} 7\n",
		"sluice_denied{limit=\"per_ip\"} 1\n",
		"# TYPE sluice_inflight gauge\nsluice_inflight 2\n",
		"envoy_http_ingress_http_downstream_rq_total 11\n",
	} {
		if !strings.Contains(prom.String(), want) {
			t.Errorf("missing %q in:\n%s", want, prom.String())
		}
	}
	if strings.Contains(prom.String(), "9lives") {
		t.Errorf("a custom stat with a leading digit must be dropped like Envoy does:\n%s", prom.String())
	}
	var text strings.Builder
	s.WriteText(&text)
	want := "9lives: 1\nhttp.ingress_http.downstream_rq_total: 11\nsluice.inflight: 2\nsluice.limit=per_ip.allowed: 3\n"
	if !strings.HasPrefix(text.String(), want) {
		t.Errorf("/stats:\n%s\nwant prefix\n%s", text.String(), want)
	}
	// A single capture group is both removed and the value.
	name, tv := extractTags("cluster.backend.upstream_rq", mustTags(t, TagSpecifier{Name: "cluster", Regex: `^cluster\.((.+?)\.)`}))
	if name != "cluster.upstream_rq" || len(tv) != 1 || tv[0][1] != "backend" {
		t.Errorf("two groups: %q %v", name, tv)
	}
	name, tv = extractTags("a.b.c", mustTags(t, TagSpecifier{Name: "x", Regex: `\.(b)`}))
	if name != "a..c" || tv[0][1] != "b" {
		t.Errorf("one group: %q %v", name, tv)
	}
	if err := ValidateTags([]TagSpecifier{{Name: "bad", Regex: "("}}); err == nil {
		t.Error("bad regex accepted")
	}
}

func mustTags(t *testing.T, ts ...TagSpecifier) []compiledTag {
	c, err := compileTags(ts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDecodePairsNeverPanics(t *testing.T) {
	good := EncodePairs([][2]string{{"a", "1"}, {"bb", ""}})
	if got, ok := DecodePairs(good); !ok || len(got) != 2 || got[1][0] != "bb" {
		t.Fatalf("round trip: %v %v", got, ok)
	}
	for i := 0; i < len(good); i++ {
		if _, ok := DecodePairs(good[:i]); ok && i > 0 {
			t.Errorf("truncated to %d bytes accepted", i)
		}
	}
	huge := []byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3}
	if _, ok := DecodePairs(huge); ok {
		t.Error("absurd count accepted")
	}
}

func FuzzDecodePairs(f *testing.F) {
	f.Add(EncodePairs([][2]string{{"k", "v"}}))
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		pairs, ok := DecodePairs(b)
		if ok && len(b) > 0 {
			if again, ok2 := DecodePairs(EncodePairs(pairs)); !ok2 || len(again) != len(pairs) {
				t.Fatalf("re-encoding failed")
			}
		}
	})
}
