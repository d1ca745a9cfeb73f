package config

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"regexp/syntax"
	"strings"

	"github.com/sluice-proxy/sluice/filter/request/cidr"
	"github.com/tidwall/gjson"
)

// Regex is an RE2 expression that must match a whole value, as Envoy's
// safe_regex does. Go's regexp runs in linear time, so no header or query
// a client sends can make matching slow.
type Regex struct {
	// Source is the expression as configured.
	Source string
	re     *regexp.Regexp
	// spans is set when re is Source alone, leftmost-longest, rather
	// than Source anchored: a match then counts only if it spans the
	// whole value.
	spans bool
}

// CompileRegex compiles s anchored at both ends. s is first compiled on
// its own: wrapped in ^(?:…)$ unchecked, a regex such as "/a)|(?:/b"
// would close our group and leave both halves unanchored. Once s is
// valid alone its parentheses balance, so the wrapper keeps its meaning;
// the one thing that can still reach past s is a \Q that s never ends,
// which would quote our ")$", so an \E closes it first.
//
// The wrapper adds a level of nesting, so a regex at Go's nesting limit
// (999 nested groups) is valid alone and not wrapped. Such a regex is
// kept alone, leftmost-longest, and matches when its match spans the
// value: the leftmost match starts at 0 whenever one does, and the
// longest from there ends at the value's end whenever one does, so this
// is the anchored meaning. The wrapped form stays the usual one because
// an anchored regex is cheaper to run on a value that does not match.
func CompileRegex(s string) (*Regex, error) {
	alone, err := regexp.Compile(s)
	if err != nil {
		return nil, fmt.Errorf("invalid regex %s: %s", Quote(s), regexReason(err))
	}
	re, err := regexp.Compile(`^(?:` + s + `)$`)
	if err != nil {
		re, err = regexp.Compile(`^(?:` + s + `\E)$`)
	}
	if err != nil {
		alone.Longest()
		return &Regex{Source: s, re: alone, spans: true}, nil
	}
	return &Regex{Source: s, re: re}, nil
}

// regexReason is why Go refused a regex, without the regex itself
// (which the caller quotes, cut).
func regexReason(err error) string {
	var e *syntax.Error
	if errors.As(err, &e) {
		return string(e.Code)
	}
	return err.Error()
}

// MatchString reports whether the whole of v matches.
func (r *Regex) MatchString(v string) bool {
	if !r.spans {
		return r.re.MatchString(v)
	}
	loc := r.re.FindStringIndex(v)
	return loc != nil && loc[0] == 0 && loc[1] == len(v)
}

// ValueOp is how a header or query condition compares a value.
type ValueOp uint8

const (
	// OpExact needs the value equal to Value.
	OpExact ValueOp = iota
	// OpPrefix, OpSuffix and OpContains compare with Value.
	OpPrefix
	OpSuffix
	OpContains
	// OpRegex needs Regex to match the whole value.
	OpRegex
)

// valueOpFields are the members that name a comparison, in ValueOp order.
var valueOpFields = []string{"value", "prefix", "suffix", "contains", "regex"}

// headerConditionFields and queryConditionFields are the comparisons an
// entry may use; the query has no suffix or contains, which the issue's
// users did not ask for.
var (
	headerConditionFields = append(append([]string{}, valueOpFields...), "present")
	queryConditionFields  = []string{"value", "prefix", "regex", "present"}
)

// QueryMatch is a condition on one query parameter, compared after
// percent-decoding as the query: key part reads it; a repeated parameter
// is tested on each value and on its values joined with ',' (ValueTest).
type QueryMatch struct {
	Name string
	ValueCondition
}

// valueCondition reads exactly one of the comparisons allowed (in
// valueOpFields order, then "present") from o, a headers or query entry.
func (p *parser) valueCondition(o *object, allowed ...string) (c ValueCondition) {
	given := []string{}
	for _, f := range allowed {
		if o.has(f) {
			given = append(given, f)
		}
	}
	switch {
	case len(given) == 0:
		p.errorf(o.path, o.at, "one of %s or present is required", strings.Join(allowed[:len(allowed)-1], ", "))
		return
	case len(given) > 1:
		o.errorf(given[1], "cannot be combined with %s", given[0])
		return
	}
	if given[0] == "present" {
		c.Present, _ = o.boolean("present")
		return
	}
	for i, f := range valueOpFields {
		if f == given[0] {
			c.Op = ValueOp(i)
		}
	}
	s, ok := o.str(given[0])
	if !ok {
		return
	}
	if c.Op == OpRegex {
		r, err := CompileRegex(s)
		if err != nil {
			o.errorf("regex", "%v", err)
			return
		}
		c.Regex = r
	} else if c.Op != OpExact && s == "" {
		o.errorf(given[0], "must not be empty; it would match every value")
		return
	}
	c.Value, c.HasValue = s, true
	return c
}

// cidrList reads the array of CIDRs o.name (ifEmpty as for object.array):
// nil when it is absent or has an error, each of which is reported.
func (p *parser) cidrList(o *object, name, ifEmpty string) *cidr.Set {
	items, ok := o.array(name, ifEmpty)
	if !ok {
		return nil
	}
	var prefixes []netip.Prefix
	for i, item := range items {
		ipath := IndexPath(o.path1(name), i)
		if item.Type != gjson.String {
			p.errorf(ipath, item.Index, "must be a string")
			continue
		}
		pfx, err := ParseCIDR(item.Str)
		if err != nil {
			p.errorf(ipath, item.Index, "%v", err)
			continue
		}
		prefixes = append(prefixes, pfx)
	}
	if len(prefixes) != len(items) {
		return nil
	}
	return cidr.NewSet(prefixes)
}
