package envoy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/config/metrics/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	h2mv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_to_metadata/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Envoy's extension names for the filters we implement. The name field is
// free-form in v3 (the @type selects the factory), but these are what Envoy
// configs conventionally use and what Envoy logs.
const (
	HCMFilterName    = "envoy.filters.network.http_connection_manager"
	WasmFilterName   = "envoy.filters.http.wasm"
	RouterFilterName = "envoy.filters.http.router"
)

// Envoy defaults that apply when the field is unset.
const (
	DefaultRouteTimeout   = 15 * time.Second
	DefaultConnectTimeout = 5 * time.Second
)

// Config is a loaded and validated bootstrap, reduced to what the server
// needs.
type Config struct {
	// Bootstrap is the parsed proto, kept for callers that need a field the
	// model below does not carry.
	Bootstrap *bootstrapv3.Bootstrap
	Listeners []*Listener
	Clusters  []*Cluster
	// Admin is nil when the bootstrap has no admin block; Envoy then serves
	// no admin interface either.
	Admin     *Admin
	StatsTags []TagSpecifier
}

// Admin is the admin listener.
type Admin struct {
	Address string // host:port; port 0 picks a free port
}

// TagSpecifier turns part of a stat name into a Prometheus label, as
// stats_config.stats_tags does in Envoy.
type TagSpecifier struct {
	Name  string
	Regex string
	// FixedValue, when Regex is empty, labels every stat with this value.
	FixedValue string
}

// Listener is one static listener running the HTTP connection manager.
type Listener struct {
	Name    string
	Address string // host:port; port 0 picks a free port
	// Path is where the listener sits in the YAML, for error messages.
	Path       string
	StatPrefix string
	// UseRemoteAddress mirrors HCM use_remote_address: when false the
	// downstream address is taken from the last x-forwarded-for entry and
	// x-forwarded-for is passed on untouched.
	UseRemoteAddress  bool
	GenerateRequestID bool
	// MergeSlashes mirrors HCM merge_slashes: runs of "/" in the path (not
	// the query) become one before routing and filters see :path.
	MergeSlashes    bool
	RouteConfigName string
	VirtualHosts    []*VirtualHost
	HTTPFilters     []*HTTPFilter
	// AccessLogs are the HCM's access_log entries (accesslog.go).
	AccessLogs []*AccessLog
}

// VirtualHost groups routes under a set of :authority patterns.
type VirtualHost struct {
	Name    string
	Domains []string
	Routes  []*Route
}

// Route is one route entry; exactly one of Prefix, Path, Regex or
// SeparatedPrefix is the matcher.
type Route struct {
	Name            string
	Prefix          string
	Path            string
	SeparatedPrefix string
	Regex           *regexp.Regexp
	CaseSensitive   bool
	// Headers are match.headers: the route matches only when every one
	// holds. Only present_match and string_match.exact are implemented.
	Headers []HeaderMatch
	// Cluster is route.cluster; "" when ClusterHeader names the cluster.
	Cluster string
	// ClusterHeader is route.cluster_header (lower case): the cluster is
	// the one the first value of this request header names, read each time
	// the route is selected, after filters changed the headers too.
	ClusterHeader string
	// NotFoundStatus is route.cluster_not_found_response_code: the router's
	// answer when the cluster to use does not exist, as when
	// cluster_header's header is missing (503 unless configured).
	NotFoundStatus int
	// Timeout is the whole-response timeout; 0 disables it, as in Envoy.
	Timeout time.Duration
}

// HeaderMatch is one of a route's match.headers.
type HeaderMatch struct {
	Name string
	// Present is present_match: the header's presence (true) or absence
	// (false) matches; unused when Exact is set.
	Present bool
	// Exact is string_match.exact, compared with the header's values
	// joined by ",", as Envoy joins them; HasExact says it is set.
	Exact    string
	HasExact bool
	Invert   bool
}

// HTTPFilter is one entry of http_filters; exactly one of Wasm,
// HeaderToMetadata and Router is set.
type HTTPFilter struct {
	Name             string
	Path             string
	Wasm             *WasmFilter
	HeaderToMetadata *HeaderToMetadata
	Router           bool
	// ConfigFile is the absolute path of the ECDS file the Wasm config came
	// from (config_discovery with path_config_source), or "" when the
	// config is inline in typed_config.
	ConfigFile string
	// configStat identifies the ECDS file version Wasm came from, so the
	// server can tell a later move over the file from this one.
	configStat os.FileInfo
}

// WasmFilter is an envoy.filters.http.wasm entry.
type WasmFilter struct {
	Name    string
	RootID  string
	VMID    string
	Runtime string
	// CodeFile is the absolute path of vm_config.code.local.filename, or
	// empty when the code is inline (then Code holds it) or remote. The file
	// is read when the server starts, so validation does not need the build
	// output.
	CodeFile string
	Code     []byte
	// Remote is vm_config.code.remote, or nil for local code. It is fetched
	// when the server starts.
	Remote          *RemoteCode
	Configuration   []byte
	VMConfiguration []byte
	Environment     map[string]string
	FailOpen        bool
	// FailurePolicy is the enum name (FAIL_CLOSED, FAIL_OPEN, FAIL_RELOAD),
	// or "" when unspecified.
	FailurePolicy string
}

// LoadCode returns the module bytes, reading CodeFile if the code is not
// inline, or fetching and verifying remote code through its cluster.
func (w *WasmFilter) LoadCode() ([]byte, error) {
	return w.LoadCodeContext(context.Background())
}

// LoadCodeContext is LoadCode with a context bounding a remote fetch.
func (w *WasmFilter) LoadCodeContext(ctx context.Context) ([]byte, error) {
	if w.Remote != nil {
		if w.Remote.cluster == nil {
			return nil, fmt.Errorf("wasm filter %q: vm_config.code.remote: cluster %q is not known here", w.Name, w.Remote.Cluster)
		}
		cm := newClusterManager([]*Cluster{w.Remote.cluster})
		defer cm.close()
		return w.Remote.fetch(ctx, cm, w.Name)
	}
	if w.CodeFile == "" {
		return w.Code, nil
	}
	b, err := os.ReadFile(w.CodeFile)
	if err != nil {
		return nil, fmt.Errorf("wasm filter %q: reading vm_config.code.local.filename: %w", w.Name, err)
	}
	return b, nil
}

// Cluster is a static upstream cluster.
type Cluster struct {
	Name           string
	Type           string // STATIC, STRICT_DNS or LOGICAL_DNS
	ConnectTimeout time.Duration
	// Network is the dial network chosen from dns_lookup_family.
	Network   string
	Endpoints []string // host:port
}

// PluginConfigRef is one wasm plugin configuration found in a config.
type PluginConfigRef struct {
	// Path is the YAML path of the http filter entry.
	Path          string
	Listener      string
	FilterName    string
	PluginName    string
	RootID        string
	VMID          string
	Configuration string
}

// LoadFile reads and validates a bootstrap file.
func LoadFile(path string) (*Config, error) {
	bs, err := readBootstrap(path)
	if err != nil {
		return nil, err
	}
	cfg, err := FromBootstrap(bs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// readBootstrap reads and parses the bootstrap file at path.
func readBootstrap(path string) (*bootstrapv3.Bootstrap, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("envoy config: %w", err)
	}
	bs, err := ParseBootstrap(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return bs, nil
}

// Load parses and validates bootstrap YAML (JSON is YAML too).
func Load(data []byte) (*Config, error) {
	bs, err := ParseBootstrap(data)
	if err != nil {
		return nil, err
	}
	return FromBootstrap(bs)
}

// LoadMerged loads configPath and/or configYAML the way Envoy combines
// --config-path and --config-yaml: the YAML is merged over the file with
// proto merge semantics (repeated fields append).
func LoadMerged(configPath, configYAML string) (*Config, error) {
	if configPath == "" && configYAML == "" {
		return nil, errors.New("envoy config: neither a config path nor a config YAML was given")
	}
	bs := &bootstrapv3.Bootstrap{}
	if configPath != "" {
		b, err := readBootstrap(configPath)
		if err != nil {
			return nil, err
		}
		bs = b
	}
	if configYAML != "" {
		b, err := ParseBootstrap([]byte(configYAML))
		if err != nil {
			return nil, fmt.Errorf("--config-yaml: %w", err)
		}
		proto.Merge(bs, b)
	}
	if err := validateProto(bs); err != nil {
		return nil, err
	}
	return FromBootstrap(bs)
}

// ValidateYAML reports whether data is a bootstrap sluice-envoy would run.
// It does not read wasm code files.
func ValidateYAML(data []byte) error {
	_, err := Load(data)
	return err
}

// PluginConfigurations returns every wasm plugin configuration string in the
// config, in listener and filter order, so tests can feed them to the
// filter's own parser.
func PluginConfigurations(data []byte) ([]PluginConfigRef, error) {
	cfg, err := Load(data)
	if err != nil {
		return nil, err
	}
	var refs []PluginConfigRef
	for _, l := range cfg.Listeners {
		for _, f := range l.HTTPFilters {
			if f.Wasm == nil {
				continue
			}
			path := f.Path
			if f.ConfigFile != "" {
				path += ".config_discovery (" + f.ConfigFile + ")"
			}
			refs = append(refs, PluginConfigRef{
				Path:          path,
				Listener:      l.Name,
				FilterName:    f.Name,
				PluginName:    f.Wasm.Name,
				RootID:        f.Wasm.RootID,
				VMID:          f.Wasm.VMID,
				Configuration: string(f.Wasm.Configuration),
			})
		}
	}
	return refs, nil
}

// ParseBootstrap turns YAML into a validated Bootstrap proto: unknown and
// unsupported fields, PGV rules on the bootstrap, and PGV rules inside every
// Any are all checked.
func ParseBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	root, err := parseYAML(data)
	if err != nil {
		return nil, err
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := checkYAML(root, bs.ProtoReflect().Descriptor(), ""); err != nil {
		return nil, err
	}
	js, err := yamlToJSON(root)
	if err != nil {
		return nil, err
	}
	if err := (protojson.UnmarshalOptions{Resolver: protoregistry.GlobalTypes}).Unmarshal(js, bs); err != nil {
		return nil, fmt.Errorf("envoy config: %w", err)
	}
	if err := validateProto(bs); err != nil {
		return nil, err
	}
	return bs, nil
}

type validatorAll interface{ ValidateAll() error }

// validateProto runs the PGV rules on the bootstrap and then on the content
// of every Any below it, recursively, since generated validators stop at
// Any fields.
func validateProto(bs *bootstrapv3.Bootstrap) error {
	if err := bs.ValidateAll(); err != nil {
		return fmt.Errorf("envoy config: invalid bootstrap: %w", err)
	}
	return validateAnys(bs.ProtoReflect(), "")
}

func validateAnys(m protoreflect.Message, path string) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		fpath := joinPath(path, string(fd.Name()))
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				return true
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				err = validateValue(mv.Message(), joinPath(fpath, k.String()))
				return err == nil
			})
		case fd.IsList():
			if fd.Kind() != protoreflect.MessageKind {
				return true
			}
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = validateValue(l.Get(i).Message(), fmt.Sprintf("%s[%d]", fpath, i))
			}
		case fd.Kind() == protoreflect.MessageKind:
			err = validateValue(v.Message(), fpath)
		}
		return err == nil
	})
	return err
}

func validateValue(m protoreflect.Message, path string) error {
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		return validateAnys(m, path)
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		return &fieldError{Path: path, Msg: fmt.Sprintf("cannot unpack %s: %v", a.GetTypeUrl(), err)}
	}
	if !anyTypeSupported(inner.ProtoReflect().Descriptor().FullName()) {
		return &fieldError{Path: path, Msg: fmt.Sprintf("type %q is not supported by sluice-envoy", a.GetTypeUrl())}
	}
	if v, ok := inner.(validatorAll); ok {
		if err := v.ValidateAll(); err != nil {
			return &fieldError{Path: path, Msg: fmt.Sprintf("invalid %s: %v", inner.ProtoReflect().Descriptor().FullName(), err)}
		}
	}
	return validateAnys(inner.ProtoReflect(), path)
}

// FromBootstrap checks the semantic rules Envoy applies at startup and
// builds the model the server runs.
func FromBootstrap(bs *bootstrapv3.Bootstrap) (*Config, error) {
	cfg := &Config{Bootstrap: bs}
	for i, layer := range bs.GetLayeredRuntime().GetLayers() {
		if layer.GetAdminLayer() == nil {
			return nil, &fieldError{Path: fmt.Sprintf("layered_runtime.layers[%d]", i), Msg: "only admin_layer runtime layers are supported (runtime overrides are not implemented)"}
		}
	}
	if a := bs.GetAdmin(); a != nil {
		addr, err := socketAddress(a.GetAddress(), "admin.address", true)
		if err != nil {
			return nil, err
		}
		cfg.Admin = &Admin{Address: addr}
	}
	for i, t := range bs.GetStatsConfig().GetStatsTags() {
		path := fmt.Sprintf("stats_config.stats_tags[%d]", i)
		switch v := t.GetTagValue().(type) {
		case *metricsv3.TagSpecifier_Regex:
			if _, err := regexp.Compile(v.Regex); err != nil {
				return nil, &fieldError{Path: path + ".regex", Msg: err.Error()}
			}
		case *metricsv3.TagSpecifier_FixedValue:
		default:
			// Envoy would look tag_name up among its default tags, none of
			// which apply to wasm metrics.
			return nil, &fieldError{Path: path, Msg: "regex or fixed_value is required (default tag names are not supported)"}
		}
		cfg.StatsTags = append(cfg.StatsTags, TagSpecifier{Name: t.GetTagName(), Regex: t.GetRegex(), FixedValue: t.GetFixedValue()})
	}

	clusters := map[string]*Cluster{}
	for i, c := range bs.GetStaticResources().GetClusters() {
		cl, err := buildCluster(c, fmt.Sprintf("static_resources.clusters[%d]", i))
		if err != nil {
			return nil, err
		}
		if clusters[cl.Name] != nil {
			return nil, &fieldError{Path: fmt.Sprintf("static_resources.clusters[%d].name", i), Msg: fmt.Sprintf("cluster manager: duplicate cluster '%s' found", cl.Name)}
		}
		clusters[cl.Name] = cl
		cfg.Clusters = append(cfg.Clusters, cl)
	}

	names := map[string]bool{}
	for i, l := range bs.GetStaticResources().GetListeners() {
		path := fmt.Sprintf("static_resources.listeners[%d]", i)
		lis, err := buildListener(l.GetName(), l.GetAddress(), l.GetFilterChains(), path, clusters)
		if err != nil {
			return nil, err
		}
		if lis.Name == "" {
			// Envoy names unnamed listeners with a UUID; the index is
			// enough to tell ours apart.
			lis.Name = fmt.Sprintf("listener_%d", i)
		}
		if names[lis.Name] {
			return nil, &fieldError{Path: path + ".name", Msg: fmt.Sprintf("error adding listener named '%s': duplicate listener", lis.Name)}
		}
		names[lis.Name] = true
		cfg.Listeners = append(cfg.Listeners, lis)
	}
	return cfg, nil
}

func socketAddress(a *corev3.Address, path string, listener bool) (string, error) {
	sa := a.GetSocketAddress()
	if sa == nil {
		return "", &fieldError{Path: path, Msg: "a socket_address is required"}
	}
	if sa.GetProtocol() != corev3.SocketAddress_TCP {
		return "", &fieldError{Path: path + ".socket_address.protocol", Msg: "only TCP is supported"}
	}
	if !listener && sa.GetPortValue() == 0 {
		return "", &fieldError{Path: path + ".socket_address.port_value", Msg: "an upstream port is required"}
	}
	if listener {
		if _, err := netip.ParseAddr(sa.GetAddress()); err != nil {
			return "", &fieldError{Path: path + ".socket_address.address", Msg: fmt.Sprintf("malformed IP address: %s", sa.GetAddress())}
		}
	}
	return net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue())), nil
}

func buildCluster(c *clusterv3.Cluster, path string) (*Cluster, error) {
	cl := &Cluster{Name: c.GetName(), ConnectTimeout: DefaultConnectTimeout, Network: "tcp"}
	switch c.GetType() {
	case clusterv3.Cluster_STATIC, clusterv3.Cluster_STRICT_DNS, clusterv3.Cluster_LOGICAL_DNS:
		cl.Type = c.GetType().String()
	default:
		return nil, &fieldError{Path: path + ".type", Msg: fmt.Sprintf("cluster type %s is not supported (STATIC, STRICT_DNS, LOGICAL_DNS are)", c.GetType())}
	}
	if c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
		return nil, &fieldError{Path: path + ".lb_policy", Msg: fmt.Sprintf("lb_policy %s is not supported (ROUND_ROBIN is)", c.GetLbPolicy())}
	}
	switch c.GetDnsLookupFamily() {
	case clusterv3.Cluster_V4_ONLY:
		cl.Network = "tcp4"
	case clusterv3.Cluster_V6_ONLY:
		cl.Network = "tcp6"
	}
	cl.ConnectTimeout = durationOr(c.GetConnectTimeout(), DefaultConnectTimeout)
	la := c.GetLoadAssignment()
	if la == nil {
		return nil, &fieldError{Path: path, Msg: "load_assignment is required"}
	}
	for i, loc := range la.GetEndpoints() {
		for j, lbe := range loc.GetLbEndpoints() {
			epath := fmt.Sprintf("%s.load_assignment.endpoints[%d].lb_endpoints[%d].endpoint.address", path, i, j)
			addr, err := socketAddress(lbe.GetEndpoint().GetAddress(), epath, false)
			if err != nil {
				return nil, err
			}
			host := lbe.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
			if cl.Type == "STATIC" {
				if _, err := netip.ParseAddr(host); err != nil {
					return nil, &fieldError{Path: epath + ".socket_address.address", Msg: fmt.Sprintf("malformed IP address: %s (STATIC clusters need IP addresses)", host)}
				}
			}
			cl.Endpoints = append(cl.Endpoints, addr)
		}
	}
	if cl.Type == "LOGICAL_DNS" && len(cl.Endpoints) != 1 {
		return nil, &fieldError{Path: path + ".load_assignment", Msg: "LOGICAL_DNS clusters must have a single locality_lb_endpoint and a single lb_endpoint"}
	}
	return cl, nil
}

func buildListener(name string, addr *corev3.Address, chains []*listenerv3.FilterChain, path string, clusters map[string]*Cluster) (*Listener, error) {
	lis := &Listener{Name: name, Path: path}
	a, err := socketAddress(addr, path+".address", true)
	if err != nil {
		return nil, err
	}
	lis.Address = a
	if len(chains) != 1 {
		return nil, &fieldError{Path: path + ".filter_chains", Msg: "exactly one filter chain is supported"}
	}
	fpath := path + ".filter_chains[0].filters"
	filters := chains[0].GetFilters()
	if len(filters) != 1 {
		return nil, &fieldError{Path: fpath, Msg: "exactly one network filter, the HTTP connection manager, is supported"}
	}
	fpath += "[0].typed_config"
	if filters[0].GetTypedConfig() == nil {
		return nil, &fieldError{Path: fpath, Msg: "typed_config is required"}
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if !filters[0].GetTypedConfig().MessageIs(hcm) {
		return nil, &fieldError{Path: fpath, Msg: fmt.Sprintf("network filter type %s is not supported (only %s)", filters[0].GetTypedConfig().GetTypeUrl(), HCMFilterName)}
	}
	if err := filters[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		return nil, &fieldError{Path: fpath, Msg: err.Error()}
	}
	switch hcm.GetCodecType() {
	case hcmv3.HttpConnectionManager_AUTO, hcmv3.HttpConnectionManager_HTTP1:
	default:
		return nil, &fieldError{Path: fpath + ".codec_type", Msg: fmt.Sprintf("codec_type %s is not supported (AUTO and HTTP1 are; both serve HTTP/1.1)", hcm.GetCodecType())}
	}
	lis.StatPrefix = hcm.GetStatPrefix()
	lis.UseRemoteAddress = hcm.GetUseRemoteAddress().GetValue()
	lis.GenerateRequestID = boolOr(hcm.GetGenerateRequestId(), true)
	lis.MergeSlashes = hcm.GetMergeSlashes()
	rc := hcm.GetRouteConfig()
	if rc == nil {
		return nil, &fieldError{Path: fpath + ".route_config", Msg: "an inline route_config is required"}
	}
	lis.RouteConfigName = rc.GetName()
	if lis.VirtualHosts, err = buildVirtualHosts(rc, fpath+".route_config", clusters); err != nil {
		return nil, err
	}
	if lis.HTTPFilters, err = buildHTTPFilters(hcm.GetHttpFilters(), fpath+".http_filters", clusters); err != nil {
		return nil, err
	}
	if lis.AccessLogs, err = buildAccessLogs(hcm.GetAccessLog(), fpath+".access_log"); err != nil {
		return nil, err
	}
	return lis, nil
}

func boolOr(v *wrapperspb.BoolValue, def bool) bool {
	if v == nil {
		return def
	}
	return v.GetValue()
}

func buildVirtualHosts(rc *routev3.RouteConfiguration, path string, clusters map[string]*Cluster) ([]*VirtualHost, error) {
	var vhosts []*VirtualHost
	seen := map[string]bool{}
	for i, vh := range rc.GetVirtualHosts() {
		vpath := fmt.Sprintf("%s.virtual_hosts[%d]", path, i)
		v := &VirtualHost{Name: vh.GetName()}
		for j, d := range vh.GetDomains() {
			d = strings.ToLower(d)
			if seen[d] {
				return nil, &fieldError{Path: fmt.Sprintf("%s.domains[%d]", vpath, j), Msg: fmt.Sprintf("Only unique values for domains are permitted. Duplicate entry of domain %s in route %s", d, rc.GetName())}
			}
			if d != "*" && strings.Count(d, "*") > 0 && !(strings.Count(d, "*") == 1 && (strings.HasPrefix(d, "*") || strings.HasSuffix(d, "*"))) {
				return nil, &fieldError{Path: fmt.Sprintf("%s.domains[%d]", vpath, j), Msg: fmt.Sprintf("invalid domain %q: a wildcard may only be the first or last character", d)}
			}
			seen[d] = true
			v.Domains = append(v.Domains, d)
		}
		for j, r := range vh.GetRoutes() {
			rt, err := buildRoute(r, fmt.Sprintf("%s.routes[%d]", vpath, j), clusters)
			if err != nil {
				return nil, err
			}
			v.Routes = append(v.Routes, rt)
		}
		vhosts = append(vhosts, v)
	}
	return vhosts, nil
}

func buildRoute(r *routev3.Route, path string, clusters map[string]*Cluster) (*Route, error) {
	rt := &Route{Name: r.GetName(), Timeout: DefaultRouteTimeout}
	m := r.GetMatch()
	rt.CaseSensitive = boolOr(m.GetCaseSensitive(), true)
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		rt.Prefix = p.Prefix
	case *routev3.RouteMatch_Path:
		rt.Path = p.Path
	case *routev3.RouteMatch_PathSeparatedPrefix:
		rt.SeparatedPrefix = p.PathSeparatedPrefix
	case *routev3.RouteMatch_SafeRegex:
		// RE2 is Envoy's regex engine too, and safe_regex must match the
		// whole path.
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		if err != nil {
			return nil, &fieldError{Path: path + ".match.safe_regex.regex", Msg: err.Error()}
		}
		rt.Regex = re
	default:
		return nil, &fieldError{Path: path + ".match", Msg: "one of prefix, path, path_separated_prefix or safe_regex is required"}
	}
	if !rt.CaseSensitive {
		rt.Prefix = strings.ToLower(rt.Prefix)
		rt.Path = strings.ToLower(rt.Path)
		rt.SeparatedPrefix = strings.ToLower(rt.SeparatedPrefix)
	}
	for j, h := range m.GetHeaders() {
		hm, err := buildHeaderMatch(h, fmt.Sprintf("%s.match.headers[%d]", path, j))
		if err != nil {
			return nil, err
		}
		rt.Headers = append(rt.Headers, hm)
	}
	action := r.GetRoute()
	if action == nil {
		return nil, &fieldError{Path: path, Msg: "a route action (route.cluster) is required"}
	}
	rt.Cluster = action.GetCluster()
	rt.ClusterHeader = strings.ToLower(action.GetClusterHeader())
	switch {
	case rt.ClusterHeader != "":
		// Envoy validates the name as a header name and cannot check the
		// clusters it will name.
		if !validHeaderName(rt.ClusterHeader) {
			return nil, &fieldError{Path: path + ".route.cluster_header", Msg: "not a valid header name"}
		}
	case rt.Cluster == "":
		return nil, &fieldError{Path: path + ".route.cluster", Msg: "a cluster is required"}
	case clusters[rt.Cluster] == nil:
		// validate_clusters defaults to true for inline route configs.
		return nil, &fieldError{Path: path + ".route.cluster", Msg: fmt.Sprintf("route: unknown cluster '%s'", rt.Cluster)}
	}
	switch action.GetClusterNotFoundResponseCode() {
	case routev3.RouteAction_NOT_FOUND:
		rt.NotFoundStatus = 404
	case routev3.RouteAction_INTERNAL_SERVER_ERROR:
		rt.NotFoundStatus = 500
	default:
		rt.NotFoundStatus = 503
	}
	rt.Timeout = durationOr(action.GetTimeout(), DefaultRouteTimeout)
	return rt, nil
}

// buildHeaderMatch reads one of match.headers; the allow list already
// refused every matcher but present_match and string_match.exact.
func buildHeaderMatch(h *routev3.HeaderMatcher, path string) (HeaderMatch, error) {
	hm := HeaderMatch{Name: strings.ToLower(h.GetName()), Invert: h.GetInvertMatch()}
	if !validHeaderName(hm.Name) {
		return hm, &fieldError{Path: path + ".name", Msg: "not a valid header name"}
	}
	switch spec := h.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_PresentMatch:
		hm.Present = spec.PresentMatch
	case *routev3.HeaderMatcher_StringMatch:
		e, ok := spec.StringMatch.GetMatchPattern().(*matcherv3.StringMatcher_Exact)
		if !ok {
			return hm, &fieldError{Path: path + ".string_match", Msg: "only exact is supported"}
		}
		hm.Exact, hm.HasExact = e.Exact, true
	default:
		return hm, &fieldError{Path: path, Msg: "one of present_match or string_match is required"}
	}
	return hm, nil
}

// validHeaderName reports whether s is a lower-case HTTP token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func buildHTTPFilters(list []*hcmv3.HttpFilter, path string, clusters map[string]*Cluster) ([]*HTTPFilter, error) {
	if len(list) == 0 {
		return nil, &fieldError{Path: path, Msg: "at least the router filter is required"}
	}
	var out []*HTTPFilter
	for i, f := range list {
		fpath := fmt.Sprintf("%s[%d]", path, i)
		hf := &HTTPFilter{Name: f.GetName(), Path: fpath}
		if cd := f.GetConfigDiscovery(); cd != nil {
			if err := notLast(list, i, fpath, WasmFilterName); err != nil {
				return nil, err
			}
			wf, file, stat, err := loadDiscoveredWasm(f.GetName(), cd, fpath+".config_discovery", clusters)
			if err != nil {
				return nil, err
			}
			hf.Wasm, hf.ConfigFile, hf.configStat = wf, file, stat
			out = append(out, hf)
			continue
		}
		tc := f.GetTypedConfig()
		if tc == nil {
			return nil, &fieldError{Path: fpath + ".typed_config", Msg: "typed_config or config_discovery is required"}
		}
		var err error
		switch {
		case tc.MessageIs(&routerv3.Router{}):
			hf.Router = true
			if i != len(list)-1 {
				return nil, &fieldError{Path: fpath, Msg: fmt.Sprintf("terminal filter named %s of type %s must be the last filter in a http filter chain", f.GetName(), RouterFilterName)}
			}
		case tc.MessageIs(&wasmfilterv3.Wasm{}):
			w := &wasmfilterv3.Wasm{}
			err = typedConfig(list, i, fpath, WasmFilterName, tc, w)
			if err == nil {
				hf.Wasm, err = buildWasm(w.GetConfig(), fpath+".typed_config.config", clusters)
			}
		case tc.MessageIs(&h2mv3.Config{}):
			c := &h2mv3.Config{}
			err = typedConfig(list, i, fpath, HeaderToMetadataFilterName, tc, c)
			if err == nil {
				hf.HeaderToMetadata, err = buildHeaderToMetadata(c, fpath+".typed_config")
			}
		default:
			return nil, &fieldError{Path: fpath + ".typed_config", Msg: fmt.Sprintf("http filter type %s is not supported (only %s, %s and %s)", tc.GetTypeUrl(), WasmFilterName, HeaderToMetadataFilterName, RouterFilterName)}
		}
		if err != nil {
			return nil, err
		}
		out = append(out, hf)
	}
	return out, nil
}

// notLast refuses a non-terminal filter of type typ at list[i] when it is
// the last of the chain, as Envoy does.
// typedConfig checks that the filter at list[i], of type typ, is not the
// last of its chain, and decodes its typed_config tc into m.
func typedConfig(list []*hcmv3.HttpFilter, i int, fpath, typ string, tc *anypb.Any, m proto.Message) error {
	if err := notLast(list, i, fpath, typ); err != nil {
		return err
	}
	if err := tc.UnmarshalTo(m); err != nil {
		return &fieldError{Path: fpath + ".typed_config", Msg: err.Error()}
	}
	return nil
}

func notLast(list []*hcmv3.HttpFilter, i int, fpath, typ string) error {
	if i < len(list)-1 {
		return nil
	}
	return &fieldError{Path: fpath, Msg: fmt.Sprintf("non-terminal filter named %s of type %s is the last filter in a http filter chain", list[i].GetName(), typ)}
}

// wasmRuntimes are the runtimes Envoy 1.39 can be built with. All of them
// run the same module, so the host's wazero stands in for any; the null
// runtime runs native code and cannot be emulated.
var wasmRuntimes = map[string]bool{
	"":                            true,
	"envoy.wasm.runtime.v8":       true,
	"envoy.wasm.runtime.wamr":     true,
	"envoy.wasm.runtime.wasmtime": true,
}

// buildWasm builds a wasm filter from its PluginConfig. clusters is nil
// when the config is checked on its own (an ECDS file outside a
// bootstrap); remote code then cannot be resolved to a cluster.
func buildWasm(pc *wasmv3.PluginConfig, path string, clusters map[string]*Cluster) (*WasmFilter, error) {
	if pc == nil {
		return nil, &fieldError{Path: path, Msg: "config is required"}
	}
	vm := pc.GetVmConfig()
	if vm == nil {
		return nil, &fieldError{Path: path + ".vm_config", Msg: "vm_config is required"}
	}
	wf := &WasmFilter{
		Name:          pc.GetName(),
		RootID:        pc.GetRootId(),
		VMID:          vm.GetVmId(),
		Runtime:       vm.GetRuntime(),
		FailOpen:      pc.GetFailOpen(),
		Environment:   map[string]string{},
		FailurePolicy: "",
	}
	if pc.GetFailurePolicy() != wasmv3.FailurePolicy_UNSPECIFIED {
		wf.FailurePolicy = pc.GetFailurePolicy().String()
	}
	if !wasmRuntimes[wf.Runtime] {
		return nil, &fieldError{Path: path + ".vm_config.runtime", Msg: fmt.Sprintf("runtime %q is not supported (use envoy.wasm.runtime.v8, .wamr or .wasmtime; all run on wazero here)", wf.Runtime)}
	}
	if remote := vm.GetCode().GetRemote(); remote != nil {
		rc, err := buildRemoteCode(remote, path+".vm_config.code.remote", clusters)
		if err != nil {
			return nil, err
		}
		wf.Remote = rc
	}
	local := vm.GetCode().GetLocal()
	switch s := local.GetSpecifier().(type) {
	case *corev3.DataSource_Filename:
		abs, err := filepath.Abs(s.Filename)
		if err != nil {
			return nil, &fieldError{Path: path + ".vm_config.code.local.filename", Msg: err.Error()}
		}
		wf.CodeFile = abs
	case *corev3.DataSource_InlineBytes:
		wf.Code = s.InlineBytes
	case *corev3.DataSource_InlineString:
		wf.Code = []byte(s.InlineString)
	default:
		if wf.Remote != nil {
			break
		}
		return nil, &fieldError{Path: path + ".vm_config.code", Msg: "code.local (filename, inline_bytes or inline_string) or code.remote is required"}
	}
	var err error
	if wf.Configuration, err = anyBytes(pc.GetConfiguration(), path+".configuration"); err != nil {
		return nil, err
	}
	if wf.VMConfiguration, err = anyBytes(vm.GetConfiguration(), path+".vm_config.configuration"); err != nil {
		return nil, err
	}
	env := vm.GetEnvironmentVariables()
	for _, k := range env.GetHostEnvKeys() {
		if v, ok := os.LookupEnv(k); ok {
			wf.Environment[k] = v
		}
	}
	keys := make([]string, 0, len(env.GetKeyValues()))
	for k := range env.GetKeyValues() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, hk := range env.GetHostEnvKeys() {
			if hk == k {
				return nil, &fieldError{Path: path + ".vm_config.environment_variables.key_values." + k, Msg: fmt.Sprintf("key %s is duplicated in host_env_keys and key_values", k)}
			}
		}
		wf.Environment[k] = env.GetKeyValues()[k]
	}
	return wf, nil
}

// anyBytes turns a plugin or VM configuration into the bytes the module
// sees, by Envoy's rules: StringValue and BytesValue pass their payload,
// Struct becomes JSON.
func anyBytes(a *anypb.Any, path string) ([]byte, error) {
	if a == nil {
		return nil, nil
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return nil, &fieldError{Path: path, Msg: err.Error()}
	}
	switch v := m.(type) {
	case *wrapperspb.StringValue:
		return []byte(v.GetValue()), nil
	case *wrapperspb.BytesValue:
		return v.GetValue(), nil
	case *structpb.Struct:
		b, err := protojson.Marshal(v)
		if err != nil {
			return nil, &fieldError{Path: path, Msg: err.Error()}
		}
		return b, nil
	}
	return nil, &fieldError{Path: path, Msg: fmt.Sprintf("configuration type %s is not supported (StringValue, BytesValue, Struct are)", a.GetTypeUrl())}
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.AsDuration()
}
