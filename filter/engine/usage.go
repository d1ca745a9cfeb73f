package engine

// Usage from a response body: the two parsers behind
// "cost_from_response": {"json": "usage.total_tokens"}. Both take input
// an upstream wrote, which may be anything, so neither recurses, neither
// allocates per byte, and neither keeps more than a fixed bound:
//
//   - jsonUsage finds a dotted path of object members in one JSON
//     document and reads the whole number there. It walks the document
//     once with an explicit depth counter, so 10,000 nested arrays cost a
//     counter, not a stack; it stops at the first byte it cannot use, so
//     truncated or malformed JSON is a fault, never a panic.
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

// jsonUsage returns the whole number at path (object member names, outer
// first) in doc. A member name that repeats is taken at its first
// occurrence. Member names are compared byte for byte with the JSON
// source, so a name written with escapes does not match. The number
// counts only when the document is whole: the value is a complete JSON
// token, and after it every object on the path closes and nothing but
// space follows. So a body cut off after the number (a reset, a
// truncating proxy) or broken after it is missing, never a partial
// number.
func jsonUsage(doc []byte, path []string) (int64, usageFault) {
	i := skipSpace(doc, 0)
	for _, name := range path {
		if i >= len(doc) || doc[i] != '{' {
			return 0, usageMissing
		}
		i = skipSpace(doc, i+1)
		found := false
		for !found {
			if i >= len(doc) || doc[i] != '"' {
				return 0, usageMissing // '}' ends the object without the name
			}
			end := skipString(doc, i)
			if end < 0 {
				return 0, usageMissing
			}
			key := doc[i+1 : end-1]
			i = skipSpace(doc, end)
			if i >= len(doc) || doc[i] != ':' {
				return 0, usageMissing
			}
			i = skipSpace(doc, i+1)
			if string(key) == name {
				found = true
				continue
			}
			if i = skipValue(doc, i); i < 0 {
				return 0, usageMissing
			}
			i = skipSpace(doc, i)
			if i >= len(doc) || doc[i] != ',' {
				return 0, usageMissing
			}
			i = skipSpace(doc, i+1)
		}
	}
	end := skipValue(doc, i)
	if end < 0 || !closesObjects(doc, end, len(path)) {
		return 0, usageMissing
	}
	return wholeNumber(doc[i:end])
}

// closesObjects reports whether doc, from i (just past a member's
// value), ends open objects, skipping their remaining members, and then
// has nothing but space.
func closesObjects(doc []byte, i, open int) bool {
	for open > 0 {
		i = skipSpace(doc, i)
		if i >= len(doc) {
			return false
		}
		switch doc[i] {
		case '}':
			open--
			i++
		case ',':
			i = skipSpace(doc, i+1)
			if i >= len(doc) || doc[i] != '"' {
				return false
			}
			if i = skipString(doc, i); i < 0 {
				return false
			}
			i = skipSpace(doc, i)
			if i >= len(doc) || doc[i] != ':' {
				return false
			}
			if i = skipValue(doc, skipSpace(doc, i+1)); i < 0 {
				return false
			}
		default:
			return false
		}
	}
	return skipSpace(doc, i) == len(doc)
}

// wholeNumber reads v, one whole JSON value, as a whole number >= 0. A
// number with a fraction or an exponent is not a count of tokens; a
// token that is not JSON at all (4x00, 012, -) makes the document
// malformed, so the usage is missing.
func wholeNumber(v []byte) (int64, usageFault) {
	switch {
	case len(v) == 0:
		return 0, usageMissing
	case v[0] == '"' || v[0] == '{' || v[0] == '[':
		return 0, usageNotNumber
	case string(v) == "null" || string(v) == "true" || string(v) == "false":
		return 0, usageNotNumber
	}
	i := 0
	neg := v[0] == '-'
	if neg {
		i++
	}
	start := i
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
	if i == start || v[start] == '0' && i-start > 1 {
		return 0, usageMissing
	}
	if i < len(v) {
		if !jsonNumberTail(v[i:]) {
			return 0, usageMissing
		}
		return 0, usageNotNumber
	}
	switch {
	case neg && n > 0:
		return 0, usageNegative
	case over:
		return 0, usageTooLarge
	}
	return n, usageOK
}

// jsonNumberTail reports whether t is a JSON number's fraction and
// exponent: ('.' digits)? ([eE] [+-]? digits)?, not both empty.
func jsonNumberTail(t []byte) bool {
	digits := func(i int) int {
		j := i
		for j < len(t) && t[j] >= '0' && t[j] <= '9' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
	i := 0
	if i < len(t) && t[i] == '.' {
		if i = digits(i + 1); i < 0 {
			return false
		}
	}
	if i < len(t) && (t[i] == 'e' || t[i] == 'E') {
		i++
		if i < len(t) && (t[i] == '+' || t[i] == '-') {
			i++
		}
		if i = digits(i); i < 0 {
			return false
		}
	}
	return i == len(t) && i > 0
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

// skipString returns the index just past the string starting at doc[i]
// (a '"'), or -1 when it does not end.
func skipString(doc []byte, i int) int {
	for i++; i < len(doc); i++ {
		switch doc[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipValue returns the index just past the value starting at doc[i], or
// -1 when it does not end. Nesting is a counter: brackets are only
// counted, not matched against each other, which is enough to find where
// a well-formed value ends, and bounded work for any other input.
func skipValue(doc []byte, i int) int {
	if i >= len(doc) {
		return -1
	}
	switch doc[i] {
	case '"':
		return skipString(doc, i)
	case '{', '[':
		depth := 0
		for ; i < len(doc); i++ {
			switch doc[i] {
			case '"':
				if i = skipString(doc, i); i < 0 {
					return -1
				}
				i-- // the loop's i++ steps past the closing quote
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	start := i
	for ; i < len(doc); i++ {
		switch c := doc[i]; {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-', c == '+', c == '.':
		default:
			if i == start {
				return -1
			}
			return i
		}
	}
	return i // a scalar may end the document (an SSE event's data)
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
