package request

import (
	"net/netip"
	"unsafe"

	"github.com/sluice-proxy/sluice/filter/config"
)

// clientAddrCache keeps the parsed client address for client_cidrs.
type clientAddrCache struct {
	loaded, ok bool
	addr       netip.Addr
}

// ClientAddr makes Info Attributes: the client address
// per client_ip, parsed once per request.
func (r *Info) ClientAddr() (netip.Addr, bool) {
	c := &r.clientAddr
	if c.loaded {
		return c.addr, c.ok
	}
	c.loaded = true
	if r.clientCfg == nil {
		return c.addr, false
	}
	ip, ok := r.Client(r.clientCfg)
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

// scratchBuf is the worker's buffer for values a condition reads, or a
// buffer of the call's own where there is none (tests).
func (r *Info) scratchBuf() *[]byte {
	if r.scratch != nil {
		return r.scratch
	}
	return new([]byte)
}

// MatchHeader makes Info a HeaderSource. The readings of a
// header (ValueTest) are each value sent under the name, or under
// the name spelled with '_' for '-' (read as one by CGI and WSGI servers,
// as the header: key part reads it), in order; with more than one, also
// the values joined with ',' (what Envoy's own header matching and WSGI
// servers see); and absent when no copy is sent under the very name (an
// upstream reading that name sees none). A single copy is one reading,
// read without a copy.
func (r *Info) MatchHeader(name string, c *config.ValueCondition, every bool) bool {
	r.loadHeaders()
	t := NewValueTest(c, every)
	n, exact := 0, false
	for _, kv := range r.headers {
		if !sameHeaderName(kv[0], name) {
			continue
		}
		n++
		exact = exact || kv[0] == name
		if t.Read(kv[1]); t.Decided() {
			return t.Holds()
		}
	}
	if !exact {
		t.ReadAbsent()
	}
	if n > 1 {
		buf := r.scratchBuf()
		j, first := (*buf)[:0], true
		for _, kv := range r.headers {
			if !sameHeaderName(kv[0], name) {
				continue
			}
			if !first {
				j = append(j, ',')
			}
			j, first = append(j, kv[1]...), false
		}
		*buf = j
		t.Read(scratchString(j))
	}
	return t.Holds()
}

// MatchQuery makes Info Attributes. The readings of a
// parameter (ValueTest) are those of every reading of the query a
// query: key part makes (QueryReadings, queryScan: with ';' as a
// separator too, and under each name PHP reads as this one): each value
// decoded, in order; with more than one, also the values joined with ','
// in order (ASP.NET's reading); and absent when the reading has none under
// the very name. Values are decoded into the worker's scratch buffer one
// at a time, so a parameter given thousands of times costs one scan per
// reading, and one given once is read without a copy of its own.
func (r *Info) MatchQuery(name string, c *config.ValueCondition, every bool) bool {
	t := NewValueTest(c, every)
	query, ok := RawQuery(r.pseudo(NeedPath))
	if !ok {
		return t.Holds()
	}
	buf := r.scratchBuf()
	for _, seps := range QueryReadings(query) {
		n, exact := 0, false
		for s := (queryScan{rest: query, name: name, seps: seps}); ; {
			v, isExact, ok := s.next()
			if !ok {
				break
			}
			n, exact = n+1, exact || isExact
			*buf = AppendQueryUnescaped((*buf)[:0], v)
			if t.Read(scratchString(*buf)); t.Decided() {
				return t.Holds()
			}
		}
		if !exact {
			if t.ReadAbsent(); t.Decided() {
				return t.Holds()
			}
		}
		if n > 1 {
			j := (*buf)[:0]
			for s, first := (queryScan{rest: query, name: name, seps: seps}), true; ; first = false {
				v, _, ok := s.next()
				if !ok {
					break
				}
				if !first {
					j = append(j, ',')
				}
				j = AppendQueryUnescaped(j, v)
			}
			*buf = j
			t.Read(scratchString(j))
		}
	}
	return t.Holds()
}

// scratchString views the scratch buffer's bytes as a string without a
// copy, valid until the buffer is next written.
func scratchString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
