package distributed

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter"
)

func TestSlotRecordRoundTrip(t *testing.T) {
	r := slotRecord{fp: 1, tokens: 2, ready: 3, expires: 4, inflight: 5, lastCall: 6, nextCall: 7, demand: 8, want: 9,
		deniedUntil: 10, failedAt: 11, interval: 12, batch: 13, windowEnd: 14}
	got, ok := decodeSlot(r.encode())
	if !ok || got != r {
		t.Fatalf("round trip: %+v %v", got, ok)
	}
	for _, b := range [][]byte{nil, r.encode()[:slotRecordLen-1], append(r.encode(), 0)} {
		if _, ok := decodeSlot(b); ok {
			t.Fatalf("a %d-byte value decoded", len(b))
		}
	}
	neg := r
	neg.tokens = -1
	if _, ok := decodeSlot(neg.encode()); ok {
		t.Fatal("negative tokens decoded")
	}
}

// TestReservedTokensBecomeSpendableOnSchedule checks pendingTokens and
// spendableAt against the schedule of limiter.Lease: the last of n tokens
// at ready, each earlier one Period/Rate before the next, never sooner.
func TestReservedTokensBecomeSpendableOnSchedule(t *testing.T) {
	for _, l := range []limiter.Limit{
		{Rate: 200, Period: time.Second},
		{Rate: 3, Period: time.Second},
		{Rate: 7, Period: 100 * time.Millisecond},
		{Rate: limiter.MaxRate, Period: time.Microsecond},
	} {
		const n = 40
		ready := int64(time.Hour)
		r := slotRecord{tokens: n, ready: ready}
		tau := float64(l.Period) / float64(l.Rate)
		for _, back := range []int64{0, 1, int64(tau) / 2, int64(tau), int64(tau) + 1, int64(7 * tau), int64(n * tau), int64(time.Minute)} {
			ns := ready - back
			// Tokens k with ready − (n−k)·τ ≤ ns are spendable.
			want := int64(0)
			for k := int64(1); k <= n; k++ {
				if float64(ready)-float64(n-k)*tau <= float64(ns)+1e-6 {
					want++
				}
			}
			if got := r.tokens - pendingTokens(&r, l, ns); got > want {
				t.Fatalf("%+v at ready−%d: %d spendable, the schedule allows %d", l, back, got, want)
			} else if got < want-1 {
				t.Fatalf("%+v at ready−%d: only %d spendable, the schedule allows %d", l, back, got, want)
			}
		}
		for cost := int64(1); cost <= n; cost += 13 {
			at := spendableAt(&r, l, cost)
			if r.tokens-pendingTokens(&r, l, at) < cost {
				t.Fatalf("%+v: %d tokens not spendable at spendableAt", l, cost)
			}
			if at > 0 && at > ready-int64(float64(n-cost)*tau)+1 {
				t.Fatalf("%+v: spendableAt(%d) = ready−%d, later than the schedule", l, cost, ready-at)
			}
		}
		if got := pendingTokens(&r, l, ready); got != 0 {
			t.Fatalf("%+v: %d pending at ready", l, got)
		}
	}
	empty := slotRecord{ready: math.MaxInt64}
	if pendingTokens(&empty, limiter.Limit{Rate: 1, Period: time.Second}, 0) != 0 {
		t.Fatal("pending tokens without tokens")
	}
}

func TestSaturatedInterval(t *testing.T) {
	l := limiter.Limit{Rate: 200, Period: time.Second}
	// Three Envoys at twice the limit each see 133/s and get a third of
	// the refill: the batch is bounded by the lag budget, 2 × 133 × 0.15
	// / (1 − 133/200) ≈ 119 tokens, one call per 119 / 67 ≈ 1.78s.
	batch := saturatedBatch(l, 133, time.Second)
	if math.Abs(batch-119.1) > 0.5 {
		t.Fatalf("batch %.1f, want about 119", batch)
	}
	if got := saturatedInterval(l, time.Second, time.Second, 67, batch); got < 1750*time.Millisecond || got > 1800*time.Millisecond {
		t.Fatalf("interval %v, want about 1.8s", got)
	}
	// Alone at twice the limit there is no lag: one batchTime of refill.
	if b := saturatedBatch(l, 400, time.Second); b != 150 {
		t.Fatalf("batch alone %.1f, want 150", b)
	}
	// A grant of nothing doubles the wait; one estimate moves it at most
	// twofold; it stays within [leaseInterval, maxInterval].
	if got := saturatedInterval(l, 300*time.Millisecond, time.Second, 0, 100); got != 600*time.Millisecond {
		t.Fatalf("after an empty grant %v, want 600ms", got)
	}
	if got := saturatedInterval(l, 300*time.Millisecond, time.Second, 1, 100); got != 600*time.Millisecond {
		t.Fatalf("one tiny grant moved the interval to %v", got)
	}
	if got := saturatedInterval(l, 150*time.Millisecond, time.Second, 10000, 1); got != leaseInterval {
		t.Fatalf("a huge share gave %v, want the floor %v", got, leaseInterval)
	}
	if got := saturatedInterval(l, 1900*time.Millisecond, time.Second, 1, 100); got != maxSaturatedInterval {
		t.Fatalf("a tiny share gave %v, want the cap %v", got, maxSaturatedInterval)
	}
	// A small bucket caps the wait at its refill plus the reservation
	// ahead, so an Envoy left alone never lets Redis's refill overflow.
	small := limiter.Limit{Rate: 10, Period: 100 * time.Millisecond}
	if got := maxInterval(small); got != 100*time.Millisecond+leaseAhead {
		t.Fatalf("maxInterval %v", got)
	}
}
