package engine

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestJSONUsage(t *testing.T) {
	deep := strings.Repeat("[", maxJSONDepth-1) + strings.Repeat("]", maxJSONDepth-1)
	deepObj := strings.Repeat(`{"a":`, 10_000) + "1" + strings.Repeat("}", 10_000)
	huge := `{"choices":[{"text":"` + strings.Repeat("x", 4<<20) + `"}],"usage":{"total_tokens":77}}`
	for _, tc := range []struct {
		name, doc string
		want      int64
		fault     usageFault
	}{
		{"openai", `{"id":"c1","usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`, 12, usageOK},
		{"spaces everywhere", " {\n \"usage\" :\t{ \"total_tokens\" : 40 } } ", 40, usageOK},
		{"skips nested values before the path", `{"a":{"b":[1,{"c":"}]\"{"}],"d":null},"usage":{"x":[[]],"total_tokens":3}}`, 3, usageOK},
		{"zero", `{"usage":{"total_tokens":0}}`, 0, usageOK},
		{"first of repeated names", `{"usage":{"total_tokens":1,"total_tokens":2}}`, 1, usageOK},
		{"largest int64", `{"usage":{"total_tokens":9223372036854775807}}`, 9223372036854775807, usageOK},
		{"no usage", `{"id":"c1"}`, 0, usageMissing},
		{"usage null", `{"usage":null}`, 0, usageMissing},
		{"usage an array", `{"usage":[{"total_tokens":5}]}`, 0, usageMissing},
		{"not an object", `[1,2]`, 0, usageMissing},
		{"not JSON", `[DONE]`, 0, usageMissing},
		{"empty", ``, 0, usageMissing},
		{"truncated before", `{"id":"c1","usage":{"prompt`, 0, usageMissing},
		{"truncated in a string", `{"id":"c1`, 0, usageMissing},
		{"truncated at the value", `{"usage":{"total_tokens":`, 0, usageMissing},
		{"escaped name does not match", `{"usage":{"total\u005ftokens":5}}`, 0, usageMissing},
		{"string", `{"usage":{"total_tokens":"12"}}`, 0, usageNotNumber},
		{"fraction", `{"usage":{"total_tokens":1.5}}`, 0, usageNotNumber},
		{"exponent", `{"usage":{"total_tokens":1e3}}`, 0, usageNotNumber},
		{"object", `{"usage":{"total_tokens":{}}}`, 0, usageNotNumber},
		{"negative", `{"usage":{"total_tokens":-4}}`, 0, usageNegative},
		{"minus zero", `{"usage":{"total_tokens":-0}}`, 0, usageOK},
		{"overflow", `{"usage":{"total_tokens":9223372036854775808}}`, 0, usageTooLarge},
		// Either side of the one-word bit stack.
		{"63 nested arrays before the path", `{"x":` + deep[:63] + deep[len(deep)-63:] + `,"usage":{"total_tokens":9}}`, 9, usageOK},
		{"64 nested arrays before the path", `{"x":` + deep[:64] + deep[len(deep)-64:] + `,"usage":{"total_tokens":9}}`, 9, usageOK},
		{"64 nested arrays, a bracket mismatched", `{"x":` + deep[:64] + "}" + deep[len(deep)-63:] + `,"usage":{"total_tokens":9}}`, 0, usageMissing},
		{"9,999 nested arrays before the path", `{"x":` + deep + `,"usage":{"total_tokens":9}}`, 9, usageOK},
		{"9,999 nested arrays, truncated", `{"x":` + deep[:15_000], 0, usageMissing},
		// Nesting past encoding/json's bound is not read.
		{"10,000 nested arrays before the path", `{"x":[` + deep + `],"usage":{"total_tokens":9}}`, 0, usageMissing},
		{"10,000 nested objects", deepObj, 0, usageMissing},
		{"huge", huge, 77, usageOK},
		// The number counts only in a whole document.
		{"ends after the number", `{"usage":{"total_tokens":4`, 0, usageMissing},
		{"ends after the number and a space", `{"usage":{"total_tokens":400 `, 0, usageMissing},
		{"malformed after the number", `{"usage":{"total_tokens":4x00}}`, 0, usageMissing},
		{"upper-case letters after the number", `{"usage":{"total_tokens":4X00}}`, 0, usageMissing},
		{"inner object closed, outer not", `{"usage":{"total_tokens":4}`, 0, usageMissing},
		{"ends in a later member", `{"usage":{"total_tokens":4,"prompt_tokens":1`, 0, usageMissing},
		{"ends in a later string", `{"usage":{"total_tokens":4},"id":"c`, 0, usageMissing},
		{"garbage after the document", `{"usage":{"total_tokens":4}} x`, 0, usageMissing},
		{"two documents", `{"usage":{"total_tokens":4}}{"usage":{"total_tokens":5}}`, 0, usageMissing},
		{"a bare minus", `{"usage":{"total_tokens":-}}`, 0, usageMissing},
		{"a leading zero", `{"usage":{"total_tokens":012}}`, 0, usageMissing},
		{"a dangling exponent", `{"usage":{"total_tokens":1e}}`, 0, usageMissing},
		{"a string, then cut off", `{"usage":{"total_tokens":"4"`, 0, usageMissing},
		{"later members skipped", `{"usage":{"total_tokens":4,"x":[1,{"y":"}"}]},"id":"c1"}` + "\n", 4, usageOK},
		{"true", `{"usage":{"total_tokens":true}}`, 0, usageNotNumber},
		{"led by a byte-order mark", "\xEF\xBB\xBF" + `{"usage":{"total_tokens":4}}`, 0, usageMissing},
		{"array on the path, then the name later", `{"usage":[],"x":{"total_tokens":4}}`, 0, usageMissing},
		{"name on the path again in another object", `{"usage":{"a":1},"x":{"total_tokens":4}}`, 0, usageMissing},
		{"name at another depth", `{"a":{"usage":{"total_tokens":4}}}`, 0, usageMissing},
		{"nested arrays of objects on the path", `{"usage":{"x":[{"total_tokens":3}],"total_tokens":5}}`, 5, usageOK},
		{"empty containers around the path", `{"a":{},"b":[],"usage":{"c":{},"total_tokens":6,"d":[]}}`, 6, usageOK},
		{"every escape", `{"s":"\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00","usage":{"total_tokens":7}}`, 7, usageOK},
		{"UTF-8 text", `{"s":"é😀 ok","usage":{"total_tokens":8}}`, 8, usageOK},
		{"numbers of every form", `{"n":[0,-0,1.5,-2e10,3E+2,4e-1,0.0],"usage":{"total_tokens":9}}`, 9, usageOK},
		// Broken anywhere, the document is not JSON: the default is
		// charged, however well-formed the part holding the number.
		// (FAIL 2 of the attacker's pass on issue 23.)
		{"a bad literal before", `{"a":tru,"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a bad literal after", `{"usage":{"total_tokens":1},"x":tru}`, 0, usageMissing},
		{"a bad literal beside", `{"usage":{"total_tokens":1,"z":tru}}`, 0, usageMissing},
		{"a trailing comma in an array", `{"x":[1,],"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a trailing comma in an object", `{"x":{"a":1,},"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a number as a name", `{"x":{1:2},"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a missing comma", `{"x":[1 2],"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"NaN", `{"usage":{"total_tokens":1},"x":NaN}`, 0, usageMissing},
		{"a mismatched bracket", `{"x":[1},"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a leading comma", `{"x":[,1],"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a name without a value", `{"a" 1,"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a literal run on", `{"x":truex,"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"nul", `{"x":nul,"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a leading zero before", `{"x":01,"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a bare minus before", `{"x":-,"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a dot without digits", `{"x":1.,"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a bad escape", `{"x":"\q","usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a short u escape", `{"x":"\u12","usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a raw control character", "{\"x\":\"\x01\",\"usage\":{\"total_tokens\":1}}", 0, usageMissing},
		{"a raw newline in a string", "{\"x\":\"a\nb\",\"usage\":{\"total_tokens\":1}}", 0, usageMissing},
		{"invalid UTF-8 in a string", "{\"x\":\"\xff\",\"usage\":{\"total_tokens\":1}}", 0, usageMissing},
		{"a UTF-16 surrogate written in UTF-8", "{\"x\":\"\xed\xa0\x80\",\"usage\":{\"total_tokens\":1}}", 0, usageMissing},
		{"invalid UTF-8 in the name", "{\"usage\xff\":1,\"usage\":{\"total_tokens\":1}}", 0, usageMissing},
		{"a single-quoted string", `{'x':1,"usage":{"total_tokens":1}}`, 0, usageMissing},
		{"a comment", `{"usage":{"total_tokens":1}} // x`, 0, usageMissing},
	} {
		n, fault := jsonUsage([]byte(tc.doc), totalTokens)
		if n != tc.want || fault != tc.fault {
			t.Errorf("%s: got %d %v, want %d %v", tc.name, n, fault, tc.want, tc.fault)
		}
		if fault == usageOK && !json.Valid([]byte(tc.doc)) {
			t.Errorf("%s: the table expects a number from a document encoding/json refuses", tc.name)
		}
	}
}

// totalTokens is the path OpenAI-style answers report their usage at.
var totalTokens = []string{"usage", "total_tokens"}

// sseEvents frames a stream fed in the given chunks.
func sseEvents(chunks ...string) (events []string, dropped int) {
	var f sseFramer
	for _, c := range chunks {
		f.feed([]byte(c), func(data []byte) { events = append(events, string(data)) })
	}
	return events, f.dropped
}

func TestSSEFramer(t *testing.T) {
	long := strings.Repeat("x", maxSSEEvent+1)
	for _, tc := range []struct {
		name    string
		stream  string
		want    []string
		dropped int
	}{
		{"openai", "data: {\"a\":1}\n\ndata: {\"usage\":{}}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, `{"usage":{}}`, "[DONE]"}, 0},
		{"CRLF and CR line ends", "data: a\r\n\r\ndata: b\r\rdata:c\n\n", []string{"a", "b", "c"}, 0},
		{"data lines joined", "data: {\"usage\":\ndata: 1}\n\n", []string{"{\"usage\":\n1}"}, 0},
		{"fields and comments ignored", ": ping\nevent: x\nid: 3\nretry: 10\ndatum: no\ndata\n\n", []string{""}, 0},
		{"only one space removed", "data:  two\n\n", []string{" two"}, 0},
		{"event without data not dispatched", "event: x\n\n\n\n", nil, 0},
		{"unterminated event not dispatched", "data: a\n\ndata: b\n", []string{"a"}, 0},
		{"an endless line", "data: " + long, nil, 0},
		{"an overlong event is dropped, the next one kept", "data: " + long + "\ndata: more\n\ndata: ok\n\n", []string{"ok"}, 1},
		{"a leading byte-order mark is dropped", "\xEF\xBB\xBFdata: a\n\n", []string{"a"}, 0},
		{"only one byte-order mark is dropped", "\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n", []string{"b"}, 0},
		{"a byte-order mark after the start is text", "data: a\n\n\xEF\xBB\xBFdata: b\n\n", []string{"a"}, 0},
		{"the start of a byte-order mark is text", "\xEF\xBBdata: a\n\ndata: b\n\n", []string{"b"}, 0},
		{"overlong across lines", "data: " + long[:maxSSEEvent/2] + "\ndata: " + long[:maxSSEEvent/2] + "\n\ndata: ok\n\n", []string{"ok"}, 1},
	} {
		events, dropped := sseEvents(tc.stream)
		if !slices.Equal(events, tc.want) || dropped != tc.dropped {
			t.Errorf("%s: got %q dropped %d, want %q dropped %d", tc.name, events, dropped, tc.want, tc.dropped)
		}
		// The same events however the stream is cut into chunks.
		for _, size := range []int{1, 2, 3, 7} {
			if len(tc.stream) > 1000 && size < 7 {
				continue
			}
			var chunks []string
			for s := tc.stream; len(s) > 0; {
				n := min(size, len(s))
				chunks, s = append(chunks, s[:n]), s[n:]
			}
			if got, d := sseEvents(chunks...); !slices.Equal(got, tc.want) || d != tc.dropped {
				t.Errorf("%s in %d-byte chunks: got %q dropped %d", tc.name, size, got, d)
			}
		}
	}
}

// The framer's memory is bounded however long the stream's lines are.
func TestSSEFramerKeepsABoundedTail(t *testing.T) {
	var f sseFramer
	chunk := bytes.Repeat([]byte("y"), 32<<10)
	f.feed([]byte("data: "), func([]byte) { t.Fatal("dispatched") })
	for i := 0; i < 100; i++ {
		f.feed(chunk, func([]byte) { t.Fatal("dispatched") })
	}
	if c := cap(f.line) + cap(f.data); c > 2*maxSSEEvent {
		t.Fatalf("framer holds %d bytes for a 3 MiB line", c)
	}
}

func FuzzJSONUsage(f *testing.F) {
	for _, s := range []string{
		`{"usage":{"total_tokens":12}}`, `{"a":[{"b":"}"}],"usage":{"total_tokens":-1}}`, `{"usage":{"total_tokens":1.0}}`,
		`{"usage":{"total_tokens":99999999999999999999}}`, `[[[[`, `{"usage":{"total_tokens":`, `{"usage" "x"}`,
		`{"usage":{"total_tokens":4`, `{"usage":{"total_tokens":4x00}}`, `{"usage":{"total_tokens":4}} x`,
		`{"a":tru,"usage":{"total_tokens":1}}`, `{"usage":{"total_tokens":1,"z":[1,]}}`, `{"x":"\u12","usage":{"total_tokens":1}}`,
		"{\"x\":\"\xff\",\"usage\":{\"total_tokens\":1}}", `{"x":[{}],"usage":{"total_tokens":1},"y":{"a":[1,-0.5e3,"\n"]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		n, fault := jsonUsage(doc, totalTokens)
		if fault != usageOK {
			if n != 0 {
				t.Fatalf("fault %v with %d", fault, n)
			}
			return
		}
		if n < 0 {
			t.Fatalf("negative usage %d accepted", n)
		}
		// A number only from a JSON text: encoding/json's checker is
		// the oracle, and RFC 8259 text is UTF-8, which it does not check.
		if !json.Valid(doc) || !utf8.Valid(doc) {
			t.Fatalf("%q is not JSON, yet yields %d", doc, n)
		}
		// A document cut short never yields a number: only the whole one.
		if len(doc) <= 1024 {
			whole := len(bytes.TrimRight(doc, " \t\r\n"))
			for k := 0; k < whole; k++ {
				if m, fault := jsonUsage(doc[:k], totalTokens); fault == usageOK {
					t.Fatalf("%q cut to %q yields %d", doc, doc[:k], m)
				}
			}
		}
		// Where the document is valid JSON with each name once, the
		// reference decoder finds the same whole number.
		// (encoding/json matches names in any case, the last one winning.)
		lower := bytes.ToLower(doc)
		if !json.Valid(doc) || bytes.Count(lower, []byte(`"usage"`)) != 1 || bytes.Count(lower, []byte(`"total_tokens"`)) != 1 ||
			bytes.Contains(doc, []byte(`\`)) {
			return
		}
		var v struct {
			Usage struct {
				TotalTokens json.Number `json:"total_tokens"`
			} `json:"usage"`
		}
		d := json.NewDecoder(bytes.NewReader(doc))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return
		}
		if want, err := v.Usage.TotalTokens.Int64(); err != nil || want != n {
			t.Fatalf("got %d, encoding/json reads %q", n, v.Usage.TotalTokens)
		}
	})
}

func FuzzSSEFramer(f *testing.F) {
	for _, s := range []string{
		"data: {\"usage\":{\"total_tokens\":3}}\n\ndata: [DONE]\n\n", "data: a\r\n\r\n", "data:x\rdata:y\r\r", ": c\n\ndata\n\n",
		"\xEF\xBB\xBFdata: {\"usage\":{\"total_tokens\":3}}\n\n", "\xEF\xBBdata: a\n\n",
	} {
		f.Add([]byte(s), uint16(3))
	}
	f.Fuzz(func(t *testing.T, stream []byte, cut uint16) {
		whole, wholeDropped := sseEvents(string(stream))
		at := int(cut) % (len(stream) + 1)
		split, splitDropped := sseEvents(string(stream[:at]), string(stream[at:]))
		if !slices.Equal(whole, split) || wholeDropped != splitDropped {
			t.Fatalf("cut at %d: %q (%d dropped), whole: %q (%d dropped)", at, split, splitDropped, whole, wholeDropped)
		}
		for _, e := range whole {
			if len(e) > maxSSEEvent {
				t.Fatalf("event of %d bytes", len(e))
			}
		}
	})
}
