package engine

import "net/netip"

// clientAddrCache keeps the parsed client address for client_cidrs.
type clientAddrCache struct {
	loaded, ok bool
	addr       netip.Addr
}

// ClientAddr makes requestInfo a config.RequestExtra: the client address
// per client_ip, parsed once per request.
func (r *requestInfo) ClientAddr() (netip.Addr, bool) {
	c := &r.clientAddr
	if c.loaded {
		return c.addr, c.ok
	}
	c.loaded = true
	if r.clientCfg == nil {
		return c.addr, false
	}
	ip, ok := r.client(r.clientCfg)
	if !ok {
		return c.addr, false
	}
	if a4, ok4 := canonicalIPv4(ip); ok4 {
		c.addr, c.ok = netip.AddrFrom4(a4), true
		return c.addr, true
	}
	a, err := netip.ParseAddr(ip)
	c.addr, c.ok = a.WithZone("").Unmap(), err == nil
	return c.addr, c.ok
}

// QueryValue gives a query parameter decoded, repeats joined with ',', in
// the worker's scratch buffer: the string is valid until the next call,
// which is enough for the condition that asked.
func (r *requestInfo) QueryValue(name string) (string, bool) {
	q, ok := rawQuery(r.pseudo(needPath))
	if !ok {
		return "", false
	}
	var local []byte
	buf := &local
	if r.scratch != nil {
		buf = r.scratch
	}
	v, found := appendQueryValue((*buf)[:0], q, name)
	*buf = v
	return arenaString(v), found
}
