package ops

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/engine"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
	"github.com/sluice-proxy/sluice/filter/request"
)

// Explanation is what the filter would do with one request arriving at a
// fresh Envoy (every bucket full, every breaker closed, nothing in
// flight), and why. Its JSON is explain --json's output; fields are only
// ever added.
type Explanation struct {
	// Outcome is "admitted" (the request goes upstream), "rejected" (the
	// filter answers it with an error: Status and Body), "answered" (the
	// filter answers it otherwise: an admin call on fresh state) or
	// "waits" (WaitsFor says for what; explain does not call Redis or the
	// limits service).
	Outcome  string `json:"outcome"`
	Status   int    `json:"status,omitempty"`
	Body     string `json:"body,omitempty"`
	WaitsFor string `json:"waits_for,omitempty"`
	// Limits are every configured limit in the engine's order (the
	// configuration's, the external limit last); Breakers and
	// Concurrency only those whose match held, in the order checked.
	Limits      []LimitExplanation       `json:"limits"`
	Breakers    []BreakerExplanation     `json:"breakers"`
	Concurrency []ConcurrencyExplanation `json:"concurrency"`
}

// LimitExplanation is one limit's part in the request.
type LimitExplanation struct {
	Name string `json:"name"`
	// State is "disabled", "not_matched" (a condition did not hold, or a
	// partial rollout skipped the request), "replaced" (ReplacedBy names
	// the matching limits whose replaces removed it) or "applies".
	State      string      `json:"state"`
	Conditions []Condition `json:"conditions"`
	ReplacedBy []string    `json:"replaced_by,omitempty"`
	// Evaluated is false for an applying limit whose key the pipeline did
	// not build: an earlier limit rejected the request while keys were
	// being built (a block, a missing key denied, an invalid cost).
	Evaluated bool `json:"evaluated"`
	Shadow    bool `json:"shadow,omitempty"`
	// Key is the key's parts; values are digests unless --show-keys.
	// MissingKey is set when a part is absent (on_missing_key applies).
	Key        []KeyValue `json:"key,omitempty"`
	MissingKey bool       `json:"missing_key,omitempty"`
	// Override is the override the key selected; Action "unlimited" or
	// "block" for those overrides.
	Override string `json:"override,omitempty"`
	Action   string `json:"action,omitempty"`
	Rate     *Rate  `json:"rate,omitempty"`
	Cost     int64  `json:"cost,omitempty"`
	Mode     string `json:"mode"`
	RedisKey string `json:"redis_key,omitempty"`
	// Decision is "allowed" or "limited" for a decision made locally, ""
	// when none was (remote limits, a rejection before it).
	Decision  string `json:"decision,omitempty"`
	Remaining *int64 `json:"remaining,omitempty"`
}

// Condition is one match condition of a limit and whether it held.
type Condition struct {
	Path      string `json:"path"`
	Condition string `json:"condition"`
	Held      bool   `json:"held"`
}

// KeyValue is one part of a key: its kind as configured and its value.
type KeyValue struct {
	Part  string `json:"part"`
	Value string `json:"value"`
}

// Rate is a limit's rate as configured.
type Rate struct {
	Limit  int64  `json:"limit"`
	Window string `json:"window"`
	Burst  int64  `json:"burst,omitempty"`
}

// BreakerExplanation is a breaker guarding the request.
type BreakerExplanation struct {
	Name     string `json:"name"`
	Instance string `json:"instance"`
	Allowed  bool   `json:"allowed"`
}

// ConcurrencyExplanation is a concurrency limit whose match held.
type ConcurrencyExplanation struct {
	Name       string     `json:"name"`
	Key        []KeyValue `json:"key,omitempty"`
	MissingKey bool       `json:"missing_key,omitempty"`
	Allowed    bool       `json:"allowed"`
}

// Explain runs req through the filter's engine configured with cfgJSON,
// on a host of fakes whose shared data is fresh, at now. Key values are
// digests unless showKeys. The error is the configuration's (config.Errors)
// or the engine's refusal of it.
func Explain(cfgJSON []byte, req Request, now time.Time, showKeys bool) (*Explanation, error) {
	cfg, err := config.Parse(cfgJSON)
	if err != nil {
		return nil, err
	}
	hc, fakes := hosttest.New(now)
	fakes.Stream.Headers = append([][2]string{{":method", req.Method}, {":path", req.Path}, {":authority", req.Authority}, {":scheme", "http"}}, req.Headers...)
	fakes.Stream.Properties = map[string]string{
		"source.address":   req.Client,
		"xds.route_name":   req.Route,
		"xds.cluster_name": req.Cluster,
	}
	for _, m := range req.Metadata {
		// hosttest joins a property path with dots; so does this.
		fakes.Stream.Properties[strings.Join(config.MetadataProperty(m.Namespace, m.Path), ".")] = m.Value
	}
	p := engine.NewVM(hc).NewPlugin()
	if !p.Start(cfgJSON) {
		return nil, fmt.Errorf("the filter refused the configuration: %s", strings.Join(fakes.Log.Lines, "; "))
	}
	var s engine.Stream
	p.Begin(&s, 1)
	var tr engine.Trace
	s.TraceInto(&tr)
	verdict := s.RequestHeaders()

	ex := &Explanation{Limits: []LimitExplanation{}, Breakers: []BreakerExplanation{}, Concurrency: []ConcurrencyExplanation{}}
	switch {
	case len(fakes.Stream.Replies) > 0:
		r := fakes.Stream.Replies[0]
		ex.Outcome, ex.Status, ex.Body = "rejected", r.Status, string(r.Body)
		if r.Status < 400 {
			ex.Outcome = "answered" // by the filter itself: its admin route
		}
	case verdict == engine.Continue:
		ex.Outcome = "admitted"
	default:
		ex.Outcome = "waits"
	}
	for i, lt := range tr.Limits {
		ex.Limits = append(ex.Limits, explainLimit(cfg, i, lt, tr.Limits, showKeys))
	}
	if ex.Outcome == "waits" {
		ex.WaitsFor = waitsFor(cfg, ex.Limits)
	}
	for _, b := range tr.Breakers {
		ex.Breakers = append(ex.Breakers, BreakerExplanation{Name: b.Name, Instance: b.Instance, Allowed: b.Allowed})
	}
	for _, c := range tr.Concurrency {
		ce := ConcurrencyExplanation{Name: c.Name, MissingKey: !c.KeyOK, Allowed: c.Allowed}
		if c.KeyOK {
			ce.Key = explainKey(concurrencyParts(cfg, c.Name), c.Key, showKeys)
		}
		ex.Concurrency = append(ex.Concurrency, ce)
	}
	return ex, nil
}

// waitsFor names what a paused request waits for, from what the trace
// says the engine started: a Redis decision of an enforcing global or
// hybrid limit, a lookup of the external limit (which the engine makes
// before any limit's key), or else a delay (on_limit delay holds the
// request for a token).
func waitsFor(cfg *config.Config, limits []LimitExplanation) string {
	for i, l := range limits {
		switch {
		case l.RedisKey != "" && !l.Shadow:
			return "redis"
		case i >= len(cfg.Limits) && l.State == "applies" && !l.Evaluated:
			return "limits_service"
		}
	}
	return "delay"
}

func explainLimit(cfg *config.Config, i int, lt engine.LimitTrace, all []engine.LimitTrace, showKeys bool) LimitExplanation {
	le := LimitExplanation{Name: lt.Name, Conditions: []Condition{}, Evaluated: lt.Evaluated, Shadow: lt.Shadow, Mode: lt.Mode.String()}
	for _, c := range lt.Conditions {
		le.Conditions = append(le.Conditions, Condition{Path: c.Path, Condition: c.JSON, Held: c.Held})
	}
	for _, j := range lt.ReplacedBy {
		le.ReplacedBy = append(le.ReplacedBy, all[j].Name)
	}
	switch {
	case lt.Disabled:
		le.State = "disabled"
	case !lt.Matched:
		le.State = "not_matched"
	case !lt.Applied:
		le.State = "replaced"
	default:
		le.State = "applies"
	}
	if !lt.Evaluated {
		return le
	}
	le.MissingKey = !lt.KeyOK
	if lt.KeyOK {
		le.Key = explainKey(limitParts(cfg, i), lt.Key, showKeys)
	}
	le.Override, le.Action = lt.OverrideValue, lt.Action
	if lt.Rate.Limit > 0 {
		le.Rate = &Rate{Limit: lt.Rate.Limit, Window: lt.Rate.WindowString(), Burst: lt.Rate.Burst}
		le.Cost = lt.Cost
	}
	le.RedisKey = lt.RedisKey
	if lt.Decided {
		le.Decision = "limited"
		if lt.Allowed {
			le.Decision = "allowed"
		}
		rem := lt.Remaining
		le.Remaining = &rem
	}
	return le
}

// limitParts names the key parts of limit i; the external limit, past
// the configured ones, has one key, the service's tenant_key.
func limitParts(cfg *config.Config, i int) []string {
	if i >= len(cfg.Limits) {
		return []string{"tenant_key"}
	}
	return partNames(cfg.Limits[i].Key)
}

func concurrencyParts(cfg *config.Config, name string) []string {
	for _, c := range cfg.Concurrency {
		if c.Name == name {
			return partNames(c.Key)
		}
	}
	return nil
}

func partNames(parts []config.KeyPart) []string {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.String()
	}
	return names
}

// explainKey splits a composite key into its parts' values
// (request.SplitKey undoes the key escaping) and redacts each unless
// showKeys. An empty parts list is the limit's one bucket: no values.
func explainKey(parts []string, key string, showKeys bool) []KeyValue {
	if len(parts) == 0 {
		return []KeyValue{} // "key": [], one bucket for every request
	}
	values := request.SplitKey(key)
	if len(values) != len(parts) {
		parts, values = []string{strings.Join(parts, "+")}, []string{key}
	}
	out := make([]KeyValue, len(parts))
	for i := range parts {
		v := values[i]
		if !showKeys {
			v = redact(v)
		}
		out[i] = KeyValue{Part: parts[i], Value: v}
	}
	return out
}

// redact stands for a key value without showing it: enough of its
// SHA-256 to tell values apart and to find it again from a known value.
func redact(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:6])
}

func runExplain(args []string, stdout, stderr io.Writer) int {
	a, err := parseRequestArgs(args)
	if err != nil {
		if !errors.Is(err, errHelp) {
			fmt.Fprintf(stderr, "sluicectl explain: %v\n", err)
		}
		fmt.Fprintln(stderr, explainUsage)
		if errors.Is(err, errHelp) {
			return exitOK
		}
		return exitUsage
	}
	cfgJSON, err := explainConfig(a.config)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl explain: %v\n", err)
		return exitUsage
	}
	ex, err := Explain(cfgJSON, a.req, time.Now(), a.showKeys)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl explain: %s: invalid configuration (run sluicectl check):\n%v\n", a.config, err)
		return exitProblems
	}
	if a.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(ex)
		return exitOK
	}
	writeExplanation(stdout, a.req, ex)
	return exitOK
}

const explainUsage = `usage: sluicectl explain --config FILE [--show-keys] [--json] [-X METHOD] [METHOD] URL
         [-H 'Name: value']... [--client ADDR] [--route NAME] [--cluster NAME]
         [--metadata namespace:dotted.path=value]...
FILE is a plugin config JSON, or Envoy YAML holding exactly one Sluice filter.`

// explainConfig reads the plugin configuration of file: the file itself
// when it is JSON, or the one Sluice filter configuration in Envoy YAML.
func explainConfig(file string) ([]byte, error) {
	data, err := readRegular(file)
	if err != nil {
		return nil, err
	}
	if isJSON(file, data) {
		return data, nil
	}
	found, problems, err := findPluginConfigs(file, data)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		// Envoy refuses the file, so no request meets this filter.
		p := problems[0]
		return nil, fmt.Errorf("%s (%s): %s", pluginConfig{File: p.File, Line: p.Line}.location(), p.YAMLPath, p.Message)
	}
	if len(found) != 1 {
		var where []string
		for _, f := range found {
			where = append(where, f.location())
		}
		return nil, fmt.Errorf("%s holds %d Sluice filter configurations, want one (give that one as a JSON file): %s", file, len(found), strings.Join(where, ", "))
	}
	if f := found[0]; f.Err != "" {
		return nil, fmt.Errorf("%s (%s): %s", f.location(), f.YAMLPath, f.Err)
	}
	return []byte(found[0].Config), nil
}

func writeExplanation(w io.Writer, req Request, ex *Explanation) {
	fmt.Fprintf(w, "request: %s http://%s%s from %s, route %q, cluster %q\n", req.Method, req.Authority, req.Path, req.Client, req.Route, req.Cluster)
	switch ex.Outcome {
	case "rejected", "answered":
		fmt.Fprintf(w, "outcome: %s %d %s\n", ex.Outcome, ex.Status, strings.TrimSpace(ex.Body))
	case "waits":
		fmt.Fprintf(w, "outcome: waits for %s (explain does not ask it, and local limits are committed only after it answers)\n", strings.ReplaceAll(ex.WaitsFor, "_", " "))
	default:
		fmt.Fprintln(w, "outcome: admitted")
	}
	fmt.Fprintln(w, "\nlimits, in the engine's order:")
	if len(ex.Limits) == 0 {
		fmt.Fprintln(w, "  (none configured)")
	}
	for i, l := range ex.Limits {
		fmt.Fprintf(w, "  %d. %s: %s", i+1, l.Name, strings.ReplaceAll(l.State, "_", " "))
		if len(l.ReplacedBy) > 0 {
			fmt.Fprintf(w, " by %s", strings.Join(l.ReplacedBy, ", "))
		}
		if l.Shadow {
			fmt.Fprint(w, " (shadow: observes only)")
		}
		fmt.Fprintln(w)
		if len(l.Conditions) == 0 && l.State != "disabled" {
			fmt.Fprintln(w, "     match: every request")
		}
		for _, c := range l.Conditions {
			held := "held"
			if !c.Held {
				held = "did not hold"
			}
			fmt.Fprintf(w, "     match %s: %s\n", c.Condition, held)
		}
		if l.State == "applies" && !l.Evaluated {
			fmt.Fprintln(w, "     not reached: an earlier limit rejected the request first")
		}
		if !l.Evaluated {
			continue
		}
		if l.MissingKey {
			fmt.Fprintln(w, "     key: missing (on_missing_key applies)")
			continue
		}
		fmt.Fprintf(w, "     key: %s\n", keyText(l.Key))
		if l.Action != "" {
			fmt.Fprintf(w, "     override %q: %s\n", l.Override, l.Action)
			continue
		}
		if l.Rate != nil {
			fmt.Fprintf(w, "     rate: %d per %s", l.Rate.Limit, l.Rate.Window)
			if l.Rate.Burst > 0 {
				fmt.Fprintf(w, ", burst %d", l.Rate.Burst)
			}
			if l.Override != "" {
				fmt.Fprintf(w, " (override %q)", l.Override)
			}
			fmt.Fprintf(w, "; cost %d; mode %s\n", l.Cost, l.Mode)
			if l.Decision == "" && l.RedisKey == "" && ex.Outcome == "rejected" {
				fmt.Fprintln(w, "     not decided: the request was rejected first")
			}
		}
		if l.RedisKey != "" {
			fmt.Fprintf(w, "     redis key: %s (decided in Redis)\n", l.RedisKey)
		}
		if l.Decision != "" {
			fmt.Fprintf(w, "     decision: %s, %d left\n", l.Decision, *l.Remaining)
		}
	}
	fmt.Fprintln(w, "\nbreakers guarding the request:")
	if len(ex.Breakers) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, b := range ex.Breakers {
		verdict := "allows"
		if !b.Allowed {
			verdict = "open: rejects"
		}
		fmt.Fprintf(w, "  %s on %q: %s\n", b.Name, b.Instance, verdict)
	}
	fmt.Fprintln(w, "\nconcurrency limits that match:")
	if len(ex.Concurrency) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, c := range ex.Concurrency {
		switch {
		case c.MissingKey:
			fmt.Fprintf(w, "  %s: key missing, not counted\n", c.Name)
		case c.Allowed:
			fmt.Fprintf(w, "  %s: key %s, takes a slot\n", c.Name, keyText(c.Key))
		default:
			fmt.Fprintf(w, "  %s: key %s, full: rejects\n", c.Name, keyText(c.Key))
		}
	}
}

func keyText(kv []KeyValue) string {
	if len(kv) == 0 {
		return "[] (one bucket for every request)"
	}
	parts := make([]string, len(kv))
	for i, p := range kv {
		parts[i] = p.Part + "=" + p.Value
	}
	return strings.Join(parts, " ")
}
