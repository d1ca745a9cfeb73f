package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRate(t *testing.T) {
	for _, c := range []struct {
		name     string
		counts   []int
		bucketMS int
		width    time.Duration
		want     [][2]float64 // {x, y}
		err      string
	}{
		{"1s from 100ms", []int{20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 5}, 100, time.Second, [][2]float64{{0.5, 200}}, ""},
		{"500ms", []int{10, 10, 10, 10, 10, 0, 0, 0, 0, 0}, 100, 500 * time.Millisecond, [][2]float64{{0.25, 100}, {0.75, 0}}, ""},
		{"same width", []int{3, 4}, 250, 250 * time.Millisecond, [][2]float64{{0.125, 12}, {0.375, 16}}, ""},
		{"partial only", []int{1, 2}, 100, time.Second, nil, ""},
		{"empty", nil, 100, time.Second, nil, ""},
		{"not a multiple", []int{1}, 300, time.Second, nil, "not a multiple"},
		{"narrower than the series", []int{1}, 100, 50 * time.Millisecond, nil, "not a multiple"},
		{"zero bucket", []int{1}, 0, time.Second, nil, "bucket_ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			xys, err := Rate(c.counts, c.bucketMS, c.width)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(xys) != len(c.want) {
				t.Fatalf("%d points %v, want %v", len(xys), xys, c.want)
			}
			for i, w := range c.want {
				if d := xys[i].X - w[0]; d > 1e-9 || d < -1e-9 || xys[i].Y != w[1] {
					t.Fatalf("point %d = (%v, %v), want (%v, %v)", i, xys[i].X, xys[i].Y, w[0], w[1])
				}
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for _, c := range []struct{ in, err string }{
		{`not json`, "invalid character"},
		{`{"limit":200,"bucket_ms":0,"modes":[{"mode":"a"}]}`, "bucket_ms"},
		{`{"limit":0,"bucket_ms":100,"modes":[{"mode":"a"}]}`, "limit"},
		{`{"limit":200,"bucket_ms":100,"modes":[]}`, "no modes"},
		{`{"limit":200,"bucket_ms":100,"modes":[{"mode":""}]}`, "no name"},
		{`{"limit":200,"bucket_ms":100,"modes":[{"mode":"a","kill_s":-1}]}`, "kill_s"},
		{`{"limit":200,"bucket_ms":100,"modes":[{"mode":"a","admitted":[1,-2]}]}`, "negative"},
		{`{"limit":200,"bucket_ms":100,"modes":[{"mode":"a","admitted":"x"}]}`, "cannot unmarshal"},
	} {
		if _, err := Parse([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("Parse(%s): err %v, want one containing %q", c.in, err, c.err)
		}
	}
}

func TestDefaultWidth(t *testing.T) {
	for _, c := range []struct {
		bucketMS int
		dur      float64
		want     time.Duration
	}{
		{100, 30, time.Second},
		{100, 3, 500 * time.Millisecond},
		{300, 30, 900 * time.Millisecond},
		{2000, 30, 2 * time.Second},
	} {
		if got := DefaultWidth(&Series{BucketMS: c.bucketMS, DurationS: c.dur}); got != c.want {
			t.Errorf("DefaultWidth(bucket %dms, %vs) = %v, want %v", c.bucketMS, c.dur, got, c.want)
		}
	}
}

// TestRunWritesPNG goes from a series file to a decodable PNG of the
// size Render asks for.
func TestRunWritesPNG(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "series.json")
	flat := func(n, v int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = v
		}
		return s
	}
	series := `{"limit":200,"offered":400,"bucket_ms":100,"duration_s":3,"failure_policy":"local","modes":[
		{"mode":"strict","kill_s":2,"admitted":` + ints(flat(30, 20)) + `},
		{"mode":"hybrid","kill_s":2.01,"admitted":` + ints(flat(30, 19)) + `},
		{"mode":"envoyproxy/ratelimit","kill_s":2.02,"admitted":` + ints(append(flat(20, 20), flat(10, 0)...)) + `}]}`
	if err := os.WriteFile(in, []byte(series), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "plot.png")
	if err := run(in, out, 0); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the plot is not a PNG: %v", err)
	}
	// 8 × 4.5 inches at gonum's default 96 dpi.
	if bnd := img.Bounds(); bnd.Dx() != 768 || bnd.Dy() != 432 {
		t.Fatalf("plot is %v, want 768×432", bnd)
	}
	if err := run(filepath.Join(dir, "missing.json"), out, 0); err == nil {
		t.Fatal("a missing input gave no error")
	}
}

func ints(s []int) string {
	b, _ := json.Marshal(s)
	return string(b)
}
