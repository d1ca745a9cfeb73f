package envoy

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// startPlugin gets a wasm filter's code and boots its VMs on every worker.
func (s *Server) startPlugin(ctx context.Context, w *WasmFilter) (*host.Plugin, error) {
	var code []byte
	var err error
	if r := w.Remote; r != nil {
		// Through the server's own cluster manager, so the fetch uses the
		// cluster exactly as the data path would.
		s.log.Logf(LevelInfo, "wasm", "fetching code for plugin '%s' from %s via cluster '%s'", w.Name, r.URI, r.Cluster)
		code, err = r.fetch(ctx, s.clusters, w.Name)
		if err != nil {
			// Envoy does not refuse to start over remote code it cannot
			// fetch or verify: the filter is left without a VM and every
			// request is answered per failure_policy. Do the same.
			s.log.Logf(LevelCritical, "wasm", "%v", err)
			if !w.failsOpen() {
				s.log.Logf(LevelCritical, "wasm", "Plugin configured to fail closed failed to load")
			}
			return nil, nil
		}
	} else {
		code, err = w.LoadCodeContext(ctx)
	}
	if err != nil {
		return nil, err
	}
	p, err := s.rt.NewPlugin(ctx, host.PluginConfig{
		Name:            w.Name,
		RootID:          w.RootID,
		VMID:            w.VMID,
		Code:            code,
		Configuration:   w.Configuration,
		VMConfiguration: w.VMConfiguration,
		Environment:     w.Environment,
		FailOpen:        w.FailOpen,
		FailurePolicy:   w.FailurePolicy,
		Concurrency:     s.opts.Concurrency,
		Caller:          s.clusters,
	})
	if err != nil {
		return nil, fmt.Errorf("unable to create Wasm HTTP filter %s: %w", w.Name, err)
	}
	s.logPrefix.Store(w.Name, w.Name+" "+w.RootID+" "+w.VMID)
	s.log.Logf(LevelInfo, "wasm", "plugin '%s' (root_id '%s', vm_id '%s') started on %d workers", w.Name, w.RootID, w.VMID, s.opts.Concurrency)
	return p, nil
}

// wasmSlot is one wasm filter in a listener's chain and the plugin serving
// it now, which an ECDS update replaces.
type wasmSlot struct {
	listener, filter string
	file             string      // ECDS file, or "" for an inline config
	loaded           os.FileInfo // the version of file read at load time

	mu   sync.RWMutex
	cur  *pluginRef
	wasm *WasmFilter // the config cur runs
}

// pluginRef counts the requests a plugin is serving, so a replaced plugin
// is closed only after its last one.
type pluginRef struct {
	p        *host.Plugin
	inflight sync.WaitGroup
}

// acquire takes the current plugin for one request; the caller calls
// inflight.Done. Taking the count under the read lock guarantees no
// request joins a plugin after swap has retired it.
func (ws *wasmSlot) acquire() *pluginRef {
	ws.mu.RLock()
	ref := ws.cur
	ref.inflight.Add(1)
	ws.mu.RUnlock()
	return ref
}

// pluginLog formats plugin output as Envoy does: "wasm log <name> <root_id>
// <vm_id>: <message>". Lines logged while a plugin is still starting come
// before its prefix is known and carry the name alone.
func (s *Server) pluginLog(level host.LogLevel, plugin, msg string) {
	prefix := plugin
	if p, ok := s.logPrefix.Load(plugin); ok {
		prefix = p.(string)
	}
	s.log.Logf(fromHostLevel(level), "wasm", "wasm log %s: %s", prefix, msg)
}

// noVM serves a request for a wasm filter whose module failed to load, as
// Envoy does: fail open passes it on, fail closed answers 503.
func noVM(ctx context.Context, req *host.Request, next host.Upstream, w *WasmFilter) (*host.Response, error) {
	if w.failsOpen() {
		return next(ctx, req)
	}
	return &host.Response{Status: 503, Details: "wasm_fail_stream", Local: true}, nil
}

// failsOpen reports whether the filter lets traffic through when its VM
// is unavailable: the legacy fail_open flag or failure_policy FAIL_OPEN.
func (w *WasmFilter) failsOpen() bool {
	return w.FailOpen || w.FailurePolicy == "FAIL_OPEN"
}
