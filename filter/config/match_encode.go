package config

// wireMatchAttributes is the JSON of the conditions matchAttributes reads,
// and of path_regex.
type wireMatchAttributes struct {
	ClientCIDRs []string            `json:"client_cidrs,omitempty"`
	Query       []wireQueryMatch    `json:"query,omitempty"`
	PathRegex   *string             `json:"path_regex,omitempty"`
	Not         *wireMatch          `json:"not,omitempty"`
	Metadata    []wireMetadataMatch `json:"metadata,omitempty"`
}

type wireMetadataMatch struct {
	Namespace string  `json:"namespace"`
	Path      string  `json:"path"`
	Value     *string `json:"value,omitempty"`
	Present   *bool   `json:"present,omitempty"`
}

type wireQueryMatch struct {
	Name string `json:"name"`
	wireValueCondition
}

// wireValueCondition is the one comparison of a headers or query entry.
type wireValueCondition struct {
	Value    *string `json:"value,omitempty"`
	Prefix   *string `json:"prefix,omitempty"`
	Suffix   *string `json:"suffix,omitempty"`
	Contains *string `json:"contains,omitempty"`
	Regex    *string `json:"regex,omitempty"`
	Present  *bool   `json:"present,omitempty"`
}

func wireValueConditionOf(c ValueCondition) wireValueCondition {
	var w wireValueCondition
	if !c.HasValue {
		w.Present = &c.Present
		return w
	}
	dst := [...]**string{&w.Value, &w.Prefix, &w.Suffix, &w.Contains, &w.Regex}[c.Op]
	*dst = &c.Value
	return w
}

func wireMatchAttributesOf(m *Match, w *wireMatch) {
	if m.ClientCIDRs != nil {
		for _, p := range m.ClientCIDRs.Prefixes {
			w.ClientCIDRs = append(w.ClientCIDRs, p.String())
		}
	}
	for _, q := range m.Query {
		w.Query = append(w.Query, wireQueryMatch{Name: q.Name, wireValueCondition: wireValueConditionOf(q.ValueCondition)})
	}
	if m.PathRegex != nil {
		s := m.PathRegex.Source
		w.PathRegex = &s
	}
	for _, c := range m.Metadata {
		wm := wireMetadataMatch{Namespace: c.Namespace, Path: c.Path}
		if c.HasValue {
			wm.Value = &c.Value
		} else {
			wm.Present = &c.Present
		}
		w.Metadata = append(w.Metadata, wm)
	}
	if m.Not != nil {
		w.Not = wireMatchOf(m.Not)
	}
}
