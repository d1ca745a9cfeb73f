package main

import (
	"strings"
	"testing"
)

const doc = "# Report\n\nintro\n<!-- soak:begin -->\nold row\n<!-- soak:end -->\n\n## Next\n"

func TestGetSet(t *testing.T) {
	got, err := Get([]byte(doc), "soak")
	if err != nil || string(got) != "old row\n" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	out, err := Set([]byte(doc), "soak", []byte("| a |\n| b |"))
	if err != nil {
		t.Fatal(err)
	}
	want := "# Report\n\nintro\n<!-- soak:begin -->\n| a |\n| b |\n<!-- soak:end -->\n\n## Next\n"
	if string(out) != want {
		t.Fatalf("Set =\n%s\nwant\n%s", out, want)
	}
	// Round trip: what Set wrote is what Get reads.
	if got, _ := Get(out, "soak"); string(got) != "| a |\n| b |\n" {
		t.Fatalf("Get after Set = %q", got)
	}
	empty, err := Set([]byte(doc), "soak", nil)
	if err != nil || !strings.Contains(string(empty), "<!-- soak:begin -->\n<!-- soak:end -->\n") {
		t.Fatalf("emptying: %q, %v", empty, err)
	}
}

func TestBadDocuments(t *testing.T) {
	for name, d := range map[string]string{
		"no block":         "# Report\n",
		"no end":           "<!-- soak:begin -->\nrow\n",
		"end before begin": "<!-- soak:end -->\n<!-- soak:begin -->\n",
		"marker mid-line":  "text <!-- soak:begin -->\nrow\n<!-- soak:end -->\n",
		"block twice":      doc + doc,
		"other block only": "<!-- faults:begin -->\n<!-- faults:end -->\n",
	} {
		if _, err := Get([]byte(d), "soak"); err == nil {
			t.Errorf("%s: Get accepted it", name)
		}
		if _, err := Set([]byte(d), "soak", []byte("x\n")); err == nil {
			t.Errorf("%s: Set accepted it", name)
		}
	}
}
