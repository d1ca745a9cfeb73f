package filtertest

import (
	"fmt"
	"strings"
	"testing"
)

func init() { Cases = append(Cases, matchCases...) }

// thousandCIDRs lists 1,000 /24s of 10.0.0.0/8 (10.0.0.0/24 … 10.3.231.0/24)
// plus an IPv6 prefix, for an exemption list of realistic size.
func thousandCIDRs() string {
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, `"10.%d.%d.0/24",`, i/256, i%256)
	}
	b.WriteString(`"2001:db8:1::/48"`)
	return b.String()
}

var matchCases = []Case{
	{
		Name: "not client_cidrs exempts listed clients; unknown and mapped addresses are handled",
		Config: `{"client_ip":{"source":"xff","trusted_hops":1},"limits":[{"name":"ext","key":[],"requests_per_second":1,"burst":0,
			"match":{"not":{"client_cidrs":[` + thousandCIDRs() + `]}}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"outside uses the bucket", from("192.0.2.1:1", get("/")), true},
				{"outside again", from("192.0.2.2:1", get("/")), false},
				{"the last listed /24", from("10.3.231.200:1", get("/")), true},
				{"again, exempt", from("10.3.231.1:1", get("/")), true},
				{"just past the list", from("10.3.232.1:1", get("/")), false},
				{"IPv4-mapped inside", get("/").with("x-forwarded-for", "::ffff:10.0.5.1"), true},
				{"with a port inside", get("/").with("x-forwarded-for", "10.0.5.1:8080"), true},
				{"IPv6 inside, zoned", get("/").with("x-forwarded-for", "[2001:db8:1::7%eth0]:443"), true},
				{"IPv6 outside", from("[2001:db8:2::1]:1", get("/")), false},
				// An unparsable XFF falls back to the peer; an unparsable peer
				// is no address, in no CIDR, so it is limited.
				{"garbage XFF, outside peer", from("192.0.2.3:1", get("/").with("x-forwarded-for", "10.0.0.1x")), false},
				{"no address at all", from("unix:/tmp/s", get("/")), false},
			})
		},
	},
	{
		Name: "header prefix, suffix, contains and regex match the whole value",
		Config: `{"limits":[
			{"name":"pre","key":[],"requests_per_second":1,"burst":0,"match":{"headers":[{"name":"x-a","prefix":"app/"}]}},
			{"name":"suf","key":[],"requests_per_second":1,"burst":0,"match":{"headers":[{"name":"x-a","suffix":".json"}]}},
			{"name":"has","key":[],"requests_per_second":1,"burst":0,"match":{"headers":[{"name":"x-a","contains":"beta"}]}},
			{"name":"bot","key":[],"requests_per_second":1,"burst":0,"match":{"headers":[{"name":"user-agent","regex":"(?i).*bot.*"}]}},
			{"name":"ver","key":[],"requests_per_second":1,"burst":0,"match":{"headers":[{"name":"x-v","regex":"v[0-9]+"}]}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"prefix", get("/").with("x-a", "app/x"), true},
				{"prefix again", get("/").with("x-a", "app/y"), false},
				{"suffix", get("/").with("x-a", "y.json"), true},
				{"suffix again", get("/").with("x-a", "z.json"), false},
				{"contains", get("/").with("x-a", "is-beta-1"), true},
				{"contains again", get("/").with("x-a", "beta"), false},
				{"regex, any case", get("/").with("user-agent", "GoogleBot/2"), true},
				{"regex again", get("/").with("user-agent", "a robot"), false},
				{"full match: v12 matches", get("/").with("x-v", "v12"), true},
				{"v12 again", get("/").with("x-v", "v7"), false},
				// Anchored: "xv1" and "v1x" do not match, so they are not limited.
				{"not a full match", get("/").with("x-v", "xv1"), true},
				{"not a full match either", get("/").with("x-v", "v1x"), true},
				// Not joined only: an upstream reading the first value serves v1.
				{"repeated header: v1 then v2 is version v1", get("/").with("x-v", "v1").with("x-v", "v2"), false},
				{"repeated header: no value a version", get("/").with("x-v", "x").with("x-v", "y"), true},
				{"absent header matches no comparison", get("/"), true},
			})
		},
	},
	{
		Name: "path_regex and query conditions; not combines with the others",
		Config: `{"limits":[
			{"name":"users","key":[],"requests_per_second":1,"burst":0,"match":{"path_regex":"/api/v[0-9]+/users(/[^/]+)?"}},
			{"name":"debug","key":[],"requests_per_second":1,"burst":0,"match":{"query":[{"name":"debug","value":"1"},{"name":"token","present":false}]}},
			{"name":"search","key":[],"requests_per_second":1,"burst":0,"match":{"query":[{"name":"q","regex":"[a-z]{3,}"}]}},
			{"name":"api","key":[],"requests_per_second":1,"burst":0,"match":{"path_prefix":"/svc","not":{"headers":[{"name":"x-plan","value":"internal"}]}}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"users", get("/api/v1/users?x=/api/v2/users"), true},
				{"users/id", get("/api/v22/users/7"), false},
				{"regex is over the path only", get("/api/v1/usersX"), true},
				{"debug=1", get("/x?debug=1"), true},
				{"debug=%31 decodes to 1", get("/x?debug=%31"), false},
				{"debug with a token is not matched", get("/x?debug=1&token=t"), true},
				{"q=abc", get("/s?q=abc"), true},
				{"q=a+bc decodes with a space: no match", get("/s?q=a+bc"), true},
				{"q=xyz", get("/s?q=xyz"), false},
				{"/svc external", get("/svc"), true},
				{"/svc external again", get("/svc/a"), false},
				{"/svc internal is exempt", get("/svc").with("x-plan", "internal"), true},
				{"/svc internal twice", get("/svc").with("x-plan", "internal"), true},
			})
		},
	},
	{
		// Upstreams disagree on which value of a repeated parameter or
		// header is the request's (Go, Flask and servlets take the first,
		// PHP and Rails the last, WSGI servers join headers), so a match
		// holds when any value does and a not only when every value keeps
		// its nested match: no spelling escapes a limit that some upstream
		// would serve the request under.
		Name: "repeated query parameters and headers: a match holds on any value, a not on every value",
		Config: `{"limits":[
			{"name":"qfree","key":[],"requests_per_second":1,"burst":0,"match":{"path_prefix":"/q","query":[{"name":"plan","value":"free"}]}},
			{"name":"hfree","key":[],"requests_per_second":1,"burst":0,"match":{"path_prefix":"/h","headers":[{"name":"x-plan","value":"free"}]}},
			{"name":"qpaid","key":[],"requests_per_second":1,"burst":0,"match":{"path_prefix":"/nq","not":{"query":[{"name":"plan","prefix":"internal"}]}}},
			{"name":"hpaid","key":[],"requests_per_second":1,"burst":0,"match":{"path_prefix":"/nh","not":{"headers":[{"name":"x-plan","prefix":"internal"}]}}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"plan=free uses the free bucket", get("/q?plan=free"), true},
				{"free first: limited as free", get("/q?plan=free&plan=pro"), false},
				{"free last, escaped: limited as free", get("/q?plan=pro&plan=%66ree"), false},
				{"no value free: not this limit's", get("/q?plan=pro&plan=team"), true},
				{"x-plan free uses the free bucket", get("/h").with("x-plan", "free"), true},
				{"free last: limited as free", get("/h").with("x-plan", "pro").with("x-plan", "free"), false},
				{"x_plan, read as x-plan by WSGI", get("/h").with("x_plan", "free"), false},
				{"one value free,pro is not free", get("/h").with("x-plan", "free,pro"), true},
				{"internal plan is exempt", get("/nq?plan=internal-1"), true},
				{"internal twice is exempt", get("/nq?plan=internal-1&plan=internal-2"), true},
				{"no plan uses the bucket", get("/nq"), true},
				{"internal then pro: limited as pro", get("/nq?plan=internal&plan=pro"), false},
				{"pro then internal: limited as pro", get("/nq?plan=pro&plan=internal"), false},
				{"internal header is exempt", get("/nh").with("x-plan", "internal"), true},
				{"no header uses the bucket", get("/nh"), true},
				{"internal then pro header: limited as pro", get("/nh").with("x-plan", "internal").with("x-plan", "pro"), false},
				{"internal and x_plan pro: limited as pro", get("/nh").with("x-plan", "internal").with("x_plan", "pro"), false},
				{"only x_plan internal: no x-plan for Go", get("/nh").with("x_plan", "internal"), false},
				{"internal header again is exempt", get("/nh").with("x-plan", "internal-2"), true},
			})
			wantCounter(t, h, "sluice.limit.qfree.limited", 2)
			wantCounter(t, h, "sluice.limit.hfree.limited", 2)
			wantCounter(t, h, "sluice.limit.qpaid.limited", 2)
			wantCounter(t, h, "sluice.limit.hpaid.limited", 3)
		},
	},
	{
		// A query: key part reads a parameter the way each common upstream
		// does: with ';' a separator too (parse_qs(separator=';'), Rack 2)
		// and under every name PHP registers as it. A query match reads it
		// all those ways, so no such spelling escapes a match or slips
		// into a not's exemption.
		Name: "query matches read the parameter as query keys do: ';' separates too, PHP's names are the name",
		Config: `{"limits":[
			{"name":"qfree","key":[],"requests_per_second":1,"burst":0,"match":{"path_prefix":"/q","query":[{"name":"plan","value":"free"}]}},
			{"name":"kfree","key":[],"requests_per_second":1,"burst":0,"match":{"path_prefix":"/k","query":[{"name":"api_key","value":"free"}]}},
			{"name":"qpaid","key":[],"requests_per_second":1,"burst":0,"match":{"path_prefix":"/nq","not":{"query":[{"name":"plan","prefix":"internal"}]}}}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"plan=free uses the free bucket", get("/q?plan=free"), true},
				{"after a ';': free to parse_qs and Rack", get("/q?junk=1;plan=free"), false},
				{"a leading space: plan to PHP", get("/q?%20plan=free"), false},
				{"plan[]: an array to PHP, no plan", get("/q?plan[]=free"), true},
				{"after a ';' but pro", get("/q?junk=1;plan=pro"), true},
				{"api_key=free uses the free bucket", get("/k?api_key=free"), true},
				{"api.key: api_key to PHP", get("/k?api.key=free"), false},
				{"api[key: api_key to PHP", get("/k?api[key=free"), false},
				{"api[k]: an array to PHP", get("/k?api[k]=free"), true},
				{"internal plan is exempt", get("/nq?plan=internal"), true},
				{"no plan uses the bucket", get("/nq"), true},
				{"pro after a ';': limited as pro", get("/nq?plan=internal&x=1;plan=pro"), false},
				{"pro under +plan: limited as pro", get("/nq?plan=internal&+plan=pro"), false},
				{"a ';' in another parameter changes nothing", get("/nq?plan=internal&x=1;y=2"), true},
			})
			wantCounter(t, h, "sluice.limit.qfree.limited", 2)
			wantCounter(t, h, "sluice.limit.kfree.limited", 2)
			wantCounter(t, h, "sluice.limit.qpaid.limited", 2)
		},
	},
}
