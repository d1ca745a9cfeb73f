package envoy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// WasmTypeURL is the type URL of the wasm HTTP filter's config, the only
// one an ECDS-configured filter may carry here.
const WasmTypeURL = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"

// ExtensionConfig is one resource of an ECDS file: a TypedExtensionConfig
// holding a wasm HTTP filter config.
type ExtensionConfig struct {
	Name string
	Wasm *WasmFilter
}

// LoadExtensionConfigFile reads an ECDS file (a DiscoveryResponse of
// TypedExtensionConfig resources, as path_config_source expects) on its
// own, outside any bootstrap. Remote code in it is checked for shape only,
// since there are no clusters to resolve it against.
func LoadExtensionConfigFile(path string) ([]*ExtensionConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("envoy config: %w", err)
	}
	out, err := ParseExtensionConfigs(data, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// ParseExtensionConfigs validates an ECDS DiscoveryResponse with Envoy's
// protos (every Any unpacked) and builds each resource's wasm filter.
// clusters resolves remote code; nil skips that check.
func ParseExtensionConfigs(data []byte, clusters map[string]*Cluster) ([]*ExtensionConfig, error) {
	_, out, err := parseDiscoveryResponse(data, clusters)
	return out, err
}

func parseDiscoveryResponse(data []byte, clusters map[string]*Cluster) (version string, _ []*ExtensionConfig, _ error) {
	root, err := parseYAML(data)
	if err != nil {
		return "", nil, err
	}
	resp := &discoveryv3.DiscoveryResponse{}
	if err := checkYAML(root, resp.ProtoReflect().Descriptor(), ""); err != nil {
		return "", nil, err
	}
	js, err := yamlToJSON(root)
	if err != nil {
		return "", nil, err
	}
	if err := (protojson.UnmarshalOptions{Resolver: protoregistry.GlobalTypes}).Unmarshal(js, resp); err != nil {
		return "", nil, fmt.Errorf("envoy config: %w", err)
	}
	if err := resp.ValidateAll(); err != nil {
		return "", nil, fmt.Errorf("envoy config: invalid DiscoveryResponse: %w", err)
	}
	if err := validateAnys(resp.ProtoReflect(), ""); err != nil {
		return "", nil, err
	}
	if len(resp.GetResources()) == 0 {
		return "", nil, &fieldError{Path: "resources", Msg: "no resources: an ECDS file holds one TypedExtensionConfig"}
	}
	var out []*ExtensionConfig
	for i, a := range resp.GetResources() {
		rpath := fmt.Sprintf("resources[%d]", i)
		tec := &corev3.TypedExtensionConfig{}
		if !a.MessageIs(tec) {
			return "", nil, &fieldError{Path: rpath, Msg: fmt.Sprintf("resource type %s is not supported (ECDS resources are %s)", a.GetTypeUrl(), "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig")}
		}
		if err := a.UnmarshalTo(tec); err != nil {
			return "", nil, &fieldError{Path: rpath, Msg: err.Error()}
		}
		tc := tec.GetTypedConfig()
		w := &wasmfilterv3.Wasm{}
		if !tc.MessageIs(w) {
			return "", nil, &fieldError{Path: rpath + ".typed_config", Msg: fmt.Sprintf("filter config has type URL %s but expect %s", tc.GetTypeUrl(), WasmTypeURL)}
		}
		if err := tc.UnmarshalTo(w); err != nil {
			return "", nil, &fieldError{Path: rpath + ".typed_config", Msg: err.Error()}
		}
		wf, err := buildWasm(w.GetConfig(), rpath+".typed_config.config", clusters)
		if err != nil {
			return "", nil, err
		}
		out = append(out, &ExtensionConfig{Name: tec.GetName(), Wasm: wf})
	}
	return resp.GetVersionInfo(), out, nil
}

// ExtensionConfigPluginConfigurations returns the plugin configuration of
// every resource in an ECDS file, for the filter's own parser.
func ExtensionConfigPluginConfigurations(data []byte) ([]PluginConfigRef, error) {
	ecs, err := ParseExtensionConfigs(data, nil)
	if err != nil {
		return nil, err
	}
	refs := make([]PluginConfigRef, 0, len(ecs))
	for i, ec := range ecs {
		refs = append(refs, PluginConfigRef{
			Path:          fmt.Sprintf("resources[%d].typed_config.config", i),
			FilterName:    ec.Name,
			PluginName:    ec.Wasm.Name,
			RootID:        ec.Wasm.RootID,
			VMID:          ec.Wasm.VMID,
			Configuration: string(ec.Wasm.Configuration),
		})
	}
	return refs, nil
}

// loadDiscoveredWasm reads the ECDS file of an http filter's
// config_discovery at load time, applying the checks Envoy applies to an
// ECDS update. Envoy would start without the filter's config and answer
// 500 until a good file arrives; refusing to start says the same thing
// sooner and louder.
func loadDiscoveredWasm(filterName string, cd *corev3.ExtensionConfigSource, path string, clusters map[string]*Cluster) (*WasmFilter, string, os.FileInfo, error) {
	wasmAllowed := false
	for i, u := range cd.GetTypeUrls() {
		if u != WasmTypeURL {
			return nil, "", nil, &fieldError{Path: fmt.Sprintf("%s.type_urls[%d]", path, i), Msg: fmt.Sprintf("type URL %s is not supported for discovered filters (only %s)", u, WasmTypeURL)}
		}
		wasmAllowed = true
	}
	if !wasmAllowed {
		return nil, "", nil, &fieldError{Path: path + ".type_urls", Msg: "at least one type URL is required"}
	}
	pcs := cd.GetConfigSource().GetPathConfigSource()
	if pcs == nil {
		return nil, "", nil, &fieldError{Path: path + ".config_source", Msg: "only path_config_source (ECDS from a file) is supported"}
	}
	switch v := cd.GetConfigSource().GetResourceApiVersion(); v {
	case corev3.ApiVersion_AUTO, corev3.ApiVersion_V3:
	default:
		return nil, "", nil, &fieldError{Path: path + ".config_source.resource_api_version", Msg: fmt.Sprintf("%s is not supported (V3 is)", v)}
	}
	file, err := filepath.Abs(pcs.GetPath())
	if err != nil {
		return nil, "", nil, &fieldError{Path: path + ".config_source.path_config_source.path", Msg: err.Error()}
	}
	// Stat before reading: if the file is replaced in between, the next
	// poll sees a new inode and re-reads, rather than missing the update.
	stat, err := os.Stat(file)
	var data []byte
	if err == nil {
		data, err = readECDSFile(file, stat)
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, "", nil, &fieldError{Path: path + ".config_source.path_config_source.path", Msg: fmt.Sprintf("paths must refer to an existing path in the system: '%s' does not exist", pcs.GetPath())}
		}
		return nil, "", nil, &fieldError{Path: path + ".config_source.path_config_source.path", Msg: err.Error()}
	}
	_, wf, err := parseECDSUpdate(data, filterName, clusters)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%s: ECDS file %s: %w", path, pcs.GetPath(), err)
	}
	return wf, file, stat, nil
}

// maxECDSFile bounds an ECDS file; real ones are a few kilobytes, and a
// path pointing at a device or a huge file must not hang or exhaust the
// loader.
const maxECDSFile = 16 << 20

func readECDSFile(file string, stat os.FileInfo) ([]byte, error) {
	if !stat.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", file)
	}
	if stat.Size() > maxECDSFile {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d an ECDS file may have", file, stat.Size(), maxECDSFile)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxECDSFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxECDSFile {
		return nil, fmt.Errorf("%s grew past %d bytes while being read", file, maxECDSFile)
	}
	return data, nil
}

// parseECDSUpdate checks an ECDS file the way Envoy checks an update for
// the http filter named filterName, and returns its version and config.
func parseECDSUpdate(data []byte, filterName string, clusters map[string]*Cluster) (string, *WasmFilter, error) {
	version, ecs, err := parseDiscoveryResponse(data, clusters)
	if err != nil {
		return version, nil, err
	}
	if len(ecs) != 1 {
		return version, nil, fmt.Errorf("Unexpected number of resources in ExtensionConfigDS response: %d", len(ecs))
	}
	if ecs[0].Name != filterName {
		return version, nil, fmt.Errorf("Unexpected resource name in ExtensionConfigDS response: %s (the http filter is named %q)", ecs[0].Name, filterName)
	}
	return version, ecs[0].Wasm, nil
}

// watchECDS applies new versions of slot's ECDS file until the server
// stops. Envoy's filesystem subscription reacts to the file being moved
// into place, not to writes, so a changed inode is what counts here too.
func (s *Server) watchECDS(slot *wasmSlot) {
	defer s.watchers.Done()
	last := slot.loaded
	tick := time.NewTicker(s.opts.ECDSPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.stopWatch:
			return
		case <-tick.C:
		}
		fi, err := os.Stat(slot.file)
		if err != nil || (last != nil && os.SameFile(fi, last)) {
			continue
		}
		last = fi
		s.applyECDS(slot)
	}
}

// applyECDS loads the slot's ECDS file and, if it holds a valid config
// different from the running one, starts a plugin for it and swaps it in.
// A rejected version leaves the running config alone, as Envoy does.
func (s *Server) applyECDS(slot *wasmSlot) {
	up := ConfigUpdate{Listener: slot.listener, Filter: slot.filter, File: slot.file}
	defer func() {
		if up.Err != nil {
			s.log.Logf(LevelWarning, "config", "ECDS update of filter '%s' from %s rejected: %v", slot.filter, slot.file, up.Err)
		}
		if s.opts.OnConfigUpdate != nil {
			s.opts.OnConfigUpdate(up)
		}
	}()
	stat, err := os.Stat(slot.file)
	var data []byte
	if err == nil {
		data, err = readECDSFile(slot.file, stat)
	}
	if err != nil {
		up.Err = err
		return
	}
	clusters := make(map[string]*Cluster, len(s.cfg.Clusters))
	for _, c := range s.cfg.Clusters {
		clusters[c.Name] = c
	}
	version, ecs, err := parseECDSUpdate(data, slot.filter, clusters)
	up.Version = version
	if err != nil {
		up.Err = err
		return
	}
	slot.mu.RLock()
	same := reflect.DeepEqual(slot.wasm, ecs)
	slot.mu.RUnlock()
	if same {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := s.startPlugin(ctx, ecs)
	if err != nil {
		up.Err = err
		return
	}
	slot.mu.Lock()
	old := slot.cur
	slot.cur, slot.wasm = &pluginRef{p: p}, ecs
	slot.mu.Unlock()
	s.log.Logf(LevelInfo, "config", "ECDS: filter '%s' updated to version '%s' from %s", slot.filter, version, slot.file)
	s.retiring.Add(1)
	go func() {
		defer s.retiring.Done()
		old.inflight.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := old.p.Close(ctx); err != nil {
			s.log.Logf(LevelWarning, "wasm", "closing replaced plugin '%s': %v", slot.filter, err)
		}
	}()
}
