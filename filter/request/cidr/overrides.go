package cidr

import (
	"net/netip"
	"slices"
)

// Overrides finds the override of a client address by longest matching
// prefix, for override_by client_ip. It keeps one map per prefix length,
// longest first, so a lookup is a mask and a map probe per distinct
// length, without allocation.
type Overrides struct {
	lengths []prefixLength
}

type prefixLength struct {
	bits int
	is4  bool
	keys map[netip.Prefix]string
}

type lengthFamily struct {
	bits int
	is4  bool
}

// NewOverrides compiles the override keys of a limit by the canonical
// prefix each names (as config.ParseCIDR returns it).
func NewOverrides(keys map[netip.Prefix]string) *Overrides {
	byLen := map[lengthFamily]map[netip.Prefix]string{}
	for pfx, key := range keys {
		lf := lengthFamily{pfx.Bits(), pfx.Addr().Is4()}
		m := byLen[lf]
		if m == nil {
			m = map[netip.Prefix]string{}
			byLen[lf] = m
		}
		m[pfx] = key
	}
	o := &Overrides{}
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
	return o
}

// Resolve returns the override key whose prefix holds the client address
// text ip, or ip itself when none does, which selects the default rate.
func (o *Overrides) Resolve(ip string) string {
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
