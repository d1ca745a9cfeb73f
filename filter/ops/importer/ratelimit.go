package importer

import (
	"strings"
)

// rlNode is a descriptor of an envoyproxy/ratelimit config, or a domain
// (the root, with no key). Children are in document order; the service
// looks them up by "key_value", then by "key" (a default: a bucket per
// value).
type rlNode struct {
	file     string
	at       node
	key      string
	value    string
	rule     *rlRule
	children []*rlNode
	// wildcard is a value ending in "*": a prefix match.
	wildcard bool
	parent   *rlNode
}

// chain is the descriptor's keys and values from the domain down, for
// limit names: "database_users-remote_address".
func (n *rlNode) chain() string {
	if n.parent == nil {
		return ""
	}
	s := n.key
	if n.value != "" {
		s += "_" + n.value
	}
	if p := n.parent.chain(); p != "" {
		return p + "-" + s
	}
	return s
}

// rlRule is a descriptor's rate_limit.
type rlRule struct {
	at        node
	limit     uint64
	window    string // a Sluice duration; "" when the unit cannot be one
	unlimited bool
	name      string
	replaces  []string
	shadow    bool
}

// unitWindows are the units the service counts in, as Sluice windows:
// both align fixed windows to the Unix epoch (the window of now/unit).
var unitWindows = map[string]string{
	"second": "1s", "minute": "1m", "hour": "1h", "day": "24h", "week": "168h",
}

// maxRate is the filter's largest limit; the service takes any uint32.
const maxRate = 1e9

// rlKeys are the service's valid keys (its loader refuses others).
var rlKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true, "metadata": true,
}

func (im *importer) readRatelimit(file string, root node) {
	r := reader{file: file, errs: &im.res.Errors, lenient: true}
	im.checkKeys(r, root)
	domain := r.str(root.child("domain"))
	if domain == "" {
		r.fail(root.child("domain"), "must not be empty")
		return
	}
	if im.domains == nil {
		im.domains = map[string]*rlNode{}
	}
	if _, dup := im.domains[domain]; dup {
		r.fail(root.child("domain"), "domain %q is given twice (the service refuses that unless it merges domains)", domain)
		return
	}
	d := &rlNode{file: file, at: root}
	im.readDescriptors(r, d, root.child("descriptors"))
	im.domains[domain] = d
}

// checkKeys refuses keys the service does not know, anywhere below n
// (metadata is free-form).
func (im *importer) checkKeys(r reader, n node) {
	for _, k := range n.keys() {
		c := n.child(k)
		switch {
		case !rlKeys[k]:
			r.fail(c, "unknown key %q", k)
		case k != "metadata":
			im.checkKeys(r, c)
			for _, it := range c.items() {
				im.checkKeys(r, it)
			}
		}
	}
}

func (im *importer) readDescriptors(r reader, parent *rlNode, list node) {
	if !r.isSeq(list) {
		return
	}
	seen := map[string]bool{}
	for _, it := range list.items() {
		if !r.isMap(it) {
			continue
		}
		d := &rlNode{file: r.file, at: it, key: r.str(it.child("key")), value: r.str(it.child("value")), parent: parent}
		if d.key == "" {
			r.fail(it.child("key"), "must not be empty")
			continue
		}
		composite := d.key
		if d.value != "" {
			composite += "_" + d.value
		}
		if seen[composite] {
			r.fail(it, "duplicate descriptor %q", composite)
			continue
		}
		seen[composite] = true
		if strings.HasSuffix(composite, "*") {
			d.wildcard = true
			im.note(Unsupported, r.file, it, "wildcard %q (a prefix match) is not imported; values it would match are counted by the key's default descriptor, if any", composite)
		}
		if it.child("share_threshold").present() && r.boolean(it.child("share_threshold")) {
			im.note(Unsupported, r.file, it.child("share_threshold"), "share_threshold goes with wildcards, which are not imported")
		}
		if it.child("quota_mode").present() && r.boolean(it.child("quota_mode")) {
			im.note(Unsupported, r.file, it.child("quota_mode"), "quota_mode is not imported: the limit is imported as an enforcing one")
		}
		for _, k := range []string{"detailed_metric", "value_to_metric"} {
			if it.child(k).present() && r.boolean(it.child(k)) {
				im.note(Inexact, r.file, it.child(k), "%s: Sluice's metrics are per limit (sluice.limit.<name>.*), never per descriptor value", k)
			}
		}
		if it.child("metadata").present() {
			im.note(Inexact, r.file, it.child("metadata"), "metadata is only returned to Envoy by the service; it is not imported")
		}
		if rl := it.child("rate_limit"); r.isMap(rl) {
			d.rule = im.readRule(r, rl, r.boolean(it.child("shadow_mode")))
		} else if it.child("shadow_mode").present() {
			r.boolean(it.child("shadow_mode"))
		}
		im.readDescriptors(r, d, it.child("descriptors"))
		parent.children = append(parent.children, d)
	}
}

func (im *importer) readRule(r reader, rl node, shadow bool) *rlRule {
	rule := &rlRule{at: rl, shadow: shadow, name: r.str(rl.child("name"))}
	rule.unlimited = r.boolean(rl.child("unlimited"))
	unit := strings.ToLower(r.str(rl.child("unit")))
	known := unit == "month" || unit == "year" || unitWindows[unit] != ""
	switch {
	case rule.unlimited && known:
		r.fail(rl.child("unit"), "must not be given with unlimited")
	case !rule.unlimited && !known:
		r.fail(rl.child("unit"), "invalid unit %q (second, minute, hour, day, week, month or year)", unit)
	case !rule.unlimited:
		rule.window = unitWindows[unit]
		if rule.window == "" {
			im.note(Unsupported, r.file, rl.child("unit"), "unit %s: Sluice windows are at most a week; the limit is not imported", unit)
		}
		rule.limit, _ = r.uint(rl.child("requests_per_unit"), 1<<32-1)
		if rule.limit > maxRate && rule.window != "" {
			im.note(Unsupported, r.file, rl.child("requests_per_unit"), "%d requests per unit: Sluice's limits are at most %d; the limit is not imported (it refuses nothing a Sluice limit could)", rule.limit, uint64(maxRate))
			rule.window = ""
		}
	}
	if rs := rl.child("replaces"); r.isSeq(rs) {
		for _, it := range rs.items() {
			name := r.str(it.child("name"))
			if name == "" {
				r.fail(it.child("name"), "must not be empty")
			} else if name == rule.name {
				r.fail(it.child("name"), "a rate limit must not replace itself")
			}
			rule.replaces = append(rule.replaces, name)
		}
	}
	return rule
}

// composite is the name the service files a descriptor under: its key,
// or its key, "_" and its value. The service looks an entry up by
// key + "_" + value in those names, so a descriptor keyed "user_vip"
// takes the entry user=vip as surely as key user, value vip would.
func (n *rlNode) composite() string {
	if n.value == "" {
		return n.key
	}
	return n.key + "_" + n.value
}

// lookup is the service's choice of the child for key and value: the
// child filed as key_value, else the one filed as key (the key's
// default). Wildcards are not imported.
func (n *rlNode) lookup(key, value string) *rlNode {
	want := key + "_" + value
	for _, c := range n.children {
		if !c.wildcard && c.composite() == want {
			return c
		}
	}
	return n.defaultChild(key)
}

func (n *rlNode) defaultChild(key string) *rlNode {
	for _, c := range n.children {
		if !c.wildcard && c.composite() == key {
			return c
		}
	}
	return nil
}

// valuedChild is a child the service picks for one value of a key.
type valuedChild struct {
	*rlNode
	value string
}

// valued are the children the service picks for key with some value
// (filed as key_value), with that value, in document order.
func (n *rlNode) valued(key string) []valuedChild {
	var out []valuedChild
	for _, c := range n.children {
		if v, ok := strings.CutPrefix(c.composite(), key+"_"); ok && !c.wildcard {
			out = append(out, valuedChild{c, v})
		}
	}
	return out
}
