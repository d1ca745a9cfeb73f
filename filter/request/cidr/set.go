// Package cidr holds sets of IPv4 and IPv6 prefixes compiled for the
// request path: Set, whether a client address is in client_cidrs, and
// Overrides, which override of a limit a client address selects by its
// longest matching prefix. Package config builds them from the prefixes
// it parsed (config.ParseCIDR gives them in canonical form); lookups do
// not allocate.
package cidr

import (
	"encoding/binary"
	"net/netip"
	"slices"
)

// Set is a set of IPv4 and IPv6 prefixes compiled into sorted,
// merged address ranges, so membership is a binary search that does not
// allocate however many prefixes an operator lists.
type Set struct {
	// Prefixes are the canonical (masked) prefixes as configured, in order,
	// for printing the configuration back.
	Prefixes []netip.Prefix
	v4       []rangeV4
	v6       []rangeV6
}

type rangeV4 struct{ lo, hi uint32 }

type rangeV6 struct{ lo, hi u128 }

type u128 struct{ hi, lo uint64 }

func (a u128) less(b u128) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }

func (a u128) next() (u128, bool) {
	if a.lo == ^uint64(0) {
		return u128{a.hi + 1, 0}, a.hi != ^uint64(0)
	}
	return u128{a.hi, a.lo + 1}, true
}

func u128Of(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// NewSet compiles prefixes (already canonical, as config.ParseCIDR
// returns them).
func NewSet(prefixes []netip.Prefix) *Set {
	s := &Set{Prefixes: prefixes}
	for _, p := range prefixes {
		if p.Addr().Is4() {
			b := p.Addr().As4()
			lo := binary.BigEndian.Uint32(b[:])
			hi := lo | uint32(uint64(1)<<(32-p.Bits())-1)
			s.v4 = append(s.v4, rangeV4{lo, hi})
			continue
		}
		lo := u128Of(p.Addr())
		hi := lo
		if host := 128 - p.Bits(); host >= 64 {
			hi.lo = ^uint64(0)
			hi.hi |= uint64(1)<<(host-64) - 1
		} else {
			hi.lo |= uint64(1)<<host - 1
		}
		s.v6 = append(s.v6, rangeV6{lo, hi})
	}
	slices.SortFunc(s.v4, func(a, b rangeV4) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	merged4 := s.v4[:0]
	for _, r := range s.v4 {
		// Overlapping or adjacent ranges merge; a range ending at the top
		// of the space absorbs everything after it.
		if n := len(merged4); n > 0 && (merged4[n-1].hi == ^uint32(0) || r.lo <= merged4[n-1].hi+1) {
			merged4[n-1].hi = max(merged4[n-1].hi, r.hi)
			continue
		}
		merged4 = append(merged4, r)
	}
	s.v4 = merged4
	slices.SortFunc(s.v6, func(a, b rangeV6) int {
		switch {
		case a.lo.less(b.lo):
			return -1
		case b.lo.less(a.lo):
			return 1
		}
		return 0
	})
	merged6 := s.v6[:0]
	for _, r := range s.v6 {
		if n := len(merged6); n > 0 {
			last := &merged6[n-1]
			if next, ok := last.hi.next(); !ok || !next.less(r.lo) {
				if last.hi.less(r.hi) {
					last.hi = r.hi
				}
				continue
			}
		}
		merged6 = append(merged6, r)
	}
	s.v6 = merged6
	return s
}

// Contains reports whether a (unmapped, zone ignored) is in the set.
func (s *Set) Contains(a netip.Addr) bool {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		x := binary.BigEndian.Uint32(b[:])
		i, _ := slices.BinarySearchFunc(s.v4, x, func(r rangeV4, x uint32) int {
			if r.hi < x {
				return -1
			}
			if r.lo > x {
				return 1
			}
			return 0
		})
		return i < len(s.v4) && s.v4[i].lo <= x && x <= s.v4[i].hi
	}
	if !a.Is6() {
		return false
	}
	x := u128Of(a)
	i, _ := slices.BinarySearchFunc(s.v6, x, func(r rangeV6, x u128) int {
		if r.hi.less(x) {
			return -1
		}
		if x.less(r.lo) {
			return 1
		}
		return 0
	})
	return i < len(s.v6) && !x.less(s.v6[i].lo) && !s.v6[i].hi.less(x)
}
