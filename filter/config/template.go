package config

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluice-proxy/sluice/filter/request/template"
	"github.com/tidwall/gjson"
)

// ReplyKind is a kind of local reply the filter sends, each with its own
// template.
type ReplyKind uint8

const (
	ReplyRateLimited ReplyKind = iota
	ReplyCircuitOpen
	ReplyConcurrencyLimited
	ReplyInvalidCost
	ReplyMissingKey
	// ReplyKinds is the number of kinds.
	ReplyKinds
)

var replyKindNames = [ReplyKinds]string{"rate_limited", "circuit_open", "concurrency_limited", "invalid_cost", "missing_key"}

func (k ReplyKind) String() string { return replyKindNames[k] }

var placeholderNames = []string{"", "limit", "limit_value", "window_seconds", "retry_after", "status",
	"upstream", "max_in_flight", "route", "path", "header:<name>"}

// placeholdersOf are the placeholders each kind of reply knows.
var placeholdersOf = [ReplyKinds][]template.Placeholder{
	ReplyRateLimited: {template.PlaceholderLimit, template.PlaceholderLimitValue, template.PlaceholderWindowSeconds, template.PlaceholderRetryAfter,
		template.PlaceholderStatus, template.PlaceholderRoute, template.PlaceholderPath, template.PlaceholderHeader},
	ReplyCircuitOpen: {template.PlaceholderUpstream, template.PlaceholderRetryAfter, template.PlaceholderStatus, template.PlaceholderRoute, template.PlaceholderPath,
		template.PlaceholderHeader},
	ReplyConcurrencyLimited: {template.PlaceholderLimit, template.PlaceholderMaxInFlight, template.PlaceholderStatus, template.PlaceholderRoute,
		template.PlaceholderPath, template.PlaceholderHeader},
	ReplyInvalidCost: {template.PlaceholderLimit, template.PlaceholderStatus, template.PlaceholderRoute, template.PlaceholderPath, template.PlaceholderHeader},
	ReplyMissingKey:  {template.PlaceholderLimit, template.PlaceholderStatus, template.PlaceholderRoute, template.PlaceholderPath, template.PlaceholderHeader},
}

// Templates are response.templates.
type Templates struct {
	ContentType string
	// Escape is how ContentType needs values escaped.
	Escape template.Escaping
	// ByKind is nil for a kind without a template, which gets the
	// built-in "json" body.
	ByKind [ReplyKinds]*template.Template
}

// MaxTemplateSize bounds one template, in bytes.
const MaxTemplateSize = 4096

// DefaultNearLimitRatio is response.near_limit_ratio's default, as
// envoyproxy/ratelimit's.
const DefaultNearLimitRatio = 0.8

// DefaultTemplateContentType is templates.content_type's default.
const DefaultTemplateContentType = "application/json"

var templateFields = append([]string{"content_type"}, replyKindNames[:]...)

func (p *parser) templates(o *object) *Templates {
	t := &Templates{ContentType: DefaultTemplateContentType}
	if ct, ok := o.str("content_type"); ok {
		if _, ok := mediaType(ct); !ok || !headerValue(ct) {
			o.errorf("content_type", "must be a media type such as application/json, got %s", Quote(ct))
		} else {
			t.ContentType = ct
		}
	}
	t.Escape = EscapingOf(t.ContentType)
	some := false
	for k := ReplyKind(0); k < ReplyKinds; k++ {
		src, ok := o.str(k.String())
		if !ok {
			continue
		}
		some = true
		if tpl := p.template(o.path1(k.String()), o.offset(k.String()), src, k, t.Escape == template.EscapeJSON); tpl != nil {
			t.ByKind[k] = tpl
		}
	}
	if !some {
		o.p.errorf(o.path, o.at, "needs at least one of %s", strings.Join(replyKindNames[:], ", "))
	}
	return t
}

// EscapingOf is the escaping a content type needs: JSON for
// application/json and any +json type; markup for text/html,
// application/xhtml+xml, text/xml, application/xml and any +xml type;
// none for the rest.
func EscapingOf(ct string) template.Escaping {
	mt, ok := mediaType(ct)
	switch {
	case !ok:
		return template.EscapeNone
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return template.EscapeJSON
	case mt == "text/html" || mt == "application/xhtml+xml" || mt == "text/xml" || mt == "application/xml" ||
		strings.HasSuffix(mt, "+xml"):
		return template.EscapeMarkup
	}
	return template.EscapeNone
}

// mediaType returns the lower-cased type/subtype of a Content-Type value
// (RFC 9110 section 8.3.1) and whether the whole value is well formed:
// type and subtype are tokens, and each parameter is token=token or
// token=quoted-string. It is written here rather than taken from package
// mime, whose extension tables link WASI file calls into the wasm that
// Envoy 1.33's runtime does not provide.
func mediaType(ct string) (string, bool) {
	full, params, _ := strings.Cut(ct, ";")
	full = strings.TrimSpace(full)
	typ, sub, ok := strings.Cut(full, "/")
	if !ok || !headerToken(typ) || !headerToken(sub) {
		return "", false
	}
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		name, value, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !headerToken(name) {
			return "", false
		}
		if !headerToken(value) && !isQuotedString(value) {
			return "", false
		}
	}
	return strings.ToLower(full), true
}

func isQuotedString(s string) bool {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
			if i == len(s)-1 {
				return false
			}
		case c == '"' || (c < 0x20 && c != '\t') || c == 0x7f:
			return false
		}
	}
	return true
}

// template parses src: {name} is a placeholder, {header:<name>} a request
// header; any other brace is literal, but literal braces must balance and
// a brace followed by a letter must be a whole placeholder, so a typo
// such as {limit or {limt} is an error rather than text sent to clients.
func (p *parser) template(path string, at int, src string, kind ReplyKind, isJSON bool) *template.Template {
	if len(src) > MaxTemplateSize {
		p.errorf(path, at, "is %d bytes, more than %d", len(src), MaxTemplateSize)
		return nil
	}
	t := &template.Template{Source: src}
	bad := false
	depth := 0
	lit := 0
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '}':
			depth--
			if depth < 0 {
				p.errorf(path, at, "unbalanced braces: } at byte %d closes nothing", i)
				return nil
			}
		case '{':
			if i+1 >= len(src) || !isPlaceholderStart(src[i+1]) {
				depth++
				continue
			}
			end := strings.IndexByte(src[i:], '}')
			if end < 0 {
				p.errorf(path, at, "unbalanced braces: placeholder at byte %d is not closed", i)
				return nil
			}
			name := src[i+1 : i+end]
			ph, arg, err := placeholderOf(name, kind)
			if err != "" {
				p.errorf(path, at, "%s at byte %d", oneLine(err), i)
				bad = true
			}
			if lit < i {
				t.Parts = append(t.Parts, template.Part{Text: src[lit:i]})
			}
			t.Parts = append(t.Parts, template.Part{Placeholder: ph, Text: arg})
			i += end
			lit = i + 1
		}
	}
	if depth != 0 {
		p.errorf(path, at, "unbalanced braces: %d { not closed", depth)
		return nil
	}
	if lit < len(src) {
		t.Parts = append(t.Parts, template.Part{Text: src[lit:]})
	}
	if bad {
		return nil
	}
	if isJSON {
		sample := t.Render(template.EscapeJSON, sampleValue)
		if !json.Valid(sample) {
			var v any
			err := json.Unmarshal(sample, &v)
			p.errorf(path, at, "is not valid JSON with sample values (%v): %s", err, Excerpt(string(sample)))
			return nil
		}
	}
	return t
}

func isPlaceholderStart(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }

// placeholderOf resolves a placeholder name for kind; err is non-empty
// for a name unknown or unknown to this kind of reply.
func placeholderOf(name string, kind ReplyKind) (template.Placeholder, string, string) {
	ph, arg := template.PlaceholderNone, ""
	if h, ok := strings.CutPrefix(name, "header:"); ok {
		if !headerToken(h) {
			return 0, "", fmt.Sprintf("placeholder {%s} does not name a header", Excerpt(name))
		}
		ph, arg = template.PlaceholderHeader, strings.ToLower(h)
	} else {
		for i, n := range placeholderNames {
			if i > 0 && n == name {
				ph = template.Placeholder(i)
			}
		}
	}
	known := placeholdersOf[kind]
	if ph == template.PlaceholderNone {
		return 0, "", fmt.Sprintf("unknown placeholder {%s}; %s knows %s", Excerpt(name), kind, placeholderList(known))
	}
	for _, k := range known {
		if k == ph {
			return ph, arg, ""
		}
	}
	return 0, "", fmt.Sprintf("placeholder {%s} is not known in %s, which knows %s", Excerpt(name), kind, placeholderList(known))
}

func placeholderList(ps []template.Placeholder) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = "{" + placeholderNames[p] + "}"
	}
	return strings.Join(names, " ")
}

// sampleValue is what validation substitutes: text with characters JSON
// must escape, and numbers, as real values would be.
func sampleValue(p template.Placeholder, _ string) string {
	switch p {
	case template.PlaceholderLimitValue, template.PlaceholderWindowSeconds, template.PlaceholderRetryAfter, template.PlaceholderStatus, template.PlaceholderMaxInFlight:
		return "1"
	}
	return "s\"a\\m\nple"
}

// responseContract reads what #17 added to response: reply_headers,
// templates and grpc.
func (p *parser) responseContract(o *object, r *Response) {
	if v, ok := o.fields["reply_headers"]; ok {
		r.ReplyHeaders = p.headerMap(o.path1("reply_headers"), v)
		for _, kv := range r.ReplyHeaders {
			if kv[0] == "content-type" || kv[0] == "retry-after" || strings.HasPrefix(kv[0], "grpc-") {
				o.p.errorf(FieldPath(o.path1("reply_headers"), kv[0]), o.offset("reply_headers"), "is set by the filter itself")
			}
		}
	}
	if b, ok := o.boolean("grpc"); ok {
		r.PlainGRPC = !b
	}
	if v, ok := o.fields["near_limit_ratio"]; ok {
		if v.Type != gjson.Number || v.Num <= 0 || v.Num > 1 {
			o.errorf("near_limit_ratio", "must be a number above 0 and at most 1, got %s", Excerpt(v.Raw))
		} else {
			r.NearLimitRatio = v.Num
		}
	}
	if c := o.child("templates", templateFields...); c != nil {
		r.Templates = p.templates(c)
	}
	if r.Body == BodyTemplate && r.Templates == nil {
		o.errorf("body", `"template" needs response.templates`)
	}
	if r.Body != BodyTemplate && o.has("templates") {
		o.errorf("templates", `needs body "template"`)
	}
}

// oneLine escapes the control characters of s (a newline as \n, others
// as \xNN), so a config error quoting operator text stays one line.
func oneLine(s string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\n':
			b.WriteString(`\n`)
		case c < 0x20 || c == 0x7f:
			b.WriteString(`\x`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
