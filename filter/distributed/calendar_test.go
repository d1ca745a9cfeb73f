package distributed

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/limiter"
)

// monthly is a calendar quota of 1000 a month in +09:00.
var monthly = limiter.Limit{Algorithm: limiter.FixedWindow, Rate: 1000, Period: limiter.CalendarMonth.Longest(),
	Calendar: limiter.CalendarMonth, Offset: 9 * 3600}

// windowLease has k's first lease call answered with the reply array
// body (as Redis's values) after lag, and returns how many units TryLease
// then serves at each instant of at (ns after the reply).
func windowLease(t *testing.T, r *rig, key string, reply string, lag time.Duration, at ...time.Duration) []int {
	t.Helper()
	k := r.lim.Key(key, monthly)
	start := r.f.Clock.Now.UnixNano()
	if out, _, _ := r.b.TryLease(&k, 1, start, true, r.f.Clock.Now); out != LeaseWait {
		t.Fatalf("first try: %v", out)
	}
	r.tick(0)
	call := r.pending(t)
	r.f.Clock.Advance(lag)
	call.Answer(200, []byte(`{"EVALSHA":`+reply+`}`), nil)
	served := make([]int, len(at))
	base := r.f.Clock.Now
	for i, d := range at {
		r.f.Clock.Now = base.Add(d)
		for served[i] < 100 {
			out, _, _ := r.b.TryLease(&k, 1, start, false, r.f.Clock.Now)
			if out != LeaseTaken {
				break
			}
			served[i]++
		}
	}
	return served
}

// TestWindowLeaseEndsWithItsWindow: a lease of a calendar quota is void
// once the window Redis leased it from ends, measured from when the call
// was sent (Redis decided after that), however late the reply came; and
// hostile replies never serve more than asked for, nor past the window.
func TestWindowLeaseEndsWithItsWindow(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply string
		lag   time.Duration
		at    []time.Duration
		want  []int
	}{
		// The first lease asks for the request's one unit.
		{"a window ending 300ms after the call, reply after 100ms, spent just before", `[1,999,0,300,0,1]`, 100 * time.Millisecond,
			[]time.Duration{198 * time.Millisecond}, []int{1}},
		{"a window ending 300ms after the call, reply after 100ms, spent at its end", `[1,999,0,300,0,1]`, 100 * time.Millisecond,
			[]time.Duration{199 * time.Millisecond}, []int{0}},
		{"a window ending after the lease's own second", `[1,999,0,86400000,0,1]`, 0,
			[]time.Duration{leaseTTL - 1, leaseTTL}, []int{1, 0}},
		{"a reply whose window has already ended", `[1,999,0,0,0,1]`, 0, []time.Duration{0}, []int{0}},
		{"a reply whose window ends before the reply came", `[1,999,0,50,0,1]`, 100 * time.Millisecond, []time.Duration{0}, []int{0}},
		{"more granted than asked", `[40,0,0,300,0,1]`, 0, []time.Duration{0}, []int{0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRigFrom(t, `{"limits":[{"name":"api","key":[],"algorithm":"fixed_window","limit":1000,"window":"month","window_offset":"+09:00","mode":"hybrid"}],
				"backend":{"cluster":"redis","timeout":"1s","retries":0}}`)
			got := windowLease(t, r, "k", c.reply, c.lag, c.at...)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("served %v at %v after the reply, want %v", got, c.at, c.want)
			}
		})
	}
}

// A window used up by the lease that took its last units is denied,
// without a call, until it ends (less the millisecond the reply may have
// rounded up), and its denial says so.
func TestUsedUpWindowIsDeniedUntilItEnds(t *testing.T) {
	r := newRigFrom(t, `{"limits":[{"name":"api","key":[],"algorithm":"fixed_window","limit":1000,"window":"month","window_offset":"+09:00","mode":"hybrid"}],
		"backend":{"cluster":"redis","timeout":"1s","retries":0}}`)
	if got := windowLease(t, r, "k", `[1,0,0,5000,0,1]`, 20*time.Millisecond, 0); got[0] != 1 {
		t.Fatalf("served %v", got)
	}
	k := r.lim.Key("k", monthly)
	out, res, _ := r.b.TryLease(&k, 1, r.f.Clock.Now.UnixNano(), true, r.f.Clock.Now)
	if out != LeaseDenied || res.RetryAfter != 5000*time.Millisecond-20*time.Millisecond-time.Millisecond || res.ResetAfter != res.RetryAfter || len(r.f.Caller.Pending()) != 0 {
		t.Fatalf("over the window: %v %+v, %d calls out", out, res, len(r.f.Caller.Pending()))
	}
}

// FuzzWindowLeaseReply: whatever a lease reply of a calendar quota says
// (any granted, remaining and times the parser accepts), and whenever it
// comes, no more units are served than were asked for, and none at or
// after the window's end as the reply gives it from the sending.
func FuzzWindowLeaseReply(f *testing.F) {
	f.Add(int64(1), int64(999), int64(0), int64(300), int64(100))
	f.Add(int64(1), int64(0), int64(0), int64(0), int64(0))
	f.Add(int64(7), int64(3), int64(5), int64(1<<40), int64(1))
	f.Fuzz(func(t *testing.T, granted, remaining, retryMs, resetMs, lagMs int64) {
		if granted < 0 || remaining < 0 || retryMs < 0 || resetMs < 0 || lagMs < 0 || retryMs > 1<<40 || resetMs > 1<<40 || lagMs >= 10_000 {
			return
		}
		reason := 0
		if granted == 0 {
			reason = 1
		}
		reply := fmt.Sprintf("[%d,%d,%d,%d,%d,1]", granted, remaining, retryMs, resetMs, reason)
		r := newRigFrom(t, `{"limits":[{"name":"api","key":[],"algorithm":"fixed_window","limit":1000,"window":"month","window_offset":"+09:00","mode":"hybrid"}],
			"backend":{"cluster":"redis","timeout":"10s","retries":0}}`)
		end := time.Duration(resetMs)*time.Millisecond - time.Duration(lagMs)*time.Millisecond
		at := []time.Duration{0, end - 1, end, end + leaseTTL}
		served := windowLease(t, r, "k", reply, time.Duration(lagMs)*time.Millisecond, at...)
		total := 0
		for i, n := range served {
			total += n
			if n > 0 && at[i] >= end {
				t.Fatalf("reply %s after %dms: %d served %v after the reply, at or past the window's end %v", reply, lagMs, n, at[i], end)
			}
		}
		if total > 1 {
			t.Fatalf("reply %s: %d served for a lease of 1", reply, total)
		}
	})
}

// TestWindowOfHostileClock: the period a reply reports is a calendar
// period whatever clock the reply claims, from the epoch to int64's end.
func TestWindowOfHostileClock(t *testing.T) {
	march := time.Date(2028, time.March, 1, 0, 0, 0, 0, time.FixedZone("+09:00", 9*3600)).UnixMicro()
	for _, us := range []int64{0, 1, march, 1<<53 - 1, math.MaxInt64 / 1000, math.MaxInt64} {
		got := windowOf(monthly, backend.Reply{ServerMicros: us})
		if got < 28*24*time.Hour || got > 31*24*time.Hour {
			t.Errorf("clock %dµs: period %v", us, got)
		}
	}
	if got := windowOf(monthly, backend.Reply{ServerMicros: march}); got != 31*24*time.Hour {
		t.Errorf("Mar 1 2028 00:00 +09:00: %v, want March's 31 days", got)
	}
	if got := windowOf(monthly, backend.Reply{ServerMicros: march - 1}); got != 29*24*time.Hour {
		t.Errorf("a µs earlier: %v, want a leap February's 29 days", got)
	}
}
