package config

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/request/cidr"
)

func TestCIDRSet(t *testing.T) {
	var prefixes []netip.Prefix
	for _, s := range []string{"10.0.0.0/8", "192.0.2.7", "10.1.0.0/16", "172.16.0.1/12", "2001:db8::/32", "::ffff:198.51.100.0/120", "fe80::1"} {
		p, err := ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		prefixes = append(prefixes, p)
	}
	set := cidr.NewSet(prefixes)
	for addr, want := range map[string]bool{
		"10.255.255.255": true, "11.0.0.0": false, "9.255.255.255": false,
		"192.0.2.7": true, "192.0.2.8": false,
		"172.31.255.255": true, "172.32.0.0": false,
		"2001:db8:ffff::1": true, "2001:db9::": false,
		"198.51.100.9": true, "::ffff:198.51.100.9": true, "::ffff:10.0.0.1": true,
		"fe80::1": true, "fe80::1%eth0": true, "fe80::2": false,
		"0.0.0.0": false, "255.255.255.255": false, "::": false,
	} {
		a := netip.MustParseAddr(addr)
		if got := set.Contains(a); got != want {
			t.Errorf("%s: %v, want %v", addr, got, want)
		}
	}
	if p := set.Prefixes[3].String(); p != "172.16.0.0/12" {
		t.Errorf("host bits kept: %s", p)
	}
	if p := set.Prefixes[5].String(); p != "198.51.100.0/24" {
		t.Errorf("mapped prefix is %s, want its IPv4 form", p)
	}
}

// FuzzCIDRSet checks the compiled ranges against netip.Prefix.Contains
// for any list of CIDRs and any address, and that parsing never panics.
func FuzzCIDRSet(f *testing.F) {
	f.Add("10.0.0.0/8,10.1.0.0/16,192.0.2.1", "10.1.2.3")
	f.Add("2001:db8::/32,::/0,::ffff:1.2.3.0/120", "1.2.3.4")
	f.Add("fe80::%eth0/64,1.2.3.4/33,x", "fe80::1%eth0")
	f.Add("0.0.0.0/1,128.0.0.0/1,8000::/1", "::ffff:255.255.255.255")
	f.Fuzz(func(t *testing.T, list, addr string) {
		var prefixes []netip.Prefix
		for _, s := range strings.Split(list, ",") {
			p, err := ParseCIDR(s)
			if err != nil {
				continue
			}
			if p != p.Masked() || p.Addr().Zone() != "" || p.Addr().Is4In6() {
				t.Fatalf("ParseCIDR(%q) = %v, not canonical", s, p)
			}
			prefixes = append(prefixes, p)
		}
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return
		}
		set := cidr.NewSet(prefixes)
		want := false
		for _, p := range prefixes {
			want = want || p.Contains(a.WithZone("").Unmap())
		}
		if got := set.Contains(a); got != want {
			t.Fatalf("%v contains %s: %v, want %v", prefixes, addr, got, want)
		}
	})
}
