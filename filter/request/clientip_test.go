package request

import (
	"net/netip"
	"testing"
)

func TestClientIPFromXFF(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		hops   int
		want   string
		wantOK bool
	}{
		{"rightmost with one trusted hop", []string{"1.1.1.1, 2.2.2.2, 3.3.3.3"}, 1, "3.3.3.3", true},
		{"second from right", []string{"1.1.1.1, 2.2.2.2, 3.3.3.3"}, 2, "2.2.2.2", true},
		{"leftmost exactly", []string{"1.1.1.1, 2.2.2.2, 3.3.3.3"}, 3, "1.1.1.1", true},
		{"fewer entries than hops", []string{"1.1.1.1, 2.2.2.2"}, 3, "", false},
		{"repeated headers are one list", []string{"1.1.1.1, 2.2.2.2", "3.3.3.3"}, 2, "2.2.2.2", true},
		{"repeated headers, crossing", []string{"1.1.1.1", "2.2.2.2,3.3.3.3"}, 3, "1.1.1.1", true},
		{"no spaces", []string{"1.1.1.1,2.2.2.2"}, 1, "2.2.2.2", true},
		{"port dropped", []string{"1.1.1.1:4711"}, 1, "1.1.1.1", true},
		{"bracketed v6 with port", []string{"[2001:db8::1]:443"}, 1, "2001:db8::1", true},
		{"bracketed v6", []string{"[2001:db8::1]"}, 1, "2001:db8::1", true},
		{"v4-mapped v6 unmapped", []string{"::ffff:10.0.0.1"}, 1, "10.0.0.1", true},
		{"garbage entry", []string{"1.1.1.1, not-an-ip"}, 1, "", false},
		{"empty entry", []string{"1.1.1.1, "}, 1, "", false},
		{"empty header", []string{""}, 1, "", false},
		{"no header", nil, 1, "", false},
		{"zero hops", []string{"1.1.1.1"}, 0, "", false},
		{"trailing comma", []string{"1.1.1.1,"}, 2, "1.1.1.1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := clientIPFromXFF(tt.values, tt.hops)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("clientIPFromXFF(%q, %d) = %q, %v; want %q, %v", tt.values, tt.hops, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestPeerIP(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.2.3:5555": "10.1.2.3", "[::1]:80": "::1", "192.168.0.1": "192.168.0.1",
		"[::ffff:10.1.2.3]:80": "10.1.2.3", "[2001:DB8::1]:443": "2001:db8::1", "255.255.255.255:0": "255.255.255.255",
	} {
		if got, ok := peerIP(in); !ok || got != want {
			t.Errorf("peerIP(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if _, ok := peerIP(""); ok {
		t.Error("empty source.address must not yield an address")
	}
}

func FuzzClientIPFromXFF(f *testing.F) {
	f.Add("1.1.1.1, 2.2.2.2", "3.3.3.3", 2)
	f.Add("[::1]:80,,", "", 1)
	f.Add(",,,", ",", 4)
	f.Fuzz(func(t *testing.T, a, b string, hops int) {
		ip, ok := clientIPFromXFF([]string{a, b}, hops%64)
		if ok {
			if again, ok2 := normalizeIP(ip); !ok2 || again != ip {
				t.Fatalf("returned %q which does not normalise to itself", ip)
			}
		} else if ip != "" {
			t.Fatalf("not ok but returned %q", ip)
		}
	})
}

// TestIPv4WithPortAgreesWithNetip: what the fast path accepts, netip
// accepts as IPv4 with a port, with the same address text; what it leaves
// to netip (ports with leading zeros past five digits, say) peerIP still
// answers as netip does.
func TestIPv4WithPortAgreesWithNetip(t *testing.T) {
	for _, in := range []string{
		"10.1.2.3:5555", "0.0.0.0:0", "255.255.255.255:65535", "1.2.3.4:65536", "1.2.3.256:1",
		"01.2.3.4:1", "1.2.3.4", "1.2.3.4:", ":80", "1.2.3:4", "1.2.3.4.5:6", "1.2.3.4:080",
		"1.2.3.4:1x", "[::1]:80", "1.2.3.4:123456", "1..3.4:5", "", "1.2.3.04:5", "9.9.9.9:00",
		"0.0.0.0:000000",
	} {
		checkIPv4WithPort(t, in)
	}
}

func checkIPv4WithPort(t *testing.T, in string) {
	t.Helper()
	ap, err := netip.ParseAddrPort(in)
	if n := ipv4WithPort(in); n > 0 && (err != nil || !ap.Addr().Is4() || in[:n] != ap.Addr().String()) {
		t.Fatalf("ipv4WithPort(%q) took %q, netip: %v %v", in, in[:n], ap, err)
	}
	want, wantOK := normalizeIP(in)
	if err == nil {
		// Zones are dropped from every client address, so a client cannot
		// buy a fresh bucket with one (TestNormalizeIPDropsZone).
		want, wantOK = ap.Addr().Unmap().WithZone("").String(), true
	}
	if got, ok := peerIP(in); got != want || ok != wantOK {
		t.Fatalf("peerIP(%q) = %q, %v; netip gives %q, %v", in, got, ok, want, wantOK)
	}
}

func FuzzIPv4WithPort(f *testing.F) {
	f.Add("10.1.2.3:5555")
	f.Add("1.2.3.4:080")
	f.Fuzz(checkIPv4WithPort)
}
