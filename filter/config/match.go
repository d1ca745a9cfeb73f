package config

import (
	"strings"

	"github.com/sluice-proxy/sluice/filter/request/pathnorm"
	"github.com/tidwall/gjson"
)

const anyIfOmitted = "must not be empty; omit it to match any"

var matchFields = fieldsOf[wireMatch]()

var knownMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}

func (p *parser) match(o *object) Match {
	var m Match
	matchPaths(o, &m)
	o.conflicts("path_prefix", "path")
	if items, ok := o.array("methods", anyIfOmitted); ok {
		for i, item := range items {
			ipath := IndexPath(o.path1("methods"), i)
			if item.Type != gjson.String {
				p.errorf(ipath, item.Index, "must be a string")
				continue
			}
			up := strings.ToUpper(item.Str)
			switch {
			case !contains(knownMethods, up):
				p.errorf(ipath, item.Index, "unknown method %s", Quote(item.Str))
			case contains(m.Methods, up):
				p.errorf(ipath, item.Index, "duplicate method %s", Quote(up))
			default:
				m.Methods = append(m.Methods, up)
			}
		}
	}
	if items, ok := o.array("hosts", anyIfOmitted); ok {
		for i, item := range items {
			ipath := IndexPath(o.path1("hosts"), i)
			if item.Type != gjson.String || !validHost(item.Str) {
				p.errorf(ipath, item.Index, `must be a host name such as "api.example.com" or "*.example.com", without port`)
				continue
			}
			m.Hosts = append(m.Hosts, strings.ToLower(item.Str))
		}
	}
	p.objects(o, "headers", fieldsOf[wireHeaderMatch](), func(h *object) {
		var hm HeaderMatch
		hm.Name = h.requestHeaderName("name", "required", "use hosts")
		hm.ValueCondition = p.valueCondition(h, headerConditionFields...)
		m.Headers = append(m.Headers, hm)
	})
	if items, ok := o.array("routes", anyIfOmitted); ok {
		for i, item := range items {
			ipath := IndexPath(o.path1("routes"), i)
			if item.Type != gjson.String || item.Str == "" {
				p.errorf(ipath, item.Index, "must be a non-empty route name")
				continue
			}
			m.Routes = append(m.Routes, item.Str)
		}
	}
	if s, ok := o.str("path_regex"); ok {
		if re, err := CompileRegex(s); err != nil {
			o.errorf("path_regex", "%v", err)
		} else {
			m.PathRegex = re
		}
	}
	p.matchAttributes(o, &m)
	return m
}

// validHost accepts DNS-style names and IPv4 literals, optionally with a
// leading "*." wildcard label; see schema.json's hostPattern.
func validHost(s string) bool {
	s = strings.TrimPrefix(s, "*.")
	if s == "" || len(s) > 253 || s[0] == '.' || s[0] == '-' || s[len(s)-1] == '.' || s[len(s)-1] == '-' {
		return false
	}
	return alnumOr(s, ".-")
}

// matchAttributes parses the conditions on what the request gives
// besides its pseudo-headers, headers and route: its client address,
// query parameters and dynamic metadata, and the nested not.
func (p *parser) matchAttributes(o *object, m *Match) {
	m.ClientCIDRs = p.cidrList(o, "client_cidrs", anyIfOmitted)
	p.objects(o, "query", append([]string{"name"}, queryConditionFields...), func(q *object) {
		var qm QueryMatch
		if s, ok := q.str("name"); ok {
			if queryName(s) {
				qm.Name = s
			} else {
				q.errorf("name", "invalid query parameter name %s: want printable ASCII without space, & or =", Quote(s))
			}
		} else if !q.has("name") {
			q.errorf("name", "required")
		}
		qm.ValueCondition = p.valueCondition(q, queryConditionFields...)
		m.Query = append(m.Query, qm)
	})
	p.matchMetadata(o, m)
	if n := o.child("not", matchFields...); n != nil {
		not := p.match(n)
		m.Not = &not
	}
}

// matchPaths reads path and path_prefix, each of which must be a path in
// the normal form requests are compared in.
func matchPaths(o *object, m *Match) {
	for _, name := range []string{"path", "path_prefix"} {
		s, ok := o.str(name)
		if !ok {
			continue
		}
		switch {
		case !strings.HasPrefix(s, "/"):
			o.errorf(name, `must start with "/"`)
		case strings.ContainsAny(s, "?#"):
			o.errorf(name, "must not contain a query or fragment; paths are matched without them")
		case !pathnorm.IsNormal(s, pathnorm.Key):
			// Requests are compared in normal form, so this one could
			// never match.
			o.errorf(name, "must be in normal form, as request paths are compared: %q", pathnorm.Normal(s, pathnorm.Key))
		}
		if name == "path" {
			m.Path = s
		} else {
			m.PathPrefix = s
		}
	}
}
