// Command benchreport plots the distributed benchmark's time series:
// admitted requests per second against the configured limit, for each
// mode (strict, hybrid, envoyproxy/ratelimit), with the moment Redis was
// killed marked.
//
//	go run ./tools/benchreport -in build/bench-distributed-series.json -out build/bench-distributed.png
//
// The input is written by TestBenchDistributed (e2e/bench_distributed_test.go).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Series is the benchmark's JSON; field names match the harness's.
type Series struct {
	Limit         int          `json:"limit"`
	Offered       int          `json:"offered"`
	BucketMS      int          `json:"bucket_ms"`
	DurationS     float64      `json:"duration_s"`
	FailurePolicy string       `json:"failure_policy"`
	Modes         []ModeSeries `json:"modes"`
}

// ModeSeries is one mode's counts per bucket of BucketMS, from the start
// of its run.
type ModeSeries struct {
	Mode     string  `json:"mode"`
	KillS    float64 `json:"kill_s"` // 0: Redis was not killed
	Admitted []int   `json:"admitted"`
	Denied   []int   `json:"denied"`
	Errors   []int   `json:"errors"`
}

func main() {
	in := flag.String("in", "build/bench-distributed-series.json", "series JSON written by the benchmark")
	out := flag.String("out", "build/bench-distributed.png", "PNG to write")
	width := flag.Duration("bucket", 0, "width of the plotted rate buckets, a multiple of the series' bucket (0: 1s, or 500ms for runs under 10s)")
	flag.Parse()
	if err := run(*in, *out, *width); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func run(in, out string, width time.Duration) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	s, err := Parse(b)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if width == 0 {
		width = DefaultWidth(s)
	}
	return Render(s, width, out)
}

// DefaultWidth is 1 s, the unit of the limit, except for short (quick)
// runs where 1 s buckets would leave only a couple of points.
func DefaultWidth(s *Series) time.Duration {
	bucket := time.Duration(s.BucketMS) * time.Millisecond
	w := time.Second
	if s.DurationS < 10 {
		w = 500 * time.Millisecond
	}
	if w < bucket {
		return bucket
	}
	return w.Truncate(bucket)
}

// Parse decodes and checks a series file, so a truncated or hand-edited
// file gives an error instead of a misleading plot.
func Parse(b []byte) (*Series, error) {
	var s Series
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	if s.BucketMS <= 0 {
		return nil, fmt.Errorf("bucket_ms %d: want > 0", s.BucketMS)
	}
	if s.Limit <= 0 {
		return nil, fmt.Errorf("limit %d: want > 0", s.Limit)
	}
	if len(s.Modes) == 0 {
		return nil, errors.New("no modes")
	}
	for _, m := range s.Modes {
		if m.Mode == "" {
			return nil, errors.New("a mode has no name")
		}
		if math.IsNaN(m.KillS) || m.KillS < 0 {
			return nil, fmt.Errorf("%s: kill_s %v: want ≥ 0", m.Mode, m.KillS)
		}
		for _, c := range m.Admitted {
			if c < 0 {
				return nil, fmt.Errorf("%s: negative admitted count %d", m.Mode, c)
			}
		}
	}
	return &s, nil
}

// Rate turns counts per bucket of bucketMS into requests per second over
// buckets of width, one point per whole bucket at its midpoint (seconds).
// A trailing partial bucket is dropped: its rate would read low.
func Rate(counts []int, bucketMS int, width time.Duration) (plotter.XYs, error) {
	if bucketMS <= 0 {
		return nil, fmt.Errorf("bucket_ms %d: want > 0", bucketMS)
	}
	bucket := time.Duration(bucketMS) * time.Millisecond
	if width < bucket || width%bucket != 0 {
		return nil, fmt.Errorf("plot bucket %v is not a multiple of the series' %v", width, bucket)
	}
	per := int(width / bucket)
	var xys plotter.XYs
	for i := 0; i+per <= len(counts); i += per {
		sum := 0
		for _, c := range counts[i : i+per] {
			sum += c
		}
		mid := (float64(i) + float64(per)/2) * bucket.Seconds()
		xys = append(xys, plotter.XY{X: mid, Y: float64(sum) / width.Seconds()})
	}
	return xys, nil
}

// Render writes the plot to out (format from its extension: .png, .svg…).
func Render(s *Series, width time.Duration, out string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Admitted per second, one key, limit %d/s, offered %d/s", s.Limit, s.Offered)
	p.X.Label.Text = "seconds since the run started"
	p.Y.Label.Text = "admitted requests per second"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	ymax := float64(s.Limit)
	xmax := s.DurationS
	for i, m := range s.Modes {
		xys, err := Rate(m.Admitted, s.BucketMS, width)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Mode, err)
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Mode, err)
		}
		l.Color = modeColor(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(m.Mode, l)
		for _, xy := range xys {
			ymax = math.Max(ymax, xy.Y)
			xmax = math.Max(xmax, xy.X)
		}
	}
	// Headroom for the legend, which sits inside the plot area.
	ymax *= 1.4

	limit, err := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(s.Limit)}, {X: xmax, Y: float64(s.Limit)}})
	if err != nil {
		return err
	}
	limit.Color = color.Gray{Y: 80}
	limit.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(limit)
	p.Legend.Add(fmt.Sprintf("limit %d/s", s.Limit), limit)

	// One marker per mode: the runs are separate, so their kills differ
	// by a few milliseconds; a shared label keeps the legend short.
	labelled := false
	for i, m := range s.Modes {
		if m.KillS <= 0 {
			continue
		}
		k, err := plotter.NewLine(plotter.XYs{{X: m.KillS, Y: 0}, {X: m.KillS, Y: ymax}})
		if err != nil {
			return err
		}
		k.Color = modeColor(i)
		k.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(k)
		if !labelled {
			p.Legend.Add("Redis killed", k)
			labelled = true
		}
	}
	p.Y.Tick.Marker = wholeTicks{}
	p.Y.Min, p.Y.Max = 0, ymax
	p.X.Min, p.X.Max = 0, xmax
	return p.Save(8*vg.Inch, 4.5*vg.Inch, out)
}

// modeColor gives each mode a distinct colour, in the order of the file.
func modeColor(i int) color.Color {
	palette := []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	return palette[i%len(palette)]
}

// wholeTicks labels the rate axis in whole requests per second; the
// default labels carry two meaningless decimals.
type wholeTicks struct{}

func (wholeTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', 0, 64)
		}
	}
	return ts
}
