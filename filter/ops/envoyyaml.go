package ops

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/ops/yamlbound"
)

// The Envoy and Istio shapes a Sluice configuration sits in. Our e2e
// loader accepts the same ones (e2e/envoy); this walk reads only what
// check and explain need and leaves validating Envoy's own fields to Envoy.
const (
	typeWasm       = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	typeHCM        = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	kindWasmPlugin = "WasmPlugin"
)

// pluginConfig is one Sluice plugin configuration found in a file.
type pluginConfig struct {
	// File and Line are where the configuration's node starts; Line is 0
	// for a JSON file, which is the configuration itself.
	File string
	Line int
	// YAMLPath is the node's path in its YAML document ("" for JSON).
	YAMLPath string
	// Config is the plugin configuration JSON the filter would receive.
	Config string
	// HCM is the HTTP connection manager the filter is in; nil when the
	// file does not say (a JSON file, a lone ECDS file, an Istio
	// WasmPlugin).
	HCM *connectionManager
	// Err is set when the configuration could not be extracted (a
	// configuration of a type Envoy does not pass to a module, bad
	// base64); Config is then empty.
	Err string
	// Clusters are the static clusters of the file the configuration is
	// in (its bootstrap's, for an ECDS file's); nil when it has none.
	Clusters map[string]staticCluster
}

// staticCluster is what the checks need of a cluster the file defines.
type staticCluster struct {
	Line int
	// HTTP2 is set when it speaks HTTP/2 to its endpoints, as a cluster
	// that takes gRPC must.
	HTTP2 bool
}

func (c pluginConfig) location() string {
	if c.Line == 0 {
		return c.File
	}
	return c.File + ":" + strconv.Itoa(c.Line)
}

// connectionManager is what the checks need of an HTTP connection
// manager.
type connectionManager struct {
	File             string
	Line             int
	UseRemoteAddress bool
	// Err says why a field the checks read is one Envoy refuses; the
	// fields are then unknown.
	Err string
}

// yamlBool reads a boolean field of an Envoy message as Envoy and our
// stand-in do: a YAML boolean (true, True, TRUE, false, False, FALSE) is
// its value, an absent field is false, and anything else (a quoted
// "true", yes, 1, a mapping) is no JSON boolean once the YAML is JSON,
// which protobuf's JSON reading of a BoolValue refuses, so Envoy does not
// start; err says so, naming the field and its line. A null is unset.
func yamlBool(n *yaml.Node, field string) (v bool, err string) {
	if n == nil {
		return false, ""
	}
	switch tag := n.ShortTag(); {
	case n.Kind == yaml.ScalarNode && tag == "!!null":
		return false, ""
	case n.Kind == yaml.ScalarNode && tag == "!!bool" && n.Decode(&v) == nil:
		return v, ""
	}
	what := map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list"}[n.Kind]
	if n.Kind == yaml.ScalarNode {
		what = config.Quote(n.Value)
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			what = "the quoted string " + what
		}
	}
	return false, fmt.Sprintf(":%d: %s: %s is not a YAML boolean, which Envoy refuses here: write true or false", n.Line, field, what)
}

// Bounds on the walk: aliases can make a small document expand
// exponentially ("billion laughs"), and ECDS files can name each other.
const (
	maxWalkDepth = 100
	maxWalkNodes = 1 << 20
	maxECDSDepth = 4
)

// isJSON reports whether file holds a plugin configuration in JSON
// rather than YAML: it is named *.json, or its first non-space byte opens
// an object. (A JSON object is also YAML, but a plugin configuration is
// never an Envoy bootstrap.)
func isJSON(file string, data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n")
	return strings.HasSuffix(file, ".json") || len(t) > 0 && t[0] == '{'
}

// findPluginConfigs finds every Sluice plugin configuration in the YAML of
// file: inline in wasm HTTP filters (StringValue, BytesValue or Struct,
// as Envoy passes them to the module), in ECDS files (read when a
// bootstrap's filter names one through path_config_source, or given on
// their own), and in Istio WasmPlugin resources (spec.pluginConfig). A
// file may hold several YAML documents.
//
// problems are the fields read on the way that Envoy refuses (a key given
// twice, a field in both its spellings), each with its line and path.
func findPluginConfigs(file string, data []byte) (found []pluginConfig, problems []Finding, err error) {
	w := &walker{file: file, budget: maxWalkNodes, starts: maxYAMLStarts, bytes: maxYAMLBytes, configBytes: maxConfigFile}
	if err := w.documents(data); err != nil {
		return nil, nil, err
	}
	for i := range w.found {
		w.found[i].Clusters = w.clusters
	}
	return w.found, w.problems, nil
}

type walker struct {
	file   string
	budget int
	found  []pluginConfig
	// problems are the fields Envoy refuses, in this file and its ECDS
	// files.
	problems []Finding
	// ecdsDepth counts the ECDS files being walked inside one another.
	ecdsDepth int

	// starts and bytes are what is left of maxYAMLStarts and
	// maxYAMLBytes for this file and the ECDS files it names, together:
	// a bootstrap naming one large ECDS file a thousand times is not
	// parsed a thousand times.
	starts, bytes int
	// configBytes is what is left of the bytes the configurations found
	// may take, aliases expanded (see chargeExpanded).
	configBytes int
	// clusters are the static clusters of the file's documents.
	clusters map[string]staticCluster
}

func (w *walker) documents(data []byte) error {
	if err := w.chargeYAML(w.file, data); err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if err == io.EOF { // yaml.v3 returns it unwrapped at the end of the stream
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %v", w.file, err)
		}
		if len(doc.Content) == 0 {
			continue
		}
		root := doc.Content[0]
		if root.Kind == yaml.MappingNode && scalar(w.lookup(root, "", "kind")) == kindWasmPlugin {
			w.wasmPlugin(root)
			continue
		}
		w.staticClusters(root)
		if err := w.walk(root, "", nil, 0); err != nil {
			return err
		}
	}
}

// staticClusters records the clusters a bootstrap defines, by name.
func (w *walker) staticClusters(root *yaml.Node) {
	cs := resolveAlias(w.lookupPath(root, "", "static_resources", "clusters"))
	if cs == nil || cs.Kind != yaml.SequenceNode {
		return
	}
	for i, c := range cs.Content {
		c = resolveAlias(c)
		path := "static_resources.clusters[" + strconv.Itoa(i) + "]"
		if c == nil || c.Kind != yaml.MappingNode {
			continue
		}
		name := scalar(w.lookup(c, path, "name"))
		if name == "" {
			continue
		}
		if w.clusters == nil {
			w.clusters = map[string]staticCluster{}
		}
		w.clusters[name] = staticCluster{Line: c.Line, HTTP2: w.speaksHTTP2(c, path)}
	}
}

// speaksHTTP2 reports whether cluster c speaks HTTP/2 to its endpoints:
// the deprecated http2_protocol_options, or an HttpProtocolOptions whose
// explicit_http_config is HTTP/2 or whose auto_config may choose it.
func (w *walker) speaksHTTP2(c *yaml.Node, path string) bool {
	if w.lookup(c, path, "http2_protocol_options") != nil {
		return true
	}
	optsPath := joinYAML(path, "typed_extension_protocol_options")
	opts := resolveAlias(w.lookup(c, path, "typed_extension_protocol_options"))
	if opts == nil || opts.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(opts.Content); i += 2 {
		o, p := resolveAlias(opts.Content[i+1]), joinYAML(optsPath, opts.Content[i].Value)
		if o == nil || o.Kind != yaml.MappingNode {
			continue
		}
		if w.lookupPath(o, p, "explicit_http_config", "http2_protocol_options") != nil || w.lookup(o, p, "auto_config") != nil {
			return true
		}
	}
	return false
}

// walk visits n, looking for wasm filter configs and the HTTP connection
// managers that hold them.
func (w *walker) walk(n *yaml.Node, path string, hcm *connectionManager, depth int) error {
	if w.budget--; w.budget < 0 {
		return fmt.Errorf("%s:%d: YAML expands to more than %d nodes", w.file, n.Line, maxWalkNodes)
	}
	if depth > maxWalkDepth {
		return fmt.Errorf("%s:%d: YAML nested too deeply", w.file, n.Line)
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil
		}
		return w.walk(n.Alias, path, hcm, depth+1)
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := w.walk(c, path+"["+strconv.Itoa(i)+"]", hcm, depth+1); err != nil {
				return err
			}
		}
		return nil
	case yaml.MappingNode:
	default:
		return nil
	}
	w.duplicateKeys(n, path)
	switch scalar(w.lookup(n, path, "@type")) {
	case typeHCM:
		hcm = &connectionManager{File: w.file, Line: n.Line}
		if ura, bad := field(n, "use_remote_address"); bad != nil {
			// Envoy refuses the file: that is the finding, and
			// nothing is known of the connection manager.
			w.problem(bad, path)
			hcm = nil
		} else {
			hcm.UseRemoteAddress, hcm.Err = yamlBool(ura, "use_remote_address")
		}
	case typeWasm:
		if cfg := w.lookup(n, path, "config"); cfg != nil && w.isSluice(cfg, joinYAML(path, "config")) {
			w.wasmFilter(cfg, joinYAML(path, "config"), hcm)
			return nil
		}
	}
	cdPath := joinYAML(path, "config_discovery")
	if cd := w.lookup(n, path, "config_discovery"); cd != nil && w.discoversWasm(cd, cdPath) {
		if src := w.lookupPath(cd, cdPath, "config_source", "path_config_source", "path"); src != nil {
			return w.ecds(scalar(src), src.Line, hcm)
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if err := w.walk(n.Content[i+1], joinYAML(path, n.Content[i].Value), hcm, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// duplicateKeys records the keys mapping n, at path, gives twice, which
// Envoy and our stand-in refuse whatever the field (a merge key's
// mappings may repeat a key: the mapping's own wins).
func (w *walker) duplicateKeys(n *yaml.Node, path string) {
	if len(n.Content) < 4 {
		return
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			continue
		}
		if seen[k.Value] {
			w.problem(duplicateKey(k), path)
		}
		seen[k.Value] = true
	}
}

func duplicateKey(k *yaml.Node) *fieldProblem {
	return &fieldProblem{Key: k.Value, Line: k.Line, Msg: config.Quote(k.Value) + ": given twice in one mapping, which Envoy refuses (duplicate key): keep one"}
}

// ecds walks the ECDS file a filter's config_discovery names. Envoy reads
// it relative to its working directory; a check may run elsewhere, so the
// bootstrap's own directory is tried next.
func (w *walker) ecds(name string, line int, hcm *connectionManager) error {
	if w.ecdsDepth >= maxECDSDepth {
		return fmt.Errorf("%s:%d: ECDS files nested more than %d deep", w.file, line, maxECDSDepth)
	}
	candidates := []string{name}
	if !filepath.IsAbs(name) {
		candidates = append(candidates, filepath.Join(filepath.Dir(w.file), filepath.Base(name)))
	}
	for _, c := range candidates {
		data, err := readRegular(c)
		if err != nil {
			continue
		}
		if err := w.chargeYAML(c, data); err != nil {
			return err
		}
		sub := &walker{file: c, problems: w.problems, budget: w.budget, starts: w.starts, bytes: w.bytes, configBytes: w.configBytes, ecdsDepth: w.ecdsDepth + 1}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			return fmt.Errorf("%s: %v", c, err)
		}
		if len(doc.Content) > 0 {
			if err := sub.walk(doc.Content[0], "", hcm, 0); err != nil {
				return err
			}
		}
		w.budget, w.starts, w.bytes, w.configBytes = sub.budget, sub.starts, sub.bytes, sub.configBytes
		w.found = append(w.found, sub.found...)
		w.problems = sub.problems
		return nil
	}
	for i, c := range candidates {
		candidates[i] = config.Quote(c)
	}
	return fmt.Errorf("%s:%d: cannot read the ECDS file %s (tried %s); check it on its own", w.file, line, config.Quote(name), strings.Join(candidates, ", "))
}

// discoversWasm reports whether a config_discovery may deliver a wasm
// filter: other filters' ECDS files are not ours to read.
func (w *walker) discoversWasm(cd *yaml.Node, path string) bool {
	urls := w.lookup(cd, path, "type_urls")
	if urls == nil || urls.Kind != yaml.SequenceNode {
		return false
	}
	for _, u := range urls.Content {
		if scalar(u) == typeWasm {
			return true
		}
	}
	return false
}

// isSluice tells a Sluice filter from another wasm module: its name,
// root_id or vm_id is "sluice", or its code's file name or URL says so.
func (w *walker) isSluice(cfg *yaml.Node, path string) bool {
	for _, k := range []string{"name", "root_id"} {
		if scalar(w.lookup(cfg, path, k)) == "sluice" {
			return true
		}
	}
	vmPath := joinYAML(path, "vm_config")
	vm := w.lookup(cfg, path, "vm_config")
	if scalar(w.lookup(vm, vmPath, "vm_id")) == "sluice" {
		return true
	}
	codePath := joinYAML(vmPath, "code")
	code := w.lookup(vm, vmPath, "code")
	for _, s := range []string{scalar(w.lookupPath(code, codePath, "local", "filename")), scalar(w.lookupPath(code, codePath, "remote", "http_uri", "uri"))} {
		if strings.Contains(strings.ToLower(s), "sluice") {
			return true
		}
	}
	return false
}

// wasmFilter extracts the plugin configuration of a wasm filter's config
// as Envoy hands it to the module: a StringValue's or BytesValue's
// payload, a Struct as JSON; no configuration is the empty one.
func (w *walker) wasmFilter(cfg *yaml.Node, path string, hcm *connectionManager) {
	pc := pluginConfig{File: w.file, Line: cfg.Line, YAMLPath: path, HCM: hcm}
	conf := w.lookup(cfg, path, "configuration")
	if conf == nil {
		w.found = append(w.found, pc)
		return
	}
	pc.Line, pc.YAMLPath = conf.Line, joinYAML(path, "configuration")
	value := w.lookup(conf, pc.YAMLPath, "value")
	if value != nil {
		pc.Line, pc.YAMLPath = value.Line, joinYAML(pc.YAMLPath, "value")
		if value.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
			pc.Line++ // a block scalar's text starts on the line after its "|"
		}
	}
	switch t := scalar(w.lookup(conf, joinYAML(path, "configuration"), "@type")); t {
	case "type.googleapis.com/google.protobuf.StringValue":
		if pc.Err = w.chargeExpanded(value, pc.YAMLPath); pc.Err == "" {
			pc.Config = scalar(value)
		}
	case "type.googleapis.com/google.protobuf.BytesValue":
		if pc.Err = w.chargeExpanded(value, pc.YAMLPath); pc.Err != "" {
			break
		}
		b, err := base64.StdEncoding.DecodeString(scalar(value))
		if err != nil {
			pc.Err = "a BytesValue holds base64: " + err.Error()
		}
		pc.Config = string(b)
	case "type.googleapis.com/google.protobuf.Struct":
		pc.Config, pc.Err = w.nodeJSON(value, pc.YAMLPath)
	default:
		pc.Err = fmt.Sprintf("configuration type %s is not passed to a module (StringValue, BytesValue and Struct are)", config.Quote(t))
	}
	w.found = append(w.found, pc)
}

// wasmPlugin extracts an Istio WasmPlugin's spec.pluginConfig, which
// Istio hands to the module as JSON.
func (w *walker) wasmPlugin(root *yaml.Node) {
	pc := pluginConfig{File: w.file, Line: root.Line, YAMLPath: "spec.pluginConfig"}
	if n := w.lookupPath(root, "", "spec", "pluginConfig"); n != nil {
		pc.Line = n.Line
		pc.Config, pc.Err = w.nodeJSON(n, pc.YAMLPath)
	}
	w.found = append(w.found, pc)
}

// nodeJSON renders a YAML mapping, at path, as JSON, once its size with
// aliases expanded is known to fit.
func (w *walker) nodeJSON(n *yaml.Node, path string) (string, string) {
	if n == nil {
		return "", ""
	}
	if n.Kind != yaml.MappingNode {
		return "", "must be a mapping (the plugin configuration object)"
	}
	if msg := w.chargeExpanded(n, path); msg != "" {
		return "", msg
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return "", err.Error()
	}
	b, err := json.Marshal(jsonable(v))
	if err != nil {
		return "", err.Error()
	}
	return string(b), ""
}

// maxExpandedDepth bounds the nesting a configuration's YAML may reach
// with aliases followed, as yaml.v3 bounds it without: an alias that
// contains itself reaches it at once.
const maxExpandedDepth = 10_000

// chargeExpanded takes what the configuration at n (at path) expands to,
// aliases followed, from what is left to the configurations of this file
// and its ECDS files, and says why when it is more. yaml.v3 checks that
// aliases are not too many for the nodes of a document, not how large
// what they name is: one 1 MiB string named 2,000 times is a few nodes
// and 2 GB of JSON. The size is counted on the node tree before
// anything is expanded, as the bytes of every scalar and two more per
// node (quotes, separators), which is what the JSON takes but for
// escapes; a plugin configuration as JSON may have maxConfigFile bytes,
// as a JSON file may, and all of them together no more.
func (w *walker) chargeExpanded(n *yaml.Node, path string) string {
	if n == nil {
		return ""
	}
	trail, ok := yamlbound.Charge(n, &w.configBytes, maxExpandedDepth)
	if ok {
		return ""
	}
	for i := len(trail) - 1; i >= 0; i-- {
		switch st := trail[i]; st.Parent.Kind {
		case yaml.SequenceNode:
			path += "[" + strconv.Itoa(st.Index) + "]"
		case yaml.MappingNode:
			path = joinYAML(path, st.Parent.Content[st.Index&^1].Value)
		}
	}
	if w.configBytes < 0 {
		return fmt.Sprintf("with aliases expanded, the plugin configurations would be more than %d bytes of JSON (at %s)", maxConfigFile, path)
	}
	return fmt.Sprintf("with aliases expanded, nested more than %d deep (at %s)", maxExpandedDepth, path)
}

// jsonable turns what yaml.v3 decodes into values encoding/json takes:
// mappings with non-string keys get their keys' text.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
	}
	return v
}

// field reads the field name (snake_case, as Envoy's docs spell it) of
// the Envoy message in mapping n as Envoy's YAML loader and our stand-in
// do: the YAML becomes JSON and protobuf's JSON mapping reads it, so the
// field may also be spelled in lowerCamelCase (use_remote_address or
// useRemoteAddress); a merge key (<<) supplies what the mapping does not
// say itself (its own keys win, and among merged mappings the first);
// aliases are followed. What Envoy refuses is err, naming the field and
// its line: a key given twice in one mapping ("duplicate key"), or both
// spellings at once ("duplicate field"), whichever says what. A nil n, or
// one that is no mapping, has no fields.
func field(n *yaml.Node, name string) (v *yaml.Node, bad *fieldProblem) {
	spellings := []string{name}
	if c := camelName(name); c != name {
		spellings = append(spellings, c)
	}
	got := make([]*yaml.Node, len(spellings))
	if bad := collectField(n, spellings, got, 0); bad != nil {
		return nil, bad
	}
	if len(got) == 2 && got[0] != nil && got[1] != nil {
		later := 1
		if got[0].Line > got[1].Line {
			later = 0
		}
		return nil, &fieldProblem{Key: spellings[later], Line: got[later].Line, Msg: fmt.Sprintf(
			"%s: set twice, as %s and as %s, which Envoy refuses (duplicate field): keep one", name, spellings[0], spellings[1])}
	}
	for _, g := range got {
		if g != nil {
			return resolveAlias(g), nil
		}
	}
	return nil, nil
}

// fieldProblem is why Envoy refuses a field's YAML: Msg names the field,
// Key and Line are where (the key as spelled there).
type fieldProblem struct {
	Key  string
	Line int
	Msg  string
}

// collectField fills got[i] with the value of spellings[i] in mapping n,
// where got[i] is still nil: n's own keys first, then its merge keys'
// mappings in order. It holds the key node's value; a value met twice in
// n's own keys is err.
func collectField(n *yaml.Node, spellings []string, got []*yaml.Node, depth int) *fieldProblem {
	n = resolveAlias(n)
	if n == nil || n.Kind != yaml.MappingNode || depth > maxWalkDepth {
		return nil
	}
	own := make([]*yaml.Node, len(spellings))
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, n.Content[i+1])
			continue
		}
		for j, s := range spellings {
			if k.Kind != yaml.ScalarNode || k.Value != s {
				continue
			}
			if own[j] != nil {
				return duplicateKey(k)
			}
			own[j] = n.Content[i+1]
		}
	}
	for j := range got {
		if got[j] == nil {
			got[j] = own[j]
		}
	}
	for _, m := range merges {
		m = resolveAlias(m)
		srcs := []*yaml.Node{m}
		if m != nil && m.Kind == yaml.SequenceNode {
			srcs = m.Content
		}
		for _, src := range srcs {
			// Several spellings may come from different merged
			// mappings; each takes the first it finds.
			if bad := collectField(src, spellings, got, depth+1); bad != nil {
				return bad
			}
		}
	}
	return nil
}

// camelName is the lowerCamelCase name protobuf's JSON mapping gives the
// snake_case field name.
func camelName(name string) string {
	var b strings.Builder
	up := false
	for _, r := range name {
		switch {
		case r == '_':
			up = true
		case up && r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			up = false
		default:
			b.WriteRune(r)
			up = false
		}
	}
	return b.String()
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < maxWalkDepth; i++ {
		n = n.Alias
	}
	return n
}

// lookup is the field key of the Envoy message in mapping n, at path (see
// field); what Envoy refuses in it is one of the file's problems, each
// reported once, and the field is then nil.
func (w *walker) lookup(n *yaml.Node, path, key string) *yaml.Node {
	v, bad := field(n, key)
	if bad != nil {
		w.problem(bad, path)
	}
	return v
}

func (w *walker) lookupPath(n *yaml.Node, path string, keys ...string) *yaml.Node {
	for _, k := range keys {
		n = w.lookup(n, path, k)
		path = joinYAML(path, k)
	}
	return n
}

// problem records p, found in the mapping at path.
func (w *walker) problem(p *fieldProblem, path string) {
	f := Finding{ConfigRef: ConfigRef{File: w.file, Line: p.Line, YAMLPath: joinYAML(path, p.Key)}, Message: p.Msg}
	if !slices.Contains(w.problems, f) {
		w.problems = append(w.problems, f)
	}
}

// scalar is a scalar node's text; "" for anything else.
func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// joinYAML adds key to a node's path; a key longer than config.MaxQuoted
// is quoted and cut, so no finding carries a hostile key whole.
func joinYAML(path, key string) string {
	if len(key) > config.MaxQuoted {
		return path + "[" + config.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}
