package config

import "testing"

func init() {
	badCases = append(badCases, overrideMoreBadCases...)
	goodConfigs = append(goodConfigs,
		`{"limits": [{"name": "a", "requests_per_second": 1, "overrides": {"10.0.0.0/8": {"requests_per_second": 5},
		  "10.1.0.0/16": {"unlimited": true}, "10.1.2.3": {"block": true}, "2001:db8::/32": {"limit": 5, "window": "1m"}}}]}`,
		`{"limits": [{"name": "a", "key": ["header:x-key"], "requests_per_second": 1, "overrides": {"bad": {"block": true}, "ops": {"unlimited": true}}}]}`,
	)
}

var overrideMoreBadCases = []badCase{
	{name: "override action false", in: lim(`, "overrides": {"a": {"unlimited": false}, "b": {"block": true, "unlimited": true}, "c": {"block": true, "burst": 1}}`),
		want: []string{"limits[0].overrides.a.unlimited: must be true; remove the override instead",
			"limits[0].overrides.b.block: cannot be combined with unlimited", "limits[0].overrides.c.burst: unknown field"}},
	{name: "two override keys for one prefix", in: lim(`, "overrides": {"10.0.0.0/8": {"unlimited": true}, "10.1.2.3/8": {"block": true}}`),
		want: []string{`limits[0].overrides["10.1.2.3/8"]: names the same prefix 10.0.0.0/8 as "10.0.0.0/8"`}, schemaAccepts: true},
}

func TestOverridePrefixesLongestWins(t *testing.T) {
	c := mustParse(t, `{"limits": [{"name": "a", "requests_per_second": 1, "overrides": {"10.0.0.0/8": {"requests_per_second": 5},
	  "10.1.0.0/16": {"unlimited": true}, "10.1.2.3": {"block": true}, "::ffff:10.2.0.0/112": {"requests_per_second": 7},
	  "2001:db8::/32": {"requests_per_second": 9}, "2001:db8:1::/48": {"block": true}, "gold": {"requests_per_second": 2}}}]}`)
	o := c.Limits[0].OverrideCIDRs
	for ip, want := range map[string]string{
		"10.9.9.9": "10.0.0.0/8", "10.1.9.9": "10.1.0.0/16", "10.1.2.3": "10.1.2.3", "10.2.0.1": "::ffff:10.2.0.0/112",
		"11.0.0.1": "11.0.0.1", "2001:db8:2::1": "2001:db8::/32", "2001:db8:1::1": "2001:db8:1::/48", "fe80::1%eth0": "fe80::1%eth0",
		"gold": "gold",
	} {
		if got := o.Resolve(ip); got != want {
			t.Errorf("Resolve(%s) = %q, want %q", ip, got, want)
		}
	}
}
