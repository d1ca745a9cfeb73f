package config

import (
	"encoding/json"
	"net/netip"
	"testing"
)

const adminHash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" // sha256("test")

func init() {
	goodConfigs = append(goodConfigs,
		`{"admin": {"client_cidrs": ["10.0.0.0/8", "::1"], "token_sha256": "`+adminHash+`"}}`,
		`{"admin": {"path_prefix": "/ops/sluice-admin/", "client_cidrs": ["127.0.0.1"], "token_sha256": "`+adminHash+`"}}`,
	)
	badCases = append(badCases,
		// Every error at once, each with its path.
		badCase{name: "admin everything wrong", in: `{"admin": {"path_prefix": "/.Sluice", "client_cidrs": ["10.0.0.0/33", 7], "token_sha256": "secret"}}`,
			want: []string{
				`admin.path_prefix: "/.Sluice": want a path such as "/.sluice/": starting and ending with "/", of lower-case letters, digits, "-", ".", "_" and "~", without empty, "." or ".." segments`,
				`admin.client_cidrs[0]: "10.0.0.0/33" is not a CIDR such as 10.0.0.0/8 or 2001:db8::/32`,
				"admin.client_cidrs[1]: must be a string",
				"admin.token_sha256: want the SHA-256 of the token as 64 hex digits (sha256sum), not the token",
			}},
		badCase{name: "admin required fields", in: `{"admin": {}}`, want: []string{
			"admin.client_cidrs: required: the addresses allowed to call the admin route",
			"admin.token_sha256: required: the SHA-256 of the bearer token, as 64 hex digits",
		}},
		badCase{name: "admin empty cidrs", in: `{"admin": {"client_cidrs": [], "token_sha256": "` + adminHash + `"}}`,
			want: []string{"admin.client_cidrs: must not be empty: no address could call the admin route"}},
		badCase{name: "admin dot segment", in: `{"admin": {"path_prefix": "/a/../", "client_cidrs": ["::1"], "token_sha256": "` + adminHash + `"}}`,
			want:          []string{`admin.path_prefix: "/a/../": want a path such as "/.sluice/": starting and ending with "/", of lower-case letters, digits, "-", ".", "_" and "~", without empty, "." or ".." segments`},
			schemaAccepts: true},
		badCase{name: "admin unknown field", in: `{"admin": {"token": "x", "client_cidrs": ["::1"], "token_sha256": "` + adminHash + `"}}`,
			want: []string{"admin.token: unknown field"}},
	)
}

func TestParseAdmin(t *testing.T) {
	if c := mustParse(t, `{}`); c.Admin != nil {
		t.Fatal("an admin route without an admin block")
	}
	c := mustParse(t, `{"admin": {"client_cidrs": ["10.0.0.0/8"], "token_sha256": "`+adminHash+`"}}`)
	a := c.Admin
	if a == nil || a.PathPrefix != DefaultAdminPathPrefix || !a.ClientCIDRs.Contains(netip.MustParseAddr("10.2.3.4")) ||
		a.ClientCIDRs.Contains(netip.MustParseAddr("11.0.0.1")) || a.TokenSHA256[0] != 0x9f || a.TokenSHA256[31] != 0x08 {
		t.Fatalf("admin %+v", a)
	}
	// The effective configuration round-trips, the hash and not a token.
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	again := mustParse(t, string(b))
	if again.Admin == nil || again.Admin.TokenSHA256 != a.TokenSHA256 || again.Admin.PathPrefix != a.PathPrefix ||
		len(again.Admin.ClientCIDRs.Prefixes) != 1 {
		t.Fatalf("round trip: %s", b)
	}
}
