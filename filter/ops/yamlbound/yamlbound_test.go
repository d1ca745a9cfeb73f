package yamlbound

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestStartsCountsLinesAndIndicators(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 1},
		{"a", 1},
		{"a: b\n", 3},
		{"[1,1,1]", 4},
		{"- *x\n", 4},
	} {
		if got := Starts([]byte(tc.in)); got != tc.want {
			t.Errorf("Starts(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// An alias counts as what it names, every time it is named, and the
// walk stops at the bound, naming the way there, instead of expanding
// everything.
func TestChargeCountsAliasesAsWhatTheyName(t *testing.T) {
	big := strings.Repeat("x", 1000)
	doc := "big: &s " + big + "\nrefs: [" + strings.Repeat("*s,", 99) + "*s]\n"
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatal(err)
	}
	left := 1 << 20
	if _, ok := Charge(&n, &left, 100); !ok || 1<<20-left < 101*1000 || 1<<20-left > 102*1000 {
		t.Fatalf("charged %d, %v; want about %d bytes", 1<<20-left, ok, 101*1000)
	}
	left = 50_000
	trail, ok := Charge(&n, &left, 100)
	if ok || len(trail) != 3 {
		t.Fatalf("under a 50,000-byte bound: %v, trail %d steps; want the bound passed three steps down", ok, len(trail))
	}
	// Innermost first: refs[48] (the 49th thousand bytes), under the
	// mapping's "refs", under the document.
	if seq := trail[0]; seq.Parent.Kind != yaml.SequenceNode || seq.Index != 48 {
		t.Errorf("innermost step: kind %v index %d, want the sequence's item 48", seq.Parent.Kind, seq.Index)
	}
	if m := trail[1]; m.Parent.Content[m.Index&^1].Value != "refs" {
		t.Errorf("middle step names %q, want refs", m.Parent.Content[m.Index&^1].Value)
	}
	left = 1 << 20
	if _, ok := Charge(&n, &left, 2); ok {
		t.Fatal("nesting deeper than 2 passed the depth bound")
	}
}
