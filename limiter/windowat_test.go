package limiter

import (
	"testing"
	"time"
)

// TestWindowAt: the window holding an instant, its length and how long
// until it ends, for a duration window and for calendar periods, with the
// clock clamped as decisions clamp it.
func TestWindowAt(t *testing.T) {
	tokyo := time.FixedZone("+09:00", 9*3600)
	month := Limit{Algorithm: FixedWindow, Rate: 5, Period: CalendarMonth.Longest(), Calendar: CalendarMonth, Offset: 9 * 3600}
	week := Limit{Algorithm: FixedWindow, Rate: 5, Period: CalendarWeek.Longest(), Calendar: CalendarWeek}
	hour := Limit{Algorithm: FixedWindow, Rate: 5, Period: time.Hour}
	for _, c := range []struct {
		l             Limit
		at            time.Time
		length, until time.Duration
	}{
		{month, time.Date(2028, time.February, 29, 23, 59, 59, 0, tokyo), 29 * 24 * time.Hour, time.Second},
		{month, time.Date(2028, time.March, 1, 0, 0, 0, 0, tokyo), 31 * 24 * time.Hour, 31 * 24 * time.Hour},
		{month, time.Date(2100, time.February, 10, 0, 0, 0, 0, tokyo), 28 * 24 * time.Hour, 19 * 24 * time.Hour},
		// 2028-03-05 is a Sunday: its week ends on Monday the 6th.
		{week, time.Date(2028, time.March, 5, 12, 0, 0, 0, time.UTC), 7 * 24 * time.Hour, 12 * time.Hour},
		{hour, time.Unix(7200+90, 0), time.Hour, time.Hour - 90*time.Second},
	} {
		length, until := c.l.WindowAt(c.at.UnixNano())
		if length != c.length || until != c.until {
			t.Errorf("%v at %v: %v, ends in %v; want %v, %v", c.l.Calendar, c.at, length, until, c.length, c.until)
		}
	}
	// Before the calendar floor: the floor's period, still a whole month.
	if length, _ := month.WindowAt(-1); length < 28*24*time.Hour || length > 31*24*time.Hour {
		t.Errorf("before the floor: %v", length)
	}
}
