package config

import (
	"regexp"
	"strings"
	"testing"
)

func init() {
	badCases = append(badCases, matchAttributeBadCases...)
	goodConfigs = append(goodConfigs,
		`{"limits": [{"name": "a", "requests_per_second": 1, "match": {"not": {"client_cidrs": ["10.0.0.0/8", "2001:db8::/32", "192.0.2.1"]}}}]}`,
		`{"limits": [{"name": "a", "requests_per_second": 1, "match": {"path_prefix": "/api", "path_regex": "/api/v[0-9]+/.*",
		  "headers": [{"name": "x-a", "prefix": "p"}, {"name": "x-b", "suffix": "s"}, {"name": "x-c", "contains": "c"}, {"name": "x-d", "regex": "(?i)bot.*"}],
		  "query": [{"name": "a", "value": ""}, {"name": "b", "present": false}, {"name": "c", "prefix": "x"}, {"name": "d", "regex": "[0-9]+"}],
		  "not": {"headers": [{"name": "x-plan", "value": "internal"}], "not": {"methods": ["GET"]}}}}]}`,
	)
}

var matchAttributeBadCases = []badCase{
	{name: "bad path regex", in: lim(`, "match": {"path_regex": "/a(b"}`),
		want: []string{`limits[0].match.path_regex: invalid regex "/a(b": missing closing )`}, schemaAccepts: true},
	{name: "bad header regex in not", in: lim(`, "match": {"not": {"headers": [{"name": "x", "regex": "*"}]}}`),
		want: []string{`limits[0].match.not.headers[0].regex: invalid regex "*": missing argument to repetition operator`}, schemaAccepts: true},
	// Each regex is compiled on its own before it is anchored: wrapped
	// unchecked, these close the group and match unanchored.
	{name: "path regex that would escape its anchors", in: lim(`, "match": {"path_regex": "/only)|(?:/never"}`),
		want: []string{`limits[0].match.path_regex: invalid regex "/only)|(?:/never": unexpected )`}, schemaAccepts: true},
	{name: "header and query regexes that would escape their anchors",
		in: lim(`, "match": {"headers": [{"name": "x", "regex": "v1)|(?:.*"}], "query": [{"name": "q", "regex": "v1)|(?:.*"}], "not": {"headers": [{"name": "y", "regex": ")("}]}}`),
		want: []string{`limits[0].match.headers[0].regex: invalid regex "v1)|(?:.*": unexpected )`,
			`limits[0].match.query[0].regex: invalid regex "v1)|(?:.*": unexpected )`,
			`limits[0].match.not.headers[0].regex: invalid regex ")(": unexpected )`}, schemaAccepts: true},
	{name: "a long bad regex is quoted in part", in: lim(`, "match": {"path_regex": "` + strings.Repeat("a", 200) + `)"}`),
		want: []string{`limits[0].match.path_regex: invalid regex "` + strings.Repeat("a", MaxQuoted) + `"… (201 bytes): unexpected )`}, schemaAccepts: true},
	{name: "header two comparisons", in: lim(`, "match": {"headers": [{"name": "x", "prefix": "a", "regex": "b"}]}`),
		want: []string{"limits[0].match.headers[0].regex: cannot be combined with prefix"}},
	{name: "header empty prefix", in: lim(`, "match": {"headers": [{"name": "x", "contains": ""}]}`),
		want: []string{"limits[0].match.headers[0].contains: must not be empty; it would match every value"}},
	{name: "query entry without comparison", in: lim(`, "match": {"query": [{"name": "a"}, {"name": "a b", "value": "1"}, {"value": "1"}, {"name": "c", "suffix": "x"}]}`),
		want: []string{"limits[0].match.query[0]: one of value, prefix, regex or present is required",
			`limits[0].match.query[1].name: invalid query parameter name "a b": want printable ASCII without space, & or =`,
			"limits[0].match.query[2].name: required", "limits[0].match.query[3]: one of value, prefix, regex or present is required",
			"limits[0].match.query[3].suffix: unknown field"}},
	{name: "bad cidrs", in: lim(`, "match": {"client_cidrs": ["10.0.0.0/33", "fe80::1%eth0", "::ffff:1.2.3.4/64", 5]}`),
		want: []string{`limits[0].match.client_cidrs[0]: "10.0.0.0/33" is not a CIDR such as 10.0.0.0/8 or 2001:db8::/32`,
			`limits[0].match.client_cidrs[1]: "fe80::1%eth0": a zone is not allowed in a CIDR`,
			`limits[0].match.client_cidrs[2]: "::ffff:1.2.3.4/64": an IPv4-mapped prefix must be at least /96`,
			"limits[0].match.client_cidrs[3]: must be a string"}},
	{name: "empty cidrs", in: lim(`, "match": {"client_cidrs": []}`), want: []string{"limits[0].match.client_cidrs: " + anyIfOmitted}},
	{name: "not unknown field", in: lim(`, "match": {"not": {"paths": ["/x"]}}`), want: []string{"limits[0].match.not.paths: unknown field"}},
}

// A regex valid on its own keeps its meaning when anchored: a value
// matches exactly when the regex, leftmost-longest, spans all of it. \Q
// without \E stays a literal to the end of the regex.
func TestCompileRegexKeepsItsMeaning(t *testing.T) {
	for _, tc := range []struct {
		re       string
		match    []string
		notMatch []string
	}{
		{`a|ab`, []string{"a", "ab"}, []string{"abc", "b"}},
		{`\Qa(b`, []string{"a(b"}, []string{"a(b)$", "ab"}},
		{`\Q`, []string{""}, []string{")$"}},
		{`x{2`, []string{"x{2"}, []string{"xx"}},
		{`(?i)v1|v2`, []string{"V1", "v2"}, []string{"v1x", "xv2"}},
		{`(?m)a$`, []string{"a"}, []string{"a\n"}},
		// At Go's nesting limit: valid alone, one level too deep wrapped.
		{strings.Repeat("(", 999) + "a" + strings.Repeat(")", 999), []string{"a"}, []string{"", "aa", "ba"}},
		{strings.Repeat("(", 997) + "a|ab" + strings.Repeat(")", 997), []string{"a", "ab"}, []string{"", "abc", "xab", "b"}},
		{strings.Repeat("(?:", 999) + "[0-9]+" + strings.Repeat(")", 999), []string{"7", "12"}, []string{"", "1a", "a1"}},
	} {
		r, err := CompileRegex(tc.re)
		if err != nil {
			t.Errorf("%.40q: %.200v", tc.re, err)
			continue
		}
		if deep := strings.HasPrefix(tc.re, "((("); r.spans != deep {
			t.Errorf("%.40q: kept alone %v, want %v", tc.re, r.spans, deep)
		}
		for _, v := range tc.match {
			if !r.MatchString(v) {
				t.Errorf("%q does not match %q", tc.re, v)
			}
		}
		for _, v := range tc.notMatch {
			if r.MatchString(v) {
				t.Errorf("%q matches %q", tc.re, v)
			}
		}
	}
}

// A regex Go refuses says why, also one nested past Go's limit.
func TestCompileRegexErrorsSayWhy(t *testing.T) {
	for re, why := range map[string]string{
		strings.Repeat("(", 1000) + "a" + strings.Repeat(")", 1000): "expression nests too deeply",
		strings.Repeat("(", 999) + "a" + strings.Repeat(")", 998):   "missing closing )",
		`a{1001}`: "invalid repeat count",
	} {
		_, err := CompileRegex(re)
		if err == nil || !strings.HasSuffix(err.Error(), ": "+why) {
			t.Errorf("%.20q…: %v, want the reason %q", re, err, why)
		}
	}
}

func FuzzCompileRegex(f *testing.F) {
	for _, s := range []string{`/only)|(?:/never`, `v1)|(?:.*`, `\Qa(b`, `a|ab`, `x{2`, `(?i)bot.*`, `[0-9]+`, `)(`,
		strings.Repeat("(", 997) + "a|ab" + strings.Repeat(")", 997)} {
		f.Add(s, "v1")
	}
	f.Fuzz(func(t *testing.T, re, v string) {
		alone, aloneErr := regexp.Compile(re)
		r, err := CompileRegex(re)
		if (aloneErr == nil) != (err == nil) {
			t.Fatalf("%q: alone %v, anchored %v", re, aloneErr, err)
		}
		if err != nil {
			// Every refusal says why, after the quoted regex.
			if _, reason, _ := strings.Cut(err.Error(), "): "); reason == "" && !strings.Contains(err.Error(), `": `) {
				t.Fatalf("%q: an error without its reason: %v", re, err)
			}
			if len(err.Error()) > 4*MaxQuoted+100 { // strconv.Quote writes a byte as at most 4
				t.Fatalf("error of %d bytes: %v", len(err.Error()), err)
			}
			return
		}
		alone.Longest()
		loc := alone.FindStringIndex(v)
		whole := loc != nil && loc[0] == 0 && loc[1] == len(v)
		if r.MatchString(v) != whole {
			t.Fatalf("%q on %q: anchored %v, whole match alone %v", re, v, !whole, whole)
		}
	})
}
