package cidr

import (
	"net/netip"
	"testing"
)

func TestCIDRSetEdges(t *testing.T) {
	all := NewSet([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("255.0.0.0/8"), netip.MustParsePrefix("::/0"), netip.MustParsePrefix("ffff::/16")})
	for _, a := range []string{"0.0.0.0", "255.255.255.255", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"} {
		if !all.Contains(netip.MustParseAddr(a)) {
			t.Errorf("/0 misses %s", a)
		}
	}
	if (&Set{}).Contains(netip.Addr{}) {
		t.Error("the empty set holds the zero address")
	}
}
