package config

import "encoding/json"

// MatchCondition is one condition of a Match: Path is where it sits in
// the match ("headers[1]", "not"), JSON its configuration as a match of
// its own ({"path_prefix":"/api"}), and Only a Match holding just that
// condition, so that Only.Matches(r) is whether this condition holds for
// r, decided by Matches itself rather than by a second reading of the
// rules.
type MatchCondition struct {
	Path string
	JSON string
	Only Match
}

// Conditions splits m into its conditions, in the order Matches checks
// them: m matches a request exactly when every one of them does. A Match
// with no condition matches every request and has none. For tools
// (sluicectl explain, check); the request path never calls it.
func (m *Match) Conditions() []MatchCondition {
	var out []MatchCondition
	add := func(path string, only Match) {
		b, _ := json.Marshal(wireMatchOf(&only))
		out = append(out, MatchCondition{Path: path, JSON: string(b), Only: only})
	}
	for _, c := range []struct {
		path string
		set  bool
		only Match
	}{
		{"path", m.Path != "", Match{Path: m.Path}},
		{"path_prefix", m.PathPrefix != "", Match{PathPrefix: m.PathPrefix}},
		{"methods", m.Methods != nil, Match{Methods: m.Methods}},
		{"hosts", m.Hosts != nil, Match{Hosts: m.Hosts}},
		{"routes", m.Routes != nil, Match{Routes: m.Routes}},
	} {
		if c.set {
			add(c.path, c.only)
		}
	}
	for i := range m.Headers {
		add(IndexPath("headers", i), Match{Headers: m.Headers[i : i+1]})
	}
	if m.PathRegex != nil {
		add("path_regex", Match{PathRegex: m.PathRegex})
	}
	if m.ClientCIDRs != nil {
		add("client_cidrs", Match{ClientCIDRs: m.ClientCIDRs})
	}
	for i := range m.Query {
		add(IndexPath("query", i), Match{Query: m.Query[i : i+1]})
	}
	for i := range m.Metadata {
		add(IndexPath("metadata", i), Match{Metadata: m.Metadata[i : i+1]})
	}
	if m.Not != nil {
		add("not", Match{Not: m.Not})
	}
	return out
}
