package limiter

import (
	"fmt"
	"time"
)

// Calendar aligns a FixedWindow to calendar periods (a day, a week starting
// Monday, a month of its true length) in a fixed UTC offset, instead of to
// multiples of Period since the Unix epoch.
type Calendar uint8

const (
	// NoCalendar: windows are Period long and aligned to the epoch.
	NoCalendar Calendar = iota
	// CalendarDay: from local midnight to the next.
	CalendarDay
	// CalendarWeek: from Monday 00:00 local to the next Monday.
	CalendarWeek
	// CalendarMonth: from the 1st 00:00 local to the 1st of the next month.
	CalendarMonth

	numCalendars
)

// MaxOffset bounds a calendar's UTC offset either way: the range of fixed
// offsets in use, with room (ISO 8601 and RFC 3339 zones reach ±14:00).
const MaxOffset = 18 * time.Hour

var calendarNames = [numCalendars]string{"", "day", "week", "month"}

func (c Calendar) String() string {
	if c < numCalendars {
		return calendarNames[c]
	}
	return fmt.Sprintf("Calendar(%d)", uint8(c))
}

// Longest is the longest period of c, which a calendar Limit's Period must
// equal: every bound that holds for Period (the refill span, the codec's
// window index) then holds for each of c's periods.
func (c Calendar) Longest() time.Duration {
	switch c {
	case CalendarDay:
		return 24 * time.Hour
	case CalendarWeek:
		return 7 * 24 * time.Hour
	case CalendarMonth:
		return 31 * 24 * time.Hour
	}
	return 0
}

const (
	secondsPerDay  = 86400
	nanosPerSec    = int64(time.Second)
	nanosPerMinute = int64(time.Minute)
	nanosPerDay    = uint64(24 * time.Hour)
	// calendarFloor is the earliest instant a calendar window is evaluated
	// at: clamping the clock here, 40 days after the epoch, keeps every
	// period's start (at most a month and MaxOffset earlier) after the
	// epoch, so window indexes are never negative.
	calendarFloor = int64(40 * 24 * time.Hour)
	// mondayShift: day 0 (1970-01-01) was a Thursday, 3 days after Monday.
	mondayShift = 3
)

// Period returns the index of the period of c containing the Unix
// nanosecond t in the UTC offset off (seconds east), its start in Unix
// nanoseconds and its length. t must be at least calendarFloor and off
// within ±MaxOffset, which makes idx non-negative. It is integer arithmetic
// only: no time.Time, no allocation.
func (c Calendar) Period(t int64, off int32) (idx, start int64, length uint64) {
	sec := t / nanosPerSec // t > 0: division truncates as floor
	local := sec + int64(off)
	day := floorDiv(local, secondsPerDay)
	var first, next int64 // local days
	switch c {
	case CalendarWeek:
		idx = floorDiv(day+mondayShift, 7)
		first = idx*7 - mondayShift
		next = first + 7
	case CalendarMonth:
		y, m := monthOf(day)
		idx = (y-1970)*12 + m - 1
		first = daysFromCivil(y, m)
		if m == 12 {
			next = daysFromCivil(y+1, 1)
		} else {
			next = daysFromCivil(y, m+1)
		}
	default:
		idx, first, next = day, day, day+1
	}
	start = (first*secondsPerDay - int64(off)) * nanosPerSec
	return idx, start, uint64(next-first) * secondsPerDay * uint64(nanosPerSec)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// daysFromCivil is the day number (since 1970-01-01) of the 1st of month m
// of year y in the proleptic Gregorian calendar, by counting in 400-year
// eras of 146097 days with years starting in March, so that February, the
// month of variable length, is last.
func daysFromCivil(y, m int64) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400                     // [0, 399]
	mp := (m + 9) % 12                     // March = 0
	doy := (153*mp + 2) / 5                // day of year of the 1st
	doe := yoe*365 + yoe/4 - yoe/100 + doy // [0, 146096]
	return era*146097 + doe - 719468       // 719468: days from 0000-03-01 to 1970-01-01
}

// monthOf is the inverse of daysFromCivil for any day: its year and month.
func monthOf(day int64) (y, m int64) {
	z := day + 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097                                  // [0, 146096]
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // [0, 399]
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // [0, 365]
	mp := (5*doy + 2) / 153                                // March = 0
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	y = yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m
}

// WindowAt is the window of fixed-window limit l that holds the Unix
// nanosecond now: its length, and how long after now it ends. For a
// calendar that is now's period (now clamped at the floor decisions clamp
// it to), so a month's length is its true one; otherwise it is Period and
// the end of now's window aligned to the epoch. A remote decision, made
// on Redis's clock, reports its period through it.
func (l Limit) WindowAt(now int64) (length, untilEnd time.Duration) {
	if l.Calendar == NoCalendar || l.Calendar >= numCalendars {
		if l.Period <= 0 {
			return 0, 0
		}
		t := max(now, 0)
		return l.Period, l.Period - time.Duration(t%int64(l.Period))
	}
	t := max(now, calendarFloor)
	_, start, n := l.Calendar.Period(t, l.Offset)
	return time.Duration(n), time.Duration(start + int64(n) - t)
}
