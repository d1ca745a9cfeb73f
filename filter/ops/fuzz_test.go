package ops

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/engine"
)

// fuzzConfig reads every part of a request explain can be told about, so
// hostile requests reach keys, matches, costs and bulkheads.
const fuzzConfig = `{"client_ip": {"sources": ["xff", "header:x-real-ip", "peer"]},
 "limits": [
  {"name": "a", "key": ["client_ip/24/64", "header:x-k", "query:q", "cookie:c", "path_segment:1", "metadata:ns:a.b", "host", "method", "route", "cluster"],
   "requests_per_second": 5, "cost": {"header": "x-cost", "max": 5}, "on_missing_key": "deny",
   "match": {"path_regex": "/.*", "headers": [{"name": "x-h", "present": false}], "query": [{"name": "z", "present": false}], "not": {"client_cidrs": ["192.0.2.0/24"]}}},
  {"name": "b", "key": ["header:x-k"], "requests_per_second": 1, "overrides": {"gold": {"requests_per_second": 9}, "bad": {"block": true}}, "replaces": ["c"]},
  {"name": "c", "key": ["path"], "requests_per_second": 1}],
 "breakers": [{"name": "br", "per": "route"}],
 "concurrency": [{"name": "cc", "key": ["header:x-k"], "max_in_flight": 1}]}`

// FuzzExplainArgs gives explain hostile command lines (arguments split at
// newlines): parsing never panics, what it accepts is a request the
// engine can be handed, and explaining it never panics either.
func FuzzExplainArgs(f *testing.F) {
	for _, s := range []string{
		"--config\nc\n/",
		"--config=c\n-X\nPOST\nhttp://h:1/a/b?q=%00&z\n-H\nX-K: gold\n-H\nCookie: c=1; d=2\n--client\n[::1]:80",
		"--config\nc\nGET\n/p\n--metadata\nns:a.b=1\n--route=r\n--cluster\nk\n--show-keys\n--json",
		"--config\nc\n-H\nx-forwarded-for: 1.2.3.4, ::ffff:5.6.7.8\n-H\nx-cost: 99999999999999999999\n/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parseRequestArgs(strings.Split(s, "\n"))
		if err != nil {
			return
		}
		r := a.req
		if !strings.HasPrefix(r.Path, "/") || !engine.IsHTTPToken(r.Method) || r.Method != strings.ToUpper(r.Method) || r.Authority == "" {
			t.Fatalf("accepted a request no client sends: %+v", r)
		}
		for _, h := range r.Headers {
			if h[0] != strings.ToLower(h[0]) || !engine.IsHTTPToken(h[0]) || !engine.IsFieldValue(h[1]) {
				t.Fatalf("accepted header %q", h)
			}
		}
		ex, err := Explain([]byte(fuzzConfig), r, explainNow, a.showKeys)
		if err != nil {
			t.Fatalf("explain: %v", err)
		}
		if len(ex.Limits) != 3 {
			t.Fatalf("limits %+v", ex.Limits)
		}
	})
}

// FuzzCheck gives check hostile files, as JSON or YAML: it never panics,
// and a file where it finds no configuration is an error, never a pass.
func FuzzCheck(f *testing.F) {
	f.Add([]byte(bootstrap(false, inlineSluice(xffConfig))))
	f.Add([]byte(ecdsFile))
	f.Add([]byte(strings.Replace(bootstrap(true, inlineSluice(xffConfig)), "use_remote_address: true", "use_remote_address: '"+strings.Repeat("t", 3000)+"'", 1)))
	f.Add([]byte(strings.Replace(bootstrap(true, inlineSluice(xffConfig)), "use_remote_address: true", "use_remote_address: [TRUE]", 1)))
	f.Add([]byte("kind: WasmPlugin\nspec:\n  pluginConfig: {limits: [{name: a, requests_per_second: 1}]}\n"))
	// The spellings Envoy reads a field in: camelCase, merge keys, and the
	// duplicates it refuses.
	for _, ura := range []string{"useRemoteAddress: true", "<<: {use_remote_address: true}", "<<: [*m, {useRemoteAddress: false}]",
		"use_remote_address: true\n                use_remote_address: false", "use_remote_address: false\n                useRemoteAddress: true"} {
		f.Add([]byte(strings.Replace(bootstrap(true, inlineSluice(peerAndAdmin)), "use_remote_address: true", ura, 1)))
	}
	f.Add([]byte(bootstrap(true, strings.NewReplacer("root_id:", "rootId:", "vm_config:", "<<: &m {vmConfig: {vmId: x}}\n                        vm_config:").Replace(inlineSluice(peerConfig)))))
	// A gRPC limits cluster, with HTTP/2 by an alias and without.
	f.Add([]byte(bootstrap(true, inlineSluice(grpcConfig)) + grpcCluster("\n      typed_extension_protocol_options: {h: &o {explicit_http_config: {http2_protocol_options: {}}}, i: *o}")))
	f.Add([]byte(bootstrap(true, inlineSluice(grpcConfig)) + grpcCluster("\n      http2ProtocolOptions: {}\n    - *c")))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte(`{"limits": [{"name": "a", "requests_per_second": 1, "match": {"not": {}}}]}`))
	// Hostile inputs: a flow sequence past the bound on nodes, long bad
	// values, and regexes that would escape their anchors.
	f.Add([]byte("x: [" + strings.Repeat("a,", maxYAMLStarts) + "a]\n"))
	f.Add([]byte("kind: WasmPlugin\nspec:\n  pluginConfig:\n    a: &a {x: yyyy}\n    b: &b [*a, *a, *a]\n    c: &c [*b, *b, *b]\n    d: [*c, *c]\n"))
	f.Add([]byte(`{"limits": [{"name": "` + strings.Repeat("n", 300) + `", "match": {"path_regex": "/only)|(?:/never"}}]}`))
	f.Add([]byte("kind: WasmPlugin\nspec:\n  pluginConfig: {limits: [{name: a, requests_per_second: 1, match: {headers: [{name: x, regex: 'v1)|(?:.*'}]}}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := Check("fuzz.yaml", data)
		if len(r.Configs) == 0 && len(r.Errors) == 0 {
			t.Fatal("no configuration found and no error")
		}
		for _, e := range r.Errors {
			// A template's messages are the longest: they quote a
			// placeholder and the sample, each cut.
			if n := len(e.Path) + len(e.Message) + len(e.YAMLPath); n > 2000 {
				t.Fatalf("a finding of %d bytes: %.200s…", n, e.text())
			}
		}
		for _, w := range r.Warnings {
			if w.Code == "" || w.File == "" {
				t.Fatalf("warning without code or file: %+v", w)
			}
		}
	})
}

// FuzzAdminReply gives the admin route's reply reader hostile bodies: it
// never panics, and what it accepts is within what the configuration
// says the route answers.
func FuzzAdminReply(f *testing.F) {
	for _, s := range []string{
		`{"limit":"qq","mode":"local","algorithm":"token_bucket","capacity":5,"remaining":4,"reset_after_ms":720000}`,
		`{"limit":"qq","mode":"local","algorithm":"token_bucket","capacity":5,"remaining":4,"reset_after_ms":720000,"reset":true}`,
		`{"limit":"qq","Limit":"qq","mode":"local","algorithm":"fixed_window","capacity":1e3,"remaining":-5,"reset_after_ms":null}`,
		`{"limit":"qq","limit":"qq"}{}`, `[`, `{"override":"gold"`,
	} {
		f.Add(s, false)
	}
	cfg, err := config.Parse([]byte(`{"limits":[{"name":"qq","key":["header:x-k"],"limit":5,"window":"1h"}]}`))
	if err != nil {
		f.Fatal(err)
	}
	lim := &cfg.Limits[0]
	q, err := engine.ResolveQuotaKey(lim, []string{"k"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string, reset bool) {
		want := adminReply{action: "get", limit: lim, q: q}
		if reset {
			want.action = "reset"
		}
		st, why := want.read("application/json", []byte(body))
		if why != "" {
			return
		}
		if st.Limit != "qq" || st.Algorithm != "token_bucket" || st.Capacity != 5 || st.Remaining < 0 || st.Remaining > 5 ||
			st.ResetAfterMS < 0 || st.Override != "" || (st.Reset != nil) != reset {
			t.Fatalf("accepted %q as %+v", body, st)
		}
	})
}
