package engine

import "unicode/utf8"

// Usage from a response body: the two parsers behind
// "cost_from_response": {"json": "usage.total_tokens"}. Both take input
// an upstream wrote, which may be anything, so neither recurses, neither
// allocates per byte, and neither keeps more than a fixed bound:
//
//   - jsonUsage finds a dotted path of object members in one JSON
//     document and reads the whole number there. It walks the document
//     once, checking all of it is JSON, with its nesting in a fixed bit
//     stack, so 10,000 nested arrays cost 10,000 bits, not a call stack;
//     it stops at the first byte that is not JSON, so truncated or
//     malformed JSON is a fault, never a panic.
//   - sseFramer cuts a text/event-stream into events as chunks arrive,
//     keeping only the current event's data (at most maxSSEEvent bytes;
//     a longer event is dropped whole), and hands each complete event's
//     data to a callback.

// usageFault says why a body yielded no usable usage.
type usageFault uint8

const (
	usageOK usageFault = iota
	// usageMissing: the path is not there, or the document ends or breaks
	// before it is found.
	usageMissing
	// usageNotNumber: the path holds something other than a whole number
	// (a string, a fraction, an object, null).
	usageNotNumber
	// usageNegative: the path holds a negative number.
	usageNegative
	// usageTooLarge: the number does not fit in 63 bits.
	usageTooLarge
)

func (f usageFault) String() string {
	switch f {
	case usageMissing:
		return "missing"
	case usageNotNumber:
		return "not_a_number"
	case usageNegative:
		return "negative"
	case usageTooLarge:
		return "too_large"
	}
	return "ok"
}

// maxJSONDepth bounds the nesting of a document read for usage, as
// encoding/json bounds it: a deeper document is not read, as if it were
// not JSON.
const maxJSONDepth = 10_000

// jsonUsage returns the whole number at path (object member names, outer
// first) in doc. A member name that repeats is taken at its first
// occurrence. Member names are compared byte for byte with the JSON
// source, so a name written with escapes does not match.
//
// The number counts only when all of doc is one JSON text (RFC 8259):
// every token spelled right, every string's escapes valid and no raw
// control character in it, every byte of it UTF-8, brackets matched,
// nesting at most maxJSONDepth, and nothing but space after the value.
// Anything else is usageMissing, so the limit charges its default: a
// body cut off after the number (a reset, a truncating proxy) or broken
// anywhere, before the number or after it, is never charged a number
// read from it. The document is checked in the same single pass that
// looks for the path, with its nesting in a fixed bit stack on the
// goroutine's stack, so the scan allocates nothing.
func jsonUsage(doc []byte, path []string) (int64, usageFault) {
	// Usage answers nest a few levels: a bit stack of one word, which
	// costs nothing to clear, takes them; a deeper document is scanned
	// again with the stack maxJSONDepth needs.
	var shallow [1]uint64
	if n, fault, deeper := scanUsage(doc, path, shallow[:]); !deeper {
		return n, fault
	}
	var deep [(maxJSONDepth + 63) / 64]uint64
	n, fault, _ := scanUsage(doc, path, deep[:])
	return n, fault
}

// scanUsage is jsonUsage with objects as its bit stack: bit d is set
// when the container open at depth d (0 is the outermost) is an object,
// not an array. deeper says the document nests deeper than objects
// holds, but not past maxJSONDepth, so it was not read.
func scanUsage(doc []byte, path []string, objects []uint64) (n int64, fault usageFault, deeper bool) {
	// The whole document is where the path leads at first.
	s := usageScan{doc: doc, path: path, objects: objects, onPath: true}
	i := 0
	for {
		i = skipSpace(doc, i)
		if i >= len(doc) {
			return 0, usageMissing, false
		}
		start, here := i, s.onPath && !s.decided
		s.onPath = false
		c := doc[i]
		if c == '{' || c == '[' {
			var next bool
			if i, next, deeper = s.open(c, start, here); i < 0 {
				return 0, usageMissing, deeper
			}
			if next {
				continue
			}
			// empty: closed below, as a scalar would be
		} else if i = scanScalar(doc, i); i < 0 {
			return 0, usageMissing, false
		}
		if here {
			// A value on the path: the value when the path is all
			// matched, otherwise not the object the path goes through.
			if s.matched == len(path) {
				s.target = doc[start:i]
			}
			s.decided = true
		}
		var done bool
		if i, done = s.close(i); i < 0 {
			return 0, usageMissing, false
		}
		if done {
			n, fault = wholeNumber(s.target)
			return n, fault, false
		}
	}
}

// usageScan is scanUsage's state. matched counts the names of path found
// so far, each in the object the one before it holds. onPath is set when
// the value about to start is where the path leads, and decided once the
// path has led to its value or can no longer: a later member of the same
// name, or an object outside the path, is then skipped like any other.
type usageScan struct {
	doc     []byte
	path    []string
	objects []uint64
	depth   int
	matched int
	onPath  bool
	decided bool
	target  []byte
}

// open opens the container c ('{' or '[') that starts at start, here
// when it is where the path leads. It returns where the next value
// starts (next), or where an empty container's closing byte is (not
// next), or -1 when the document is refused: deeper when only for want
// of bits in objects.
func (s *usageScan) open(c byte, start int, here bool) (i int, next, deeper bool) {
	doc := s.doc
	switch {
	case s.depth == maxJSONDepth:
		return -1, false, false
	case s.depth == 64*len(s.objects):
		return -1, false, true
	}
	if c == '{' {
		s.objects[s.depth/64] |= 1 << (s.depth % 64)
	} else {
		s.objects[s.depth/64] &^= 1 << (s.depth % 64)
	}
	s.depth++
	if here && s.matched == len(s.path) {
		// The path's value, and not a number: its first byte says so.
		s.target, s.decided = doc[start:start+1], true
	}
	if here && c == '[' {
		s.decided = true // an array where the path needs an object
	}
	i = skipSpace(doc, start+1)
	if i < len(doc) && doc[i] == c+2 { // '}' is '{'+2, ']' is '['+2
		return i, false, false
	}
	if c == '[' {
		return i, true, false
	}
	return s.member(i), true, false
}

// close reads on from i, where a value has ended, closing containers
// until one goes on: it returns where the next value starts, or done at
// the end of the document with target read, or -1.
func (s *usageScan) close(i int) (int, bool) {
	doc := s.doc
	for {
		i = skipSpace(doc, i)
		if s.depth == 0 {
			if i != len(doc) || s.target == nil {
				return -1, false
			}
			return i, true
		}
		if i >= len(doc) {
			return -1, false
		}
		d := s.depth - 1
		inObject := s.objects[d/64]&(1<<(d%64)) != 0
		switch c := doc[i]; {
		case c == ',':
			if !inObject {
				return i + 1, false
			}
			return s.member(i + 1), false
		case c == '}' && inObject, c == ']' && !inObject:
			// Leaving an object of the path, it has no more to find.
			if s.depth <= s.matched+1 {
				s.decided = true
			}
			s.depth--
			i++
		default:
			return -1, false
		}
	}
}

// scanScalar returns where the scalar starting at doc[i] ends, or -1.
func scanScalar(doc []byte, i int) int {
	switch doc[i] {
	case '"':
		return scanString(doc, i)
	case 't':
		return scanLiteral(doc, i, "true")
	case 'f':
		return scanLiteral(doc, i, "false")
	case 'n':
		return scanLiteral(doc, i, "null")
	}
	return scanNumber(doc, i)
}

// member reads a member's name and its colon from doc[i:], in the object
// open at depth, and returns where its value starts, or -1. When the
// name is the path's next, in the object the path has led to, it
// matches, and the value is on the path.
func (s *usageScan) member(i int) int {
	doc := s.doc
	i = skipSpace(doc, i)
	if i >= len(doc) || doc[i] != '"' {
		return -1
	}
	end := scanString(doc, i)
	if end < 0 {
		return -1
	}
	if !s.decided && s.depth == s.matched+1 && s.matched < len(s.path) && string(doc[i+1:end-1]) == s.path[s.matched] {
		s.matched++
		s.onPath = true
	}
	i = skipSpace(doc, end)
	if i >= len(doc) || doc[i] != ':' {
		return -1
	}
	return i + 1
}

// wholeNumber reads v, one JSON value, as a whole number >= 0. A number
// with a fraction or an exponent is not a count of tokens.
func wholeNumber(v []byte) (int64, usageFault) {
	i := 0
	neg := v[0] == '-'
	if neg {
		i++
	}
	if i >= len(v) || v[i] < '0' || v[i] > '9' {
		return 0, usageNotNumber // a string, an object, an array, true, false, null
	}
	var n int64
	over := false
	for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		d := int64(v[i] - '0')
		if n > (1<<63-1-d)/10 {
			over = true
		} else {
			n = n*10 + d
		}
	}
	switch {
	case i < len(v):
		return 0, usageNotNumber // a fraction or an exponent
	case neg && n > 0:
		return 0, usageNegative
	case over:
		return 0, usageTooLarge
	}
	return n, usageOK
}

func skipSpace(doc []byte, i int) int {
	for i < len(doc) {
		switch doc[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString returns the index just past the JSON string starting at
// doc[i] (a '"'), or -1 when it does not end or is not one: a raw
// control character, an escape JSON does not have, or bytes that are
// not UTF-8.
func scanString(doc []byte, i int) int {
	for i++; i < len(doc); {
		switch c := doc[i]; {
		case c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\':
			i++
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 >= len(doc) {
				return -1
			}
			switch doc[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(doc) || !isHex(doc[i+2]) || !isHex(doc[i+3]) || !isHex(doc[i+4]) || !isHex(doc[i+5]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		default:
			r, n := utf8.DecodeRune(doc[i:])
			if r == utf8.RuneError && n == 1 {
				return -1
			}
			i += n
		}
	}
	return -1
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scanLiteral returns the index just past lit at doc[i], or -1.
func scanLiteral(doc []byte, i int, lit string) int {
	if len(doc)-i < len(lit) || string(doc[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// scanNumber returns the index just past the JSON number at doc[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, or -1.
func scanNumber(doc []byte, i int) int {
	if doc[i] == '-' {
		i++
	}
	switch {
	case i < len(doc) && doc[i] == '0':
		i++
	case i < len(doc) && doc[i] >= '1' && doc[i] <= '9':
		i = skipDigits(doc, i)
	default:
		return -1
	}
	if i < len(doc) && doc[i] == '.' {
		if j := skipDigits(doc, i+1); j > i+1 {
			i = j
		} else {
			return -1
		}
	}
	if i < len(doc) && (doc[i] == 'e' || doc[i] == 'E') {
		i++
		if i < len(doc) && (doc[i] == '+' || doc[i] == '-') {
			i++
		}
		j := skipDigits(doc, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func skipDigits(doc []byte, i int) int {
	for i < len(doc) && doc[i] >= '0' && doc[i] <= '9' {
		i++
	}
	return i
}

// maxSSEEvent bounds the data an SSE event may carry to be scanned; a
// longer one is dropped whole and counted. Usage events are a few hundred
// bytes; content events are what the bound keeps from growing the buffer.
const maxSSEEvent = 64 << 10

// sseFramer cuts a text/event-stream (the WHATWG HTML "server-sent
// events" format) into events. Lines end with CRLF, LF or CR; "data"
// fields of one event are joined with LF; other fields and comments are
// ignored; an empty line dispatches the event. An event the stream ends
// in the middle of is not dispatched, as the format says.
type sseFramer struct {
	// line is the current line so far, and data the current event's
	// data lines; both share one bound, maxSSEEvent.
	line, data []byte
	hasData    bool
	// overlong drops the rest of the current event: it grew past the
	// bound.
	overlong bool
	// afterCR skips the LF of a CRLF split between two chunks.
	afterCR bool
	// lineBytes counts the current line's bytes, also those an overlong
	// event no longer records, to see the empty line that ends it.
	lineBytes int
	// dropped counts the events dropped for their size.
	dropped int
	// bomSeen counts the bytes of a leading byte-order mark matched so
	// far, and pastStart is set once the stream's start is behind: the
	// standard decodes the stream as UTF-8, which drops one leading BOM,
	// so "\uFEFFdata: …" is a data line.
	bomSeen   uint8
	pastStart bool
}

func (f *sseFramer) reset() {
	f.line, f.data = f.line[:0], f.data[:0]
	f.hasData, f.overlong, f.afterCR = false, false, false
	f.lineBytes, f.dropped = 0, 0
	f.bomSeen, f.pastStart = 0, false
}

// utf8BOM is the byte-order mark in UTF-8.
const utf8BOM = "\xEF\xBB\xBF"

// skipBOM drops a byte-order mark from the stream's start, even one
// split between chunks; bytes that only began like one are the first
// line's.
func (f *sseFramer) skipBOM(chunk []byte) []byte {
	for len(chunk) > 0 && int(f.bomSeen) < len(utf8BOM) {
		if chunk[0] != utf8BOM[f.bomSeen] {
			f.pastStart = true
			if f.bomSeen > 0 {
				f.keepLine([]byte(utf8BOM[:f.bomSeen]))
			}
			return chunk
		}
		f.bomSeen++
		chunk = chunk[1:]
	}
	f.pastStart = int(f.bomSeen) == len(utf8BOM)
	return chunk
}

// feed scans one chunk; dispatch runs for every complete event that has
// data, with the data valid only during the call.
func (f *sseFramer) feed(chunk []byte, dispatch func(data []byte)) {
	if !f.pastStart {
		chunk = f.skipBOM(chunk)
	}
	for i := 0; i < len(chunk); {
		if f.afterCR {
			f.afterCR = false
			if chunk[i] == '\n' {
				i++
				continue
			}
		}
		j := i
		for j < len(chunk) && chunk[j] != '\n' && chunk[j] != '\r' {
			j++
		}
		if j == len(chunk) {
			f.keepLine(chunk[i:j]) // the line goes on in the next chunk
			return
		}
		f.afterCR = chunk[j] == '\r'
		f.endLine(f.completeLine(chunk[i:j]), dispatch)
		i = j + 1
	}
}

// fits counts n more bytes of the current line and tells whether the
// event still fits the bound; past it, the event is dropped.
func (f *sseFramer) fits(n int) bool {
	f.lineBytes += n
	if f.overlong {
		return false
	}
	if len(f.line)+len(f.data)+n > maxSSEEvent {
		f.overlong = true
		f.line, f.data = f.line[:0], f.data[:0]
		return false
	}
	return true
}

// keepLine keeps the start of a line the chunk ends in the middle of.
func (f *sseFramer) keepLine(b []byte) {
	if f.fits(len(b)) {
		f.line = append(f.line, b...)
	}
}

// completeLine is the line b ends: b itself when the whole line is in
// this chunk, which is the usual case and needs no copy.
func (f *sseFramer) completeLine(b []byte) []byte {
	if !f.fits(len(b)) {
		return nil
	}
	if len(f.line) == 0 {
		return b
	}
	f.line = append(f.line, b...)
	return f.line
}

func (f *sseFramer) endLine(line []byte, dispatch func(data []byte)) {
	empty := f.lineBytes == 0
	f.line, f.lineBytes = f.line[:0], 0
	if f.overlong {
		if empty {
			// The event the bound dropped ends here.
			f.overlong, f.hasData = false, false
			f.dropped++
		}
		return
	}
	if empty {
		if f.hasData {
			dispatch(f.data)
		}
		f.data, f.hasData = f.data[:0], false
		return
	}
	const field = "data"
	if len(line) < len(field) || string(line[:len(field)]) != field {
		return // another field or a comment
	}
	v := line[len(field):]
	switch {
	case len(v) == 0:
	case v[0] == ':':
		v = v[1:]
		if len(v) > 0 && v[0] == ' ' {
			v = v[1:]
		}
	default:
		return // a field whose name only starts with "data"
	}
	if f.hasData {
		f.data = append(f.data, '\n')
	}
	f.data = append(f.data, v...)
	f.hasData = true
}
