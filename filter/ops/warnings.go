package ops

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-proxy/sluice/filter/config"
)

// warnings are the risky but valid setups check reports in a parsed
// configuration; hcm is the HTTP connection manager the filter sits in,
// nil when the file does not say.
func warnings(cfg *config.Config, hcm *connectionManager) []Finding {
	var out []Finding
	if hcm != nil && !hcm.UseRemoteAddress && readsXFF(&cfg.ClientIP) {
		out = append(out, Finding{Code: warnXFF, Path: "client_ip", Message: fmt.Sprintf(
			"reads X-Forwarded-For, but the HTTP connection manager at %s:%d does not set use_remote_address: true, "+
				"so Envoy does not append the peer and the entries trusted_hops counts can be written by the client",
			hcm.File, hcm.Line)})
	}
	if hcm != nil && !hcm.UseRemoteAddress {
		out = append(out, withoutRemoteAddress(cfg, hcm)...)
	}
	for i := range cfg.Limits {
		if msg := neverMatches(cfg, i); msg != "" {
			out = append(out, Finding{Code: warnNeverMatches, Path: config.IndexPath("limits", i), Message: "never matches: " + msg})
		}
	}
	out = append(out, failOpenReplaces(cfg)...)
	return out
}

// withoutRemoteAddress warns about what Envoy's source.address means when
// the connection manager lacks use_remote_address: Envoy then takes it
// from the last X-Forwarded-For entry, which the client writes.
//   - Keys on client_ip from the peer: a client picks its own bucket by
//     sending an X-Forwarded-For.
//   - The admin route: it refuses every address that may have come from
//     that header (a last entry that is a bare IP address), so calls
//     through a proxy that adds one are refused.
func withoutRemoteAddress(cfg *config.Config, hcm *connectionManager) []Finding {
	var out []Finding
	if readsPeer(&cfg.ClientIP) {
		var keyed []string
		for i := range cfg.Limits {
			if l := &cfg.Limits[i]; !l.Disabled && keysOnClient(l.Key) {
				keyed = append(keyed, config.FieldPath(config.IndexPath("limits", i), "key")+" ("+l.Name+")")
			}
		}
		for i := range cfg.Concurrency {
			if c := &cfg.Concurrency[i]; keysOnClient(c.Key) {
				keyed = append(keyed, config.FieldPath(config.IndexPath("concurrency", i), "key")+" ("+c.Name+")")
			}
		}
		if len(keyed) > 0 {
			out = append(out, Finding{Code: warnPeer, Path: "client_ip", Message: fmt.Sprintf(
				"%s key on client_ip from the peer (source.address), but the HTTP connection manager at %s:%d does not set use_remote_address: true, "+
					"so Envoy takes source.address from the last X-Forwarded-For entry and a client picks its own bucket by sending one; "+
					"set use_remote_address: true (and xff_num_trusted_hops for proxies you trust)",
				strings.Join(keyed, ", "), hcm.File, hcm.Line)})
		}
	}
	if cfg.Admin != nil {
		out = append(out, Finding{Code: warnAdmin, Path: "admin", Message: fmt.Sprintf(
			"the HTTP connection manager at %s:%d does not set use_remote_address: true, so Envoy takes source.address from the last X-Forwarded-For entry "+
				"when it is a bare IP address: the admin route refuses every such call (the address may be the caller's choice) and judges only calls "+
				"that keep the connection's own address (no X-Forwarded-For, or a last entry Envoy cannot parse as an address); set use_remote_address: true",
			hcm.File, hcm.Line)})
	}
	return out
}

// readsPeer reports whether client_ip reads the peer of its own accord:
// the peer source, or a sources list naming it. (xff falls back to the
// peer too, but reading X-Forwarded-For has its own warning.)
func readsPeer(c *config.ClientIP) bool {
	if len(c.Sources) == 0 {
		return c.Source == config.ClientIPPeer
	}
	for _, s := range c.Sources {
		if s.Kind == config.ClientIPPeer {
			return true
		}
	}
	return false
}

func keysOnClient(parts []config.KeyPart) bool {
	for _, p := range parts {
		if p.Kind == config.KeyClientIP || p.Kind == config.KeyClientIPMasked {
			return true
		}
	}
	return false
}

func readsXFF(c *config.ClientIP) bool {
	if c.Source == config.ClientIPXFF {
		return true
	}
	for _, s := range c.Sources {
		if s.Kind == config.ClientIPXFF {
			return true
		}
	}
	return false
}

// neverMatches says why limit i can never apply to a request, or "". It
// detects exactly these:
//   - the limit is disabled ("enabled": false);
//   - its match contradicts itself: a header, query parameter or metadata
//     value required absent and also present or compared, or required
//     equal to two different values; a path the match's own path_regex
//     rejects; a not whose conditions are all among the match's own (so
//     it holds whenever the match does; "not": {} always holds);
//   - an enabled limit with a full rollout names it in replaces and
//     matches whenever it does: every condition of the replacing limit's
//     match is also one of this limit's (a match with no condition
//     matches every request).
func neverMatches(cfg *config.Config, i int) string {
	l := &cfg.Limits[i]
	if l.Disabled {
		return `"enabled" is false: the limit is never evaluated`
	}
	if msg := contradiction(&l.Match); msg != "" {
		return msg
	}
	for j := range cfg.Limits {
		r := &cfg.Limits[j]
		if j == i || r.Disabled || r.Rollout != config.FullRollout || !slices.Contains(r.Replaces, i) {
			continue
		}
		if subset(r.Match.Conditions(), l.Match.Conditions()) {
			return fmt.Sprintf("%s (%s) replaces it and matches every request it matches", config.IndexPath("limits", j), r.Name)
		}
	}
	return ""
}

// namedCondition is a header, query or metadata condition, by what it
// reads.
type namedCondition struct {
	what     string
	hasValue bool
	exact    bool
	value    string
	present  bool
}

func contradiction(m *config.Match) string {
	var conds []namedCondition
	for _, h := range m.Headers {
		conds = append(conds, namedCondition{"header " + h.Name, h.HasValue, h.Op == config.OpExact, h.Value, h.Present})
	}
	for _, q := range m.Query {
		conds = append(conds, namedCondition{"query parameter " + q.Name, q.HasValue, q.Op == config.OpExact, q.Value, q.Present})
	}
	for _, md := range m.Metadata {
		conds = append(conds, namedCondition{"metadata " + md.Namespace + ":" + md.Path, md.HasValue, true, md.Value, md.Present})
	}
	for a := range conds {
		for b := a + 1; b < len(conds); b++ {
			x, y := conds[a], conds[b]
			if x.what != y.what {
				continue
			}
			absent := func(c namedCondition) bool { return !c.hasValue && !c.present }
			if absent(x) != absent(y) {
				return x.what + " must be absent and also present"
			}
			if x.hasValue && y.hasValue && x.exact && y.exact && x.value != y.value {
				return fmt.Sprintf("%s must equal both %s and %s", x.what, config.Quote(x.value), config.Quote(y.value))
			}
		}
	}
	if m.Path != "" && m.PathRegex != nil && !m.PathRegex.MatchString(m.Path) {
		return fmt.Sprintf("path %s does not match the path_regex %s", config.Quote(m.Path), config.Quote(m.PathRegex.Source))
	}
	if m.Not != nil && subset(m.Not.Conditions(), m.Conditions()) {
		return "its not holds whenever the rest of the match does"
	}
	return ""
}

// subset reports whether every condition of a is also one of b, compared
// by their configuration.
func subset(a, b []config.MatchCondition) bool {
	for _, x := range a {
		found := false
		for _, y := range b {
			// The JSON names the field too: "path_prefix":"/api".
			if x.JSON == y.JSON {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// failOpenReplaces finds global and hybrid limits failing open
// (failure_policy allow, the default) on either side of a replaces:
//   - a replaced limit that fails open is the case: the limit
//     named in replaces;
//   - a replacing limit that fails open still removes its targets while
//     Redis is unreachable, so its requests then pass limited by neither.
func failOpenReplaces(cfg *config.Config) []Finding {
	var out []Finding
	failsOpen := func(l *config.Limit) bool {
		return !l.Disabled && l.Mode != config.ModeLocal && l.FailurePolicy == config.FailAllow
	}
	for i := range cfg.Limits {
		l := &cfg.Limits[i]
		if l.Disabled {
			continue
		}
		var targets []string
		for _, j := range l.Replaces {
			t := &cfg.Limits[j]
			targets = append(targets, t.Name)
			if failsOpen(t) {
				out = append(out, Finding{Code: warnFailOpen, Path: config.FieldPath(config.IndexPath("limits", j), "failure_policy"), Message: fmt.Sprintf(
					"%s fails open (failure_policy allow) and is named in the replaces of %s (%s): while Redis is unreachable, "+
						"the requests %s does not match are limited by nothing; use deny or local", t.Name, config.IndexPath("limits", i), l.Name, l.Name)})
			}
		}
		if len(targets) > 0 && failsOpen(l) {
			out = append(out, Finding{Code: warnFailOpen, Path: config.FieldPath(config.IndexPath("limits", i), "failure_policy"), Message: fmt.Sprintf(
				"%s fails open (failure_policy allow) and replaces %s: while Redis is unreachable its requests are limited by neither; use deny or local",
				l.Name, strings.Join(targets, ", "))})
		}
	}
	return out
}

// grpcClusterWarning warns when external.grpc names a cluster the file
// defines without HTTP/2 to its endpoints: Envoy's gRPC client would
// reach it over HTTP/1.1, which no gRPC service speaks, so every lookup
// fails and the fallback decides every request.
func grpcClusterWarning(cfg *config.Config, clusters map[string]staticCluster) []Finding {
	e := cfg.External
	if e == nil || e.Grpc == nil {
		return nil
	}
	c, ok := clusters[e.Cluster]
	if !ok || c.HTTP2 {
		return nil
	}
	return []Finding{{Code: warnGrpcHTTP1, Path: "external.grpc.cluster", Message: fmt.Sprintf(
		"cluster %s (line %d) does not speak HTTP/2 to its endpoints, so Envoy's gRPC client reaches the limits service over HTTP/1.1 "+
			"and every lookup fails (the fallback decides every request); give it typed_extension_protocol_options with "+
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions explicit_http_config: {http2_protocol_options: {}}",
		config.Quote(e.Cluster), c.Line)}}
}
