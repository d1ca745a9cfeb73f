// Command benchfmt turns `go test -bench -count N` output into a markdown
// table: the median ns/op over the runs, the spread, allocations, and the
// ratio of each median to a baseline benchmark measured in the same run.
//
//	go test -run '^$' -bench . -benchmem -count 5 ./limiter/ ./breaker/ |
//		go run ./tools/benchfmt -baseline XTimeRate,XTimeRateAllowN
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

type series struct {
	pkg    string
	name   string
	ns     []float64
	allocs string
}

func main() {
	baseline := flag.String("baseline", "", "comma-separated benchmark names (without Benchmark prefix or -N suffix); in each package the first one present is 1.00×")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *baseline); err != nil {
		fmt.Fprintln(os.Stderr, "benchfmt:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, baseline string) error {
	var order []*series
	byKey := map[string]*series{}
	pkg := ""
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = rest
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || f[3] != "ns/op" {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		ns, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			return fmt.Errorf("%q: %v", line, err)
		}
		key := pkg + " " + name
		s := byKey[key]
		if s == nil {
			s = &series{pkg: pkg, name: name}
			byKey[key] = s
			order = append(order, s)
		}
		s.ns = append(s.ns, ns)
		for i := 4; i+1 < len(f); i++ {
			if f[i+1] == "allocs/op" {
				s.allocs = f[i]
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(order) == 0 {
		return fmt.Errorf("no benchmark results on input")
	}
	fmt.Fprintln(out, "| package | benchmark | ns/op (median) | spread | allocs/op | ratio to baseline |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|")
	for _, s := range order {
		ratio := "—"
		for _, name := range strings.Split(baseline, ",") {
			if b := byKey[s.pkg+" "+name]; b != nil {
				ratio = fmt.Sprintf("%.2f×", median(s.ns)/median(b.ns))
				break
			}
		}
		short := s.pkg[strings.LastIndexByte(s.pkg, '/')+1:]
		fmt.Fprintf(out, "| %s | %s | %.1f | %.1f–%.1f | %s | %s |\n", short, s.name, median(s.ns), slices.Min(s.ns), slices.Max(s.ns), s.allocs, ratio)
	}
	return nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
