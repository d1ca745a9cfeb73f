package breaker

import (
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-proxy/sluice/limiter/store"
)

var benchSettings = map[string]Settings{
	"consecutive": DefaultSettings(),
	"count100":    {FailureThreshold: 5, FailureRatePercent: 50, SlowCallDuration: sec, Window: Window{Size: 100}},
	"count1024":   {FailureThreshold: 5, FailureRatePercent: 50, SlowCallDuration: sec, Window: Window{Size: 1024}},
	"time":        {FailureThreshold: 5, FailureRatePercent: 50, SlowCallDuration: sec, Window: Window{Type: WindowTime, Duration: 10 * sec}},
}

var benchOrder = []string{"consecutive", "count100", "count1024", "time"}

// checkReport is one request's worth of decisions on a closed breaker: a
// check, then a report that never trips (every eighth call fails).
func checkReport(m *Machine, r *Record, i int, now time.Time) {
	tk, _, _ := m.Check(r, now)
	m.Report(r, tk, Outcome{Failure: i%8 == 0, Duration: time.Millisecond}, now)
}

// resetMachine is a machine with the settings of a benchmark case and a
// record it has reset.
func resetMachine(tb testing.TB, s Settings) (*Machine, *Record) {
	tb.Helper()
	m := mustMachine(tb, s)
	r := new(Record)
	m.Reset(r)
	return m, r
}

// probingMachine is a machine opened by one failure at t0 and the first
// instant after its open timeout, when checks are half-open probes.
func probingMachine(tb testing.TB) (*Machine, *Record, time.Time) {
	tb.Helper()
	m, r := resetMachine(tb, Settings{FailureThreshold: 1, SuccessThreshold: MaxCounter, OpenTimeout: sec})
	tk, _, _ := m.Check(r, t0)
	m.Report(r, tk, fail, t0)
	return m, r, t0.Add(2 * sec)
}

func TestDecisionsDoNotAllocate(t *testing.T) {
	for _, name := range benchOrder {
		m, r := resetMachine(t, benchSettings[name])
		buf := make([]byte, 0, MaxEncodedLen)
		i := 0
		now := t0
		allocs := testing.AllocsPerRun(1000, func() {
			i++
			now = now.Add(time.Millisecond)
			checkReport(m, r, i, now)
			enc := r.Encode(buf[:0])
			if err := r.Decode(enc); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per check+report+encode+decode", name, allocs)
		}
	}
	m, r, now := probingMachine(t)
	allocs := testing.AllocsPerRun(1000, func() {
		tk, d, _ := m.Check(r, now)
		if !tk.Probe() {
			t.Fatalf("not a probe: %+v", d)
		}
		m.Report(r, tk, ok, now)
	})
	if allocs != 0 {
		t.Errorf("half-open probe: %v allocations", allocs)
	}
}

func BenchmarkMachineCheckReport(b *testing.B) {
	for _, name := range benchOrder {
		b.Run(name, func(b *testing.B) {
			m, r := resetMachine(b, benchSettings[name])
			now := t0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				now = now.Add(time.Microsecond)
				checkReport(m, r, i, now)
			}
		})
	}
}

func BenchmarkMachineHalfOpenProbe(b *testing.B) {
	m, r, now := probingMachine(b)
	m.Check(r, now) // half-open
	tk, _, _ := m.Check(r, now)
	m.Report(r, tk, ok, now)
	halfOpen := *r
	b.ReportAllocs()
	for i := 1; b.Loop(); i++ {
		// Restart before SuccessThreshold successes would close it.
		if i%(1<<19) == 0 {
			*r = halfOpen
		}
		tk, _, _ := m.Check(r, now)
		m.Report(r, tk, ok, now)
	}
	if r.State() != HalfOpen {
		b.Fatalf("benchmark left half-open: %v", r.State())
	}
}

// BenchmarkCodec is the per-access cost that shared data adds: one decode
// of what Get returned and one encode for Set.
func BenchmarkCodec(b *testing.B) {
	for _, name := range benchOrder {
		b.Run(name, func(b *testing.B) {
			m, r := resetMachine(b, benchSettings[name])
			for i := 0; i < 2000; i++ {
				checkReport(m, r, i, t0.Add(time.Duration(i)*time.Millisecond))
			}
			buf := r.Encode(make([]byte, 0, MaxEncodedLen))
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if err := r.Decode(buf); err != nil {
					b.Fatal(err)
				}
				buf = r.Encode(buf[:0])
			}
		})
	}
}

// BenchmarkBreakerCheckReport is the full store-backed path: Get, decode,
// decide, (for the report) encode and Set, on store.Memory. Its allocations
// are Memory's copies of the value, as the host's would be.
func BenchmarkBreakerCheckReport(b *testing.B) {
	for _, name := range benchOrder {
		b.Run(name, func(b *testing.B) {
			bk := NewBreaker(mustMachine(b, benchSettings[name]), store.NewMemory(), "cb:backend")
			if err := bk.Init(); err != nil {
				b.Fatal(err)
			}
			now := t0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				now = now.Add(time.Microsecond)
				tk, _, _ := bk.Check(now)
				bk.Report(tk, Outcome{Failure: i%8 == 0, Duration: time.Millisecond}, now)
			}
		})
	}
}

// BenchmarkXTimeRateAllowN is the yardstick the issue asks for: one
// golang.org/x/time/rate decision, measured in the same run.
func BenchmarkXTimeRateAllowN(b *testing.B) {
	lim := rate.NewLimiter(rate.Limit(1e9), 1<<30)
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		lim.AllowN(now, 1)
	}
}
