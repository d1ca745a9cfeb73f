package filtertest

import (
	"strings"
	"testing"
)

// Usage read from the response body: cost_from_response with json.

func init() { Cases = append(Cases, bodyCases...) }

// wantBody checks that the client got the upstream's body unchanged.
func wantBody(t *testing.T, what string, resp Response, chunks []string) {
	t.Helper()
	if want := strings.Join(chunks, ""); string(resp.Body) != want {
		t.Fatalf("%s: the client got %q, want the upstream's %q", what, resp.Body, want)
	}
}

const tokensFromBody = `{"limits":[{"name":"tokens","key":[],"limit":100,"window":"10s",
	"cost_from_response":{"json":"usage.total_tokens","max_body_bytes":64}}]}`

var bodyCases = []Case{
	{
		Name:    "usage from a JSON body is charged when the body ends",
		Config:  tokensFromBody,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			json60 := []string{`{"id":"a","usage":{"total_`, `tokens":60}}`}
			// The headers go out before the body is read: they count only
			// the unit taken at admission.
			resp := h.Do(t, get("/").streaming("application/json", json60...))
			wantRemaining(t, "first answer", resp, "99")
			wantBody(t, "first answer", resp, json60)
			// 100 - 1 - 59 = 40 left; this one takes a unit.
			resp = h.Do(t, get("/").on(1).streaming("application/json; charset=utf-8", `{"usage":{"total_tokens":30}}`))
			wantRemaining(t, "after 60", resp, "39")
			// 10 left.
			wantRemaining(t, "no usage in the body", h.Do(t, get("/").streaming("application/json", `{"id":"c"}`)), "9")
			wantRemaining(t, "negative usage", h.Do(t, get("/").streaming("application/json", `{"usage":{"total_tokens":-5}}`)), "8")
			// The default 1 each: the units taken at admission.
			wantRemaining(t, "defaults charged nothing more", h.Do(t, get("/")), "7")
			wantCounter(t, h, "sluice.limit.tokens.response_cost", 60+30+1+1+1)
			wantCounter(t, h, "sluice.limit.tokens.response_usage_missing", 2) // the bodyless answer too
			wantCounter(t, h, "sluice.limit.tokens.invalid_response_cost", 1)
		},
	},
	{
		Name:    "a JSON body over max_body_bytes passes whole and is charged the default",
		Config:  strings.Replace(tokensFromBody, `"max_body_bytes":64`, `"max_body_bytes":64,"default":5`, 1),
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			big := []string{`{"choices":[{"text":"` + strings.Repeat("x", 40), `"}],"usage":{"total_tokens":50}}`}
			resp := h.Do(t, get("/").streaming("application/json", big...))
			wantRemaining(t, "big answer", resp, "99")
			wantBody(t, "big answer", resp, big)
			wantRemaining(t, "charged 5", h.Do(t, get("/")), "94")
			wantCounter(t, h, "sluice.limit.tokens.response_body_too_large", 1)
		},
	},
	{
		Name:    "an event stream is charged the usage of its last event with the path, and passes unchanged",
		Config:  tokensFromBody,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			events := []string{
				"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n",
				"data: {\"usage\":{\"total_tokens\":5}}\n\ndata: {\"choices\":[],\"us",
				"age\":{\"total_tokens\":70}}\r\n\r\n: done\n\n",
				"data: [DONE]\n\n",
			}
			resp := h.Do(t, get("/").streaming("text/event-stream", events...))
			wantRemaining(t, "streamed answer", resp, "99")
			wantBody(t, "streamed answer", resp, events)
			// 100 - 1 - 69 = 30 left.
			wantRemaining(t, "after 70", h.Do(t, get("/").on(1)), "29")
			wantCounter(t, h, "sluice.limit.tokens.response_cost", 70+1)
			// No bound on the stream: it is never buffered.
			long := []string{"data: {\"pad\":\"" + strings.Repeat("y", 200) + "\"}\n\n", "data: {\"usage\":{\"total_tokens\":3}}\n\n"}
			wantBody(t, "a long stream", h.Do(t, get("/").streaming("text/event-stream", long...)), long)
			wantCounter(t, h, "sluice.limit.tokens.response_body_too_large", 0)
			wantCounter(t, h, "sluice.limit.tokens.response_cost", 70+1+3)
		},
	},
	{
		Name:    "a JSON body cut off or broken after the number is charged the default, never the number",
		Config:  strings.Replace(tokensFromBody, `"max_body_bytes":64`, `"max_body_bytes":64,"default":5`, 1),
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			for i, body := range [][]string{
				{`{"usage":{"total_tokens":4`},          // ends early
				{`{"usage":{"total_`, `tokens":4x00}}`}, // malformed after the number
				{`{"usage":{"total_tokens":40}`},        // the outer object never closes
			} {
				resp := h.Do(t, get("/").on(i%2).streaming("application/json", body...))
				wantBody(t, "broken answer", resp, body)
			}
			// Three defaults of 5, one unit each taken at admission:
			// 100 - 3*5 = 85 left, and this request takes one more.
			wantRemaining(t, "after three defaults", h.Do(t, get("/")), "84")
			// The bodyless answer to that request is a fourth.
			wantCounter(t, h, "sluice.limit.tokens.response_usage_missing", 4)
			wantCounter(t, h, "sluice.limit.tokens.response_cost", 4*5)
		},
	},
	{
		Name:    "a body that is not JSON anywhere, before or beside a well-formed number, is charged the default, never the number",
		Config:  strings.Replace(tokensFromBody, `"max_body_bytes":64`, `"max_body_bytes":64,"default":5`, 1),
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			for i, body := range []struct{ contentType, body string }{
				{"application/json", `{"a":tru,"usage":{"total_tokens":60}}`},            // a bad literal before
				{"application/json", `{"usage":{"total_tokens":60,"z":"\q"}}`},           // a bad escape beside
				{"application/json", "{\"x\":\"\xff\",\"usage\":{\"total_tokens\":60}}"}, // not UTF-8
				{"text/event-stream", "data: {\"x\":[1,],\"usage\":{\"total_tokens\":60}}\n\n"},
			} {
				resp := h.Do(t, get("/").on(i%2).streaming(body.contentType, body.body))
				wantBody(t, "broken answer", resp, []string{body.body})
			}
			// Four defaults of 5 (each 60 read from the body would leave
			// nothing): 100 - 4*5 = 80 left, and this request takes one.
			wantRemaining(t, "after four defaults", h.Do(t, get("/")), "79")
			wantCounter(t, h, "sluice.limit.tokens.response_usage_missing", 5) // the bodyless answer too
			wantCounter(t, h, "sluice.limit.tokens.response_cost", 5*5)
		},
	},
	{
		Name:    "an event stream that starts with a byte-order mark is read from its first event",
		Config:  tokensFromBody,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			// The mark is split between chunks, and the only event with
			// the path is the first.
			events := []string{"\xEF\xBB", "\xBFdata: {\"usage\":{\"total_tokens\":50}}\n\n", "data: [DONE]\n\n"}
			resp := h.Do(t, get("/").streaming("text/event-stream", events...))
			wantBody(t, "streamed answer", resp, events)
			// 100 - 50 = 50 left, and this request takes one more.
			wantRemaining(t, "after 50", h.Do(t, get("/")), "49")
			// Only that bodyless answer missed its usage.
			wantCounter(t, h, "sluice.limit.tokens.response_usage_missing", 1)
			wantCounter(t, h, "sluice.limit.tokens.response_cost", 50+1)
		},
	},
}
