package importer

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// convert imports every filter found, then checks what the inputs hold
// that no filter used.
func (im *importer) convert() {
	rls := im.envoy.ratelimits
	if len(rls) == 0 && len(im.domains) > 0 {
		// Ratelimit files without the Envoy filter: the domain is the
		// one given, or the only one.
		domain := im.opt.Domain
		if domain == "" && len(im.domains) == 1 {
			for d := range im.domains {
				domain = d
			}
		}
		if domain == "" {
			im.res.Errors = append(im.res.Errors, Finding{Message: "several ratelimit domains and no Envoy ratelimit filter naming one: give --domain"})
			return
		}
		rls = []filterRef{{name: "envoy.filters.http.ratelimit", domain: domain}}
	}
	im.usedDomains = map[string]bool{}
	for _, f := range rls {
		im.convertRatelimit(f)
	}
	for _, d := range sortedKeys(im.domains) {
		if !im.usedDomains[d] {
			im.note(Unsupported, im.domains[d].file, im.domains[d].at, "no ratelimit filter among the inputs names domain %q: nothing is imported from it", d)
		}
	}
	for _, f := range im.envoy.locals {
		im.convertLocal(f)
	}
	if len(rls) == 0 && len(im.envoy.locals) == 0 {
		im.res.Errors = append(im.res.Errors, Finding{File: strings.Join(im.files, ", "), Message: "nothing to import: no envoyproxy/ratelimit config and no Envoy ratelimit or local_ratelimit filter"})
	}
}

// convertRatelimit imports what Envoy's ratelimit filter f asks the
// service: for every rate_limits entry of its stage, every descriptor the
// entry can produce, resolved in the domain's descriptor tree into the
// Sluice limit that counts exactly the same requests in the same buckets.
func (im *importer) convertRatelimit(f filterRef) {
	r := reader{file: f.file, errs: &im.res.Errors}
	domain := f.domain
	stage := uint64(0)
	if f.cfg.present() {
		domain = r.str(f.cfg.child("domain"))
		stage, _ = r.uint(f.cfg.child("stage"), 10)
	}
	// Without the filter in the inputs, its defaults.
	im.ratelimitResponse(r, f.cfg)
	tree := im.domains[domain]
	if tree == nil {
		im.note(Unsupported, f.file, f.cfg.child("domain"), "no envoyproxy/ratelimit config for domain %q among the inputs: what this filter asks the service is not imported (give the service's config files too)", domain)
		return
	}
	entries, routes := im.entriesFor(stage, func(vh *vhost, rt *route) string {
		opt := vhOptionOf(r, perFilterConfig(r, rt.perFilter, f.name))
		if pr := perFilterConfig(r, rt.perFilter, f.name); pr.present() {
			for _, k := range []string{"override_option", "rate_limits", "domain"} {
				if pr.child(k).present() {
					im.note(Unsupported, vh.file, pr.child(k), "%s of a per-route ratelimit config is not imported", k)
				}
			}
		}
		return opt
	})
	im.usedDomains[domain] = true
	before := len(im.out.Limits)
	defer func() {
		if len(im.out.Limits) == before {
			im.note(Unsupported, tree.file, tree.at, "no route's rate_limits (of stage %d) reach a limit of domain %q: nothing is imported from it", stage, domain)
		}
	}()
	mode := ""
	if im.opt.BackendCluster != "" {
		mode = "global"
		if im.out.Backend == nil {
			im.backendPolicy("allow")
		}
	} else {
		im.note(Inexact, tree.file, tree.at, "the service counts across every Envoy; imported as local limits, each Envoy counts alone (give --backend-cluster for global limits in Redis)")
	}
	perRoute := map[string]int{}
	for _, se := range entries {
		var scope *match
		if len(dedupe(se.routes)) < routes {
			var ok bool
			if scope, ok = im.scopeFor(se.routes); !ok {
				continue
			}
		}
		alts, ok := im.readActions(se.file, se.entry, im.envoy.serviceCluster)
		if !ok {
			continue
		}
		enforcing := false
		for _, alt := range alts {
			var present []entryAlt
			for _, e := range alt.entries {
				if !e.omit {
					present = append(present, e)
				}
			}
			if len(present) == 0 {
				continue
			}
			cond := scope.and(alt.cond)
			var out []branch
			im.walk(tree, present, 0, branch{cond: cond}, &out)
			for _, b := range out {
				if l := im.ruleLimit(domain, b, mode); l != nil && !l.Shadow {
					enforcing = true
				}
			}
		}
		if enforcing {
			for _, rt := range dedupe(se.routes) {
				perRoute[rt]++
			}
		}
	}
	var crowded []string
	for rt, n := range perRoute {
		if n > 1 {
			crowded = append(crowded, im.routeLabel(rt))
		}
	}
	sort.Strings(crowded)
	if len(crowded) > 0 {
		file, at := f.file, f.cfg
		if file == "" {
			file, at = tree.file, tree.at
		}
		im.note(Inexact, file, at, "routes %s send several descriptors with limits: the service counts a request against every one even when another refuses it; Sluice counts a refused request against none, so after a refusal the other limits admit a little more", strings.Join(crowded, ", "))
	}
}

// branch is a path through the descriptor tree: the condition it needs,
// the key parts whose values make buckets, and the values of each part
// that a more specific descriptor takes (the default must not count
// them).
type branch struct {
	cond   *match
	parts  []string
	exempt map[string][]string
	node   *rlNode
	// fixedPart and fixedValue are the last dynamic entry whose value a
	// valued descriptor fixed: a rule of 0 requests blocks that value.
	fixedPart, fixedValue string
}

// walk follows entries from n as the service's lookup does: the child
// with the entry's key and value, else the key's default; a limit applies
// only at the descriptor's last entry, and the walk stops at a child
// without children.
func (im *importer) walk(n *rlNode, entries []entryAlt, i int, b branch, out *[]branch) {
	e := entries[i]
	type step struct {
		child *rlNode
		b     branch
	}
	var steps []step
	if e.part == "" {
		if c := n.lookup(e.key, e.value); c != nil {
			steps = append(steps, step{c, b})
		}
	} else {
		var taken []string
		for _, c := range n.valued(e.key) {
			vc, ok := valueCond(e.part, c.value)
			if !ok && strings.HasPrefix(e.part, "client_ip") {
				// No request takes it in the service: its requests
				// stay with the default, so it exempts nothing.
				im.note(Unsupported, c.file, c.at, "value %q is not the text Envoy sends for a client address (one address, canonical: lower-case IPv6, IPv4 unmapped; masked, the canonical prefix of the action's length), so the service never matches it: not imported", c.value)
				continue
			}
			if e.part == "host" {
				// Sluice's host is normalised (lower-cased, no port):
				// exempting the value from the default would exempt
				// every spelling of it, which the service counts there.
				im.note(Unsupported, c.file, c.at, "a descriptor for one :authority value needs the raw authority, which Sluice reads only normalised (lower-cased, without the port): not imported; requests with it count against the key's default, if any")
				continue
			}
			taken = append(taken, c.value)
			if !ok {
				if e.part == "cluster" {
					im.note(Unsupported, c.file, c.at, "a descriptor for one destination_cluster value needs a condition on the cluster, which Sluice's match has not; not imported")
				}
				continue
			}
			cond := b.cond.and(vc)
			if cond == nil {
				im.note(Unsupported, c.file, c.at, "this descriptor's conditions need two negations; not imported")
				continue
			}
			steps = append(steps, step{c.rlNode, branch{cond: cond, parts: b.parts, exempt: b.exempt, fixedPart: e.part, fixedValue: c.value}})
		}
		if d := n.defaultChild(e.key); d != nil {
			nb := branch{cond: b.cond, parts: append(append([]string(nil), b.parts...), e.part), exempt: map[string][]string{}}
			for k, v := range b.exempt {
				nb.exempt[k] = v
			}
			if len(taken) > 0 {
				nb.exempt[e.part] = taken
			}
			steps = append(steps, step{d, nb})
		}
	}
	for _, s := range steps {
		if i == len(entries)-1 {
			if s.child.rule != nil {
				s.b.node = s.child
				*out = append(*out, s.b)
			}
		} else if len(s.child.children) > 0 {
			im.walk(s.child, entries, i+1, s.b, out)
		}
	}
}

// ruleLimit adds the limit of a branch ending at a rule; nil when the
// rule has none (unlimited, or not importable).
func (im *importer) ruleLimit(domain string, b branch, mode string) *limit {
	rule := b.node.rule
	l := &limit{Key: append([]string{}, b.parts...), Algorithm: "fixed_window", Match: b.cond, Mode: mode, Shadow: rule.shadow, from: b.node}
	if l.Match == nil {
		l.Match = &match{}
	}
	if im.rlStatus != 0 {
		l.OnLimit = &onLimit{Status: im.rlStatus}
	}
	switch {
	case rule.unlimited && len(rule.replaces) == 0:
		return nil
	case rule.unlimited:
		// It only replaces: a shadow limit never refuses, and matching it
		// disables the limits it names.
		l.Key, l.Limit, l.Window, l.Shadow = []string{}, 1, "1s", true
		im.note(Inexact, b.node.file, rule.at, "an unlimited rule that replaces others is imported as a shadow limit: it never refuses, but its shadow_limited metric counts")
		im.excludeTaken(l, b)
		return im.addShared(l, ruleHint(domain, b.node), fmt.Sprintf("rule %p", b.node), b.node.file, b.node.at)
	case rule.window == "":
		return nil
	case rule.limit == 0 && b.fixedPart == "":
		im.note(Unsupported, b.node.file, rule.at, "0 requests per unit (refuse everything) reached without a descriptor value to block is not imported")
		return nil
	case rule.limit == 0:
		// Refuse every request: a block override on the value the
		// descriptor fixed, which every request reaching it has.
		l.Key = append(l.Key, b.fixedPart)
		l.Limit, l.Window = 1, rule.window
		l.OverrideBy = b.fixedPart
		l.Overrides = map[string]*override{b.fixedValue: {Block: true}}
		if len(l.Key) == 1 {
			l.OverrideBy = ""
		}
		return im.addShared(l, ruleHint(domain, b.node), fmt.Sprintf("rule %p", b.node), b.node.file, b.node.at)
	default:
		l.Limit, l.Window = rule.limit, rule.window
	}
	if len(b.exempt) > 1 {
		im.note(Inexact, b.node.file, b.node.at, "more specific descriptors take values of %d different entries here; Sluice can exempt the values of one: requests with the others' values also count against this default", len(b.exempt))
	}
	for _, part := range sortedKeys(b.exempt) {
		l.OverrideBy = part
		l.Overrides = map[string]*override{}
		for _, v := range b.exempt[part] {
			l.Overrides[v] = &override{Unlimited: true}
		}
		break
	}
	if l.OverrideBy != "" && len(l.Key) == 1 {
		l.OverrideBy = "" // the only part
	}
	if l.OverrideBy != "" && !contains(l.Key, l.OverrideBy) {
		l.OverrideBy, l.Overrides = "", nil
	}
	if len(rule.replaces) > 0 {
		im.excludeTaken(l, b)
	}
	return im.addShared(l, ruleHint(domain, b.node), fmt.Sprintf("rule %p", b.node), b.node.file, b.node.at)
}

// excludeTaken keeps the limit l of a default rule that replaces others
// off the values more specific descriptors take: the service applies the
// replaces of the rule a descriptor resolves to only, and those values
// resolve to their own rules. An unlimited override would leave l
// matching them, and a matching limit disables its targets; so the
// values become a negated condition instead, where Sluice has one.
func (im *importer) excludeTaken(l *limit, b branch) {
	if len(b.exempt) == 0 {
		return
	}
	part := sortedKeys(b.exempt)[0]
	not, ok := oneOf(part, b.exempt[part])
	if !ok || l.Match.Not != nil {
		im.note(Inexact, b.node.file, b.node.rule.at.child("replaces"), "the replaces of this default rule also apply, in Sluice, to the values more specific descriptors take (%s), which the service resolves to their own rules: a Sluice match cannot exclude them here", strings.Join(b.exempt[part], ", "))
		return
	}
	l.Match.Not = not
	l.OverrideBy, l.Overrides = "", nil
}

// oneOf is the condition that part's value is one of values, false when
// Sluice has none.
func oneOf(part string, values []string) (*match, bool) {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = regexp.QuoteMeta(v)
	}
	alt := "(?:" + strings.Join(quoted, "|") + ")"
	switch {
	case strings.HasPrefix(part, "header:"):
		return &match{Headers: []condition{{Name: part[len("header:"):], Regex: alt}}}, true
	case strings.HasPrefix(part, "query:"):
		return &match{Query: []condition{{Name: part[len("query:"):], Regex: alt}}}, true
	case part == "path":
		return &match{PathRegex: alt}, true
	case part == "client_ip" || strings.HasPrefix(part, "client_ip/"):
		// The values are canonical addresses, or prefixes of the mask's
		// length (valueCond let no other through).
		return &match{CIDRs: append([]string(nil), values...)}, true
	case part == "method":
		var ms []string
		for _, v := range values {
			if knownMethods[v] {
				ms = append(ms, v)
			}
		}
		return &match{Methods: ms}, len(ms) > 0
	}
	return nil, false
}

// ruleHint is the name a rule's limit is given: the rule's name, or its
// domain and descriptor chain.
func ruleHint(domain string, n *rlNode) string {
	if n.rule.name != "" {
		return n.rule.name
	}
	return domain + "-" + n.chain()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// resolveReplaces turns each limit's rule's replaces (rule names) into
// the Sluice names of the limits imported from rules of those names.
func (im *importer) resolveReplaces() {
	byRule := map[string][]string{}
	for _, l := range im.out.Limits {
		if l.from != nil && l.from.rule != nil && l.from.rule.name != "" {
			byRule[l.from.rule.name] = append(byRule[l.from.rule.name], l.Name)
		}
	}
	for _, l := range im.out.Limits {
		if l.from == nil || l.from.rule == nil {
			continue
		}
		for _, n := range l.from.rule.replaces {
			for _, target := range byRule[n] {
				if target != l.Name && !contains(l.Replaces, target) {
					l.Replaces = append(l.Replaces, target)
				}
			}
		}
	}
	im.breakReplaceCycles()
}

// breakReplaceCycles drops the replaces of every limit that replaces
// itself through others: the service accepts such a cycle (a request
// matching both rules is counted by neither), the filter refuses it. The
// limits stay, each counting on its own, which is reported at the rule.
func (im *importer) breakReplaceCycles() {
	byName := map[string]*limit{}
	for _, l := range im.out.Limits {
		byName[l.Name] = l
	}
	reaches := func(from *limit, to string) bool {
		seen := map[string]bool{}
		stack := append([]string(nil), from.Replaces...)
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if n == to {
				return true
			}
			if !seen[n] && byName[n] != nil {
				seen[n] = true
				stack = append(stack, byName[n].Replaces...)
			}
		}
		return false
	}
	var cyclic []*limit
	for _, l := range im.out.Limits {
		if reaches(l, l.Name) {
			cyclic = append(cyclic, l)
		}
	}
	for _, l := range cyclic {
		im.note(Unsupported, l.from.file, l.from.rule.at.child("replaces"), "these replaces form a cycle, which the service accepts (a request both rules apply to is limited by neither) and Sluice refuses: not imported, so each of those limits applies on its own")
		l.Replaces = nil
	}
}

// ratelimitKnown are the ratelimit filter's fields the importer reads or
// that only concern how Envoy reaches the service; any other is
// reported.
var ratelimitKnown = map[string]bool{
	"@type": true, "domain": true, "stage": true, "request_type": true, "timeout": true,
	"failure_mode_deny": true, "rate_limited_as_resource_exhausted": true, "rate_limit_service": true,
	"enable_x_ratelimit_headers": true, "disable_x_envoy_ratelimited_header": true,
	"rate_limited_status": true, "stat_prefix": true,
}

// ratelimitResponse imports the filter's reply settings.
func (im *importer) ratelimitResponse(r reader, cfg node) {
	resp := &response{Headers: []string{}, Body: "none", ReplyHeaders: map[string]string{}}
	if !r.boolean(cfg.child("disable_x_envoy_ratelimited_header")) {
		resp.ReplyHeaders["x-envoy-ratelimited"] = "true"
	}
	if xh := r.str(cfg.child("enable_x_ratelimit_headers")); xh != "" && xh != "OFF" {
		resp.Headers = []string{"x-ratelimit"}
		im.note(Inexact, r.file, cfg.child("enable_x_ratelimit_headers"), "Sluice's X-RateLimit-Reset is a Unix time, Envoy's draft 03 header the seconds until the reset; X-RateLimit-Limit carries no policy")
	}
	resp.GRPC = r.boolean(cfg.child("rate_limited_as_resource_exhausted"))
	if cfg.child("failure_mode_deny").present() && im.opt.BackendCluster != "" {
		if r.boolean(cfg.child("failure_mode_deny")) {
			im.backendPolicy("deny")
		}
	}
	im.rlStatus = statusOf(r, cfg.child("rate_limited_status"))
	for _, k := range cfg.keys() {
		if !ratelimitKnown[k] {
			im.note(Unsupported, r.file, cfg.child(k), "%s is not imported", k)
		}
	}
	if rt := strings.ToLower(r.str(cfg.child("request_type"))); rt != "" && rt != "both" {
		im.note(Unsupported, r.file, cfg.child("request_type"), "request_type %s is not imported: the limits apply to internal and external requests alike", rt)
	}
	im.setResponse(r, cfg, resp)
}

func (im *importer) backendPolicy(p string) {
	im.out.Backend = &backend{Cluster: im.opt.BackendCluster, FailurePolicy: p}
}

// setResponse sets the configuration's reply settings, which are one for
// the whole filter: a second, different set is reported.
func (im *importer) setResponse(r reader, at node, resp *response) {
	if len(resp.ReplyHeaders) == 0 {
		resp.ReplyHeaders = nil
	}
	if im.out.Response == nil {
		im.out.Response = resp
		return
	}
	if !sameResponse(im.out.Response, resp) {
		im.note(Inexact, r.file, at, "this filter's replies differ from an earlier one's; Sluice has one reply format for the whole filter, the first one's")
	}
}

// statusOf reads an HttpStatus ({code: n}): 0 for the default 429, and
// as Envoy does, a code below 400 counts as 429.
func statusOf(r reader, s node) int {
	code, ok := r.uint(s.child("code"), 599)
	if !ok || code < 400 || code == 429 {
		return 0
	}
	return int(code)
}

func sameResponse(a, b *response) bool {
	if strings.Join(a.Headers, ",") != strings.Join(b.Headers, ",") || a.Body != b.Body || a.GRPC != b.GRPC ||
		len(a.ReplyHeaders) != len(b.ReplyHeaders) || len(a.Templates) != len(b.Templates) {
		return false
	}
	for k, v := range a.ReplyHeaders {
		if b.ReplyHeaders[k] != v {
			return false
		}
	}
	for k, v := range a.Templates {
		if b.Templates[k] != v {
			return false
		}
	}
	return true
}
