package config

import (
	"strings"

	"github.com/tidwall/gjson"
)

// ClientIPFrom is one entry of client_ip.sources.
type ClientIPFrom struct {
	// Kind is ClientIPXFF, ClientIPHeader or ClientIPPeer.
	Kind ClientIPSource
	// Header is the lower-cased header name when Kind is ClientIPHeader.
	Header string
}

// String gives the entry in config syntax: xff, peer or header:<name>.
func (f ClientIPFrom) String() string {
	if f.Kind == ClientIPHeader {
		return "header:" + f.Header
	}
	return f.Kind.String()
}

func hasSource(sources []ClientIPFrom, k ClientIPSource) bool {
	for _, s := range sources {
		if s.Kind == k {
			return true
		}
	}
	return false
}

// clientIPSources parses client_ip.sources, the ordered form of source.
// With it, xff yields only a valid entry at trusted_hops (it no longer
// falls back to the peer by itself: list peer for that), and header
// (the single-source field) is not used.
func (p *parser) clientIPSources(o *object) []ClientIPFrom {
	items, ok := o.array("sources", "must not be empty; omit it to use source")
	if !ok {
		return nil
	}
	o.conflicts("sources", "source")
	var out []ClientIPFrom
	for i, item := range items {
		ipath := IndexPath(o.path1("sources"), i)
		if item.Type != gjson.String {
			p.errorf(ipath, item.Index, "must be a string")
			continue
		}
		var f ClientIPFrom
		switch s := item.Str; {
		case s == "xff":
			f.Kind = ClientIPXFF
		case s == "peer":
			f.Kind = ClientIPPeer
		case strings.HasPrefix(s, "header:") && headerToken(s[len("header:"):]):
			h, bad := requestHeader(s[len("header:"):], "")
			if bad != "" {
				p.errorf(ipath, item.Index, "%s", bad)
				continue
			}
			f = ClientIPFrom{Kind: ClientIPHeader, Header: h}
		default:
			p.errorf(ipath, item.Index, `unknown source %s; want xff, header:<name> or peer`, Quote(s))
			continue
		}
		for _, g := range out {
			if g == f {
				p.errorf(ipath, item.Index, "duplicate source %q", f.String())
			}
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
