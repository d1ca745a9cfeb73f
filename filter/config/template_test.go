package config

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/request/template"
)

func init() {
	addCases(templateGoodConfigs, templateBadCases)
}

func resp(fields string) string { return `{"response": {` + fields + `}}` }

var templateGoodConfigs = []string{
	resp(`"reply_headers": {"x-envoy-ratelimited": "true"}, "grpc": false, "near_limit_ratio": 0.5`),
	resp(`"body": "template", "templates": {"rate_limited": "{\"ok\": false, \"error\": {\"code\": \"{limit}\", \"retry\": {retry_after}}}"}`),
	resp(`"body": "template", "templates": {"content_type": "text/plain; charset=utf-8", "circuit_open": "{upstream} is down {path}",
	  "concurrency_limited": "{limit}: {max_in_flight}", "invalid_cost": "bad cost for {limit}", "missing_key": "no {header:x-tenant-id}"}`),
}

var templateBadCases = []badCase{
	{name: "template unknown placeholder", in: resp(`"body": "template", "templates": {"rate_limited": "{\"a\": \"{limt}\"}"}`),
		want:          []string{`response.templates.rate_limited: unknown placeholder {limt}; rate_limited knows {limit} {limit_value} {window_seconds} {retry_after} {status} {route} {path} {header:<name>} at byte 7`},
		schemaAccepts: true},
	{name: "template placeholder of another kind", in: resp(`"body": "template", "templates": {"rate_limited": "{upstream}", "content_type": "text/plain"}`),
		want:          []string{`response.templates.rate_limited: placeholder {upstream} is not known in rate_limited, which knows {limit} {limit_value} {window_seconds} {retry_after} {status} {route} {path} {header:<name>} at byte 0`},
		schemaAccepts: true},
	{name: "template unbalanced braces", in: resp(`"body": "template", "templates": {"content_type": "text/plain", "rate_limited": "{limit", "circuit_open": "x}", "invalid_cost": "{ {status}"}`),
		want: []string{
			`response.templates.rate_limited: unbalanced braces: placeholder at byte 0 is not closed`,
			`response.templates.circuit_open: unbalanced braces: } at byte 1 closes nothing`,
			`response.templates.invalid_cost: unbalanced braces: 1 { not closed`},
		schemaAccepts: true},
	{name: "template not JSON", in: resp(`"body": "template", "templates": {"rate_limited": "{\"a\": {limit}}"}`),
		want:          []string{`response.templates.rate_limited: is not valid JSON with sample values (invalid character 's' looking for beginning of value): {"a": s\"a\\m\nple}`},
		schemaAccepts: true},
	{name: "template too large", in: resp(`"body": "template", "templates": {"content_type": "text/plain", "rate_limited": "` + strings.Repeat("x", 4097) + `"}`),
		want: []string{`response.templates.rate_limited: is 4097 bytes, more than 4096`}},
	{name: "template without templates", in: resp(`"body": "template"`),
		want: []string{`response.body: "template" needs response.templates`}},
	{name: "templates without template body", in: resp(`"templates": {"rate_limited": "{}"}`),
		want: []string{`response.templates: needs body "template"`}},
	{name: "templates empty", in: resp(`"body": "template", "templates": {}`),
		want: []string{`response.templates: needs at least one of rate_limited, circuit_open, concurrency_limited, invalid_cost, missing_key`}},
	{name: "template content type", in: resp(`"body": "template", "templates": {"content_type": "json", "rate_limited": "{}"}`),
		want: []string{`response.templates.content_type: must be a media type such as application/json, got "json"`}, schemaAccepts: true},
	{name: "reply headers the filter sets", in: resp(`"reply_headers": {"content-type": "text/plain", "x-ok": "1", "Grpc-Status": "0"}`),
		want: []string{`response.reply_headers.content-type: is set by the filter itself`,
			`response.reply_headers.grpc-status: is set by the filter itself`}, schemaAccepts: true},
	{name: "reply header with a NUL", in: resp(`"reply_headers": {"x-bad\u0000": "1", "x-v": "a\u0000"}`),
		want: []string{`response.reply_headers["x-bad\x00"]: must be a header name (an RFC 9110 token of at most 256 characters)`,
			`response.reply_headers.x-v: must be a header value: at most 4096 visible characters, spaces or tabs, without leading or trailing whitespace`}},
	{name: "near limit ratio out of range", in: resp(`"near_limit_ratio": 0`),
		want: []string{`response.near_limit_ratio: must be a number above 0 and at most 1, got 0`}},
	{name: "near limit ratio above 1", in: resp(`"near_limit_ratio": 1.5`),
		want: []string{`response.near_limit_ratio: must be a number above 0 and at most 1, got 1.5`}},
	{name: "grpc not a boolean", in: resp(`"grpc": "yes"`), want: []string{`response.grpc: must be a boolean`}},
}

func TestTemplateParts(t *testing.T) {
	c := mustParse(t, resp(`"body": "template", "templates": {"content_type": "application/problem+json",
		"rate_limited": "{\"l\": \"{limit}\", \"n\": {limit_value}, \"t\": \"{header:X-Tenant}\"}"}`))
	tpl := c.Response.Templates
	if tpl.Escape != template.EscapeJSON || tpl.ContentType != "application/problem+json" {
		t.Fatalf("templates = %+v", tpl)
	}
	got := tpl.ByKind[ReplyRateLimited].Render(template.EscapeJSON, func(p template.Placeholder, h string) string {
		switch p {
		case template.PlaceholderLimit:
			return `a"b`
		case template.PlaceholderLimitValue:
			return "7"
		case template.PlaceholderHeader:
			return h + "=\xff\n"
		}
		return "?"
	})
	if want := `{"l": "a\"b", "n": 7, "t": "x-tenant=` + "\ufffd" + `\n"}`; string(got) != want {
		t.Errorf("rendered %s, want %s", got, want)
	}
}

// Values are escaped as the content type needs: markup for HTML and XML,
// JSON for JSON, nothing for other types.
func TestTemplateEscaping(t *testing.T) {
	for _, tc := range []struct {
		ct   string
		want string
	}{
		{"text/html", `<p title="&lt;b&gt;&#34;it&#39;s&#34; &amp; co` + "\ufffd" + `">x</p>`},
		{"Text/HTML; charset=utf-8", `<p title="&lt;b&gt;&#34;it&#39;s&#34; &amp; co` + "\ufffd" + `">x</p>`},
		{"application/xhtml+xml", `<p title="&lt;b&gt;&#34;it&#39;s&#34; &amp; co` + "\ufffd" + `">x</p>`},
		{"application/atom+xml", `<p title="&lt;b&gt;&#34;it&#39;s&#34; &amp; co` + "\ufffd" + `">x</p>`},
		{"text/plain", `<p title="<b>"it's" & co` + "\xff" + `">x</p>`},
	} {
		src, _ := json.Marshal(`<p title="{header:x-name}">x</p>`)
		c := mustParse(t, resp(`"body": "template", "templates": {"content_type": "`+tc.ct+`", "rate_limited": `+string(src)+`}`))
		tpl := c.Response.Templates
		got := tpl.ByKind[ReplyRateLimited].Render(tpl.Escape, func(template.Placeholder, string) string { return `<b>"it's" & co` + "\xff" })
		if string(got) != tc.want {
			t.Errorf("%s: rendered %s, want %s", tc.ct, got, tc.want)
		}
	}
}

// FuzzTemplate: any template text either fails with errors or parses; an
// accepted JSON template renders valid JSON for any text values and
// positive numbers, which is what the engine substitutes.
func FuzzTemplate(f *testing.F) {
	f.Add(`{"ok": false, "error": {"code": "{limit}", "retry": {retry_after}}}`, "a\"b", uint16(30))
	f.Add(`{"a": "{header:x-tenant-id}", "n": -{status}.{limit_value}}`, "\xff\n", uint16(1))
	f.Add(`{{limit}`, "", uint16(0))
	f.Fuzz(func(t *testing.T, src, text string, n uint16) {
		if len(src) > 2*MaxTemplateSize {
			return
		}
		doc, _ := json.Marshal(map[string]any{"response": map[string]any{"body": "template",
			"templates": map[string]string{"rate_limited": src}}})
		c, err := Parse(doc)
		if err != nil {
			return
		}
		tpl := c.Response.Templates.ByKind[ReplyRateLimited]
		out := tpl.Render(template.EscapeJSON, func(p template.Placeholder, _ string) string {
			if sampleValue(p, "") == "1" {
				return strconv.Itoa(int(n) + 1)
			}
			return text
		})
		if !json.Valid(out) {
			t.Fatalf("accepted template %q renders invalid JSON %q", src, out)
		}
	})
}

// FuzzTemplateMarkup: in an HTML template every <, >, " and ' of the
// reply is the template's own, whatever a value holds.
func FuzzTemplateMarkup(f *testing.F) {
	f.Add(`<p title="{header:x-name}">{limit}</p>`, `<script>"it's" & co</script>`)
	f.Add(`{header:a}<{header:b}>`, "\xff<\xef\xbb")
	f.Fuzz(func(t *testing.T, src, text string) {
		if len(src) > 2*MaxTemplateSize {
			return
		}
		doc, _ := json.Marshal(map[string]any{"response": map[string]any{"body": "template",
			"templates": map[string]string{"content_type": "text/html", "rate_limited": src}}})
		c, err := Parse(doc)
		if err != nil {
			return
		}
		tpl := c.Response.Templates.ByKind[ReplyRateLimited]
		out := tpl.Render(c.Response.Templates.Escape, func(template.Placeholder, string) string { return text })
		var literal []byte
		for _, part := range tpl.Parts {
			if part.Placeholder == template.PlaceholderNone {
				literal = append(literal, part.Text...)
			}
		}
		for _, c := range []string{"<", ">", `"`, "'"} {
			if bytes.Count(out, []byte(c)) != bytes.Count(literal, []byte(c)) {
				t.Fatalf("%q with %q renders %q: a value added %s", src, text, out, c)
			}
		}
	})
}

func TestMediaType(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"application/json", "application/json", true},
		{"Application/Problem+JSON; charset=utf-8", "application/problem+json", true},
		{`text/plain; charset="utf-8"`, "text/plain", true},
		{`text/plain; q="a\"b"`, "text/plain", true},
		{"json", "", false},
		{"text/", "", false},
		{"/plain", "", false},
		{"text/pl ain", "", false},
		{"text/plain; charset", "", false},
		{"text/plain; =utf-8", "", false},
		{`text/plain; charset="utf-8`, "", false},
		{`text/plain; charset="a\"`, "", false},
		{"text/plain; a=b c", "", false},
	} {
		got, ok := mediaType(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("mediaType(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
