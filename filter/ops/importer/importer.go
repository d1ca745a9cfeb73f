// Package importer turns the rate limiting of an Envoy deployment into a
// Sluice plugin configuration: envoyproxy/ratelimit service configs
// together with the route and virtual-host rate_limits actions that
// produce their descriptors, and Envoy's local_ratelimit filter. It is
// sluicectl import. It reads bytes and returns bytes: no files, no SDK.
//
// The importer never drops a construct silently: what it cannot express
// exactly is a Finding with its file and YAML path, and what it could not
// read at all is an error. Its output is deterministic (the same inputs
// give the same bytes) and is checked with the filter's own parser.
//
// envoyproxy/ratelimit: every descriptor a route's rate_limits entry can
// produce is resolved in the domain's tree as the service does (key and
// value, else the key's default; a limit only at the last entry) into a
// fixed_window limit of requests_per_unit per unit, which both count in
// windows aligned to the Unix epoch; varying entries are key parts
// (a bucket per value), values named in the config are conditions, and
// the default exempts them with unlimited overrides. local_ratelimit: a
// token_bucket limit of tokens_per_fill per fill_interval with
// max_tokens capacity, rollout from the two fractions. What differs
// (several descriptors per request, continuous refill against stepped
// fills, header value joining, wildcards, per-connection buckets, ...)
// is reported where it occurs and listed in the README's "Migrating from
// Envoy's rate limiting".
package importer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/ops/yamlbound"
)

// Input is one file: its name (for messages) and its content.
type Input struct {
	Name string
	Data []byte
}

// Options steer the import.
type Options struct {
	// Domain is the envoyproxy/ratelimit domain when no ratelimit filter
	// in the Envoy YAML names one (and the ratelimit files hold more
	// than one).
	Domain string
	// BackendCluster makes the limits imported from envoyproxy/ratelimit
	// global (counted in Redis through this Envoy cluster), as the
	// service counts them; empty keeps them local to each Envoy.
	BackendCluster string
}

// Finding is a construct the importer could not express exactly (Code
// "inexact": imported with the difference Message describes;
// "unsupported": not imported), or an input it could not read (in
// Result.Errors). Path is the YAML path in File.
type Finding struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Path    string `json:"path"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

func (f Finding) String() string {
	loc := f.File
	if f.Line > 0 {
		loc += fmt.Sprintf(":%d", f.Line)
	}
	if f.Path != "" {
		loc += " (" + f.Path + ")"
	}
	if f.Code != "" {
		return loc + ": " + f.Code + ": " + f.Message
	}
	return loc + ": " + f.Message
}

// Finding codes.
const (
	Inexact     = "inexact"
	Unsupported = "unsupported"
)

// Result is an import's answer. Config is the plugin configuration JSON
// (nil when Errors is not empty).
type Result struct {
	Config   []byte    `json:"-"`
	Findings []Finding `json:"findings"`
	Errors   []Finding `json:"errors"`
}

// Bounds on hostile input, all inputs together: yaml.v3 builds a file's
// whole tree before anything can count it, YAML aliases can expand a
// small file exponentially, and descriptor alternatives multiply.
const (
	// maxYAMLStarts bounds the places a node can start in the inputs'
	// text (yamlbound.Starts), before they are parsed, as sluicectl
	// check bounds what it reads.
	maxYAMLStarts = 1 << 18
	// maxExpanded bounds the inputs' documents with aliases expanded
	// (yamlbound.Charge): ratelimit and Envoy configs are a few KiB.
	maxExpanded     = 4 << 20
	maxDepth        = 64
	maxAlternatives = 256
	maxLimits       = 1000 // the filter's own bound on limits
)

// Import converts inputs. Each is a ratelimit service config (a document
// with a domain) or Envoy YAML (a bootstrap, listener, route
// configuration or anything holding them); documents of a file may mix.
func Import(inputs []Input, opt Options) *Result {
	im := &importer{opt: opt, res: &Result{Findings: []Finding{}, Errors: []Finding{}}, startsLeft: maxYAMLStarts, expandedLeft: maxExpanded}
	for _, in := range inputs {
		im.read(in)
	}
	if len(im.res.Errors) == 0 {
		im.convert()
	}
	if len(im.res.Errors) == 0 {
		im.finish()
	}
	if len(im.res.Errors) > 0 {
		im.res.Config = nil
	}
	return im.res
}

type importer struct {
	opt Options
	res *Result
	// domains are the ratelimit service configs by domain.
	domains map[string]*rlNode
	// envoy is what the Envoy YAML holds.
	envoy envoyConfig
	out   plugin
	names map[string]bool
	// rlStatus is the ratelimit filter's rate_limited_status, 0 for 429.
	rlStatus int
	// usedDomains are the domains a ratelimit filter names.
	usedDomains map[string]bool
	// unnamedRoutes are the routes without a name, by their key.
	unnamedRoutes map[string]*route
	// shared are the limits added by the bucket they count in.
	shared map[string]*limit
	// files are the inputs' names, for errors about all of them.
	files []string
	// startsLeft and expandedLeft are what the inputs read so far left
	// of maxYAMLStarts and maxExpanded.
	startsLeft, expandedLeft int
}

func (im *importer) note(code, file string, n node, format string, args ...any) {
	im.res.Findings = append(im.res.Findings, Finding{File: file, Line: n.line(), Path: n.path, Code: code, Message: fmt.Sprintf(format, args...)})
}

// read parses one file's documents and sorts them by kind.
func (im *importer) read(in Input) {
	im.files = append(im.files, in.Name)
	if im.startsLeft -= yamlbound.Starts(in.Data); im.startsLeft < 0 {
		im.res.Errors = append(im.res.Errors, Finding{File: in.Name, Message: fmt.Sprintf("YAML with more than %d lines and indicators (-, ?, :, ',', [, {, *), with the other inputs, is too large to import", maxYAMLStarts)})
		return
	}
	dec := yaml.NewDecoder(bytes.NewReader(in.Data))
	for i := 0; ; i++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			im.res.Errors = append(im.res.Errors, Finding{File: in.Name, Message: "not YAML: " + err.Error()})
			return
		}
		if len(doc.Content) == 0 {
			continue
		}
		if _, ok := yamlbound.Charge(doc.Content[0], &im.expandedLeft, maxDepth); !ok {
			im.res.Errors = append(im.res.Errors, Finding{File: in.Name, Message: fmt.Sprintf("document %d is too large or too deep with aliases expanded (at most %d bytes with the other inputs, %d levels)", i, maxExpanded, maxDepth)})
			return
		}
		root := node{n: deref(doc.Content[0])}
		before := len(im.res.Errors)
		duplicateKeys(reader{file: in.Name, errs: &im.res.Errors}, root)
		if len(im.res.Errors) > before {
			return
		}
		if root.child("domain").present() {
			im.readRatelimit(in.Name, root)
		} else {
			im.readEnvoy(in.Name, root)
		}
	}
}

// plugin is the Sluice configuration written; fields in the field
// reference's order, empty ones left out.
type plugin struct {
	Limits   []*limit  `json:"limits"`
	Response *response `json:"response,omitempty"`
	Backend  *backend  `json:"backend,omitempty"`
}

type limit struct {
	Name       string               `json:"name"`
	Match      *match               `json:"match,omitempty"`
	Key        []string             `json:"key"`
	Algorithm  string               `json:"algorithm"`
	Limit      uint64               `json:"limit"`
	Window     string               `json:"window"`
	Burst      uint64               `json:"burst,omitempty"`
	Overrides  map[string]*override `json:"overrides,omitempty"`
	OverrideBy string               `json:"override_by,omitempty"`
	Mode       string               `json:"mode,omitempty"`
	OnLimit    *onLimit             `json:"on_limit,omitempty"`
	Shadow     bool                 `json:"shadow,omitempty"`
	Rollout    *rollout             `json:"rollout,omitempty"`
	Upstream   map[string]string    `json:"upstream_headers_when_limited,omitempty"`
	Replaces   []string             `json:"replaces,omitempty"`

	// from is the rule a limit came from, for replaces and messages.
	from *rlNode
}

type override struct {
	Unlimited bool   `json:"unlimited,omitempty"`
	Block     bool   `json:"block,omitempty"`
	Limit     uint64 `json:"limit,omitempty"`
	Window    string `json:"window,omitempty"`
}

type match struct {
	Path       string      `json:"path,omitempty"`
	PathPrefix string      `json:"path_prefix,omitempty"`
	PathRegex  string      `json:"path_regex,omitempty"`
	Hosts      []string    `json:"hosts,omitempty"`
	Methods    []string    `json:"methods,omitempty"`
	Routes     []string    `json:"routes,omitempty"`
	Headers    []condition `json:"headers,omitempty"`
	Query      []condition `json:"query,omitempty"`
	Meta       []metaCond  `json:"metadata,omitempty"`
	CIDRs      []string    `json:"client_cidrs,omitempty"`
	Not        *match      `json:"not,omitempty"`
}

type condition struct {
	Name     string  `json:"name"`
	Value    *string `json:"value,omitempty"`
	Prefix   string  `json:"prefix,omitempty"`
	Suffix   string  `json:"suffix,omitempty"`
	Contains string  `json:"contains,omitempty"`
	Regex    string  `json:"regex,omitempty"`
	Present  *bool   `json:"present,omitempty"`
}

type metaCond struct {
	Namespace string  `json:"namespace"`
	Path      string  `json:"path"`
	Value     *string `json:"value,omitempty"`
	Present   *bool   `json:"present,omitempty"`
}

type onLimit struct {
	Status int `json:"status"`
}

type rollout struct {
	Enabled  float64 `json:"enabled_percent"`
	Enforced float64 `json:"enforced_percent"`
}

type response struct {
	Headers      []string          `json:"headers"`
	Body         string            `json:"body"`
	Templates    map[string]string `json:"templates,omitempty"`
	ReplyHeaders map[string]string `json:"reply_headers,omitempty"`
	GRPC         bool              `json:"grpc"`
}

type backend struct {
	Cluster       string `json:"cluster"`
	FailurePolicy string `json:"failure_policy,omitempty"`
}

// empty reports whether m holds no condition.
func (m *match) empty() bool {
	return m == nil || m.Path == "" && m.PathPrefix == "" && m.PathRegex == "" && len(m.Hosts)+len(m.Methods)+len(m.Routes)+len(m.Headers)+len(m.Query)+len(m.Meta)+len(m.CIDRs) == 0 && m.Not == nil
}

// and is the conjunction of a and b; nil when it cannot be written (two
// negations).
func (m *match) and(o *match) *match {
	if m == nil {
		m = &match{}
	}
	if o == nil {
		o = &match{}
	}
	// Methods and routes are lists of alternatives: their conjunction is
	// the intersection. A path is exact: two different ones never hold.
	if m.Path != "" && o.Path != "" && m.Path != o.Path || m.PathRegex != "" && o.PathRegex != "" && m.PathRegex != o.PathRegex {
		return nil
	}
	path, re := m.Path+o.Path, m.PathRegex+o.PathRegex
	if m.Path != "" && o.Path != "" {
		path = m.Path
	}
	if m.PathRegex != "" && o.PathRegex != "" {
		re = m.PathRegex
	}
	// Of two prefixes the longer holds when it extends the shorter.
	prefix := m.PathPrefix
	switch {
	case prefix == "":
		prefix = o.PathPrefix
	case o.PathPrefix == "" || strings.HasPrefix(prefix, o.PathPrefix):
	case strings.HasPrefix(o.PathPrefix, prefix):
		prefix = o.PathPrefix
	default:
		return nil
	}
	if path != "" && prefix != "" {
		// An exact path holds the prefix, or the two never hold.
		if !strings.HasPrefix(path, prefix) {
			return nil
		}
		prefix = ""
	}
	hosts, ok0 := intersect(m.Hosts, o.Hosts)
	methods, ok1 := intersect(m.Methods, o.Methods)
	routes, ok2 := intersect(m.Routes, o.Routes)
	cidrs, ok3 := intersect(m.CIDRs, o.CIDRs)
	if !ok0 || !ok1 || !ok2 || !ok3 {
		return nil
	}
	r := &match{
		Path:       path,
		PathPrefix: prefix,
		PathRegex:  re,
		Hosts:      hosts,
		Methods:    methods,
		Routes:     routes,
		Headers:    append(append([]condition(nil), m.Headers...), o.Headers...),
		Query:      append(append([]condition(nil), m.Query...), o.Query...),
		Meta:       append(append([]metaCond(nil), m.Meta...), o.Meta...),
		CIDRs:      cidrs,
		Not:        m.Not,
	}
	if o.Not != nil {
		if r.Not != nil {
			return nil
		}
		r.Not = o.Not
	}
	return r
}

// addLimit names l uniquely from hint and adds it.
func (im *importer) addLimit(l *limit, hint string) {
	base := sanitize(hint)
	name := base
	for i := 2; im.names[name]; i++ {
		suffix := fmt.Sprintf("-%d", i)
		name = truncate(base, 64-len(suffix)) + suffix
	}
	if im.names == nil {
		im.names = map[string]bool{}
	}
	im.names[name] = true
	l.Name = name
	if l.Match.empty() {
		l.Match = nil
	} else {
		l.Match.compact()
	}
	im.out.Limits = append(im.out.Limits, l)
}

// addShared adds l, which counts in the original's bucket identity,
// unless a limit for that bucket was added already: the original counts
// one bucket whichever route a request took, so the routes are merged
// into that limit. The same bucket under different conditions cannot be
// one Sluice limit, which is reported.
func (im *importer) addShared(l *limit, hint, identity, file string, at node) *limit {
	if prev := im.shared[identity]; prev != nil {
		if sameExceptRoutes(prev, l) {
			if prev.Match != nil && l.Match != nil && len(prev.Match.Routes) > 0 && len(l.Match.Routes) > 0 {
				prev.Match.Routes = dedupe(append(prev.Match.Routes, l.Match.Routes...))
			} else if prev.Match != nil {
				prev.Match.Routes = nil
			}
			return prev
		}
		im.note(Inexact, file, at, "requests reach this bucket under different conditions (several rate_limits entries): the original counts them in one bucket, Sluice in one per entry")
	}
	im.addLimit(l, hint)
	if im.shared == nil {
		im.shared = map[string]*limit{}
	}
	if im.shared[identity] == nil {
		im.shared[identity] = l
	}
	return l
}

// sameExceptRoutes reports whether a and b differ at most in their
// names and routes.
func sameExceptRoutes(a, b *limit) bool {
	strip := func(l *limit) []byte {
		c := *l
		c.Name = ""
		m := (&match{}).and(l.Match)
		m.Routes = nil
		m.compact()
		c.Match = m
		data, _ := json.Marshal(c)
		return data
	}
	return bytes.Equal(strip(a), strip(b))
}

// sanitize makes a limit name: A-Z a-z 0-9 _ -, at most 64 bytes.
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
		if ok {
			b.WriteRune(c)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		out = "limit"
	}
	return truncate(out, 60)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return strings.TrimRight(s[:n], "-")
	}
	return s
}

// finish resolves replaces, writes the configuration and checks it with
// the filter's parser: an importer bug must not reach an Envoy.
func (im *importer) finish() {
	im.resolveReplaces()
	if len(im.out.Limits) > maxLimits {
		im.res.Errors = append(im.res.Errors, Finding{Message: fmt.Sprintf("the import makes %d limits, more than the filter's %d", len(im.out.Limits), maxLimits)})
		return
	}
	if im.out.Limits == nil {
		im.out.Limits = []*limit{}
	}
	data, err := json.MarshalIndent(im.out, "", "  ")
	if err != nil {
		im.res.Errors = append(im.res.Errors, Finding{Message: err.Error()})
		return
	}
	if _, err := config.Parse(data); err != nil {
		var errs config.Errors
		if !errors.As(err, &errs) {
			errs = config.Errors{{Message: err.Error()}}
		}
		for _, e := range errs {
			im.res.Errors = append(im.res.Errors, Finding{Path: e.Path, Message: "the imported configuration is invalid: " + e.Message})
		}
		return
	}
	im.res.Config = append(data, '\n')
	sort.SliceStable(im.res.Findings, func(i, j int) bool {
		a, b := im.res.Findings[i], im.res.Findings[j]
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Line < b.Line
	})
}

// compact drops a "present: true" condition on a name that another
// condition of the same list already needs present.
func (m *match) compact() {
	m.Headers = compactConds(m.Headers)
	m.Query = compactConds(m.Query)
	var metas []metaCond
	for _, c := range m.Meta {
		redundant := false
		if c.Present != nil && *c.Present {
			for _, o := range m.Meta {
				redundant = redundant || o.Value != nil && o.Namespace == c.Namespace && o.Path == c.Path
			}
		}
		if !redundant {
			metas = append(metas, c)
		}
	}
	m.Meta = metas
	if m.Not != nil {
		m.Not.compact()
	}
}

func compactConds(cs []condition) []condition {
	var out []condition
	for _, c := range cs {
		redundant := false
		if c.Present != nil && *c.Present {
			for _, o := range cs {
				redundant = redundant || o.Name == c.Name && o.Present == nil
			}
		}
		if !redundant {
			out = append(out, c)
		}
	}
	return out
}

// intersect is the conjunction of two lists of alternatives (nil: any);
// false when nothing is left.
func intersect(a, b []string) ([]string, bool) {
	if a == nil {
		return append([]string(nil), b...), true
	}
	if b == nil {
		return append([]string(nil), a...), true
	}
	var out []string
	for _, x := range a {
		if contains(b, x) {
			out = append(out, x)
		}
	}
	return out, len(out) > 0
}
