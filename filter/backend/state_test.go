package backend_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/limiter"
)

// TestPeekAndReset drives each algorithm against real Redis through both
// protocols: a peek reports what the local limiter's Peek reports for the
// same consumption and changes nothing, a reset gives the key its full
// allowance back, and a lease reserved beyond the empty bucket shows as
// Reserved.
func TestPeekAndReset(t *testing.T) {
	fx := newFixture(t)
	limits := []limiter.Limit{
		{Algorithm: limiter.TokenBucket, Rate: 10, Period: time.Second, Burst: 5},
		{Algorithm: limiter.FixedWindow, Rate: 6, Period: time.Minute},
		{Algorithm: limiter.SlidingWindow, Rate: 6, Period: time.Minute},
	}
	now := time.Unix(1_700_000_000, 0)
	for _, rm := range fx.remotes {
		for _, l := range limits {
			t.Run(fmt.Sprintf("%s/%v", rm.name, l.Algorithm), func(t *testing.T) {
				key := "peek:" + rm.name + ":" + l.Algorithm.String()
				holdKey(t, fx.rdb, key)
				var st limiter.State
				for range 4 {
					cmd, _ := backend.Decide(l, key, 1)
					if r, err := rm.call(t, cmd.WithTime(now)); err != nil || !r.Allowed() {
						t.Fatalf("spending: %+v %v", r, err)
					}
					st, _ = l.Decide(st, now.UnixNano(), 1)
				}
				_, want := l.Decide(st, now.UnixNano(), 0)
				peek, _ := backend.Peek(l, key)
				for range 2 { // a peek must not consume
					got, err := rm.call(t, peek.WithTime(now))
					if err != nil || !same(got, want) {
						t.Fatalf("peek: %+v %v, want %+v", got, err, want)
					}
				}
				reset, _ := backend.Reset(l, key)
				got, err := rm.call(t, reset.WithTime(now))
				if err != nil || got.Remaining != l.Capacity() || got.ResetAfter != 0 || got.Allowed() {
					t.Fatalf("reset: %+v %v", got, err)
				}
				got, err = rm.call(t, peek.WithTime(now))
				if err != nil || got.Remaining != l.Capacity() || got.ResetAfter != 0 {
					t.Fatalf("peek after reset: %+v %v, want the full %d", got, err, l.Capacity())
				}
			})
		}
		t.Run(rm.name+"/reserved", func(t *testing.T) {
			l := limits[0]
			key := "reserved:" + rm.name
			holdKey(t, fx.rdb, key)
			// 15 capacity and up to 1s (10 tokens) ahead: 20 granted, 5
			// of them reserved beyond the empty bucket.
			lease, _ := backend.Lease(l, key, 20, time.Second)
			if r, err := rm.call(t, lease.WithTime(now)); err != nil || r.Granted != 20 {
				t.Fatalf("lease: %+v %v", r, err)
			}
			peek, _ := backend.Peek(l, key)
			got, err := rm.call(t, peek.WithTime(now))
			if err != nil {
				t.Fatal(err)
			}
			if n := backend.Reserved(l, got); got.Remaining != 0 || n != 5 {
				t.Fatalf("after the lease: remaining %d reserved %d, want 0 and 5 (%+v)", got.Remaining, n, got)
			}
		})
	}
}
