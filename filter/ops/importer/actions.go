package importer

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// entryAlt is one way an action contributes to a descriptor: under cond,
// it adds the entry key with a constant value, or with the value of a
// Sluice key part, or (omit) adds nothing. An action whose descriptor is
// dropped when it cannot produce an entry has no alternative for that
// case: no descriptor means no limit.
type entryAlt struct {
	cond  *match
	omit  bool
	key   string
	value string
	part  string
}

// descAlt is one descriptor an entry of rate_limits can produce, under
// cond.
type descAlt struct {
	cond    *match
	entries []entryAlt
}

// readActions reads a rate_limits entry's actions into the descriptors it
// can produce; ok is false when one cannot be imported (reported).
func (im *importer) readActions(file string, entry node, serviceCluster string) ([]descAlt, bool) {
	r := reader{file: file, errs: &im.res.Errors}
	for _, k := range []string{"disable_key", "limit", "hits_addend", "apply_on_stream_done"} {
		if entry.child(k).present() {
			im.note(Unsupported, file, entry.child(k), "%s is not imported: the descriptor is imported as if it were not set", k)
		}
	}
	alts := []descAlt{{}}
	actions := entry.child("actions")
	if !r.isSeq(actions) {
		r.fail(actions, "a rate_limits entry needs actions")
		return nil, false
	}
	for _, a := range actions.items() {
		choices, ok := im.readAction(r, a, serviceCluster)
		if !ok {
			return nil, false
		}
		var next []descAlt
		for _, d := range alts {
			for _, c := range choices {
				cond := d.cond.and(c.cond)
				if cond == nil {
					im.note(Unsupported, file, a, "the conditions of this descriptor need two negations, which a Sluice match cannot hold; it is not imported")
					return nil, false
				}
				next = append(next, descAlt{cond: cond, entries: append(append([]entryAlt(nil), d.entries...), c)})
			}
		}
		if len(next) > maxAlternatives {
			im.note(Unsupported, file, entry, "this entry can produce more than %d different descriptors; it is not imported", maxAlternatives)
			return nil, false
		}
		alts = next
	}
	return alts, true
}

func yes() *bool { t := true; return &t }
func no() *bool  { f := false; return &f }

// readAction reads one action.
func (im *importer) readAction(r reader, a node, serviceCluster string) ([]entryAlt, bool) {
	kinds := a.keys()
	if len(kinds) != 1 {
		r.fail(a, "an action has exactly one kind")
		return nil, false
	}
	kind := kinds[0]
	v := a.child(kind)
	switch kind {
	case "generic_key":
		key := r.str(v.child("descriptor_key"))
		if key == "" {
			key = "generic_key"
		}
		return []entryAlt{{key: key, value: r.str(v.child("descriptor_value"))}}, true
	case "source_cluster":
		if serviceCluster == "" {
			im.note(Unsupported, r.file, a, "source_cluster is Envoy's --service-cluster (node.cluster), which the input does not give; the descriptor is not imported")
			return nil, false
		}
		return []entryAlt{{key: "source_cluster", value: serviceCluster}}, true
	case "destination_cluster":
		return []entryAlt{{key: "destination_cluster", part: "cluster"}}, true
	case "remote_address":
		im.note(Inexact, r.file, a, "remote_address is Envoy's trusted client address (use_remote_address, xff_num_trusted_hops): set Sluice's client_ip source to match your connection manager")
		return []entryAlt{{key: "remote_address", part: "client_ip"}}, true
	case "masked_remote_address":
		v4, v6 := uint64(32), uint64(128)
		if n, ok := r.wrappedUint(v.child("v4_prefix_mask_len"), 32); ok {
			v4 = n
		}
		if n, ok := r.wrappedUint(v.child("v6_prefix_mask_len"), 128); ok {
			v6 = n
		}
		// Both write the masked address as a CIDR ("192.0.2.0/24"), also
		// with full masks.
		return []entryAlt{{key: "masked_remote_address", part: fmt.Sprintf("client_ip/%d/%d", v4, v6)}}, true
	case "request_headers":
		name := strings.ToLower(r.str(v.child("header_name")))
		key := r.str(v.child("descriptor_key"))
		if name == "" || key == "" {
			r.fail(v, "header_name and descriptor_key are required")
			return nil, false
		}
		if !headerName(r, v.child("header_name"), name) {
			return nil, false
		}
		if pseudo, ok := pseudoParts[name]; ok {
			switch pseudo {
			case "path":
				im.note(Inexact, r.file, a, ":path: Envoy's value holds the query string, Sluice's path part does not")
			case "host":
				im.note(Inexact, r.file, a, ":authority: Envoy sends it as the client wrote it, Sluice's host key part is normalised (lower-cased, without the port), so API.example.com:8443 and api.example.com share one bucket in Sluice and count apart in the service")
			}
			return []entryAlt{{key: key, part: pseudo}}, true
		}
		if strings.HasPrefix(name, ":") {
			im.note(Unsupported, r.file, v.child("header_name"), "pseudo-header %s is not imported; the descriptor is not imported", name)
			return nil, false
		}
		im.note(Inexact, r.file, a, "header %s: Envoy takes its first value and sends an empty value as a bucket of its own; Sluice joins repeated values with \",\" and treats an empty value as absent", name)
		return presence(key, "header:"+name, &match{Headers: []condition{{Name: name, Present: yes()}}},
			&match{Headers: []condition{{Name: name, Present: no()}}}, r.boolean(v.child("skip_if_absent"))), true
	case "query_parameters":
		name := r.str(v.child("query_parameter_name"))
		key := r.str(v.child("descriptor_key"))
		if name == "" || key == "" {
			r.fail(v, "query_parameter_name and descriptor_key are required")
			return nil, false
		}
		im.note(Inexact, r.file, a, "query parameter %s: Sluice joins repeated values with \",\" and treats an empty value as a value; Envoy may take one occurrence", name)
		return presence(key, "query:"+name, &match{Query: []condition{{Name: name, Present: yes()}}},
			&match{Query: []condition{{Name: name, Present: no()}}}, r.boolean(v.child("skip_if_absent"))), true
	case "dynamic_metadata", "metadata":
		if kind == "metadata" && strings.EqualFold(r.str(v.child("source")), "ROUTE_ENTRY") {
			im.note(Unsupported, r.file, v.child("source"), "route entry metadata cannot be read by a filter; the descriptor is not imported")
			return nil, false
		}
		mk := v.child("metadata_key")
		ns := r.str(mk.child("key"))
		var path []string
		for _, p := range mk.child("path").items() {
			path = append(path, r.str(p.child("key")))
		}
		key := r.str(v.child("descriptor_key"))
		if ns == "" || len(path) == 0 || key == "" || strings.Contains(ns, ":") {
			r.fail(v, "descriptor_key, metadata_key.key (without \":\") and metadata_key.path are required")
			return nil, false
		}
		for _, p := range path {
			if strings.Contains(p, ".") || p == "" {
				im.note(Unsupported, r.file, mk, "the metadata path element %q holds a dot, which a Sluice metadata key cannot address; the descriptor is not imported", p)
				return nil, false
			}
		}
		dotted := strings.Join(path, ".")
		im.note(Inexact, r.file, a, "metadata %s:%s: Envoy reads only a string there, Sluice also a number (as its decimal form)", ns, dotted)
		alts := []entryAlt{{key: key, part: "metadata:" + ns + ":" + dotted, cond: &match{Meta: []metaCond{{Namespace: ns, Path: dotted, Present: yes()}}}}}
		absent := &match{Meta: []metaCond{{Namespace: ns, Path: dotted, Present: no()}}}
		if def := r.str(v.child("default_value")); def != "" {
			alts = append(alts, entryAlt{key: key, value: def, cond: absent})
		} else if kind == "metadata" && r.boolean(v.child("skip_if_absent")) {
			alts = append(alts, entryAlt{omit: true, cond: absent})
		}
		return alts, true
	case "header_value_match":
		var conds []condition
		for _, h := range v.child("headers").items() {
			c, ok := im.headerCond(r, h)
			if !ok {
				return nil, false
			}
			conds = append(conds, c...)
		}
		return valueMatch(r, v, "header_match", &match{Headers: conds}), true
	case "query_parameter_value_match":
		var conds []condition
		for _, q := range v.child("query_parameters").items() {
			name := r.str(q.child("name"))
			if q.child("present_match").present() {
				conds = append(conds, condition{Name: name, Present: yes()})
				continue
			}
			c, ok := im.stringCond(r, q.child("string_match"), name, true)
			if !ok {
				return nil, false
			}
			conds = append(conds, c)
		}
		return valueMatch(r, v, "query_match", &match{Query: conds}), true
	}
	im.note(Unsupported, r.file, a, "action %s is not imported; the descriptors of this entry are not imported", kind)
	return nil, false
}

// headerName reports whether name (at n) is a header name a request can
// carry: an RFC 9110 token, or a pseudo-header's; else an error at n.
func headerName(r reader, n node, name string) bool {
	token := strings.TrimPrefix(name, ":")
	ok := token != ""
	for i := 0; i < len(token) && ok; i++ {
		c := token[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
	}
	if !ok {
		r.fail(n, "%q is not a header name", name)
	}
	return ok
}

// valueMatch is a *_value_match action: its constant entry when m holds
// (or, with expect_match false, when it does not).
func valueMatch(r reader, v node, defaultKey string, m *match) []entryAlt {
	key := r.str(v.child("descriptor_key"))
	if key == "" {
		key = defaultKey
	}
	if !r.wrappedBool(v.child("expect_match"), true) {
		m = &match{Not: m}
	}
	return []entryAlt{{key: key, value: r.str(v.child("descriptor_value")), cond: m}}
}

// presence is an action reading part into key: the entry when present
// holds, and with skip the descriptor without it when absent holds
// (without skip, Envoy makes no descriptor then).
func presence(key, part string, present, absent *match, skip bool) []entryAlt {
	alts := []entryAlt{{key: key, part: part, cond: present}}
	if skip {
		alts = append(alts, entryAlt{omit: true, cond: absent})
	}
	return alts
}

// headerCond converts an Envoy HeaderMatcher; an inverted one becomes a
// negation, so it must be the only header of its action.
func (im *importer) headerCond(r reader, h node) ([]condition, bool) {
	name := strings.ToLower(r.str(h.child("name")))
	if name == "" {
		r.fail(h.child("name"), "must not be empty")
		return nil, false
	}
	if !headerName(r, h.child("name"), name) {
		return nil, false
	}
	if strings.HasPrefix(name, ":") {
		im.note(Unsupported, r.file, h.child("name"), "pseudo-header %s is not a header a Sluice match reads (use path, hosts or methods conditions); the descriptor is not imported", name)
		return nil, false
	}
	if h.child("invert_match").present() && r.boolean(h.child("invert_match")) ||
		h.child("treat_missing_header_as_empty").present() && r.boolean(h.child("treat_missing_header_as_empty")) {
		im.note(Unsupported, r.file, h, "invert_match and treat_missing_header_as_empty are not imported; the descriptor is not imported")
		return nil, false
	}
	for _, k := range []string{"exact_match", "prefix_match", "suffix_match", "contains_match"} {
		if c := h.child(k); c.present() {
			s := r.str(c)
			if s == "" && k != "exact_match" {
				r.fail(c, "must not be empty (Envoy refuses it)")
				return nil, false
			}
			switch k {
			case "exact_match":
				return []condition{{Name: name, Value: &s}}, true
			case "prefix_match":
				return []condition{{Name: name, Prefix: s}}, true
			case "suffix_match":
				return []condition{{Name: name, Suffix: s}}, true
			default:
				return []condition{{Name: name, Contains: s}}, true
			}
		}
	}
	if c := h.child("safe_regex_match"); c.present() {
		return []condition{{Name: name, Regex: r.str(c.child("regex"))}}, true
	}
	if c := h.child("present_match"); c.present() {
		return []condition{{Name: name, Present: map[bool]*bool{true: yes(), false: no()}[r.boolean(c)]}}, true
	}
	if c := h.child("string_match"); c.present() {
		sc, ok := im.stringCond(r, c, name, false)
		return []condition{sc}, ok
	}
	if h.child("range_match").present() {
		im.note(Unsupported, r.file, h.child("range_match"), "range_match is not imported; the descriptor is not imported")
		return nil, false
	}
	// No matcher: the header must be present.
	return []condition{{Name: name, Present: yes()}}, true
}

// stringCond converts a StringMatcher on name. Query conditions have no
// suffix or contains, so those become regexes there, as does ignore_case.
func (im *importer) stringCond(r reader, m node, name string, query bool) (condition, bool) {
	ic := r.boolean(m.child("ignore_case"))
	for _, k := range []string{"exact", "prefix", "suffix", "contains"} {
		c := m.child(k)
		if !c.present() {
			continue
		}
		s := r.str(c)
		if s == "" && k != "exact" {
			r.fail(c, "must not be empty (Envoy refuses it)")
			return condition{}, false
		}
		if !ic && !(query && (k == "suffix" || k == "contains")) {
			switch k {
			case "exact":
				return condition{Name: name, Value: &s}, true
			case "prefix":
				return condition{Name: name, Prefix: s}, true
			case "suffix":
				return condition{Name: name, Suffix: s}, true
			default:
				return condition{Name: name, Contains: s}, true
			}
		}
		q := regexp.QuoteMeta(s)
		if ic {
			q = asciiFold(s)
		}
		re := map[string]string{"exact": q, "prefix": q + ".*", "suffix": ".*" + q, "contains": ".*" + q + ".*"}[k]
		return condition{Name: name, Regex: re}, true
	}
	if c := m.child("safe_regex"); c.present() {
		if ic {
			im.note(Unsupported, r.file, m, "ignore_case with safe_regex is ignored by Envoy too; imported as written")
		}
		return condition{Name: name, Regex: r.str(c.child("regex"))}, true
	}
	im.note(Unsupported, r.file, m, "this string matcher is not imported; the descriptor is not imported")
	return condition{}, false
}

// asciiFold is a regex matching s with ASCII letters in either case and
// every other byte as is: Envoy's ignore_case (absl::EqualsIgnoreCase)
// folds ASCII only, while (?i) would also fold U+017F into s and U+212A
// into k.
func asciiFold(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if lo := c | 0x20; lo >= 'a' && lo <= 'z' {
			b.WriteString("[" + string(lo-0x20) + string(lo) + "]")
		} else {
			// Byte by byte: QuoteMeta escapes only ASCII, so a
			// multi-byte character's bytes stay together.
			b.WriteString(regexp.QuoteMeta(s[i : i+1]))
		}
	}
	return b.String()
}

// knownMethods are the methods a Sluice match names.
var knownMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true,
	"CONNECT": true, "OPTIONS": true, "TRACE": true, "PATCH": true}

// pseudoParts are the pseudo-headers a request_headers action may name,
// as Sluice key parts (always present).
var pseudoParts = map[string]string{":method": "method", ":authority": "host", ":path": "path"}

// valueCond is the condition that the part's value is v, false when
// Sluice has no such condition.
func valueCond(part, v string) (*match, bool) {
	switch {
	case strings.HasPrefix(part, "header:"):
		return &match{Headers: []condition{{Name: part[len("header:"):], Value: &v}}}, true
	case strings.HasPrefix(part, "query:"):
		return &match{Query: []condition{{Name: part[len("query:"):], Value: &v}}}, true
	case strings.HasPrefix(part, "metadata:"):
		rest := part[len("metadata:"):]
		i := strings.Index(rest, ":")
		return &match{Meta: []metaCond{{Namespace: rest[:i], Path: rest[i+1:], Value: &v}}}, true
	case part == "method":
		if !knownMethods[v] {
			return nil, false // no request has it: the descriptor never applies
		}
		return &match{Methods: []string{v}}, true
	case part == "path":
		if !strings.HasPrefix(v, "/") || strings.Contains(v, "?") {
			return nil, false
		}
		return &match{Path: v}, true
	case part == "client_ip":
		// Envoy sends the address's canonical text (IPv6 lower-case and
		// compressed, IPv4-mapped peers as IPv4) and the service compares
		// text: another spelling, or a CIDR, never matches there, while
		// Sluice would read it as an address or a range.
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" || a.Is4In6() || a.String() != v {
			return nil, false
		}
		return &match{CIDRs: []string{a.String()}}, true
	case strings.HasPrefix(part, "client_ip/"):
		p, err := netip.ParsePrefix(v)
		if err != nil || p.Masked() != p || p.Addr().Is4In6() || p.String() != v {
			return nil, false
		}
		var v4, v6 int
		fmt.Sscanf(part, "client_ip/%d/%d", &v4, &v6)
		if p.Addr().Is4() && p.Bits() != v4 || p.Addr().Is6() && p.Bits() != v6 {
			return nil, false
		}
		return &match{CIDRs: []string{p.String()}}, true
	}
	return nil, false
}
