package request

import (
	"net/netip"
	"strconv"
)

// appendMaskedIP appends ip masked to v4Bits or v6Bits, with the prefix
// length, as Envoy's masked_remote_address: "192.0.2.0/24". ip is the
// canonical text the client address resolution gives (IPv4-mapped IPv6
// already unmapped); a zone is dropped, so no client picks a bucket of
// its own by naming a zone.
func appendMaskedIP(dst []byte, ip string, v4Bits, v6Bits uint8) ([]byte, bool) {
	if a, ok := canonicalIPv4(ip); ok {
		m := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		if v4Bits < 32 {
			m &^= 1<<(32-v4Bits) - 1
		}
		for i := 3; i >= 0; i-- {
			dst = strconv.AppendUint(dst, uint64(m>>(8*i)&0xff), 10)
			if i > 0 {
				dst = append(dst, '.')
			}
		}
		dst = append(dst, '/')
		return strconv.AppendUint(dst, uint64(v4Bits), 10), true
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return dst, false
	}
	addr = addr.WithZone("").Unmap()
	bits := int(v6Bits)
	if addr.Is4() {
		bits = int(v4Bits)
	}
	p, err := addr.Prefix(bits)
	if err != nil {
		return dst, false
	}
	return p.AppendTo(dst), true
}

// canonicalIPv4 parses dotted-decimal IPv4 in the canonical form netip
// prints (no leading zeros); it avoids netip's slower general parser for
// the common case.
func canonicalIPv4(s string) (a [4]byte, ok bool) {
	a, n := ipv4Prefix(s)
	return a, n > 0 && n == len(s)
}

// ipv4Prefix parses a canonical dotted-decimal IPv4 address (octets 0-255
// without leading zeros, the forms netip accepts) at the start of s and
// returns it and its length, or a length of 0. It is the one hand-written
// IPv4 parser of the request path: source.address, client_ip keys and
// CIDR matches all start here.
func ipv4Prefix(s string) (a [4]byte, n int) {
	i := 0
	for octet := 0; octet < 4; octet++ {
		start, v := i, 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < 3 {
			v = v*10 + int(s[i]-'0')
			i++
		}
		if i == start || v > 255 || (s[start] == '0' && i-start > 1) {
			return a, 0
		}
		a[octet] = byte(v)
		if octet < 3 {
			if i >= len(s) || s[i] != '.' {
				return a, 0
			}
			i++
		}
	}
	return a, i
}
