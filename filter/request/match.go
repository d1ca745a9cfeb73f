package request

import (
	"slices"
	"strings"

	"github.com/sluice-proxy/sluice/filter/config"
)

// Matches reports whether r satisfies m. It does not allocate. A header
// or query parameter that has several readings (ValueTest) satisfies a
// condition when any reading does; a not holds when its nested match
// fails for some reading, that is, when the nested match does not hold
// for every reading. So no reading an upstream may serve a request as
// lets it escape a limit whose match that reading satisfies.
func Matches(m *config.Match, r View) bool { return holds(m, &r, false) }

// holds is Matches for some reading of the request, or every reading with
// every. A conjunction holds for every reading exactly when each of its
// conditions does; for some reading, testing each condition on its own
// may find them held by different readings, which only ever applies a
// limit to more requests, never fewer.
func holds(m *config.Match, r *View, every bool) bool {
	path := r.Path
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if m.Path != "" && path != m.Path {
		return false
	}
	if m.PathPrefix != "" && !strings.HasPrefix(path, m.PathPrefix) {
		return false
	}
	if m.Methods != nil && !containsFold(m.Methods, r.Method) {
		return false
	}
	if m.Hosts != nil && !matchHost(m.Hosts, HostName(r.Host)) {
		return false
	}
	if m.Routes != nil && !slices.Contains(m.Routes, r.Route) {
		return false
	}
	for i := range m.Headers {
		if !r.headerHolds(&m.Headers[i], every) {
			return false
		}
	}
	return attributesHold(m, r, path, every)
}

// attributesHold checks path_regex, client_cidrs, query, metadata and not,
// for some reading or every reading (holds). path is the path without
// the query.
func attributesHold(m *config.Match, r *View, path string, every bool) bool {
	if m.PathRegex != nil && !m.PathRegex.MatchString(path) {
		return false
	}
	if m.ClientCIDRs != nil {
		// An unknown client is in no CIDR, so an exemption written as
		// not: client_cidrs never exempts it.
		a, ok := r.clientAddr()
		if !ok || !m.ClientCIDRs.Contains(a) {
			return false
		}
	}
	for i := range m.Query {
		if !r.queryHolds(&m.Query[i], every) {
			return false
		}
	}
	for i := range m.Metadata {
		c := &m.Metadata[i]
		v, found := r.metadata(c.Property)
		if !conditionHolds(&c.ValueCondition, v, found) {
			return false
		}
	}
	// Not holds for some reading when the nested match fails for some
	// reading, and for every reading when it holds for none.
	if m.Not != nil && holds(m.Not, r, !every) {
		return false
	}
	return true
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func matchHost(hosts []string, host string) bool {
	for _, h := range hosts {
		if strings.HasPrefix(h, "*.") {
			suffix := h[1:]
			if len(host) > len(suffix) && strings.EqualFold(host[len(host)-len(suffix):], suffix) {
				return true
			}
		} else if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// HostName is the host of an :authority as hosts matches and the host key
// part read it: without its port (everything from the first ':' after the
// name, see stripPort; any port: an upstream that routes by
// name, as nginx's server_name and Go's ServeMux do, ignores it, and a
// port's spellings are endless: ":80", ":080") and without trailing dots
// ("api.example." is the fully qualified "api.example"). Case is left to
// the caller, which compares or folds it.
func HostName(authority string) string {
	return strings.TrimRight(stripPort(authority), ".")
}

// stripPort is the host of an authority: a bracketed IPv6 literal up to
// its ']' ("[::1]:80" is "[::1]"), any other host up to its first ':', as
// nginx takes it, so that "api.example:80:80", "api.example::" and
// "api.example:1:2" are all "api.example" rather than a host each. An
// unbracketed IPv6 address is no valid authority; it is cut like any
// other ("::1" is "", missing).
func stripPort(host string) string {
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, ']'); i >= 0 {
			return host[:i+1]
		}
		return host
	}
	if i := strings.IndexByte(host, ':'); i >= 0 {
		return host[:i]
	}
	return host
}
