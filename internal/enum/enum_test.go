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

func (c color) String() string { return Name(c, "color", "", "red", "green") }

func TestNames(t *testing.T) {
	colors := New[color]("color", "", "red", "green")
	if got := colors.Name(2); got != "green" {
		t.Errorf("Name(2) = %q, want green", got)
	}
	if got := colors.Name(0); got != "color(0)" {
		t.Errorf("Name(0) = %q, want color(0)", got)
	}
	for _, c := range []struct {
		s    string
		want color
		ok   bool
	}{{"red", 1, true}, {"green", 2, true}, {"", 0, false}, {"blue", 0, false}, {"Red", 0, false}} {
		if v, ok := colors.Parse(c.s); v != c.want || ok != c.ok {
			t.Errorf("Parse(%q) = %d, %v; want %d, %v", c.s, v, ok, c.want, c.ok)
		}
	}
	if got := colors.List(); got != "red, green" {
		t.Errorf("List() = %q, want %q", got, "red, green")
	}
}

// TestOf checks that a type naming itself reads back by its String,
// whatever order its values are given in.
func TestOf(t *testing.T) {
	colors := Of[color]("color", 2, 1)
	for _, v := range []color{1, 2} {
		if got, ok := colors.Parse(v.String()); !ok || got != v {
			t.Errorf("Parse(%q) = %d, %v; want %d", v.String(), got, ok, v)
		}
	}
	if got := colors.List(); got != "red, green" {
		t.Errorf("List() = %q, want %q", got, "red, green")
	}
	if _, ok := colors.Parse("color(0)"); ok {
		t.Error("Parse accepts the name of a value not given")
	}
}

// FuzzNamesParse checks that Parse and Name are inverse on any input: a
// name that parses is the value's name, and no other string parses.
func FuzzNamesParse(f *testing.F) {
	f.Add("red")
	f.Add("")
	f.Add("color(1)")
	names := New[color]("color", "", "red", "green", "", "red-ish")
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := names.Parse(s)
		if !ok {
			if v != 0 {
				t.Errorf("Parse(%q) failed but gave %d", s, v)
			}
			for i, n := range names.names {
				if n != "" && n == s {
					t.Errorf("Parse(%q) failed, but it is the name of %d", s, i)
				}
			}
			return
		}
		if got := names.Name(v); got != s {
			t.Errorf("Parse(%q) = %d, whose name is %q", s, v, got)
		}
	})
}
