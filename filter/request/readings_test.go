package request

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
)

// matchOf parses one limit's match.
func matchOf(t testing.TB, match string) *config.Match {
	t.Helper()
	cfg, err := config.Parse([]byte(`{"limits":[{"name":"l","requests_per_second":1,"match":` + match + `}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return &cfg.Limits[0].Match
}

// matches decides m on a request of header lines, as matchLimits does.
func matches(m *config.Match, headerBlob string) bool {
	var scratch []byte
	r := &Info{src: &fakeHost{headers: parseFuzzHeaders(headerBlob)}, scratch: &scratch}
	return Matches(m, r.View(NeedPath|NeedMethod|NeedHost|NeedRoute))
}

// TestRepeatedValuesInMatches checks that no reading of a repeated header
// or query parameter escapes a match: a condition holds when any value,
// or the values joined, satisfies it, and a not holds unless every
// reading satisfies its nested match. Upstreams disagree on the reading
// (first: Go, Flask, servlets; last: PHP, Rails; joined: WSGI, ASP.NET).
func TestRepeatedValuesInMatches(t *testing.T) {
	for _, c := range []struct {
		match, request string
		want           bool
	}{
		// Positive conditions: any reading.
		{`{"query":[{"name":"plan","value":"free"}]}`, ":path=/?plan=free", true},
		{`{"query":[{"name":"plan","value":"free"}]}`, ":path=/?plan=free&plan=x", true},
		{`{"query":[{"name":"plan","value":"free"}]}`, ":path=/?plan=x&plan=%66ree", true},
		{`{"query":[{"name":"plan","value":"free"}]}`, ":path=/?plan=x&plan=y", false},
		{`{"query":[{"name":"plan","value":"free,x"}]}`, ":path=/?plan=free&plan=x", true},
		{`{"query":[{"name":"plan","prefix":"fr"}]}`, ":path=/?plan=x&plan=fre", true},
		{`{"query":[{"name":"plan","regex":"f.*"}]}`, ":path=/?plan=x&plan=f", true},
		{`{"query":[{"name":"plan","present":true}]}`, ":path=/?plan&plan", true},
		{`{"query":[{"name":"plan","present":false}]}`, ":path=/?plan=a&plan=b", false},
		{`{"headers":[{"name":"x-plan","value":"free"}]}`, "x-plan=pro\nx-plan=free", true},
		{`{"headers":[{"name":"x-plan","value":"free"}]}`, "x-plan=free\nx-plan=pro", true},
		{`{"headers":[{"name":"x-plan","value":"pro,free"}]}`, "x-plan=pro\nx-plan=free", true},
		{`{"headers":[{"name":"x-plan","value":"free"}]}`, "x-plan=free,pro", false},
		{`{"headers":[{"name":"x-plan","suffix":"ee"}]}`, "x-plan=free\nx-plan=pro", true},
		{`{"headers":[{"name":"x-plan","contains":"re"}]}`, "x-plan=pro\nx-plan=free", true},
		// '_' for '-': read as x-plan by CGI and WSGI servers.
		{`{"headers":[{"name":"x-plan","value":"free"}]}`, "x_plan=free", true},
		{`{"headers":[{"name":"x-plan","present":true}]}`, "x_plan=free", true},
		// ...and absent for an upstream reading x-plan only.
		{`{"headers":[{"name":"x-plan","present":false}]}`, "x_plan=free", true},
		{`{"headers":[{"name":"x-plan","present":false}]}`, "x-plan=free\nx_plan=free", false},
		// Negated: the nested match must hold for every reading.
		{`{"not":{"query":[{"name":"plan","value":"internal"}]}}`, ":path=/?plan=internal", false},
		{`{"not":{"query":[{"name":"plan","value":"internal"}]}}`, ":path=/?plan=internal&plan=x", true},
		{`{"not":{"query":[{"name":"plan","value":"internal"}]}}`, ":path=/?plan=x&plan=internal", true},
		{`{"not":{"query":[{"name":"plan","prefix":"internal"}]}}`, ":path=/?plan=internal&plan=x", true},
		{`{"not":{"query":[{"name":"plan","prefix":"internal"}]}}`, ":path=/?plan=internal-a&plan=internal-b", false},
		{`{"not":{"headers":[{"name":"x-plan","prefix":"internal"}]}}`, "x-plan=internal\nx-plan=pro", true},
		{`{"not":{"headers":[{"name":"x-plan","prefix":"internal"}]}}`, "x-plan=internal\nx_plan=pro", true},
		{`{"not":{"headers":[{"name":"x-plan","prefix":"internal"}]}}`, "x_plan=internal", true},
		{`{"not":{"headers":[{"name":"x-plan","prefix":"internal"}]}}`, "x-plan=internal-a\nx-plan=internal-b", false},
		{`{"not":{"headers":[{"name":"x-plan","present":true}]}}`, "x_plan=a", true},
		{`{"not":{"headers":[{"name":"x-plan","present":false}]}}`, "x_plan=a", true},
		{`{"not":{"headers":[{"name":"x-plan","present":false}]}}`, "x-plan=a", true},
		{`{"not":{"headers":[{"name":"x-plan","present":false}]}}`, "", false},
		// A conjunction under not fails for every reading when one of its
		// conditions fails for one.
		{`{"not":{"query":[{"name":"a","value":"1"},{"name":"b","value":"1"}]}}`, ":path=/?a=1&b=1&b=2", true},
		{`{"not":{"query":[{"name":"a","value":"1"},{"name":"b","value":"1"}]}}`, ":path=/?a=1&b=1", false},
		// One value twice is still read joined, "1,1", as Envoy's own
		// header matching and WSGI servers read a repeated header.
		{`{"not":{"query":[{"name":"a","value":"1"},{"name":"b","value":"1"}]}}`, ":path=/?a=1&b=1&b=%31", true},
		// Every reading of the query a query: key part makes: ';' as a
		// separator too (parse_qs(separator=';'), Rack 2)...
		{`{"query":[{"name":"plan","value":"free"}]}`, ":path=/?junk=1;plan=free", true},
		{`{"query":[{"name":"plan","value":"free"}]}`, ":path=/?plan=free;junk=1", true},
		{`{"query":[{"name":"plan","present":false}]}`, ":path=/?junk=1;plan=free", true},
		{`{"query":[{"name":"plan","value":"free"}]}`, ":path=/?junk=1;plan=pro", false},
		{`{"not":{"query":[{"name":"plan","value":"internal"}]}}`, ":path=/?plan=internal;x=1", true},
		{`{"not":{"query":[{"name":"plan","present":true}]}}`, ":path=/?x=1;plan=a", true},
		{`{"not":{"query":[{"name":"plan","value":"internal"}]}}`, ":path=/?plan=internal&x=1;y=2", false},
		// ...and the names PHP registers as this one.
		{`{"query":[{"name":"plan","value":"free"}]}`, ":path=/?+plan=free", true},
		{`{"query":[{"name":"plan","value":"free"}]}`, ":path=/?plan%00x=free", true},
		{`{"query":[{"name":"api_key","value":"free"}]}`, ":path=/?api.key=free", true},
		{`{"query":[{"name":"api_key","value":"free"}]}`, ":path=/?api[key=free", true},
		{`{"query":[{"name":"api_key","value":"free"}]}`, ":path=/?api[k]=free", false},
		{`{"query":[{"name":"api_key","value":"free"}]}`, ":path=/?api_key=pro&api+key=free", true},
		{`{"query":[{"name":"api_key","present":false}]}`, ":path=/?api.key=free", true},
		{`{"not":{"query":[{"name":"api_key","value":"internal"}]}}`, ":path=/?api_key=internal&api.key=pro", true},
		{`{"not":{"query":[{"name":"api_key","present":true}]}}`, ":path=/?api.key=a", true},
		{`{"not":{"query":[{"name":"api_key","present":true}]}}`, ":path=/?api_key=a&api.key=b", false},
		// not not: back to any reading.
		{`{"not":{"not":{"query":[{"name":"plan","value":"free"}]}}}`, ":path=/?plan=x&plan=free", true},
		{`{"not":{"not":{"query":[{"name":"plan","value":"free"}]}}}`, ":path=/?plan=x&plan=y", false},
	} {
		if got := matches(matchOf(t, c.match), c.request); got != c.want {
			t.Errorf("%s on %q: %v, want %v", c.match, c.request, got, c.want)
		}
	}
}

// TestOneValueMatchAllocs checks that a header or query condition on a
// value sent once, the common request, allocates nothing.
func TestOneValueMatchAllocs(t *testing.T) {
	m := matchOf(t, `{"headers":[{"name":"x-plan","prefix":"fr"}],"query":[{"name":"plan","value":"free"}],
		"not":{"headers":[{"name":"x-tier","value":"internal"}],"query":[{"name":"u","regex":"a.*"}]}}`)
	var scratch []byte
	r := &Info{src: &fakeHost{headers: parseFuzzHeaders(":path=/x?plan=fr%65e&u=b\nx-plan=free\nx-tier=pro")}, scratch: &scratch}
	req := r.View(NeedPath)
	if !Matches(m, req) {
		t.Fatal("the request does not match")
	}
	if n := testing.AllocsPerRun(100, func() { Matches(m, req) }); n != 0 {
		t.Fatalf("%v allocations per match", n)
	}
}

// readingsOf lists every reading of a header or query parameter as
// MatchHeader and MatchQuery define them, with "" and false for absent,
// written out plainly as a reference.
func readingsOf(headers [][2]string, header bool, name string) (vals []string, absent bool) {
	if header {
		exact := false
		for _, kv := range headers {
			if sameHeaderName(kv[0], name) {
				vals = append(vals, kv[1])
				exact = exact || kv[0] == name
			}
		}
		if len(vals) > 1 {
			vals = append(vals, strings.Join(vals, ","))
		}
		return vals, !exact
	}
	var path string
	for _, kv := range headers {
		if kv[0] == ":path" {
			path = kv[1]
			break
		}
	}
	q, ok := RawQuery(path)
	if !ok {
		return nil, true
	}
	// Each reading of the query: split at '&', and, when it holds ';',
	// at '&' and ';' too; a parameter is the name itself decoded, or one
	// PHP registers as the name.
	splits := []func(rune) bool{func(c rune) bool { return c == '&' }}
	if strings.Contains(q, ";") {
		splits = append(splits, func(c rune) bool { return c == '&' || c == ';' })
	}
	for _, split := range splits {
		var these []string
		exact := false
		for _, param := range strings.FieldsFunc(q, split) {
			k, v, _ := strings.Cut(param, "=")
			dk := string(AppendQueryUnescaped(nil, k))
			phpK, kOK := phpName([]byte(dk))
			phpN, nOK := phpName([]byte(name))
			if k == "" || dk != name && !(kOK && nOK && string(phpK) == string(phpN)) {
				continue
			}
			exact = exact || dk == name
			these = append(these, string(AppendQueryUnescaped(nil, v)))
		}
		vals = append(vals, these...)
		if len(these) > 1 {
			vals = append(vals, strings.Join(these, ","))
		}
		absent = absent || !exact
	}
	return vals, absent
}

// FuzzMatchReadings checks header and query conditions, and their not,
// on any request against the readings listed plainly: a condition holds
// exactly when some reading satisfies it, and its not exactly when some
// reading does not.
func FuzzMatchReadings(f *testing.F) {
	f.Add(":path=/?plan=free&plan=x", false, "plan", uint8(0), "free")
	f.Add(":path=/?plan=x&plan=%66ree&plan=", false, "plan", uint8(1), "f")
	f.Add(":path=/?plan&plan=a%zz", false, "plan", uint8(4), "a.*")
	f.Add(":path=/?junk=1;xplan=free", false, "xplan", uint8(0), "free")
	f.Add(":path=/?xplan=internal;x=1&xplan=internal", false, "xplan", uint8(1), "internal")
	f.Add(":path=/?x.plan=a&x_plan=a", false, "x_plan", uint8(0), "a")
	f.Add(":path=/?x+plan=a&x[plan=b&x%00y=c&x[p]=d", false, "x_plan", uint8(3), "")
	f.Add(":path=/?x.plan=a", false, "x_plan", uint8(4), "")
	f.Add("x-plan=internal\nx_plan=pro", true, "x-plan", uint8(1), "internal")
	f.Add("x_plan=a", true, "x-plan", uint8(5), "")
	f.Add("x-plan=a\nx-plan=b\nx-plan=c", true, "x-plan", uint8(0), "a,b,c")
	f.Add("x-plan=", true, "x-plan", uint8(6), "")
	f.Fuzz(func(t *testing.T, headerBlob string, header bool, name string, op uint8, operand string) {
		name = strings.ToLower(name)
		if name == "" || strings.ContainsAny(name, "\n=\"\\") || !strings.HasPrefix(name, "x") {
			return
		}
		kind, fields := "query", `"value","prefix","regex","present","present"`
		if header {
			kind, fields = "headers", `"value","prefix","suffix","contains","regex","present","present"`
		}
		opNames := strings.Split(strings.ReplaceAll(fields, `"`, ""), ",")
		opName := opNames[int(op)%len(opNames)]
		arg := fmt.Sprintf("%q", operand)
		if opName == "present" {
			arg = fmt.Sprint(int(op)%len(opNames) == len(opNames)-2)
		} else if operand == "" && opName != "value" && opName != "regex" {
			return
		}
		cond := fmt.Sprintf(`{"%s":[{"name":%q,%q:%s}]}`, kind, name, opName, arg)
		cfg, err := config.Parse([]byte(`{"limits":[{"name":"l","requests_per_second":1,"match":` + cond + `},
			{"name":"n","requests_per_second":1,"match":{"not":` + cond + `}}]}`))
		if err != nil {
			return // a name or regex the configuration refuses
		}
		headers := parseFuzzHeaders(headerBlob)
		vals, absent := readingsOf(headers, header, name)
		only := cfg.Limits[0].Match
		var some, all = false, true
		test := func(held bool) { some, all = some || held, all && held }
		for _, v := range vals {
			test(Matches(&config.Match{Headers: only.Headers, Query: only.Query}, View{
				Header:     HeaderFunc(func(string) (string, bool) { return v, true }),
				Attributes: &oneValue{v: v, ok: true}}))
		}
		if absent {
			test(Matches(&only, View{Attributes: &oneValue{}}))
		}
		if got := matches(&cfg.Limits[0].Match, headerBlob); got != some {
			t.Fatalf("%s on %q: %v, want %v (readings %q, absent %v)", cond, headerBlob, got, some, vals, absent)
		}
		if got := matches(&cfg.Limits[1].Match, headerBlob); got != !all {
			t.Fatalf("not %s on %q: %v, want %v (readings %q, absent %v)", cond, headerBlob, got, !all, vals, absent)
		}
	})
}

// oneValue serves one reading of every query parameter.
type oneValue struct {
	v  string
	ok bool
}

func (o *oneValue) ClientAddr() (a netip.Addr, ok bool) { return a, false }
func (o *oneValue) Metadata([]string) (string, bool)    { return "", false }
func (o *oneValue) MatchQuery(name string, c *config.ValueCondition, every bool) bool {
	return HeaderFunc(func(string) (string, bool) { return o.v, o.ok }).MatchHeader(name, c, every)
}
