package engine

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
)

func TestParseCost(t *testing.T) {
	check := func(in string, lo, hi, want int64, wantFault costFault) {
		t.Helper()
		if got, fault := parseCost(in, lo, hi); got != want || fault != wantFault {
			t.Errorf("parseCost(%q, %d, %d) = %d, %v; want %d, %v", in, lo, hi, got, fault, want, wantFault)
		}
	}
	// Accepted, repeats included when they agree.
	for _, c := range []struct {
		in           string
		lo, hi, want int64
	}{
		{"1", 1, 10, 1}, {"10", 1, 10, 10}, {"007", 1, 10, 7}, {" \t4\t ", 1, 10, 4}, {"3,3", 1, 10, 3}, {"3, 3 ,3", 1, 10, 3},
		{"0", 0, math.MaxInt64, 0}, {"9223372036854775807", 0, math.MaxInt64, math.MaxInt64},
	} {
		check(c.in, c.lo, c.hi, c.want, costOK)
	}
	// Refused for a cost in [1, 10].
	for fault, ins := range map[costFault][]string{
		costTooSmall:  {"0", "-3", "-0", "-99999999999999999999"},
		costTooLarge:  {"11", "99999999999999999999", "2,11"},
		costNotNumber: {"abc", "1.5", "+3", "0x10", "1e3", "-", "--3", "٣" /* a digit, but not an ASCII one */, "3 3", "3,", ",3", "2,,2"},
		costConflict:  {"2,3", "2,2,3"},
	} {
		for _, in := range ins {
			check(in, 1, 10, 0, fault)
		}
	}
	check("9223372036854775808", 0, math.MaxInt64, 0, costTooLarge)
}

// A request's cost is parsed on the hot path.
func TestParseCostDoesNotAllocate(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { parseCost(" 42 , 42", 1, 1000) }); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

func FuzzParseCost(f *testing.F) {
	for _, s := range []string{"1", "3,3", "-5", "99999999999999999999", " 7 ", "2,,2", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, fault := parseCost(s, 1, 1000)
		if fault == costOK && (n < 1 || n > 1000) {
			t.Fatalf("parseCost(%q) accepted %d outside [1, 1000]", s, n)
		}
		if fault != costOK && n != 0 {
			t.Fatalf("parseCost(%q) refused with %v but returned %d", s, fault, n)
		}
	})
}

func TestInvalidCostBody(t *testing.T) {
	ch := &config.CostHeader{Header: "x-cost", Default: 1, Max: 1000}
	ct, body := invalidCostBody(config.BodyJSON, "llm", ch)
	var got map[string]any
	if ct != contentTypeJSON || json.Unmarshal(body, &got) != nil {
		t.Fatalf("json: %s %s", ct, body)
	}
	if want := `{"error":"invalid_cost","message":"x-cost must be a whole number from 1 to 1000, sent once","limit":"llm"}`; string(body) != want {
		t.Fatalf("json body %s, want %s", body, want)
	}
	ct, body = invalidCostBody(config.BodyProblemJSON, "llm", ch)
	got = nil
	if ct != contentTypeProblemJSON || json.Unmarshal(body, &got) != nil {
		t.Fatalf("problem+json: %s %s", ct, body)
	}
	if got["status"] != 400.0 || got["title"] != "Invalid request cost" || got["limit"] != "llm" ||
		got["detail"] != "x-cost must be a whole number from 1 to 1000, sent once" {
		t.Fatalf("problem+json body %v", got)
	}
	if ct, body = invalidCostBody(config.BodyNone, "llm", ch); ct != "" || body != nil {
		t.Fatalf("none: %q %q", ct, body)
	}
}
