package config

import (
	"fmt"
	"net/netip"
	"strings"
)

// ParseCIDR reads "10.0.0.0/8", "2001:db8::/32" or a bare address (a /32
// or /128). Host bits are cleared, as Envoy's CidrRange does. An
// IPv4-mapped IPv6 prefix of at least /96 is the IPv4 prefix it maps, so
// it matches the clients it names: client addresses are unmapped. Zones
// are refused: a zone names an interface of this host, not clients.
func ParseCIDR(s string) (netip.Prefix, error) {
	if strings.ContainsRune(s, '%') {
		return netip.Prefix{}, fmt.Errorf("%s: a zone is not allowed in a CIDR", Quote(s))
	}
	var p netip.Prefix
	if strings.ContainsRune(s, '/') {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, fmt.Errorf("%s is not a CIDR such as 10.0.0.0/8 or 2001:db8::/32", Quote(s))
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%s is not a CIDR such as 10.0.0.0/8 or 2001:db8::/32", Quote(s))
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("%s: an IPv4-mapped prefix must be at least /96", Quote(s))
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}
