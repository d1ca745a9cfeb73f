package backend_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/limiter"
)

// calendarLimit is a fixed window of limit per calendar period cal in the
// UTC offset off (seconds east).
func calendarLimit(limit int64, cal limiter.Calendar, off int32) limiter.Limit {
	return limiter.Limit{Algorithm: limiter.FixedWindow, Rate: limit, Period: cal.Longest(), Calendar: cal, Offset: off}
}

// calendarSchedule is the config a key is decided under, changed every
// few steps of TestCalendarScriptsMatchLimiter: periods, offsets and rates
// in turn, and a duration window either way.
var calendarSchedule = []limiter.Limit{
	calendarLimit(6, limiter.CalendarMonth, 9*3600),
	calendarLimit(4, limiter.CalendarMonth, 9*3600),
	calendarLimit(5, limiter.CalendarDay, 9*3600),
	calendarLimit(9, limiter.CalendarWeek, 0),
	calendarLimit(9, limiter.CalendarWeek, -5*3600-1800),
	{Algorithm: limiter.FixedWindow, Rate: 3, Period: time.Hour},
	calendarLimit(7, limiter.CalendarMonth, 0),
	calendarLimit(3, limiter.CalendarDay, 14*3600),
	{Algorithm: limiter.FixedWindow, Rate: 5, Period: 6 * time.Hour},
	calendarLimit(8, limiter.CalendarMonth, -18*3600),
}

// TestCalendarScriptsMatchLimiter drives the fixed-window script on a
// stepped clock from mid-January to April of leap year 2028, and of 2100
// (not a leap year), through month ends, Feb 29 and week starts, with the
// config changing between periods, offsets, rates and durations, small
// clock steps back (across period ends too) and hybrid leases among the
// decisions, and checks each reply against limiter.Decide on one state:
// the local mode's semantics, including what a config change keeps.
func TestCalendarScriptsMatchLimiter(t *testing.T) {
	fx := newFixture(t)
	for _, rm := range fx.remotes {
		for _, year := range []int{2028, 2100} {
			t.Run(fmt.Sprintf("%s/%d", rm.name, year), func(t *testing.T) {
				rng := rand.New(rand.NewSource(int64(year)))
				key := fmt.Sprintf("cal:%s:%d", rm.name, year)
				now := time.Date(year, time.January, 20, 0, 0, 0, 0, time.UTC)
				end := time.Date(year, time.April, 3, 0, 0, 0, 0, time.UTC)
				var st limiter.State
				l := calendarSchedule[0]
				var allowed, denied, leased, changes int
				for step := 0; now.Before(end); step++ {
					if step%25 == 24 {
						l = calendarSchedule[rng.Intn(len(calendarSchedule))]
						changes++
					}
					switch k := rng.Intn(10); {
					case k == 0: // back a little, often across a period's end
						now = now.Add(-time.Duration(rng.Int63n(int64(limiter.ClockStepTolerance))))
					case k < 4:
						now = now.Add(time.Duration(rng.Int63n(int64(18 * time.Hour))))
					default:
						now = now.Add(time.Duration(rng.Int63n(int64(90 * time.Minute))))
					}
					now = now.Truncate(time.Microsecond)
					if rng.Intn(4) == 0 {
						want := 1 + rng.Int63n(l.Rate+2)
						cmd, err := backend.Lease(l, key, want, time.Second)
						if err != nil {
							t.Fatal(err)
						}
						got, err := rm.call(t, cmd.WithTime(now))
						if err != nil {
							t.Fatalf("step %d lease: %v", step, err)
						}
						_, peek := l.Decide(st, now.UnixNano(), 0)
						grant := min(want, peek.Remaining)
						if got.Granted != grant || got.RetryAfter != 0 && grant > 0 {
							t.Fatalf("step %d at %v under %v %v: lease of %d granted %+v, want %d of %d left", step, now, l.Calendar, l.Period, want, got, grant, peek.Remaining)
						}
						if grant > 0 {
							next, res := l.Decide(st, now.UnixNano(), grant)
							if got.Remaining != res.Remaining || got.ResetAfter != ceilMillis(res.ResetAfter) {
								t.Fatalf("step %d: lease reply %+v, decision of the grant %+v", step, got, res)
							}
							st = next
							leased++
						}
						continue
					}
					cost := int64(1)
					if rng.Intn(5) == 0 {
						cost = rng.Int63n(l.Rate + 2)
					}
					cmd, err := backend.Decide(l, key, cost)
					if err != nil {
						t.Fatal(err)
					}
					got, err := rm.call(t, cmd.WithTime(now))
					if err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					next, want := l.Decide(st, now.UnixNano(), cost)
					if !same(got, want) {
						t.Fatalf("step %d at %v under %v %v offset %d, cost %d: script %+v, limiter %+v", step, now, l.Calendar, l.Period, l.Offset, cost, got, want)
					}
					st = next
					if want.Allowed {
						allowed++
					} else {
						denied++
					}
				}
				if allowed < 40 || denied < 50 || leased < 15 || changes < 5 {
					t.Fatalf("weak run: %d allowed, %d denied, %d leases, %d config changes", allowed, denied, leased, changes)
				}
			})
		}
	}
}

// TestCalendarKeyExpiresAfterItsPeriod: a calendar key's TTL is the time
// to its period's end plus the margin (the clock tolerance), whatever a
// previous state left, and one admission after another within the period
// does not write it again.
func TestCalendarKeyExpiresAfterItsPeriod(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	l := calendarLimit(100, limiter.CalendarMonth, 9*3600)
	rm := fx.remotes[0]
	key := "cal:ttl"
	// Feb 29 2028 12:00 +09:00: the period ends Mar 1 00:00 +09:00.
	now := time.Date(2028, time.February, 29, 3, 0, 0, 0, time.UTC)
	untilEnd := 12 * time.Hour
	if err := fx.rdb.HSet(ctx, key, "w", "5", "c", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := fx.rdb.PExpire(ctx, key, 90*24*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	cmd, _ := backend.Decide(l, key, 1)
	if r, err := rm.call(t, cmd.WithTime(now)); err != nil || r.Remaining != 99 || r.ResetAfter != untilEnd {
		t.Fatalf("first admission: %+v, %v", r, err)
	}
	want := untilEnd + limiter.ClockStepTolerance
	ttl, err := fx.rdb.PTTL(ctx, key).Result()
	if err != nil || ttl > want || ttl < want-time.Minute/2 {
		t.Fatalf("TTL %v (%v), want %v: the period's end plus the margin", ttl, err, want)
	}
	if n, err := fx.rdb.HExists(ctx, key, "w").Result(); err != nil || n {
		t.Fatalf("the duration window's index is still there (%v, %v)", n, err)
	}
	// A later admission in the period leaves the TTL alone: mark it and
	// see the mark survive.
	if err := fx.rdb.PExpire(ctx, key, want-time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := rm.call(t, cmd.WithTime(now.Add(time.Hour))); err != nil || !r.Allowed() {
		t.Fatalf("second admission: %+v, %v", r, err)
	}
	if ttl, err := fx.rdb.PTTL(ctx, key).Result(); err != nil || ttl > want-time.Second {
		t.Fatalf("TTL %v (%v) rewritten by an admission in the same period", ttl, err)
	}
}
