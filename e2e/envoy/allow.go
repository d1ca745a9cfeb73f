package envoy

import "google.golang.org/protobuf/reflect/protoreflect"

// supportedFields is the subset of Envoy's v3 API that sluice-envoy
// implements. A field outside it is an error: a config that loads here but
// means something else in Envoy would make every test run on it a lie.
//
// Some fields are accepted but have no effect; each is listed with why that
// is harmless.
var supportedFields = map[protoreflect.FullName][]protoreflect.Name{
	"envoy.config.bootstrap.v3.Bootstrap": {
		"static_resources", "admin", "stats_config",
		// Identification only: no behaviour of the data path depends on it.
		"node",
		// Only runtime layers that carry no overrides (see below).
		"layered_runtime",
	},
	"envoy.config.core.v3.Node":                           {"id", "cluster"},
	"envoy.config.bootstrap.v3.LayeredRuntime":            {"layers"},
	"envoy.config.bootstrap.v3.RuntimeLayer":              {"name", "admin_layer"},
	"envoy.config.bootstrap.v3.RuntimeLayer.AdminLayer":   {},
	"envoy.config.bootstrap.v3.Bootstrap.StaticResources": {"listeners", "clusters"},
	"envoy.config.bootstrap.v3.Admin":                     {"address"},
	"envoy.config.core.v3.Address":                        {"socket_address"},
	"envoy.config.core.v3.SocketAddress":                  {"address", "port_value", "protocol"},
	"envoy.config.metrics.v3.StatsConfig":                 {"stats_tags"},
	"envoy.config.metrics.v3.TagSpecifier":                {"tag_name", "regex", "fixed_value"},
	"envoy.config.listener.v3.Listener":                   {"name", "address", "filter_chains"},
	"envoy.config.listener.v3.FilterChain":                {"name", "filters"},
	"envoy.config.listener.v3.Filter":                     {"name", "typed_config"},
	"envoy.config.route.v3.RouteConfiguration":            {"name", "virtual_hosts"},
	"envoy.config.route.v3.VirtualHost":                   {"name", "domains", "routes"},
	"envoy.config.route.v3.Route":                         {"name", "match", "route"},
	"envoy.config.route.v3.RouteMatch":                    {"prefix", "path", "safe_regex", "path_separated_prefix", "case_sensitive", "headers"},
	// Route header matchers: presence and exact values only.
	"envoy.config.route.v3.HeaderMatcher":            {"name", "present_match", "string_match", "invert_match"},
	"envoy.type.matcher.v3.StringMatcher":            {"exact"},
	"envoy.type.matcher.v3.RegexMatcher":             {"regex"},
	"envoy.config.route.v3.RouteAction":              {"cluster", "cluster_header", "cluster_not_found_response_code", "timeout"},
	"envoy.config.cluster.v3.Cluster":                {"name", "type", "connect_timeout", "load_assignment", "lb_policy", "dns_lookup_family"},
	"envoy.config.endpoint.v3.ClusterLoadAssignment": {"cluster_name", "endpoints"},
	"envoy.config.endpoint.v3.LocalityLbEndpoints":   {"lb_endpoints"},
	"envoy.config.endpoint.v3.LbEndpoint":            {"endpoint"},
	"envoy.config.endpoint.v3.Endpoint":              {"address"},
	"envoy.extensions.filters.http.wasm.v3.Wasm":     {"config"},
	"envoy.extensions.wasm.v3.PluginConfig":          {"name", "root_id", "vm_config", "configuration", "fail_open", "failure_policy"},
	"envoy.extensions.wasm.v3.VmConfig":              {"vm_id", "runtime", "code", "configuration", "environment_variables"},
	"envoy.extensions.wasm.v3.EnvironmentVariables":  {"host_env_keys", "key_values"},
	"envoy.config.core.v3.AsyncDataSource":           {"local", "remote"},
	// Remote code is fetched once at start through the named cluster and
	// checked against sha256, as Envoy does; retry_policy is not
	// implemented, so it is not accepted.
	"envoy.config.core.v3.RemoteDataSource": {"http_uri", "sha256"},
	"envoy.config.core.v3.HttpUri":          {"uri", "cluster", "timeout"},
	// ECDS from the filesystem: the file is read when the config is loaded
	// and re-read when a new version is moved over it.
	"envoy.config.core.v3.ExtensionConfigSource": {"config_source", "type_urls"},
	// resource_api_version only names the (single, v3) API version.
	"envoy.config.core.v3.ConfigSource": {"path_config_source", "resource_api_version"},
	// watched_directory only changes what Envoy watches to notice a move;
	// polling the path's inode notices the same moves, symlink swaps
	// included.
	"envoy.config.core.v3.PathConfigSource": {"path", "watched_directory"},
	"envoy.config.core.v3.WatchedDirectory": {"path"},
	// The ECDS file: a DiscoveryResponse of TypedExtensionConfigs.
	"envoy.service.discovery.v3.DiscoveryResponse":   {"version_info", "resources"},
	"envoy.config.core.v3.TypedExtensionConfig":      {"name", "typed_config"},
	"envoy.config.core.v3.DataSource":                {"filename", "inline_bytes", "inline_string"},
	"envoy.extensions.filters.http.router.v3.Router": {},
	// header_to_metadata: request rules on headers only (see
	// header_to_metadata.go); stat_prefix only names stats this server
	// does not emit.
	"envoy.extensions.filters.http.header_to_metadata.v3.Config":              {"request_rules", "stat_prefix"},
	"envoy.extensions.filters.http.header_to_metadata.v3.Config.Rule":         {"header", "on_header_present", "on_header_missing", "remove"},
	"envoy.extensions.filters.http.header_to_metadata.v3.Config.KeyValuePair": {"metadata_namespace", "key", "value", "type"},
	"envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter":  {"name", "typed_config", "config_discovery"},
	"envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager": {
		"stat_prefix", "codec_type", "route_config", "http_filters",
		"use_remote_address", "generate_request_id", "merge_slashes",
		"access_log",
	},
	// The file access logger with a text format (accesslog.go); no access
	// log filters, no JSON formats.
	"envoy.config.accesslog.v3.AccessLog":                   {"name", "typed_config"},
	"envoy.extensions.access_loggers.file.v3.FileAccessLog": {"path", "log_format", "format"},
	"envoy.config.core.v3.SubstitutionFormatString":         {"text_format_source", "text_format"},
}

// supportedAnyTypes are the messages a typed_config or configuration Any may
// hold. Where each one may appear is checked when the config is built.
var supportedAnyTypes = map[protoreflect.FullName]bool{
	"envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager": true,
	"envoy.extensions.filters.http.wasm.v3.Wasm":                                        true,
	"envoy.extensions.filters.http.router.v3.Router":                                    true,
	"envoy.extensions.filters.http.header_to_metadata.v3.Config":                        true,
	"envoy.config.core.v3.TypedExtensionConfig":                                         true,
	"envoy.extensions.access_loggers.file.v3.FileAccessLog":                             true,
	"google.protobuf.StringValue":                                                       true,
	"google.protobuf.BytesValue":                                                        true,
	"google.protobuf.Struct":                                                            true,
}

var supportedFieldSet = func() map[protoreflect.FullName]map[protoreflect.Name]bool {
	m := make(map[protoreflect.FullName]map[protoreflect.Name]bool, len(supportedFields))
	for msg, fields := range supportedFields {
		set := make(map[protoreflect.Name]bool, len(fields))
		for _, f := range fields {
			set[f] = true
		}
		m[msg] = set
	}
	return m
}()

func fieldSupported(msg protoreflect.FullName, field protoreflect.Name) bool {
	switch msg {
	case "google.protobuf.Duration", "google.protobuf.StringValue", "google.protobuf.BytesValue",
		"google.protobuf.BoolValue", "google.protobuf.UInt32Value", "google.protobuf.Struct",
		"google.protobuf.Value", "google.protobuf.ListValue":
		return true
	}
	return supportedFieldSet[msg][field]
}

func anyTypeSupported(name protoreflect.FullName) bool { return supportedAnyTypes[name] }
