// Package enum names the values of small integer enums, so that a String
// method lists its names once, in the order of the constants, instead of
// a switch written out for every type.
package enum

import "strconv"

// Name is names[v], or typ(v) for a value that has no name: one past the
// list, or one whose place in it is "" (a gap, or a zero value that is
// not one of the constants).
func Name[T ~uint8 | ~uint32 | ~int32](v T, typ string, names ...string) string {
	if v >= 0 && int64(v) < int64(len(names)) && names[v] != "" {
		return names[v]
	}
	return typ + "(" + strconv.FormatInt(int64(v), 10) + ")"
}
