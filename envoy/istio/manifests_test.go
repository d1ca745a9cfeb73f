// Package istio holds no code, only the Istio manifests Sluice ships and the
// test that checks them against Istio's own API types (istio.io/api), the
// rules Istio's CRDs add on top, and Sluice's config parser.
package istio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/golang/protobuf/jsonpb"
	"github.com/google/go-containerregistry/pkg/name"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
	"gopkg.in/yaml.v3"
	extensions "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1"

	"github.com/sluice-proxy/sluice/filter/config"
)

// kinds maps each kind we ship to the apiVersion Istio serves it under and
// the proto message its spec must decode into.
var kinds = map[string]struct {
	apiVersion string
	newSpec    func() proto.Message
}{
	"WasmPlugin":      {"extensions.istio.io/v1alpha1", func() proto.Message { return &extensions.WasmPlugin{} }},
	"ServiceEntry":    {"networking.istio.io/v1", func() proto.Message { return &networking.ServiceEntry{} }},
	"DestinationRule": {"networking.istio.io/v1", func() proto.Message { return &networking.DestinationRule{} }},
}

// doc is one YAML document of a manifest file, still as generic data so
// that the negative tests can mutate it before validation.
type doc struct {
	where string // file.yaml#index, for error messages
	obj   map[string]any
}

// resource is a doc that passed decoding.
type resource struct {
	where      string
	kind       string
	name       string
	namespace  string
	rawSpec    map[string]any
	spec       proto.Message
	pluginJSON []byte // WasmPlugin only: pluginConfig as the JSON Envoy hands the plugin
}

func loadDocs(t *testing.T) []doc {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var docs []doc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 0; ; i++ {
			var obj map[string]any
			err := dec.Decode(&obj)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s#%d: %v", f, i, err)
			}
			if obj == nil {
				continue // an empty document between separators
			}
			docs = append(docs, doc{where: fmt.Sprintf("%s#%d", f, i), obj: obj})
		}
	}
	return docs
}

var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func decode(d doc) (*resource, []error) {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", d.where, fmt.Sprintf(format, args...)))
	}
	for k := range d.obj {
		if !slices.Contains([]string{"apiVersion", "kind", "metadata", "spec"}, k) {
			fail("unknown top-level field %q", k)
		}
	}
	kind, _ := d.obj["kind"].(string)
	k, ok := kinds[kind]
	if !ok {
		fail("kind %q is not one we ship", kind)
		return nil, errs
	}
	if av, _ := d.obj["apiVersion"].(string); av != k.apiVersion {
		fail("apiVersion %q, want %q for %s", av, k.apiVersion, kind)
	}
	r := &resource{where: d.where, kind: kind}
	meta, _ := d.obj["metadata"].(map[string]any)
	for key := range meta {
		if !slices.Contains([]string{"name", "namespace", "labels", "annotations"}, key) {
			fail("unexpected metadata field %q", key)
		}
	}
	r.name, _ = meta["name"].(string)
	r.namespace, _ = meta["namespace"].(string)
	// An explicit namespace keeps kubectl apply from scattering the
	// resources into whatever namespace the user happens to be in.
	if !dns1123Label.MatchString(r.name) || !dns1123Label.MatchString(r.namespace) {
		fail("metadata name %q and namespace %q must both be DNS-1123 labels", r.name, r.namespace)
	}
	spec, ok := d.obj["spec"].(map[string]any)
	if !ok {
		fail("spec missing or not a mapping")
		return nil, errs
	}
	r.rawSpec = spec
	b, err := json.Marshal(spec)
	if err != nil {
		fail("spec to JSON: %v", err)
		return nil, errs
	}
	r.spec = k.newSpec()
	errs = append(errs, checkJSONNames(d.where+": spec", r.spec.ProtoReflect().Descriptor(), spec)...)
	// The decoder istio.io/api's generated UnmarshalJSON uses, so durations
	// such as "250ms" are read as Istio reads them (protojson accepts only
	// "0.250s"). Unknown fields are rejected here, where Istio's copy allows
	// them: a misspelled field would otherwise vanish without a trace.
	dec := jsonpb.Unmarshaler{AllowUnknownFields: false}
	if err := dec.Unmarshal(bytes.NewReader(b), protoadapt.MessageV1Of(r.spec)); err != nil {
		fail("spec does not decode as %s: %v", r.spec.ProtoReflect().Descriptor().FullName(), err)
		return nil, errs
	}
	return r, errs
}

// checkJSONNames insists on the lowerCamelCase JSON names. protojson also
// accepts the proto (snake_case) names, but Istio's CRD schemas list only
// the camelCase ones, and the API server silently prunes anything else:
// fail_strategy: FAIL_OPEN would vanish and leave the default FAIL_CLOSE.
func checkJSONNames(path string, md protoreflect.MessageDescriptor, v any) []error {
	switch md.FullName() {
	case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue":
		return nil // free-form by design
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil // scalars and well-known types with scalar JSON forms; protojson checks those
	}
	var errs []error
	for key, val := range obj {
		p := path + "." + key
		fd := md.Fields().ByJSONName(key)
		if fd == nil {
			if byName := md.Fields().ByName(protoreflect.Name(key)); byName != nil {
				errs = append(errs, fmt.Errorf("%s: write %q; the API server drops proto field names", p, byName.JSONName()))
			}
			continue // unknown: protojson reports it
		}
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				if m, ok := val.(map[string]any); ok {
					for mk, mv := range m {
						errs = append(errs, checkJSONNames(p+"."+mk, fd.MapValue().Message(), mv)...)
					}
				}
			}
		case fd.Kind() != protoreflect.MessageKind:
		case fd.IsList():
			if l, ok := val.([]any); ok {
				for i, e := range l {
					errs = append(errs, checkJSONNames(fmt.Sprintf("%s[%d]", p, i), fd.Message(), e)...)
				}
			}
		default:
			errs = append(errs, checkJSONNames(p, fd.Message(), val)...)
		}
	}
	return errs
}

var (
	sha256Hex     = regexp.MustCompile(`^[a-f0-9]{64}$`)
	cIdentifier   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	fqdn          = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	targetRefKind = map[string][]string{
		// kind -> accepted groups, from the targetRefs documentation in wasm.proto.
		"Gateway":      {"gateway.networking.k8s.io"},
		"GatewayClass": {"gateway.networking.k8s.io"},
		"Service":      {"", "core"},
		"ServiceEntry": {"networking.istio.io"},
	}
)

// checkWasmPlugin applies the rules Istio's CRD adds to the proto (CEL and
// OpenAPI constraints quoted in wasm.proto) plus the fields this project
// insists on being explicit, and runs pluginConfig through the same parser
// the wasm module runs at OnPluginStart.
func checkWasmPlugin(r *resource) []error {
	wp := r.spec.(*extensions.WasmPlugin)
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s (WasmPlugin %s/%s): %s", r.where, r.namespace, r.name, fmt.Sprintf(format, args...)))
	}

	ref, ok := strings.CutPrefix(wp.GetUrl(), "oci://")
	if !ok {
		fail("url %q: ship an oci:// image", wp.GetUrl())
	} else if parsed, err := name.ParseReference(ref, name.StrictValidation); err != nil {
		// Istio's fetcher parses the reference with go-containerregistry too.
		fail("url %q: %v", wp.GetUrl(), err)
	} else if tag, isTag := parsed.(name.Tag); isTag && tag.TagStr() == "latest" {
		fail("url %q: pin a release tag or digest, not latest (which also forces imagePullPolicy Always)", wp.GetUrl())
	}
	if s := wp.GetSha256(); s != "" && !sha256Hex.MatchString(s) {
		fail("sha256 %q is not 64 lowercase hex digits", s)
	}

	set := 0
	if wp.GetSelector() != nil {
		set++
	}
	if wp.GetTargetRef() != nil {
		set++
	}
	if len(wp.GetTargetRefs()) > 0 {
		set++
	}
	switch {
	case set > 1:
		fail("only one of targetRefs or selector can be set")
	case set == 0:
		// Valid for Istio, but it would apply the limit to every workload
		// in the namespace; our manifests always say where they apply.
		fail("neither selector nor targetRefs: the plugin would apply namespace-wide")
	}
	if n := len(wp.GetTargetRefs()); n > 16 {
		fail("%d targetRefs, at most 16", n)
	}
	for i, tr := range wp.GetTargetRefs() {
		groups, known := targetRefKind[tr.GetKind()]
		if !known || !slices.Contains(groups, tr.GetGroup()) || tr.GetName() == "" {
			fail("targetRefs[%d]: %s/%s %q is not a supported attachment", i, tr.GetGroup(), tr.GetKind(), tr.GetName())
		}
	}
	if sel := wp.GetSelector(); sel != nil && len(sel.GetMatchLabels()) == 0 {
		fail("selector without matchLabels selects every workload")
	}

	// Zero values are valid proto but hide a decision; the README explains
	// each of these, so the manifest must state them.
	if wp.GetImagePullPolicy() == extensions.PullPolicy_UNSPECIFIED_POLICY {
		fail("imagePullPolicy must be explicit")
	}
	if wp.GetPhase() == extensions.PluginPhase_UNSPECIFIED_PHASE {
		fail("phase must be explicit")
	}
	if wp.GetPriority() == nil {
		fail("priority must be explicit")
	}
	if _, ok := r.rawSpec["failStrategy"]; !ok {
		fail("failStrategy must be explicit (its zero value is FAIL_CLOSE)")
	}
	if wp.GetType() == extensions.PluginType_NETWORK {
		fail("type NETWORK: Sluice is an HTTP filter")
	}
	if n := len(wp.GetPluginName()); n > 256 {
		fail("pluginName is %d characters, at most 256", n)
	}
	for i, env := range wp.GetVmConfig().GetEnv() {
		if !cIdentifier.MatchString(env.GetName()) {
			fail("vmConfig.env[%d].name %q is not a C identifier", i, env.GetName())
		}
		if env.GetValueFrom() == extensions.EnvValueSource_HOST && env.GetValue() != "" {
			fail("vmConfig.env[%d]: value may only be set when valueFrom is INLINE", i)
		}
	}

	if wp.GetPluginConfig() == nil {
		fail("pluginConfig missing")
		return errs
	}
	// Istio hands Envoy the Struct as its JSON text; this is that text.
	b, err := protojson.Marshal(wp.GetPluginConfig())
	if err != nil {
		fail("pluginConfig to JSON: %v", err)
		return errs
	}
	r.pluginJSON = b
	if _, err := config.Parse(b); err != nil {
		fail("pluginConfig rejected by Sluice's parser: %v", err)
	}
	return errs
}

// serviceKey is one port of one host, as Istio names clusters after it.
type serviceKey struct {
	host string
	port uint32
}

// istioCluster splits an Envoy cluster name as Istio builds it for a
// service port (model.BuildSubsetKey): outbound|<port>|<subset>|<host>.
func istioCluster(cluster string) (key serviceKey, subset string, err error) {
	parts := strings.Split(cluster, "|")
	if len(parts) != 4 || parts[0] != "outbound" {
		return key, "", fmt.Errorf("%q is not outbound|<port>|<subset>|<host>", cluster)
	}
	port, err := strconv.ParseUint(parts[1], 10, 16)
	if err != nil || port == 0 {
		return key, "", fmt.Errorf("%q: port %q is not 1-65535", cluster, parts[1])
	}
	return serviceKey{host: parts[3], port: uint32(port)}, parts[2], nil
}

type mesh struct {
	services map[serviceKey]*resource // HTTP ports of ServiceEntries
	rules    map[string]*resource     // DestinationRules by host
}

func checkServiceEntry(r *resource, m *mesh) []error {
	se := r.spec.(*networking.ServiceEntry)
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s (ServiceEntry %s/%s): %s", r.where, r.namespace, r.name, fmt.Sprintf(format, args...)))
	}
	if len(se.GetHosts()) == 0 {
		fail("no hosts")
	}
	if len(se.GetPorts()) == 0 {
		fail("no ports")
	}
	for _, h := range se.GetHosts() {
		// A wildcard host cannot be resolved, and Sluice needs one concrete
		// cluster name.
		if !fqdn.MatchString(h) {
			fail("host %q must be a fully qualified, non-wildcard DNS name", h)
		}
	}
	if se.GetResolution() == networking.ServiceEntry_NONE {
		fail("resolution NONE gives a passthrough cluster with no endpoints for proxy_http_call")
	}
	if !slices.Contains(se.GetExportTo(), "*") {
		fail("exportTo %q: Webdis must be visible to every namespace running Sluice", se.GetExportTo())
	}
	numbers, names := map[uint32]bool{}, map[string]bool{}
	for i, p := range se.GetPorts() {
		if p.GetNumber() == 0 || p.GetNumber() > 65535 || numbers[p.GetNumber()] {
			fail("ports[%d]: number %d is out of range or repeated", i, p.GetNumber())
		}
		if p.GetName() == "" || names[p.GetName()] {
			fail("ports[%d]: name %q is empty or repeated", i, p.GetName())
		}
		numbers[p.GetNumber()], names[p.GetName()] = true, true
		if p.GetProtocol() != "HTTP" {
			fail("ports[%d]: protocol %q, want HTTP: Webdis speaks HTTP/1.1", i, p.GetProtocol())
			continue
		}
		for _, h := range se.GetHosts() {
			m.services[serviceKey{host: h, port: p.GetNumber()}] = r
		}
	}
	return errs
}

func checkDestinationRule(r *resource, m *mesh) []error {
	dr := r.spec.(*networking.DestinationRule)
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s (DestinationRule %s/%s): %s", r.where, r.namespace, r.name, fmt.Sprintf(format, args...)))
	}
	if dr.GetHost() == "" {
		fail("no host")
	}
	if len(dr.GetSubsets()) > 0 {
		fail("subsets rename the cluster to outbound|<port>|<subset>|<host>; keep Webdis subset-free")
	}
	switch mode := dr.GetTrafficPolicy().GetTls().GetMode(); mode {
	case networking.ClientTLSSettings_DISABLE, networking.ClientTLSSettings_SIMPLE:
	default:
		fail("tls mode %s: Webdis has no sidecar, so use DISABLE (or SIMPLE behind TLS)", mode)
	}
	if !slices.Contains(dr.GetExportTo(), "*") {
		fail("exportTo %q: the rule must reach the same proxies as the ServiceEntry", dr.GetExportTo())
	}
	m.rules[dr.GetHost()] = r
	return errs
}

// checkBackendCluster ties the plugin config to the mesh resources: the
// cluster Sluice calls must be the name Istio generates for a shipped
// ServiceEntry port, or every Redis call fails with "cluster not found".
func checkBackendCluster(r *resource, m *mesh) []error {
	fail := func(format string, args ...any) []error {
		return []error{fmt.Errorf("%s (WasmPlugin %s/%s): %s", r.where, r.namespace, r.name, fmt.Sprintf(format, args...))}
	}
	if r.pluginJSON == nil {
		return nil // already reported by checkWasmPlugin
	}
	var pc struct {
		Backend *struct {
			Cluster   string `json:"cluster"`
			Authority string `json:"authority"`
		} `json:"backend"`
	}
	if err := json.Unmarshal(r.pluginJSON, &pc); err != nil {
		return fail("pluginConfig: %v", err)
	}
	if pc.Backend == nil {
		return nil
	}
	key, subset, err := istioCluster(pc.Backend.Cluster)
	if err != nil {
		return fail("backend.cluster: %v", err)
	}
	if subset != "" {
		return fail("backend.cluster %q names subset %q; the shipped DestinationRule has none", pc.Backend.Cluster, subset)
	}
	if m.services[key] == nil {
		return fail("backend.cluster %q matches no HTTP port of a shipped ServiceEntry", pc.Backend.Cluster)
	}
	if m.rules[key.host] == nil {
		return fail("backend.cluster %q: no DestinationRule for host %s", pc.Backend.Cluster, key.host)
	}
	if pc.Backend.Authority != key.host {
		return fail("backend.authority %q, want the service host %q", pc.Backend.Authority, key.host)
	}
	return nil
}

// validate checks a set of documents as one deployment.
func validate(docs []doc) ([]*resource, []error) {
	var errs []error
	var all []*resource
	for _, d := range docs {
		r, derrs := decode(d)
		errs = append(errs, derrs...)
		if r != nil && len(derrs) == 0 {
			all = append(all, r)
		}
	}
	m := &mesh{services: map[serviceKey]*resource{}, rules: map[string]*resource{}}
	for _, r := range all {
		switch r.kind {
		case "ServiceEntry":
			errs = append(errs, checkServiceEntry(r, m)...)
		case "DestinationRule":
			errs = append(errs, checkDestinationRule(r, m)...)
		case "WasmPlugin":
			errs = append(errs, checkWasmPlugin(r)...)
		}
	}
	for _, r := range all {
		if r.kind == "WasmPlugin" {
			errs = append(errs, checkBackendCluster(r, m)...)
		}
	}
	return all, errs
}

func TestShippedManifests(t *testing.T) {
	docs := loadDocs(t)
	resources, errs := validate(docs)
	for _, err := range errs {
		t.Error(err)
	}
	count := map[string]int{}
	for _, r := range resources {
		count[r.kind]++
	}
	// Guards against a glob or decoder change that silently checks nothing.
	if count["WasmPlugin"] < 2 || count["ServiceEntry"] < 1 || count["DestinationRule"] < 1 {
		t.Fatalf("checked %v; want both WasmPlugins, the ServiceEntry and the DestinationRule", count)
	}
	var withBackend int
	for _, r := range resources {
		if r.kind == "WasmPlugin" && bytes.Contains(r.pluginJSON, []byte(`"backend"`)) {
			withBackend++
		}
	}
	if withBackend == 0 {
		t.Fatal("no WasmPlugin uses the Webdis backend, so the cluster-name check ran on nothing")
	}
}

// deepCopy round-trips through JSON, which is enough for YAML-sourced data.
func deepCopy(t *testing.T, docs []doc) []doc {
	t.Helper()
	out := make([]doc, len(docs))
	for i, d := range docs {
		b, err := json.Marshal(d.obj)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Fatal(err)
		}
		out[i] = doc{where: d.where, obj: obj}
	}
	return out
}

func specOf(docs []doc, kind, name string) map[string]any {
	for _, d := range docs {
		meta, _ := d.obj["metadata"].(map[string]any)
		if d.obj["kind"] == kind && meta["name"] == name {
			spec, _ := d.obj["spec"].(map[string]any)
			return spec
		}
	}
	return nil
}

// TestValidationCatchesMistakes breaks the shipped manifests one way at a
// time and expects each break to be reported, so a check that silently
// stopped working would show up here.
func TestValidationCatchesMistakes(t *testing.T) {
	base := loadDocs(t)
	for _, tc := range []struct {
		name    string
		mutate  func(docs []doc)
		wantErr string
	}{
		{
			name: "snake_case field",
			mutate: func(d []doc) {
				s := specOf(d, "WasmPlugin", "sluice")
				s["fail_strategy"] = s["failStrategy"]
				delete(s, "failStrategy")
			},
			wantErr: `write "failStrategy"`,
		},
		{
			name:    "misspelled field",
			mutate:  func(d []doc) { specOf(d, "WasmPlugin", "sluice")["pluginconfig"] = map[string]any{} },
			wantErr: "unknown field",
		},
		{
			name:    "bad enum value",
			mutate:  func(d []doc) { specOf(d, "WasmPlugin", "sluice")["phase"] = "BEFORE_AUTHN" },
			wantErr: "does not decode",
		},
		{
			name:    "wrong apiVersion",
			mutate:  func(d []doc) { d[0].obj["apiVersion"] = "extensions.istio.io/v1" },
			wantErr: "apiVersion",
		},
		{
			name: "selector and targetRefs",
			mutate: func(d []doc) {
				specOf(d, "WasmPlugin", "sluice-global")["selector"] = map[string]any{"matchLabels": map[string]any{"app": "x"}}
			},
			wantErr: "only one of targetRefs or selector",
		},
		{
			name:    "no target",
			mutate:  func(d []doc) { delete(specOf(d, "WasmPlugin", "sluice"), "selector") },
			wantErr: "namespace-wide",
		},
		{
			name:    "implicit fail strategy",
			mutate:  func(d []doc) { delete(specOf(d, "WasmPlugin", "sluice"), "failStrategy") },
			wantErr: "failStrategy must be explicit",
		},
		{
			name:    "latest tag",
			mutate:  func(d []doc) { specOf(d, "WasmPlugin", "sluice")["url"] = "oci://ghcr.io/sluice-proxy/sluice:latest" },
			wantErr: "not latest",
		},
		{
			name:    "http url",
			mutate:  func(d []doc) { specOf(d, "WasmPlugin", "sluice")["url"] = "https://example.com/sluice.wasm" },
			wantErr: "ship an oci://",
		},
		{
			name: "plugin config the filter rejects",
			mutate: func(d []doc) {
				pc := specOf(d, "WasmPlugin", "sluice")["pluginConfig"].(map[string]any)
				pc["limits"].([]any)[0].(map[string]any)["burst"] = -1
			},
			wantErr: "rejected by Sluice's parser",
		},
		{
			name: "cluster named after the host only",
			mutate: func(d []doc) {
				pc := specOf(d, "WasmPlugin", "sluice-global")["pluginConfig"].(map[string]any)
				pc["backend"].(map[string]any)["cluster"] = "webdis"
			},
			wantErr: "is not outbound|<port>|<subset>|<host>",
		},
		{
			name: "cluster with the wrong port",
			mutate: func(d []doc) {
				pc := specOf(d, "WasmPlugin", "sluice-global")["pluginConfig"].(map[string]any)
				pc["backend"].(map[string]any)["cluster"] = "outbound|6379||webdis.redis.internal"
			},
			wantErr: "matches no HTTP port",
		},
		{
			name: "DestinationRule with subsets",
			mutate: func(d []doc) {
				specOf(d, "DestinationRule", "webdis")["subsets"] = []any{map[string]any{"name": "v1", "labels": map[string]any{"v": "1"}}}
			},
			wantErr: "subsets rename the cluster",
		},
		{
			name: "ServiceEntry port as TCP",
			mutate: func(d []doc) {
				specOf(d, "ServiceEntry", "webdis")["ports"].([]any)[0].(map[string]any)["protocol"] = "TCP"
			},
			wantErr: "want HTTP",
		},
		{
			name:    "ServiceEntry not exported",
			mutate:  func(d []doc) { specOf(d, "ServiceEntry", "webdis")["exportTo"] = []any{"."} },
			wantErr: "must be visible to every namespace",
		},
		{
			name: "istio mutual TLS to Webdis",
			mutate: func(d []doc) {
				tp := specOf(d, "DestinationRule", "webdis")["trafficPolicy"].(map[string]any)
				tp["tls"] = map[string]any{"mode": "ISTIO_MUTUAL"}
			},
			wantErr: "no sidecar",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs := deepCopy(t, base)
			tc.mutate(docs)
			_, errs := validate(docs)
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.wantErr) {
					return
				}
			}
			t.Fatalf("no error mentions %q; got %v", tc.wantErr, errs)
		})
	}
}

func TestIstioCluster(t *testing.T) {
	for _, tc := range []struct {
		in         string
		want       serviceKey
		wantSubset string
		wantErr    bool
	}{
		{in: "outbound|7379||webdis.redis.internal", want: serviceKey{"webdis.redis.internal", 7379}},
		{in: "outbound|80|v1|reviews.default.svc.cluster.local", want: serviceKey{"reviews.default.svc.cluster.local", 80}, wantSubset: "v1"},
		{in: "inbound|7379||webdis.redis.internal", wantErr: true},
		{in: "outbound|0||h", wantErr: true},
		{in: "outbound|70000||h", wantErr: true},
		{in: "outbound|7379|webdis.redis.internal", wantErr: true},
		{in: "webdis", wantErr: true},
	} {
		got, subset, err := istioCluster(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && (got != tc.want || subset != tc.wantSubset)) {
			t.Errorf("istioCluster(%q) = %v, %q, %v", tc.in, got, subset, err)
		}
	}
}
