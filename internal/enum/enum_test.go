package enum

import "testing"

type color uint8

type level int32

func TestName(t *testing.T) {
	names := []string{"", "red", "green"}
	for _, c := range []struct {
		v    color
		want string
	}{{1, "red"}, {2, "green"}, {0, "color(0)"}, {3, "color(3)"}, {255, "color(255)"}} {
		if got := Name(c.v, "color", names...); got != c.want {
			t.Errorf("Name(%d) = %q, want %q", c.v, got, c.want)
		}
	}
	if got := Name(level(-1), "level", "trace"); got != "level(-1)" {
		t.Errorf("a negative value: %q, want level(-1)", got)
	}
	if got := Name(level(0), "level", "trace"); got != "trace" {
		t.Errorf("Name(0) = %q, want trace", got)
	}
}
