// Package enum names the values of small integer enums, so that a String
// method lists its names once, in the order of the constants, instead of
// a switch written out for every type; a parser reads the same names back
// (Names.Parse) and lists them in its error (Names.List).
package enum

import (
	"strconv"
	"strings"
)

// Integer is the underlying types an enum may have.
type Integer interface{ ~uint8 | ~uint32 | ~int32 }

// Name is names[v], or typ(v) for a value that has no name: one past the
// list, or one whose place in it is "" (a gap, or a zero value that is
// not one of the constants).
func Name[T Integer](v T, typ string, names ...string) string {
	if v >= 0 && int64(v) < int64(len(names)) && names[v] != "" {
		return names[v]
	}
	return typ + "(" + strconv.FormatInt(int64(v), 10) + ")"
}

// Names are the names of the values of one enum type T, value v named
// names[v]: the one list its String method and its parser share.
type Names[T Integer] struct {
	typ   string
	names []string
}

// New names the values 0, 1, … of T in order; "" leaves a value unnamed
// (Name prints it as typ(v), Parse never returns it).
func New[T Integer](typ string, names ...string) Names[T] {
	return Names[T]{typ: typ, names: names}
}

// Named is an enum type of another package that names its values itself.
type Named interface {
	Integer
	String() string
}

// Of is the Names of values of a type that has its own String method (a
// type of another package): each value is named by its String.
func Of[T Named](typ string, values ...T) Names[T] {
	n := Names[T]{typ: typ}
	for _, v := range values {
		if v < 0 {
			continue
		}
		for int64(len(n.names)) <= int64(v) {
			n.names = append(n.names, "")
		}
		n.names[v] = v.String()
	}
	return n
}

// Name is v's name, or typ(v) for a value without one.
func (n Names[T]) Name(v T) string { return Name(v, n.typ, n.names...) }

// Parse is the value named s; ok is false for a name that is none of
// them (and for "").
func (n Names[T]) Parse(s string) (v T, ok bool) {
	if s == "" {
		return 0, false
	}
	for i, name := range n.names {
		if name == s {
			return T(i), true
		}
	}
	return 0, false
}

// List is the names in value order, joined with ", ": what an error
// about a value that is none of them offers instead.
func (n Names[T]) List() string {
	named := make([]string, 0, len(n.names))
	for _, name := range n.names {
		if name != "" {
			named = append(named, name)
		}
	}
	return strings.Join(named, ", ")
}
