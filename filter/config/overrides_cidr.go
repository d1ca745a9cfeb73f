package config

import (
	"net/netip"
	"slices"

	"github.com/tidwall/gjson"
)

// OverridePrefixes finds the override of a client address by longest
// matching prefix, for override_by client_ip. It keeps one map per prefix
// length, longest first, so a lookup is a mask and a map probe per
// distinct length, without allocation.
type OverridePrefixes struct {
	lengths []prefixLength
}

type prefixLength struct {
	bits int
	is4  bool
	keys map[netip.Prefix]string
}

// Resolve returns the override key whose prefix holds the client address
// text ip, or ip itself when none does, which selects the default rate.
func (o *OverridePrefixes) Resolve(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.WithZone("").Unmap()
	for i := range o.lengths {
		pl := &o.lengths[i]
		if pl.is4 != a.Is4() {
			continue
		}
		if p, err := a.Prefix(pl.bits); err == nil {
			if key, ok := pl.keys[p]; ok {
				return key
			}
		}
	}
	return ip
}

type lengthFamily struct {
	bits int
	is4  bool
}

// overridePrefixes compiles the override keys of a limit whose override_by
// part is client_ip. A key that is an address is a /32 or /128; two keys
// naming the same prefix are an error.
func (p *parser) overridePrefixes(l *Limit, opath string, ov gjson.Result) {
	byLen := map[lengthFamily]map[netip.Prefix]string{}
	ov.ForEach(func(k, _ gjson.Result) bool {
		key := k.String()
		pfx, err := ParseCIDR(key)
		if err != nil {
			// Not an address: it is compared as text, as before CIDR keys.
			return true
		}
		lf := lengthFamily{pfx.Bits(), pfx.Addr().Is4()}
		m := byLen[lf]
		if m == nil {
			m = map[netip.Prefix]string{}
			byLen[lf] = m
		}
		if other, dup := m[pfx]; dup {
			p.errorf(FieldPath(opath, key), k.Index, "names the same prefix %s as %s", pfx, Quote(other))
			return true
		}
		m[pfx] = key
		return true
	})
	if len(byLen) == 0 {
		return
	}
	o := &OverridePrefixes{}
	for lf, m := range byLen {
		o.lengths = append(o.lengths, prefixLength{bits: lf.bits, is4: lf.is4, keys: m})
	}
	// Longest first; the family order only makes the result deterministic.
	slices.SortFunc(o.lengths, func(a, b prefixLength) int {
		switch {
		case a.bits != b.bits:
			return b.bits - a.bits
		case a.is4 == b.is4:
			return 0
		case a.is4:
			return -1
		}
		return 1
	})
	l.OverrideCIDRs = o
}

// OverrideAction is what an override does instead of giving a rate.
type OverrideAction uint8

const (
	// OverrideUnlimited exempts the value: it consumes nothing.
	OverrideUnlimited OverrideAction = iota + 1
	// OverrideBlock rejects every request with the value, as an
	// over-limit request with the limit's status, headers and body.
	OverrideBlock
)

func (a OverrideAction) String() string {
	if a == OverrideBlock {
		return "block"
	}
	return "unlimited"
}

// overrideAction parses {"unlimited": true} or {"block": true}; it reports
// whether v was one of those forms (valid or not), so the caller does not
// read it as a rate.
func (p *parser) overrideAction(l *Limit, name, vpath string, v gjson.Result) bool {
	if !v.IsObject() || !v.Get("unlimited").Exists() && !v.Get("block").Exists() {
		return false
	}
	o := p.object(vpath, v, "unlimited", "block")
	o.conflicts("block", "unlimited")
	for _, a := range []OverrideAction{OverrideUnlimited, OverrideBlock} {
		if b, ok := o.boolean(a.String()); ok {
			if !b {
				o.errorf(a.String(), "must be true; remove the override instead")
				continue
			}
			if l.OverrideActions == nil {
				l.OverrideActions = map[string]OverrideAction{}
			}
			l.OverrideActions[name] = a
		}
	}
	return true
}
