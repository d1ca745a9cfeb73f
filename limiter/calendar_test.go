package limiter

import (
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter/store"
)

func utc(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixNano()
}

func TestCalendarPeriod(t *testing.T) {
	const h = 3600
	for _, tc := range []struct {
		cal        Calendar
		off        int32
		at         string
		start, end string
	}{
		{CalendarMonth, 0, "2024-02-10T12:00:00Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"}, // leap year
		{CalendarMonth, 0, "2023-02-28T23:59:59Z", "2023-02-01T00:00:00Z", "2023-03-01T00:00:00Z"},
		{CalendarMonth, 0, "2100-02-15T00:00:00Z", "2100-02-01T00:00:00Z", "2100-03-01T00:00:00Z"}, // not leap
		{CalendarMonth, 0, "2000-02-29T00:00:00Z", "2000-02-01T00:00:00Z", "2000-03-01T00:00:00Z"}, // leap
		{CalendarMonth, 0, "2024-12-31T23:59:59Z", "2024-12-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{CalendarMonth, 0, "2025-01-01T00:00:00Z", "2025-01-01T00:00:00Z", "2025-02-01T00:00:00Z"}, // exactly at midnight
		{CalendarMonth, 0, "2024-04-30T10:00:00Z", "2024-04-01T00:00:00Z", "2024-05-01T00:00:00Z"},
		{CalendarMonth, 9 * h, "2024-02-29T15:00:00Z", "2024-02-29T15:00:00Z", "2024-03-31T15:00:00Z"}, // +09:00: March began
		{CalendarMonth, -5 * h, "2024-03-01T04:59:59Z", "2024-02-01T05:00:00Z", "2024-03-01T05:00:00Z"},
		{CalendarDay, 0, "2024-02-29T00:00:00Z", "2024-02-29T00:00:00Z", "2024-03-01T00:00:00Z"},
		{CalendarDay, 0, "2024-02-28T23:59:59Z", "2024-02-28T00:00:00Z", "2024-02-29T00:00:00Z"},
		{CalendarDay, 5*h + 30*60, "2024-06-01T18:29:59Z", "2024-05-31T18:30:00Z", "2024-06-01T18:30:00Z"}, // +05:30
		{CalendarDay, 5*h + 30*60, "2024-06-01T18:30:00Z", "2024-06-01T18:30:00Z", "2024-06-02T18:30:00Z"},
		{CalendarDay, -(9*h + 30*60), "2024-06-01T09:29:00Z", "2024-05-31T09:30:00Z", "2024-06-01T09:30:00Z"}, // -09:30
		{CalendarWeek, 0, "2024-06-05T12:00:00Z", "2024-06-03T00:00:00Z", "2024-06-10T00:00:00Z"},             // Wednesday
		{CalendarWeek, 0, "2024-06-03T00:00:00Z", "2024-06-03T00:00:00Z", "2024-06-10T00:00:00Z"},             // Monday midnight
		{CalendarWeek, 0, "2024-06-09T23:59:59Z", "2024-06-03T00:00:00Z", "2024-06-10T00:00:00Z"},             // Sunday
		{CalendarWeek, 0, "2024-12-31T00:00:00Z", "2024-12-30T00:00:00Z", "2025-01-06T00:00:00Z"},             // across the year
		{CalendarWeek, 9 * h, "2024-06-02T15:00:00Z", "2024-06-02T15:00:00Z", "2024-06-09T15:00:00Z"},
		{CalendarWeek, -14 * h, "1970-01-05T13:59:59Z", "1969-12-29T14:00:00Z", "1970-01-05T14:00:00Z"},
	} {
		_, start, length := tc.cal.Period(utc(tc.at), tc.off)
		if start != utc(tc.start) || start+int64(length) != utc(tc.end) {
			t.Errorf("%v %+ds at %s: [%s, %s), want [%s, %s)", tc.cal, tc.off, tc.at,
				time.Unix(0, start).UTC().Format(time.RFC3339), time.Unix(0, start+int64(length)).UTC().Format(time.RFC3339), tc.start, tc.end)
		}
	}
}

// TestCalendarMonthsAgainstTime checks every month from 1970 to 2400 against
// the standard library's calendar, for an offset that is not whole hours.
func TestCalendarMonthsAgainstTime(t *testing.T) {
	zone := time.FixedZone("", -(3*3600 + 45*60))
	prev := int64(-1)
	for y := 1970; y < 2400; y++ {
		for m := time.January; m <= time.December; m++ {
			first := time.Date(y, m, 1, 0, 0, 0, 0, zone)
			next := first.AddDate(0, 1, 0)
			for _, at := range []time.Time{first, first.Add(36 * time.Hour), next.Add(-time.Nanosecond)} {
				if at.UnixNano() < calendarFloor {
					continue
				}
				idx, start, length := CalendarMonth.Period(at.UnixNano(), -(3*3600 + 45*60))
				if start != first.UnixNano() || start+int64(length) != next.UnixNano() {
					t.Fatalf("%v: [%v, +%v), want [%v, %v)", at, time.Unix(0, start), time.Duration(length), first, next)
				}
				if idx != int64((y-1970)*12+int(m)-1) {
					t.Fatalf("%v: index %d", at, idx)
				}
			}
			if prev >= 0 && prev != first.UnixNano() {
				t.Fatalf("%v does not abut the previous month", first)
			}
			prev = next.UnixNano()
		}
	}
}

// checkPeriod is the calendar function's contract at t: t is in its period,
// the period has a length the calendar allows, and the next period starts
// where it ends with the next index.
func checkPeriod(t *testing.T, c Calendar, at int64, off int32) {
	idx, start, length := c.Period(at, off)
	if idx < 0 || start > at || uint64(at-start) >= length {
		t.Fatalf("%v %d at %d: index %d, [%d, +%d)", c, off, at, idx, start, length)
	}
	var lo, hi time.Duration
	switch c {
	case CalendarMonth:
		lo, hi = 28*24*time.Hour, 31*24*time.Hour
	default:
		lo, hi = c.Longest(), c.Longest()
	}
	if length < uint64(lo) || length > uint64(hi) {
		t.Fatalf("%v at %d: length %v", c, at, time.Duration(length))
	}
	end := start + int64(length)
	if end < start { // beyond int64 nanoseconds: nothing follows
		return
	}
	nextIdx, nextStart, _ := c.Period(end, off)
	if nextStart != end || nextIdx != idx+1 {
		t.Fatalf("%v %d at %d: next period [%d) index %d does not follow [%d, %d) index %d", c, off, at, nextStart, nextIdx, start, end, idx)
	}
	if idx2, start2, _ := c.Period(end-1, off); idx2 != idx || start2 != start {
		t.Fatalf("%v %d: the period's last nanosecond %d is in period %d", c, off, end-1, idx2)
	}
}

func FuzzCalendarPeriod(f *testing.F) {
	f.Add(uint8(3), utc("2024-02-29T12:00:00Z"), int32(9*3600))
	f.Add(uint8(2), utc("2024-06-03T00:00:00Z"), int32(-5*3600-30*60))
	f.Add(uint8(1), calendarFloor, int32(-18*3600))
	f.Add(uint8(3), int64(1<<63-1), int32(18*3600))
	f.Fuzz(func(t *testing.T, c uint8, at int64, off int32) {
		cal := Calendar(1 + c%3)
		maxOff := int32(MaxOffset / time.Second)
		if at < calendarFloor || off < -maxOff || off > maxOff {
			return
		}
		// The last period before MaxInt64 ns (April 2262) ends past it.
		if at > 1<<63-1-int64(cal.Longest()) {
			at = 1<<63 - 1 - int64(cal.Longest())
		}
		checkPeriod(t, cal, at, off)
	})
}

// TestCalendarFixedWindowSteppedClock walks a monthly quota of 3 through
// February of a leap year into March, with the clock stepped by hand.
func TestCalendarFixedWindowSteppedClock(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Rate: 3, Period: CalendarMonth.Longest(), Calendar: CalendarMonth}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	var st State
	decide := func(at string) Result {
		var res Result
		st, res = l.Decide(st, utc(at), 1)
		// Every state round-trips through the codec and is possible.
		if _, err := l.DecodeState(l.AppendState(nil, st), utc(at)); err != nil {
			t.Fatalf("%s: %v", at, err)
		}
		return res
	}
	for _, at := range []string{"2024-02-01T00:00:00Z", "2024-02-28T23:00:00Z", "2024-02-29T00:00:00Z"} {
		if res := decide(at); !res.Allowed || res.Period != 29*24*time.Hour {
			t.Fatalf("%s: %+v", at, res)
		}
	}
	res := decide("2024-02-29T23:59:59Z")
	if res.Allowed || res.RetryAfter != time.Second || res.ResetAfter != time.Second {
		t.Fatalf("fourth in February: %+v, want denied for 1s (the end of Feb 29)", res)
	}
	res = decide("2024-03-01T00:00:00Z")
	if !res.Allowed || res.Remaining != 2 || res.ResetAfter != 31*24*time.Hour || res.Period != 31*24*time.Hour {
		t.Fatalf("first in March: %+v", res)
	}
	// A clock stepped back into February keeps March's use, evaluated at
	// March's start, so it releases nothing.
	st, res = l.Decide(st, utc("2024-02-29T23:59:30Z"), 3)
	if res.Allowed || res.RetryAfter != 30*time.Second+31*24*time.Hour {
		t.Fatalf("clock stepped back: %+v", res)
	}
	// Month 2024-12 rolls over into 2025-01.
	st = State{}
	for range 3 {
		decide("2024-12-31T23:59:59Z")
	}
	if res := decide("2024-12-31T23:59:59Z"); res.Allowed || res.RetryAfter != time.Second {
		t.Fatalf("December used up: %+v", res)
	}
	if res := decide("2025-01-01T00:00:00Z"); !res.Allowed || res.Remaining != 2 {
		t.Fatalf("January: %+v", res)
	}
}

func TestCalendarLimitValidate(t *testing.T) {
	good := Limit{Algorithm: FixedWindow, Rate: 1, Period: 24 * time.Hour, Calendar: CalendarDay, Offset: -18 * 3600}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []Limit{
		{Algorithm: TokenBucket, Rate: 1, Period: 24 * time.Hour, Calendar: CalendarDay},
		{Algorithm: SlidingWindow, Rate: 1, Period: 24 * time.Hour, Calendar: CalendarDay},
		{Algorithm: FixedWindow, Rate: 1, Period: time.Hour, Calendar: CalendarDay},
		{Algorithm: FixedWindow, Rate: 1, Period: 24 * time.Hour, Calendar: CalendarDay, Offset: 18*3600 + 1},
		{Algorithm: FixedWindow, Rate: 1, Period: 24 * time.Hour, Offset: 3600},
		{Algorithm: FixedWindow, Rate: 1, Period: 24 * time.Hour, Calendar: 9},
	} {
		if l.Validate() == nil || l.valid() {
			t.Errorf("%+v is valid", l)
		}
		if _, res := l.Decide(State{}, utc("2024-01-01T00:00:00Z"), 1); res.Reason != ReasonInvalidLimit {
			t.Errorf("%+v decided %v", l, res.Reason)
		}
	}
}

// TestCalendarPeriodChangeKeepsUse: what a key used stays counted in the
// current period when the config changes its period, offset or rate.
func TestCalendarPeriodChangeKeepsUse(t *testing.T) {
	month := Limit{Algorithm: FixedWindow, Rate: 100, Period: CalendarMonth.Longest(), Calendar: CalendarMonth}
	day := Limit{Algorithm: FixedWindow, Rate: 50, Period: CalendarDay.Longest(), Calendar: CalendarDay}
	// reload is what the table does with the stored bytes under a new limit.
	reload := func(l Limit, st State, at string) State {
		got, err := l.DecodeState(month.AppendState(nil, st), utc(at))
		if err != nil {
			t.Logf("%s: %v", at, err)
		}
		return got
	}

	// Month to day: the 30 used this month count today, not tomorrow.
	st, _ := month.Decide(State{}, utc("2024-02-10T08:00:00Z"), 30)
	st = reload(day, st, "2024-02-10T12:00:00Z")
	st, res := day.Decide(st, utc("2024-02-10T12:00:00Z"), 20)
	if !res.Allowed || res.Remaining != 0 {
		t.Fatalf("month to day: %+v", res)
	}
	if _, res := day.Decide(st, utc("2024-02-10T12:00:00Z"), 1); res.Allowed || res.RetryAfter != 12*time.Hour {
		t.Fatalf("month to day, over: %+v", res)
	}
	if _, res := day.Decide(st, utc("2024-02-11T00:00:00Z"), 1); !res.Allowed || res.Remaining != 49 {
		t.Fatalf("month to day, next day: %+v", res)
	}

	// Day to month: today's 4 count toward the month, to its end.
	st, _ = day.Decide(State{}, utc("2024-02-10T08:00:00Z"), 4)
	st = reload(month, st, "2024-02-10T09:00:00Z")
	st, res = month.Decide(st, utc("2024-02-10T09:00:00Z"), 1)
	if !res.Allowed || res.Remaining != 95 {
		t.Fatalf("day to month: %+v", res)
	}
	st, res = month.Decide(st, utc("2024-02-20T09:00:00Z"), 1)
	if !res.Allowed || res.Remaining != 94 || res.ResetAfter != (9*24+15)*time.Hour {
		t.Fatalf("day to month, later: %+v", res)
	}
	if _, res = month.Decide(st, utc("2024-03-01T00:00:00Z"), 1); res.Remaining != 99 {
		t.Fatalf("day to month, next month: %+v", res)
	}

	// A new offset: the UTC month overlaps the +09:00 month it is in.
	tokyo := month
	tokyo.Offset = 9 * 3600
	st, _ = month.Decide(State{}, utc("2024-02-10T08:00:00Z"), 30)
	st = reload(tokyo, st, "2024-02-10T09:00:00Z")
	if _, res = tokyo.Decide(st, utc("2024-02-10T09:00:00Z"), 1); res.Remaining != 69 || res.ResetAfter != (19*24-9)*time.Hour+15*time.Hour {
		t.Fatalf("new offset: %+v", res)
	}

	// A lower rate than already used: the key has nothing left until the
	// period ends (the state reads as impossible, and Empty is used).
	lower := month
	lower.Rate = 20
	st, _ = month.Decide(State{}, utc("2024-02-10T08:00:00Z"), 30)
	st = reload(lower, st, "2024-02-10T09:00:00Z")
	if _, res = lower.Decide(st, utc("2024-02-10T09:00:00Z"), 1); res.Allowed || res.RetryAfter != (19*24+15)*time.Hour {
		t.Fatalf("lower rate: %+v", res)
	}
	// A higher one keeps the 30 and adds the difference.
	higher := month
	higher.Rate = 200
	st, _ = month.Decide(State{}, utc("2024-02-10T08:00:00Z"), 30)
	st = reload(higher, st, "2024-02-10T09:00:00Z")
	if _, res = higher.Decide(st, utc("2024-02-10T09:00:00Z"), 1); res.Remaining != 169 {
		t.Fatalf("higher rate: %+v", res)
	}
}

// TestCalendarDurationChange: from a calendar period to a duration window
// the count carries into the window it overlaps; from a duration window to
// a calendar period the key starts afresh (a duration window's index does
// not say its length), even for a window far shorter than a period.
func TestCalendarDurationChange(t *testing.T) {
	month := Limit{Algorithm: FixedWindow, Rate: 100, Period: CalendarMonth.Longest(), Calendar: CalendarMonth}
	hour := Limit{Algorithm: FixedWindow, Rate: 50, Period: time.Hour}
	st, _ := month.Decide(State{}, utc("2024-02-10T08:00:00Z"), 30)
	st, err := hour.DecodeState(month.AppendState(nil, st), utc("2024-02-10T09:30:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	st, res := hour.Decide(st, utc("2024-02-10T09:30:00Z"), 1)
	if !res.Allowed || res.Remaining != 19 || res.ResetAfter != 30*time.Minute {
		t.Fatalf("month to hour: %+v", res)
	}
	if _, res = hour.Decide(st, utc("2024-02-10T10:00:00Z"), 1); res.Remaining != 49 {
		t.Fatalf("month to hour, next hour: %+v", res)
	}
	for _, d := range []time.Duration{time.Millisecond, time.Second, time.Hour, 168 * time.Hour} {
		short := Limit{Algorithm: FixedWindow, Rate: 50, Period: d}
		st, _ := short.Decide(State{}, utc("2024-02-10T08:00:00Z"), 30)
		st, err := month.DecodeState(short.AppendState(nil, st), utc("2024-02-10T08:00:00Z"))
		if err != nil {
			t.Fatalf("%v: %v", d, err)
		}
		if _, res := month.Decide(st, utc("2024-02-10T08:00:00Z"), 1); res.Remaining != 99 {
			t.Fatalf("%v to month: %+v", d, res)
		}
	}
}

// TestCalendarTableReload: a table rebuilt over the same shared data with
// another period or rate (a config reload) keeps what each key used, as
// the field reference says, and other keys are untouched.
func TestCalendarTableReload(t *testing.T) {
	s := store.NewMemory()
	cfg := TableConfig{Prefix: "t.", Slots: 64}
	month := Limit{Algorithm: FixedWindow, Rate: 100, Period: CalendarMonth.Longest(), Calendar: CalendarMonth}
	at := utc("2024-02-10T08:00:00Z")
	if res, err := newTable(t, s, month, cfg).AllowN("a", at, 30); err != nil || !res.Allowed {
		t.Fatalf("%+v %v", res, err)
	}
	day := Limit{Algorithm: FixedWindow, Rate: 40, Period: CalendarDay.Longest(), Calendar: CalendarDay}
	tab := newTable(t, s, day, cfg)
	if res, _ := tab.AllowN("a", at, 1); res.Remaining != 9 {
		t.Fatalf("month to day: %+v", res)
	}
	if res, _ := tab.AllowN("b", at, 1); res.Remaining != 39 {
		t.Fatalf("another key: %+v", res)
	}
	// Lower than what "a" used: nothing left until the day ends.
	lower := day
	lower.Rate = 5
	tab = newTable(t, s, lower, cfg)
	if res, _ := tab.AllowN("a", at, 1); res.Allowed || res.RetryAfter != 16*time.Hour {
		t.Fatalf("lower rate: %+v", res)
	}
	if res, _ := tab.AllowN("a", utc("2024-02-11T00:00:00Z"), 1); !res.Allowed || res.Remaining != 4 {
		t.Fatalf("lower rate, next day: %+v", res)
	}
}
