package config

import "testing"

func init() {
	badCases = append(badCases, keyPartBadCases...)
	goodConfigs = append(goodConfigs,
		`{"limits": [{"name": "a", "key": ["query:user", "cookie:sid", "path_segment:1", "client_ip/24/56"], "requests_per_second": 1}]}`,
		`{"limits": [{"name": "a", "key": ["client_ip/0/128", "path_segment:99", "query:a%2Bb"], "override_by": "client_ip/0/128",
		  "requests_per_second": 1, "overrides": {"0.0.0.0/0": {"requests_per_second": 2}}}]}`,
		`{"concurrency": [{"name": "c", "key": ["query:tenant"], "max_in_flight": 1}]}`,
		`{"limits": [{"name": "a", "key": ["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub", "metadata:ns:n"], "override_by": "metadata:ns:n",
		  "requests_per_second": 1, "overrides": {"3": {"requests_per_second": 2}},
		  "match": {"metadata": [{"namespace": "envoy.filters.http.jwt_authn", "path": "jwt_payload.plan", "value": "free"},
		    {"namespace": "ns", "path": "n", "present": true}]}}]}`,
	)
}

var keyPartBadCases = []badCase{
	{name: "empty query key", in: lim(`, "key": ["query:"]`),
		want: []string{`limits[0].key[0]: invalid query parameter name "": want printable ASCII without space, & or =`}},
	{name: "query key with separator", in: lim(`, "key": ["query:a=b", "query:a b"]`),
		want: []string{`limits[0].key[0]: invalid query parameter name "a=b": want printable ASCII without space, & or =`,
			`limits[0].key[1]: invalid query parameter name "a b": want printable ASCII without space, & or =`}},
	{name: "bad cookie key", in: lim(`, "key": ["cookie:a;b"]`), want: []string{`limits[0].key[0]: invalid cookie name "a;b"`}},
	{name: "path segment zero", in: lim(`, "key": ["path_segment:0", "path_segment:100", "path_segment:01", "path_segment:x"]`),
		want: []string{`limits[0].key[0]: invalid path segment "0": want 1 to 99`, `limits[0].key[1]: invalid path segment "100": want 1 to 99`,
			`limits[0].key[2]: invalid path segment "01": want 1 to 99`, `limits[0].key[3]: invalid path segment "x": want 1 to 99`}},
	{name: "masked client out of range", in: lim(`, "key": ["client_ip/33/56", "client_ip/24/129", "client_ip/24", "client_ip/024/56"]`),
		want: []string{`limits[0].key[0]: invalid masked client address "client_ip/33/56": want client_ip/<0-32>/<0-128>`,
			`limits[0].key[1]: invalid masked client address "client_ip/24/129": want client_ip/<0-32>/<0-128>`,
			`limits[0].key[2]: invalid masked client address "client_ip/24": want client_ip/<0-32>/<0-128>`,
			`limits[0].key[3]: invalid masked client address "client_ip/024/56": want client_ip/<0-32>/<0-128>`}},
	{name: "bad metadata keys", in: lim(`, "key": ["metadata:ns", "metadata::p", "metadata:ns:a..b", "metadata:ns:a:b", "metadata:ns:.a"]`),
		want: []string{`limits[0].key[0]: invalid metadata key "metadata:ns": want metadata:<namespace>:<dotted.path> with a path`,
			`limits[0].key[1]: invalid metadata key "metadata::p": want metadata:<namespace>:<dotted.path> with a namespace`,
			`limits[0].key[2]: invalid metadata key "metadata:ns:a..b": the path has an empty element`,
			`limits[0].key[3]: invalid metadata key "metadata:ns:a:b": names must not contain NUL or ':'`,
			`limits[0].key[4]: invalid metadata key "metadata:ns:.a": the path has an empty element`}},
	{name: "bad metadata match", in: lim(`, "match": {"metadata": [{"namespace": "n"}, {"path": "p", "value": "v"}, {"namespace": "n", "path": "a..b", "present": true},
		{"namespace": "n", "path": "p", "value": "v", "present": false}, {"namespace": "n", "path": "p", "value": 1}, {"namespace": "n", "path": "p", "prefix": "x"}]}`),
		want: []string{`limits[0].match.metadata[0].path: required`, `limits[0].match.metadata[0]: one of value or present is required`,
			`limits[0].match.metadata[1].namespace: required`,
			`limits[0].match.metadata[2].path: invalid metadata namespace or path: the path has an empty element`,
			`limits[0].match.metadata[3].present: cannot be combined with value`,
			`limits[0].match.metadata[4].value: must be a string`,
			`limits[0].match.metadata[5]: one of value or present is required`, `limits[0].match.metadata[5].prefix: unknown field`}},
	{name: "duplicate query part", in: lim(`, "key": ["query:a", "query:a"]`), want: []string{`limits[0].key[1]: duplicate key part "query:a"`}},
}

// TestKeyPartStringRoundTrips: encode.go and override_by print parts with
// String, which must parse back to the same part.
func TestKeyPartStringRoundTrips(t *testing.T) {
	for _, s := range []string{"query:user", "cookie:sid", "path_segment:7", "client_ip/24/56", "client_ip/0/0", "client_ip",
		"metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"} {
		p, err := parseKeyPart(s)
		if err != "" || p.String() != s {
			t.Errorf("%s parses to %+v (%s), prints %q", s, p, err, p.String())
		}
	}
}
