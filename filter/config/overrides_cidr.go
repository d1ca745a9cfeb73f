package config

import (
	"net/netip"

	"github.com/sluice-proxy/sluice/filter/request/cidr"
	"github.com/tidwall/gjson"
)

// overridePrefixes compiles the override keys of a limit whose override_by
// part is client_ip. A key that is an address is a /32 or /128; two keys
// naming the same prefix are an error.
func (p *parser) overridePrefixes(l *Limit, opath string, ov gjson.Result) {
	keys := map[netip.Prefix]string{}
	ov.ForEach(func(k, _ gjson.Result) bool {
		key := k.String()
		pfx, err := ParseCIDR(key)
		if err != nil {
			// Not an address: it is compared as text, as before CIDR keys.
			return true
		}
		if other, dup := keys[pfx]; dup {
			p.errorf(FieldPath(opath, key), k.Index, "names the same prefix %s as %s", pfx, Quote(other))
			return true
		}
		keys[pfx] = key
		return true
	})
	if len(keys) > 0 {
		l.OverrideCIDRs = cidr.NewOverrides(keys)
	}
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
