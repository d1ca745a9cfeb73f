package engine

import (
	"testing"
	"time"
)

func TestParseGRPCTimeout(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1H", time.Hour, true}, {"2M", 2 * time.Minute, true}, {"3S", 3 * time.Second, true},
		{"100m", 100 * time.Millisecond, true}, {"7u", 7 * time.Microsecond, true}, {"0n", 0, true},
		{"99999999n", 99999999, true}, {"99999999H", 1<<63 - 1, true},
		{"", 0, false}, {"S", 0, false}, {"10", 0, false}, {"10x", 0, false}, {"10s", 0, false},
		{"-1S", 0, false}, {"+1S", 0, false}, {"1.5S", 0, false}, {" 1S", 0, false}, {"123456789S", 0, false},
	} {
		got, ok := parseGRPCTimeout(c.in)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("parseGRPCTimeout(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestFormatGRPCTimeout(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want string
	}{
		{1, "1n"}, {99_999_999, "99999999n"}, {100_000_000, "100000u"}, {2 * time.Second, "2000000u"},
		{2*time.Second + 999, "2000000u"}, {200 * time.Second, "200000m"}, {time.Hour, "3600000m"},
		{200 * time.Hour, "720000S"}, {1<<63 - 1, "2562047H"},
	} {
		if got, ok := formatGRPCTimeout(c.in); !ok || got != c.want {
			t.Errorf("formatGRPCTimeout(%v) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
	if _, ok := formatGRPCTimeout(0); ok {
		t.Error("formatGRPCTimeout(0) reported time left")
	}
}

func TestParseTimeoutMillis(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"5000", 5000, true}, {"999999999999", 999999999999, true},
		{"", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {"1.5", 0, false}, {"1e3", 0, false},
		{"5000ms", 0, false}, {"9999999999999", 0, false}, {" 1", 0, false},
	} {
		got, ok := parseTimeoutMillis(c.in)
		if ok != c.ok || got != c.want {
			t.Errorf("parseTimeoutMillis(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// FuzzDeadlineHeaders: the parsers never panic, accept only what they
// can represent, and a lowered grpc-timeout never grants more than it was
// given and parses back.
func FuzzDeadlineHeaders(f *testing.F) {
	f.Add("3S", "5000", int64(time.Second))
	f.Add("10x", "-1", int64(0))
	f.Add("99999999H", "999999999999", int64(1))
	f.Fuzz(func(t *testing.T, grpc, ms string, held int64) {
		if d, ok := parseGRPCTimeout(grpc); ok {
			if d < 0 {
				t.Fatalf("parseGRPCTimeout(%q) = %v", grpc, d)
			}
			if held > 0 && time.Duration(held) < d {
				left := d - time.Duration(held)
				s, ok := formatGRPCTimeout(left)
				if ok {
					back, valid := parseGRPCTimeout(s)
					if !valid || back > left || back <= 0 {
						t.Fatalf("%v left wrote %q, which reads %v (%v)", left, s, back, valid)
					}
				}
			}
		}
		if n, ok := parseTimeoutMillis(ms); ok && (n < 0 || n > 999_999_999_999) {
			t.Fatalf("parseTimeoutMillis(%q) = %d", ms, n)
		}
	})
}
