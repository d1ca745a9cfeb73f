package importer

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// localKnown are the LocalRateLimit fields the importer reads; any other
// is reported.
var localKnown = map[string]bool{
	"@type": true, "stat_prefix": true, "status": true, "token_bucket": true, "filter_enabled": true,
	"filter_enforced": true, "request_headers_to_add_when_not_enforced": true, "response_headers_to_add": true,
	"descriptors": true, "stage": true, "local_rate_limit_per_downstream_connection": true,
	"enable_x_ratelimit_headers": true, "vh_rate_limits": true, "always_consume_default_token_bucket": true,
	"rate_limited_as_resource_exhausted": true, "rate_limits": true, "max_dynamic_descriptors": true,
}

// convertLocal imports Envoy's local_ratelimit filter f: for each
// configuration in force (the filter's, or a virtual host's or route's
// typed_per_filter_config, the most specific winning) the default token
// bucket and the descriptors' buckets, scoped to the routes it governs.
func (im *importer) convertLocal(f filterRef) {
	r := reader{file: f.file, errs: &im.res.Errors}
	type group struct {
		cfg    node
		file   string
		routes []string
		rts    []*route
	}
	var groups []*group
	byCfg := map[*yaml.Node]*group{}
	all := true
	for _, vh := range im.envoy.vhosts {
		for _, rt := range vh.routes {
			cfg, file := f.cfg, f.file
			if c := perFilterConfig(r, vh.perFilter, f.name); c.present() {
				cfg, file = c, vh.file
			}
			if c := perFilterConfig(r, rt.perFilter, f.name); c.present() {
				cfg, file = c, vh.file
			}
			if !cfg.child("token_bucket").present() {
				all = false
				continue
			}
			g := byCfg[cfg.n]
			if g == nil {
				g = &group{cfg: cfg, file: file}
				byCfg[cfg.n] = g
				groups = append(groups, g)
			}
			g.routes = append(g.routes, rt.key)
			g.rts = append(g.rts, rt)
		}
	}
	if len(im.envoy.vhosts) == 0 && f.cfg.child("token_bucket").present() {
		// A filter without routes among the inputs: it limits every
		// request.
		groups = append(groups, &group{cfg: f.cfg, file: f.file})
	}
	for _, g := range groups {
		var scope *match
		if !all || len(groups) > 1 {
			var ok bool
			if scope, ok = im.scopeFor(g.routes); !ok {
				continue
			}
		}
		im.localGroup(f, g.file, g.cfg, scope, g.routes, g.rts)
	}
}

func (im *importer) localGroup(f filterRef, file string, cfg node, scope *match, routes []string, rts []*route) {
	r := reader{file: file, errs: &im.res.Errors}
	for _, k := range cfg.keys() {
		if !localKnown[k] {
			im.note(Unsupported, file, cfg.child(k), "%s is not imported", k)
		}
	}
	if r.boolean(cfg.child("local_rate_limit_per_downstream_connection")) {
		im.note(Inexact, file, cfg.child("local_rate_limit_per_downstream_connection"), "Sluice has no per-connection bucket: imported as one bucket per Envoy, shared by every connection")
	}
	base := limit{Key: []string{}, Algorithm: "token_bucket", Match: scope}
	base.Rollout = &rollout{Enabled: im.fraction(r, cfg.child("filter_enabled")), Enforced: im.fraction(r, cfg.child("filter_enforced"))}
	if s := statusOf(r, cfg.child("status")); s != 0 {
		base.OnLimit = &onLimit{Status: s}
	}
	if hs := im.headerOptions(r, cfg.child("request_headers_to_add_when_not_enforced")); len(hs) > 0 {
		base.Upstream = hs
	}
	im.localResponse(r, cfg)

	def := base
	if !im.bucket(r, cfg.child("token_bucket"), &def) {
		return
	}
	hint := strings.TrimPrefix(f.name, "envoy.filters.http.")
	if len(rts) == 1 {
		hint += "-" + im.routeLabel(rts[0].key)
	}
	im.addLimit(&def, hint)

	descs := cfg.child("descriptors").items()
	if len(descs) == 0 {
		return
	}
	always := r.wrappedBool(cfg.child("always_consume_default_token_bucket"), true)
	stage, _ := r.uint(cfg.child("stage"), 10)
	// The request's descriptors: the filter's own rate_limits, else the
	// routes' and virtual hosts' of its stage.
	var entries []*scopedEntry
	if own := cfg.child("rate_limits"); own.present() {
		se := &scopedEntry{file: file, routes: routes}
		for _, e := range own.items() {
			c := *se
			c.entry = e
			entries = append(entries, &c)
		}
	} else {
		opt := vhOptionOf(r, cfg)
		inGroup := map[*route]bool{}
		for _, rt := range rts {
			inGroup[rt] = true
		}
		es, _ := im.entriesFor(stage, func(vh *vhost, rt *route) string {
			if !inGroup[rt] {
				return skipRoute
			}
			return opt
		})
		for _, se := range es {
			var keep []string
			for _, rn := range se.routes {
				if scope == nil || contains(routes, rn) {
					keep = append(keep, rn)
				}
			}
			if len(keep) > 0 {
				se.routes = keep
				entries = append(entries, se)
			}
		}
	}
	matched := 0
	for _, se := range entries {
		alts, ok := im.readActions(se.file, se.entry, im.envoy.serviceCluster)
		if !ok {
			continue
		}
		var escope *match
		if scope != nil || len(se.routes) > 0 {
			if escope, ok = im.scopeFor(se.routes); !ok {
				continue
			}
		}
		for _, alt := range alts {
			var present []entryAlt
			for _, e := range alt.entries {
				if !e.omit {
					present = append(present, e)
				}
			}
			for _, d := range descs {
				cond, parts, ok := im.matchLocal(r, d, present)
				if !ok {
					continue
				}
				cond = escope.and(alt.cond).and(cond)
				if cond == nil {
					im.note(Unsupported, file, d, "this descriptor's conditions need two negations; not imported")
					continue
				}
				l := base
				l.Match, l.Key = cond, parts
				if taken := valuedSiblings(r, d, descs); len(parts) == 1 && len(taken) > 0 {
					// A descriptor naming a value wins over this one for
					// any value: those values are not counted here.
					l.Overrides = map[string]*override{}
					for _, v := range taken {
						l.Overrides[v] = &override{Unlimited: true}
					}
				}
				if !im.bucket(r, d.child("token_bucket"), &l) {
					continue
				}
				if !always {
					l.Replaces = []string{def.Name}
				}
				im.addShared(&l, hint+"-descriptor", fmt.Sprintf("descriptor %p", d.n), file, d)
				matched++
			}
		}
	}
	if partial := func(p float64) bool { return p > 0 && p < 100 }; matched > 0 && (partial(base.Rollout.Enabled) || partial(base.Rollout.Enforced)) {
		im.note(Inexact, file, cfg, "Envoy draws filter_enabled and filter_enforced once per request for all its buckets; Sluice draws them for each limit, so a request may be limited by one bucket's limit and not another's")
	}
	if matched > 0 && (always || len(entries) > 1) {
		im.note(Inexact, file, cfg.child("descriptors"), "a request whose descriptors match takes a token from each matching bucket (and, with always_consume_default_token_bucket, the default one) one after another, and a token taken before a later bucket refuses is not given back; Sluice takes from none when any refuses")
	}
}

// valuedSiblings are, for a one-entry descriptor d for any value, the
// values other one-entry descriptors of the same key name.
func valuedSiblings(r reader, d node, descs []node) []string {
	es := d.child("entries").items()
	if len(es) != 1 || r.str(es[0].child("value")) != "" {
		return nil
	}
	key := r.str(es[0].child("key"))
	var out []string
	for _, o := range descs {
		oe := o.child("entries").items()
		if len(oe) == 1 && r.str(oe[0].child("key")) == key {
			if v := r.str(oe[0].child("value")); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// matchLocal is the condition under which a request descriptor of
// entries matches the configured descriptor d (same keys in order, each
// value equal, or any value for an empty one: a bucket per value), and
// the key parts of those per-value buckets.
func (im *importer) matchLocal(r reader, d node, entries []entryAlt) (*match, []string, bool) {
	want := d.child("entries").items()
	if len(want) != len(entries) {
		return nil, nil, false
	}
	cond := &match{}
	parts := []string{}
	for i, w := range want {
		k, v := r.str(w.child("key")), r.str(w.child("value"))
		e := entries[i]
		if e.key != k {
			return nil, nil, false
		}
		switch {
		case e.part == "" && v == "":
			// A constant matches the wildcard: one bucket.
		case e.part == "":
			if e.value != v {
				return nil, nil, false
			}
		case v == "":
			parts = append(parts, e.part)
			im.note(Inexact, r.file, w, "an empty value is a bucket per value: Envoy keeps at most max_dynamic_descriptors of them (least recently used go), Sluice keeps every key within its slots")
		default:
			vc, ok := valueCond(e.part, v)
			if !ok {
				if e.part == "cluster" {
					im.note(Unsupported, r.file, w, "a descriptor for one destination_cluster value needs a condition on the cluster, which Sluice's match has not; not imported")
				}
				return nil, nil, false
			}
			if cond = cond.and(vc); cond == nil {
				return nil, nil, false
			}
		}
	}
	return cond, parts, true
}

// bucket sets l's rate from an Envoy token bucket: tokens_per_fill per
// fill_interval, capacity max_tokens. Envoy adds the tokens at each fill;
// Sluice refills continuously at the same rate, which is reported.
func (im *importer) bucket(r reader, tb node, l *limit) bool {
	if !r.isMap(tb) {
		r.fail(tb, "a token_bucket is required")
		return false
	}
	maxTokens, ok := r.uint(tb.child("max_tokens"), 1<<32-1)
	if !ok || maxTokens == 0 {
		r.fail(tb.child("max_tokens"), "must be at least 1")
		return false
	}
	perFill := uint64(1)
	if n, ok := r.wrappedUint(tb.child("tokens_per_fill"), 1<<32-1); ok {
		perFill = n
	}
	interval, ok := durationOf(tb.child("fill_interval"))
	if !ok || interval < 50*time.Millisecond || interval > 168*time.Hour || perFill == 0 {
		r.fail(tb, "fill_interval must be a duration from 50ms (Envoy's minimum) to 168h and tokens_per_fill at least 1")
		return false
	}
	if perFill > maxTokens {
		// A fill tops the bucket up to max_tokens whatever it held.
		perFill = maxTokens
	}
	l.Limit, l.Burst, l.Window = perFill, maxTokens-perFill, formatDuration(interval)
	im.note(Inexact, r.file, tb, "Envoy adds %d token(s) at each %s tick; Sluice refills continuously at the same rate: both hold the same tokens at the ticks, but between them Sluice can admit up to %d request(s) earlier, and as many fewer after the tick", perFill, l.Window, perFill)
	return true
}

// durationOf reads a protobuf Duration: "1.5s" or {seconds, nanos}.
func durationOf(n node) (time.Duration, bool) {
	if !n.present() {
		return 0, false
	}
	if n.n.Kind == yaml.MappingNode {
		s, err1 := strconv.ParseInt(orZero(n.child("seconds")), 10, 64)
		ns, err2 := strconv.ParseInt(orZero(n.child("nanos")), 10, 64)
		if err1 != nil || err2 != nil || s < 0 || s > 1<<30 || ns < 0 || ns >= 1e9 {
			return 0, false
		}
		return time.Duration(s)*time.Second + time.Duration(ns), true
	}
	v := n.n.Value
	if n.n.Kind != yaml.ScalarNode || !strings.HasSuffix(v, "s") {
		return 0, false
	}
	x, ok := new(big.Rat).SetString(strings.TrimSuffix(v, "s"))
	if !ok || x.Sign() < 0 || x.Cmp(big.NewRat(1<<30, 1)) > 0 {
		return 0, false
	}
	x.Mul(x, big.NewRat(int64(time.Second), 1))
	if !x.IsInt() {
		return 0, false
	}
	return time.Duration(x.Num().Int64()), true
}

func orZero(n node) string {
	if !n.present() || n.n.Kind != yaml.ScalarNode {
		return "0"
	}
	return n.n.Value
}

// formatDuration writes d in the largest unit that holds it whole.
func formatDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d%u.d == 0 {
			return fmt.Sprintf("%d%s", d/u.d, u.name)
		}
	}
	return fmt.Sprintf("%dns", d)
}

// fraction reads a RuntimeFractionalPercent as a percentage; absent is 0
// (Envoy's default for both of the filter's fractions).
func (im *importer) fraction(r reader, n node) float64 {
	if !n.present() {
		return 0
	}
	if n.child("runtime_key").present() {
		im.note(Inexact, r.file, n.child("runtime_key"), "the runtime key is not followed: Sluice uses the default value")
	}
	dv := n.child("default_value")
	num, _ := r.uint(dv.child("numerator"), 1<<32-1)
	den := map[string]float64{"": 100, "HUNDRED": 100, "TEN_THOUSAND": 10000, "MILLION": 1e6}[strings.ToUpper(r.str(dv.child("denominator")))]
	if den == 0 {
		r.fail(dv.child("denominator"), "must be HUNDRED, TEN_THOUSAND or MILLION")
		return 0
	}
	p := float64(num) * 100 / den
	if p > 100 {
		p = 100
	}
	return p
}

// headerOptions reads HeaderValueOptions into a header map.
func (im *importer) headerOptions(r reader, list node) map[string]string {
	out := map[string]string{}
	for _, h := range list.items() {
		k, v := strings.ToLower(r.str(h.child("header").child("key"))), r.str(h.child("header").child("value"))
		if strings.Contains(v, "%") {
			im.note(Inexact, r.file, h, "Envoy substitutes %%...%% command operators in header values; Sluice sends the value as written")
		}
		if k != "" {
			out[k] = v
		}
	}
	return out
}

// localResponse imports the local filter's reply: 429 (or status) with
// the body "local_rate_limited" and x-envoy-ratelimited, as Envoy sends.
func (im *importer) localResponse(r reader, cfg node) {
	resp := &response{Headers: []string{}, Body: "template",
		Templates:    map[string]string{"content_type": "text/plain", "rate_limited": "local_rate_limited"},
		ReplyHeaders: map[string]string{"x-envoy-ratelimited": "true"}}
	for k, v := range im.headerOptions(r, cfg.child("response_headers_to_add")) {
		resp.ReplyHeaders[k] = v
	}
	if xh := r.str(cfg.child("enable_x_ratelimit_headers")); xh != "" && xh != "OFF" {
		resp.Headers = []string{"x-ratelimit"}
		im.note(Inexact, r.file, cfg.child("enable_x_ratelimit_headers"), "Sluice's X-RateLimit-Reset is a Unix time, Envoy's draft 03 header the seconds until the reset")
	}
	resp.GRPC = r.boolean(cfg.child("rate_limited_as_resource_exhausted"))
	im.setResponse(r, cfg, resp)
}
