package host

import (
	"context"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// MetricType is the proxy-wasm metric type.
type MetricType uint32

const (
	Counter   MetricType = 0
	Gauge     MetricType = 1
	Histogram MetricType = 2
)

func (t MetricType) String() string {
	switch t {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	case Histogram:
		return "histogram"
	}
	return "unknown"
}

// customNamespace is Envoy's namespace for wasm-defined stats; it is
// stripped from the names in both admin formats.
const customNamespace = "wasmcustom."

// Envoy's default histogram bucket bounds.
var defaultBuckets = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

type metric struct {
	name  string // full name, with the wasmcustom. namespace
	typ   MetricType
	value atomic.Uint64

	hmu     sync.Mutex
	buckets []uint64 // cumulative counts are computed on output
	sum     float64
	count   uint64
}

// Metric is one stat in a Snapshot.
type Metric struct {
	Name  string // as shown in /stats (namespace stripped)
	Type  MetricType
	Value uint64 // counter / gauge value (gauges are uint64 like Envoy's)
	// Histogram summary.
	Count   uint64
	Sum     float64
	Buckets []Bucket
}

// Bucket is a cumulative histogram bucket.
type Bucket struct {
	UpperBound float64
	Count      uint64
}

// Stats is the process-wide stats store: same-named metrics from any worker
// or plugin are one stat.
type Stats struct {
	mu sync.Mutex
	m  map[string]*metric
}

func newStats() *Stats { return &Stats{m: map[string]*metric{}} }

func (s *Stats) get(name string, t MetricType) *metric {
	key := name + "\x00" + t.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m[key]
	if m == nil {
		m = &metric{name: name, typ: t}
		if t == Histogram {
			m.buckets = make([]uint64, len(defaultBuckets))
		}
		s.m[key] = m
	}
	return m
}

func (m *metric) record(v uint64) {
	m.hmu.Lock()
	defer m.hmu.Unlock()
	f := float64(v)
	for i, b := range defaultBuckets {
		if f <= b {
			m.buckets[i]++
			break
		}
	}
	m.sum += f
	m.count++
}

// AddCounter adds delta to a host-side counter (listener, cluster, http
// stats of the Envoy stand-in). Such names carry no custom namespace, so
// Prometheus output prefixes them with "envoy_".
func (s *Stats) AddCounter(name string, delta uint64) { s.get(name, Counter).value.Add(delta) }

// SetGauge sets a host-side gauge.
func (s *Stats) SetGauge(name string, v uint64) { s.get(name, Gauge).value.Store(v) }

// Snapshot returns every stat sorted by name.
func (s *Stats) Snapshot() []Metric {
	s.mu.Lock()
	all := make([]*metric, 0, len(s.m))
	for _, m := range s.m {
		all = append(all, m)
	}
	s.mu.Unlock()
	out := make([]Metric, 0, len(all))
	for _, m := range all {
		x := Metric{Name: strings.TrimPrefix(m.name, customNamespace), Type: m.typ, Value: m.value.Load()}
		if m.typ == Histogram {
			m.hmu.Lock()
			x.Count, x.Sum = m.count, m.sum
			var cum uint64
			for i, b := range defaultBuckets {
				cum += m.buckets[i]
				x.Buckets = append(x.Buckets, Bucket{UpperBound: b, Count: cum})
			}
			m.hmu.Unlock()
		}
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Type < out[j].Type
	})
	return out
}

// Lookup returns the value of a counter or gauge by its /stats name.
func (s *Stats) Lookup(name string) (uint64, bool) {
	for _, m := range s.Snapshot() {
		if m.Name == name && m.Type != Histogram {
			return m.Value, true
		}
	}
	return 0, false
}

// WriteText writes Envoy's /stats format: "name: value", sorted.
func (s *Stats) WriteText(w io.Writer) {
	for _, m := range s.Snapshot() {
		if m.Type == Histogram {
			if m.Count == 0 {
				fmt.Fprintf(w, "%s: No recorded values\n", m.Name)
				continue
			}
			fmt.Fprintf(w, "%s: count=%d sum=%s\n", m.Name, m.Count, fmtFloat(m.Sum))
			continue
		}
		fmt.Fprintf(w, "%s: %d\n", m.Name, m.Value)
	}
}

// TagSpecifier is Envoy's stats_config.stats_tags entry.
type TagSpecifier struct {
	Name  string
	Regex string
	// FixedValue is stats_tags.fixed_value: the tag applies to every stat.
	FixedValue string
}

type compiledTag struct {
	name  string
	re    *regexp.Regexp
	fixed string
}

// ValidateTags checks tag specifiers the way Envoy does at load (a bad
// regex is a configuration error).
func ValidateTags(tags []TagSpecifier) error {
	_, err := compileTags(tags)
	return err
}

func compileTags(tags []TagSpecifier) ([]compiledTag, error) {
	out := make([]compiledTag, 0, len(tags))
	for _, t := range tags {
		if t.Name == "" {
			return nil, fmt.Errorf("stats_tags: tag_name is required")
		}
		if t.Regex == "" {
			out = append(out, compiledTag{name: t.Name, fixed: t.FixedValue})
			continue
		}
		re, err := regexp.Compile(t.Regex)
		if err != nil {
			return nil, fmt.Errorf("stats_tags %q: bad regex: %w", t.Name, err)
		}
		out = append(out, compiledTag{name: t.Name, re: re})
	}
	return out, nil
}

// extractTags applies Envoy's tag extraction: the first capture group is
// removed from the name; the tag value is the second group if present, else
// the first.
func extractTags(name string, tags []compiledTag) (string, [][2]string) {
	var out [][2]string
	for _, t := range tags {
		if t.re == nil {
			out = append(out, [2]string{t.name, t.fixed})
			continue
		}
		loc := t.re.FindStringSubmatchIndex(name)
		if loc == nil || len(loc) < 4 || loc[2] < 0 {
			continue
		}
		val := name[loc[2]:loc[3]]
		if len(loc) >= 6 && loc[4] >= 0 {
			val = name[loc[4]:loc[5]]
		}
		name = name[:loc[2]] + name[loc[3]:]
		out = append(out, [2]string{t.name, val})
	}
	return name, out
}

var promBad = regexp.MustCompile(`[^a-zA-Z0-9_]`)

func sanitize(name string) string {
	return promBad.ReplaceAllString(name, "_")
}

// promName is Envoy's Prometheus naming: custom-namespace stats (wasm) are
// exported without the "envoy_" prefix, everything else gets it. A custom
// name that cannot be a Prometheus name (empty, leading digit) is dropped,
// as Envoy drops it.
func promName(extracted string) (string, bool) {
	if rest, ok := strings.CutPrefix(extracted, customNamespace); ok {
		n := sanitize(rest)
		if n == "" || (n[0] >= '0' && n[0] <= '9') {
			return "", false
		}
		return n, true
	}
	return "envoy_" + sanitize(extracted), true
}

func fmtFloat(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

func labels(tags [][2]string, extra ...[2]string) string {
	all := append(append([][2]string(nil), tags...), extra...)
	if len(all) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, t := range all {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(sanitize(t[0]))
		b.WriteString(`="`)
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(t[1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// WritePrometheus writes Envoy's /stats/prometheus format. Bad tag regexes
// are reported as a comment line and skipped; validate them with
// ValidateTags when loading configuration.
func (s *Stats) WritePrometheus(w io.Writer, tags []TagSpecifier) {
	ct, err := compileTags(tags)
	if err != nil {
		fmt.Fprintf(w, "# %v\n", err)
		ct = nil
	}
	s.mu.Lock()
	all := make([]*metric, 0, len(s.m))
	for _, m := range s.m {
		all = append(all, m)
	}
	s.mu.Unlock()
	type series struct {
		labels string
		m      *metric
	}
	families := map[string][]series{}
	famType := map[string]MetricType{}
	for _, m := range all {
		extracted, tv := extractTags(m.name, ct)
		name, ok := promName(extracted)
		if !ok {
			continue
		}
		families[name] = append(families[name], series{labels(tv), m})
		famType[name] = m.typ
	}
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ss := families[n]
		sort.Slice(ss, func(i, j int) bool { return ss[i].labels < ss[j].labels })
		fmt.Fprintf(w, "# TYPE %s %s\n", n, famType[n])
		for _, x := range ss {
			if x.m.typ != Histogram {
				fmt.Fprintf(w, "%s%s %d\n", n, x.labels, x.m.value.Load())
				continue
			}
			x.m.hmu.Lock()
			tags, _ := extractTagsPairs(x.m.name, ct)
			var cum uint64
			for i, b := range defaultBuckets {
				cum += x.m.buckets[i]
				fmt.Fprintf(w, "%s_bucket%s %d\n", n, labels(tags, [2]string{"le", fmtFloat(b)}), cum)
			}
			fmt.Fprintf(w, "%s_bucket%s %d\n", n, labels(tags, [2]string{"le", "+Inf"}), x.m.count)
			fmt.Fprintf(w, "%s_sum%s %s\n", n, x.labels, fmtFloat(x.m.sum))
			fmt.Fprintf(w, "%s_count%s %d\n", n, x.labels, x.m.count)
			x.m.hmu.Unlock()
		}
	}
}

func extractTagsPairs(name string, ct []compiledTag) ([][2]string, string) {
	n, t := extractTags(name, ct)
	return t, n
}

// ---- hostcalls ----

// Metric ids carry the type in the low 2 bits, as Envoy's do.
func hDefineMetric(v *vm, _ context.Context, s []uint64) {
	a := v.args(s)
	t := MetricType(uint32(s[0]))
	a.check(t <= Histogram, StatusBadArgument)
	name := a.string(1)
	if a.failed() {
		return
	}
	m := v.p.rt.stats.get(customNamespace+name, t)
	v.nextMID++
	id := v.nextMID<<2 | uint32(t)
	v.metrics[id] = m
	wrote(s, v.mem.WriteUint32Le(uint32(s[3]), id))
}

// metricOrNotFound is the metric of id s[0], or nil after answering
// NotFound.
func (v *vm) metricOrNotFound(s []uint64) *metric {
	m := v.metrics[uint32(s[0])]
	if m == nil {
		ok(s, StatusNotFound)
	}
	return m
}

func hIncrementMetric(v *vm, _ context.Context, s []uint64) {
	m := v.metricOrNotFound(s)
	if m == nil {
		return
	}
	delta := int64(s[1])
	switch m.typ {
	case Counter:
		if delta <= 0 {
			ok(s, StatusBadArgument)
			return
		}
		m.value.Add(uint64(delta))
	case Gauge:
		m.value.Add(uint64(delta)) // two's complement: negative subtracts
	default:
		ok(s, StatusBadArgument)
		return
	}
	ok(s, StatusOK)
}

func hRecordMetric(v *vm, _ context.Context, s []uint64) {
	m := v.metricOrNotFound(s)
	if m == nil {
		return
	}
	val := s[1]
	switch m.typ {
	case Counter:
		m.value.Add(val)
	case Gauge:
		m.value.Store(val)
	case Histogram:
		m.record(val)
	}
	ok(s, StatusOK)
}

func hGetMetric(v *vm, _ context.Context, s []uint64) {
	m := v.metricOrNotFound(s)
	if m == nil {
		return
	}
	if m.typ == Histogram {
		ok(s, StatusBadArgument)
		return
	}
	wrote(s, v.mem.WriteUint64Le(uint32(s[1]), m.value.Load()))
}
