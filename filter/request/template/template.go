// Package template holds the body templates of the filter's local replies
// as the request path renders them: literal text and placeholders, each
// value escaped as the reply's content type needs, so that a value a
// client sends (a header) cannot change the structure of the reply.
// Package config parses and validates templates into this form.
package template

import (
	"encoding/json"
	"strings"
)

// Placeholder is a value a template inserts.
type Placeholder uint8

const (
	// PlaceholderNone marks a literal part.
	PlaceholderNone Placeholder = iota
	PlaceholderLimit
	PlaceholderLimitValue
	PlaceholderWindowSeconds
	PlaceholderRetryAfter
	PlaceholderStatus
	PlaceholderUpstream
	PlaceholderMaxInFlight
	PlaceholderRoute
	PlaceholderPath
	// PlaceholderHeader is {header:<name>}, a request header's first
	// value, "" when absent.
	PlaceholderHeader
)

// Part is literal Text, or a Placeholder (with Text the header name of
// PlaceholderHeader).
type Part struct {
	Placeholder Placeholder
	Text        string
}

// Template is a parsed body template.
type Template struct {
	Source string
	Parts  []Part
}

// Escaping is how a template escapes the values it inserts, chosen by
// its content type, so a header value a client sends cannot change the
// structure of the reply.
type Escaping uint8

const (
	// EscapeNone inserts values as they are (text/plain and any type
	// not below).
	EscapeNone Escaping = iota
	// EscapeJSON escapes them as the inside of a JSON string.
	EscapeJSON
	// EscapeMarkup escapes &, <, >, " and ' as character references,
	// for HTML and XML.
	EscapeMarkup
)

// Render substitutes value(placeholder, header name) into the template,
// escaped as esc says: for JSON without quotes (the template supplies
// them).
func (t *Template) Render(esc Escaping, value func(Placeholder, string) string) []byte {
	b := make([]byte, 0, len(t.Source)+64)
	for _, part := range t.Parts {
		if part.Placeholder == PlaceholderNone {
			b = append(b, part.Text...)
			continue
		}
		v := value(part.Placeholder, part.Text)
		switch esc {
		case EscapeJSON:
			b = appendJSONStringContent(b, v)
		case EscapeMarkup:
			b = appendMarkupEscaped(b, v)
		default:
			b = append(b, v...)
		}
	}
	return b
}

// appendMarkupEscaped appends s with the five characters that can end
// text or a quoted attribute in HTML or XML written as character
// references; invalid UTF-8 becomes U+FFFD, as in JSON.
func appendMarkupEscaped(b []byte, s string) []byte {
	s = strings.ToValidUTF8(s, "\ufffd")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '&':
			b = append(b, "&amp;"...)
		case '<':
			b = append(b, "&lt;"...)
		case '>':
			b = append(b, "&gt;"...)
		case '"':
			b = append(b, "&#34;"...)
		case '\'':
			b = append(b, "&#39;"...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendJSONStringContent appends s escaped as the inside of a JSON
// string; invalid UTF-8 becomes U+FFFD, so the result is always valid.
func appendJSONStringContent(b []byte, s string) []byte {
	q, _ := json.Marshal(strings.ToValidUTF8(s, "\ufffd"))
	// json.Marshal escapes <, > and & for HTML; harmless in a body.
	return append(b, q[1:len(q)-1]...)
}
