package request

import (
	"net/netip"
	"strings"

	"github.com/sluice-proxy/sluice/filter/config"
)

// clientIPFromXFF returns the X-Forwarded-For entry trustedHops positions
// from the right (1 is the rightmost, the address the nearest trusted proxy
// saw). Repeated X-Forwarded-For headers are one list in order, as HTTP
// field combination says. Entries may carry a port or IPv6 brackets, which
// are dropped so one client maps to one key. ok is false when the list is
// shorter than trustedHops or the entry is not an IP address: the caller
// then uses the peer, because an unparsable entry would let a client pick
// its own bucket.
func clientIPFromXFF(values []string, trustedHops int) (ip string, ok bool) {
	if trustedHops < 1 {
		return "", false
	}
	seen := 0
	for v := len(values) - 1; v >= 0; v-- {
		list := values[v]
		end := len(list)
		for end >= 0 {
			start := strings.LastIndexByte(list[:end], ',') + 1
			seen++
			if seen == trustedHops {
				return normalizeIP(list[start:end])
			}
			if start == 0 {
				break
			}
			end = start - 1
		}
	}
	return "", false
}

// normalizeIP parses an address that may carry a port or brackets and
// returns its canonical text form. An IPv6 zone is dropped: it names an
// interface of the sender, not another client, and a client that could
// add one would pick a bucket of its own.
func normalizeIP(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", false
	}
	if addr, err := netip.ParseAddr(s); err == nil {
		return addr.WithZone("").Unmap().String(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap().String(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if addr, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return addr.WithZone("").Unmap().String(), true
		}
	}
	return "", false
}

// peerIP strips the port from Envoy's source.address ("ip:port", or
// "[v6]:port"); Envoy may also give a bare address. The usual form is
// tried first: a failed parse returns an allocated error, and this runs
// on every request with a client_ip key.
func peerIP(sourceAddress string) (string, bool) {
	if n := ipv4WithPort(sourceAddress); n > 0 {
		return sourceAddress[:n], true
	}
	if ap, err := netip.ParseAddrPort(sourceAddress); err == nil {
		if ap.Addr().Is4() {
			// netip accepts only canonical dotted-decimal IPv4 (no leading
			// zeros), so the text before the port is already the canonical
			// form, and slicing it saves an allocation per request.
			return sourceAddress[:strings.LastIndexByte(sourceAddress, ':')], true
		}
		return ap.Addr().WithZone("").Unmap().String(), true
	}
	return normalizeIP(sourceAddress)
}

// ipv4WithPort returns the length of the address in "a.b.c.d:port" when s
// is exactly that, with the forms netip accepts (octets 0-255 without
// leading zeros, port 0-65535), and 0 otherwise. It is the shape of
// nearly every source.address, and netip's general parser is several
// times slower in the wasm guest.
func ipv4WithPort(s string) int {
	_, addrLen := ipv4Prefix(s)
	if addrLen == 0 {
		return 0
	}
	i := addrLen
	if i >= len(s) || s[i] != ':' {
		return 0
	}
	i++
	start, port := i, 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < 5 {
		port = port*10 + int(s[i]-'0')
		i++
	}
	if i == start || i != len(s) || port > 65535 {
		return 0
	}
	return addrLen
}

// clientFromSources tries client_ip.sources in order; the first that
// yields one valid address wins. A source yields nothing when its header
// is absent, repeated or not one address, or when X-Forwarded-For is
// shorter than trusted_hops; the next is then tried. No source at all is
// a missing client address, never a shared empty one.
func (r *Info) clientFromSources(cfg *config.ClientIP) (string, bool) {
	for _, s := range cfg.Sources {
		var ip string
		var ok bool
		switch s.Kind {
		case config.ClientIPXFF:
			ip, ok = clientIPFromXFF(r.headerValues("x-forwarded-for"), cfg.TrustedHops)
		case config.ClientIPHeader:
			if v, present := r.Header(s.Header); present {
				ip, ok = normalizeIP(v)
			}
		default:
			ip, ok = peerIP(r.src.Property(SourceAddressProperty))
		}
		if ok {
			return ip, true
		}
	}
	return "", false
}
