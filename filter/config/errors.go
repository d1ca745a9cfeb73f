package config

import (
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// FieldError is one problem with the configuration, located by its JSON path
// (for example "limits[1].burst"). Path is empty for problems with the
// document as a whole.
type FieldError struct {
	Path    string
	Message string
	// Unlisted, on the last entry of a list cut at MaxErrors, is how many
	// errors that entry stands for; it is not an error itself.
	Unlisted int

	// offset is the byte position the error is about, so errors can be
	// listed in document order whatever order the checks ran in.
	offset int
}

func (e FieldError) Error() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// Errors is every problem found in one configuration, in document order.
// Parse returns it as its error, so callers can get at the fields with
// errors.As(err, &errs).
type Errors []FieldError

func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

func (es Errors) sort() {
	sort.SliceStable(es, func(i, j int) bool { return es[i].offset < es[j].offset })
}

// FieldPath joins an object path and a member name, quoting names that
// would make the path ambiguous (override values can be any string):
// FieldPath("limits[0]", "overrides") is "limits[0].overrides" and
// FieldPath("limits[0].overrides", "a.b") is `limits[0].overrides["a.b"]`.
// A name longer than MaxQuoted is quoted, cut, as Quote cuts it.
// Every error path about a configuration is built with it and IndexPath,
// in this package and in the filter, so they all read the same way.
func FieldPath(path, name string) string {
	if !plainName(name) || len(name) > MaxQuoted {
		return path + "[" + Quote(name) + "]"
	}
	if path == "" {
		return name
	}
	return path + "." + name
}

// IndexPath is the path of element i of the array at path: "limits[2]".
func IndexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

func plainName(s string) bool { return s != "" && alnumOr(s, "_-") }

// MaxQuoted is how many bytes of a value an error message quotes at most.
const MaxQuoted = 128

// Quote is s quoted for an error message or an error path: a value longer
// than MaxQuoted bytes is cut at a character boundary and its length
// given, so a hostile value of megabytes still gives a short message
// that names it.
func Quote(s string) string {
	prefix, rest := cutQuoted(s)
	return strconv.Quote(prefix) + rest
}

// Excerpt is raw JSON text (a number, a value of the wrong type) cut as
// Quote cuts, on one line.
func Excerpt(raw string) string {
	prefix, rest := cutQuoted(raw)
	return oneLine(prefix) + rest
}

// cutQuoted splits s into what a message shows and, when it is cut, the
// note of its length.
func cutQuoted(s string) (string, string) {
	if len(s) <= MaxQuoted {
		return s, ""
	}
	cut := MaxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut], "… (" + strconv.Itoa(len(s)) + " bytes)"
}
