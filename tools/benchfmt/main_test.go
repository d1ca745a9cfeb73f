package main

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	in := `goos: linux
pkg: example.com/limiter
BenchmarkTokenBucket-2   	 1000	 30.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkTokenBucket-2   	 1000	 20.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkTokenBucket-2   	 1000	 25.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkXTimeRate-2     	 1000	 50.0 ns/op	 0 B/op	 0 allocs/op
PASS
`
	var out strings.Builder
	if err := run(strings.NewReader(in), &out, "XTimeRate"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| limiter | TokenBucket | 25.0 | 20.0–30.0 | 0 | 0.50× |") {
		t.Fatalf("table:\n%s", out.String())
	}
	if err := run(strings.NewReader("nothing"), &out, "X"); err == nil {
		t.Fatal("no results must be an error")
	}
}
