package limiter

import (
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// All decision benchmarks use the same schedule: one request of cost 1
// every 5ms against 100/s with burst 20, so half are admitted once the
// burst is gone, and time is passed in as x/time/rate's AllowN allows.
const benchStep = 5 * time.Millisecond

func benchDecide(b *testing.B, l Limit) {
	var st State
	now := t0
	allowed := 0
	b.ReportAllocs()
	for b.Loop() {
		now += int64(benchStep)
		var r Result
		st, r = l.Decide(st, now, 1)
		if r.Allowed {
			allowed++
		}
	}
	if allowed == 0 {
		b.Fatal("nothing admitted")
	}
}

func BenchmarkTokenBucket(b *testing.B) {
	benchDecide(b, Limit{Rate: 100, Period: time.Second, Burst: 20})
}

func BenchmarkFixedWindow(b *testing.B) {
	benchDecide(b, Limit{Algorithm: FixedWindow, Rate: 100, Period: time.Second})
}

// BenchmarkFixedWindowMonth is a calendar month with a fixed offset: its
// period bounds are computed on every decision, in integers.
func BenchmarkFixedWindowMonth(b *testing.B) {
	benchDecide(b, Limit{Algorithm: FixedWindow, Rate: 1 << 30, Period: CalendarMonth.Longest(), Calendar: CalendarMonth, Offset: 9 * 3600})
}

func BenchmarkSlidingWindow(b *testing.B) {
	benchDecide(b, Limit{Algorithm: SlidingWindow, Rate: 100, Period: time.Second})
}

// BenchmarkXTimeRate is the reference: golang.org/x/time/rate's AllowN on
// the same schedule. It includes that limiter's mutex, which Decide (a pure
// function) does not need.
func BenchmarkXTimeRate(b *testing.B) {
	lim := rate.NewLimiter(100, 120)
	now := time.Unix(0, t0)
	allowed := 0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(benchStep)
		if lim.AllowN(now, 1) {
			allowed++
		}
	}
	if allowed == 0 {
		b.Fatal("nothing admitted")
	}
}

func BenchmarkCodec(b *testing.B) {
	l := Limit{Algorithm: SlidingWindow, Rate: 100, Period: time.Second}
	st := State{At: t0 / int64(time.Second), N: 40, Prev: 90}
	buf := make([]byte, 0, MaxStateLen)
	b.ReportAllocs()
	for b.Loop() {
		buf = l.AppendState(buf[:0], st)
		if _, err := l.DecodeState(buf, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTableAllowN is the full path through the slot table on the
// in-memory store (two Gets, one Set; the store's copies allocate, as the
// host's shared-data calls do).
func BenchmarkTableAllowN(b *testing.B) {
	tab, err := NewTable(store.NewMemory(), Limit{Rate: 100, Period: time.Second, Burst: 20}, TableConfig{})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "198.51.100." + strconv.Itoa(i)
	}
	now := t0
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		now += int64(benchStep)
		if _, err := tab.AllowN(keys[i%len(keys)], now, 1); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkSlidingLog decides on a log kept near its limit: one request
// per 10.5ms of a 1s window holds 95 entries, every request admitted
// (the lifecycle benchmark's sliding-log case).
func BenchmarkSlidingLog(b *testing.B) {
	benchTableOneKey(b, Limit{Algorithm: SlidingLog, Rate: 100, Period: time.Second})
}

// BenchmarkSlidingWindowTable is the same traffic on the counter.
func BenchmarkSlidingWindowTable(b *testing.B) {
	benchTableOneKey(b, Limit{Algorithm: SlidingWindow, Rate: 100, Period: time.Second})
}

func benchTableOneKey(b *testing.B, l Limit) {
	tab, err := NewTable(store.NewMemory(), l, TableConfig{})
	if err != nil {
		b.Fatal(err)
	}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now += int64(10500 * time.Microsecond)
		if r, err := tab.AllowN("198.51.100.7", now, 1); err != nil || !r.Allowed {
			b.Fatal(r, err)
		}
	}
}
