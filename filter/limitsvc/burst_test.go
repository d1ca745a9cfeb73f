package limitsvc

import (
	"math/big"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter"
)

// TestAnswerBurstIsCapacity: an answer's burst is the bucket's capacity
// (seed 003), where a static limit's burst is added to the rate.
func TestAnswerBurstIsCapacity(t *testing.T) {
	for _, c := range []struct {
		a    Answer
		want limiter.Limit
	}{
		{Answer{Rate: 100, Period: time.Second}, limiter.Limit{Rate: 100, Period: time.Second}},
		{Answer{Rate: 100, Period: time.Second, Burst: 100}, limiter.Limit{Rate: 100, Period: time.Second}},
		{Answer{Rate: 100, Period: time.Second, Burst: 150}, limiter.Limit{Rate: 100, Period: time.Second, Burst: 50}},
		{Answer{Rate: 100, Period: time.Second, Burst: 10}, limiter.Limit{Rate: 10, Period: 100 * time.Millisecond}},
		{Answer{Rate: 3, Period: time.Second, Burst: 2}, limiter.Limit{Rate: 2, Period: 666_666_667}},
		{Answer{Rate: MaxRate, Period: MinPeriod, Burst: 1}, limiter.Limit{Rate: 1, Period: limiter.MinPeriod}},
		{Answer{Rate: 5, Period: MaxPeriod, Burst: 4}, limiter.Limit{Rate: 4, Period: MaxPeriod / 5 * 4}},
	} {
		got := c.a.Limit()
		if got != c.want {
			t.Errorf("%+v: Limit() = %+v, want %+v", c.a, got, c.want)
			continue
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%+v: %v", c.a, err)
		}
		wantCap := c.a.Burst
		if wantCap == 0 {
			wantCap = c.a.Rate
		}
		if got.Capacity() != wantCap {
			t.Errorf("%+v: capacity %d, want the answer's burst", c.a, got.Capacity())
		}
		// Never a faster refill than the answer's rate: got.Rate/got.Period <= Rate/Period.
		lhs := new(big.Int).Mul(big.NewInt(got.Rate), big.NewInt(int64(c.a.Period)))
		rhs := new(big.Int).Mul(big.NewInt(c.a.Rate), big.NewInt(int64(got.Period)))
		if lhs.Cmp(rhs) > 0 {
			t.Errorf("%+v: %d per %v refills faster than the answer", c.a, got.Rate, got.Period)
		}
	}
}
