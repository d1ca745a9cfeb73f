// Package envoy runs a supported subset of Envoy v3 bootstrap configuration
// on the sluice wazero host: it loads and validates the YAML with Envoy's own
// protos and serves the listeners, routes, clusters, wasm filters and admin
// endpoints it describes.
//
// Where each part lives:
//
//   - server.go: the Server, its Options and lifecycle (Start binds admin,
//     boots the plugins, binds the listeners; Shutdown undoes it).
//   - listener.go: one listener's HTTP connection manager: reading a
//     request, the filter chain, handing the answer to response.go.
//   - headers.go: the request header mutations the HCM applies
//     (x-forwarded-*, x-request-id, merge_slashes), header lookups, and the
//     canonical header names net/http wants.
//   - route.go: virtual host and route selection, and the router filter.
//   - response.go: local replies and writing a response, streamed or not,
//     with its trailers.
//   - plugin.go: booting a wasm filter's VMs and the slot that holds the
//     plugin serving it now.
//   - ecds.go: ECDS files: parsing them, and watching them to swap plugins.
//   - cluster.go: the cluster manager and upstream round trips.
//   - admin.go: the admin endpoints.
//   - load.go, yaml.go, allow.go, remote.go, header_to_metadata.go:
//     loading and checking the config, and the pieces it builds.
//   - log.go: Envoy's log levels and format.
package envoy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// Version is what /server_info reports.
const Version = "sluice-envoy/0.1 (envoy v3 API subset on wazero)"

// Options configure a Server.
type Options struct {
	// Concurrency is the number of workers, each with its own wasm VM per
	// plugin (--concurrency). Zero value: the number of CPUs, Envoy's
	// default.
	Concurrency int
	// Profile is the Envoy release the wasm host imitates. Zero value:
	// envoy-1.39.
	Profile host.Profile
	// Logger receives server and plugin logs. Nil: info level to stderr.
	Logger *Logger
	// ConfigPath is only reported by /server_info.
	ConfigPath string
	// ECDSPollInterval is how often ECDS files (config_discovery with
	// path_config_source) are checked for a new version. Envoy reacts to a
	// file being moved into place (inotify); polling for a changed inode
	// sees the same event without a dependency. Zero value: one second.
	ECDSPollInterval time.Duration
	// OnConfigUpdate, if set, is called after every attempt to apply a new
	// version of an ECDS file, successful or not.
	OnConfigUpdate func(ConfigUpdate)
	// Clock and ManualTicks are host.RuntimeOptions' for tests that step
	// the plugins' time: the tests then fire ticks with Plugin.Tick on
	// Server.Plugins.
	Clock       func() time.Time
	ManualTicks bool
}

// ConfigUpdate reports one ECDS file change.
type ConfigUpdate struct {
	Listener string
	Filter   string // the http filter (and ECDS resource) name
	File     string
	// Version is the file's version_info.
	Version string
	// Err is why the new version was rejected; the previous config stays
	// in force, as in Envoy. Nil when the new config was applied or was
	// identical to the running one.
	Err error
}

// Server runs a Config: listeners, clusters, wasm plugins and admin.
type Server struct {
	cfg  *Config
	opts Options
	log  *Logger

	rt       *host.Runtime
	clusters *clusterManager
	// slots are the wasm filters in listener and filter order.
	slots []*wasmSlot

	stopWatch chan struct{}
	// watchers are the ECDS pollers; retiring are plugins replaced by an
	// ECDS update, closing once their last request is done.
	watchers sync.WaitGroup
	retiring sync.WaitGroup

	live      atomic.Bool
	started   time.Time
	quit      chan struct{}
	quitOnce  sync.Once
	closeOnce sync.Once
	// logPrefix maps a plugin name to Envoy's "name root_id vm_id" log
	// prefix.
	logPrefix sync.Map

	// accessLogs are the files the listeners' access logs write.
	accessLogs accessLogFiles

	mu        sync.Mutex
	servers   []*http.Server
	listeners map[string]net.Addr
	admin     net.Addr
	serveErrs chan error
}

// NewServer prepares a server; nothing is bound or started until Start.
func NewServer(cfg *Config, opts Options) *Server {
	if opts.Concurrency <= 0 {
		opts.Concurrency = runtime.NumCPU()
	}
	if opts.Logger == nil {
		opts.Logger = NewLogger(nil, LevelInfo)
	}
	if opts.ECDSPollInterval <= 0 {
		opts.ECDSPollInterval = time.Second
	}
	return &Server{
		cfg:       cfg,
		opts:      opts,
		log:       opts.Logger,
		quit:      make(chan struct{}),
		stopWatch: make(chan struct{}),
		listeners: map[string]net.Addr{},
		serveErrs: make(chan error, len(cfg.Listeners)+1),
	}
}

// Start binds the admin listener, boots every wasm plugin on every worker,
// then binds the listeners; /ready reports LIVE only after all of that, in
// the order Envoy follows.
func (s *Server) Start(ctx context.Context) error {
	s.started = time.Now()
	s.log.Logf(LevelInfo, "main", "initializing epoch 0 (base id=0, hot restart version=disabled)")
	s.log.Logf(LevelInfo, "main", "statically linked extensions: %s, %s, %s", HCMFilterName, WasmFilterName, RouterFilterName)
	if s.cfg.Admin != nil {
		addr, err := s.serve("admin", s.cfg.Admin.Address, s.adminHandler(), nil)
		if err != nil {
			return err
		}
		s.admin = addr
		s.log.Logf(LevelInfo, "main", "admin address: %s", addr)
	}
	s.clusters = newClusterManager(s.cfg.Clusters)
	for _, c := range s.cfg.Clusters {
		s.log.Logf(LevelInfo, "upstream", "cm init: adding cluster %s (%s, %d endpoints)", c.Name, c.Type, len(c.Endpoints))
	}
	s.rt = host.NewRuntime(host.RuntimeOptions{
		Profile:     s.opts.Profile,
		Logger:      s.pluginLog,
		LogLevel:    s.log.hostLevel(),
		Clock:       s.opts.Clock,
		ManualTicks: s.opts.ManualTicks,
	})

	var workerSeq atomic.Uint64
	for _, lc := range s.cfg.Listeners {
		ls, err := s.newListener(ctx, lc)
		if err != nil {
			s.closeAll(ctx)
			return err
		}
		connCtx := func(ctx context.Context, _ net.Conn) context.Context {
			// Envoy balances connections over workers and keeps each on its
			// worker for life; round robin gives the same spread.
			w := int((workerSeq.Add(1) - 1) % uint64(s.opts.Concurrency))
			return context.WithValue(ctx, workerKey{}, w)
		}
		addr, err := s.serve(lc.Name, lc.Address, ls, connCtx)
		if err != nil {
			s.closeAll(ctx)
			return err
		}
		s.mu.Lock()
		s.listeners[lc.Name] = addr
		s.mu.Unlock()
		s.log.Logf(LevelInfo, "config", "listener '%s' bound to %s (%d workers)", lc.Name, addr, s.opts.Concurrency)
	}
	for _, slot := range s.slots {
		if slot.file != "" {
			s.watchers.Add(1)
			go s.watchECDS(slot)
		}
	}
	s.live.Store(true)
	s.log.Logf(LevelInfo, "main", "all dependencies initialized. starting workers")
	return nil
}

func (s *Server) serve(name, address string, h http.Handler, connCtx func(context.Context, net.Conn) context.Context) (net.Addr, error) {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("listener '%s': cannot bind '%s': %w", name, address, err)
	}
	srv := &http.Server{
		Handler:           h,
		ConnContext:       connCtx,
		ReadHeaderTimeout: time.Minute,
		// Envoy's default idle timeout for downstream connections.
		IdleTimeout: time.Hour,
	}
	s.mu.Lock()
	s.servers = append(s.servers, srv)
	s.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.serveErrs <- fmt.Errorf("listener '%s': %w", name, err)
		}
	}()
	return ln.Addr(), nil
}

// ListenerAddr is the bound address of the named listener (useful with
// port 0), or "" if there is none.
func (s *Server) ListenerAddr(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.listeners[name]; a != nil {
		return a.String()
	}
	return ""
}

// AdminAddr is the bound admin address, or "" without an admin block.
func (s *Server) AdminAddr() string {
	if s.admin == nil {
		return ""
	}
	return s.admin.String()
}

// Runtime is the wasm host runtime (stats, shared data).
func (s *Server) Runtime() *host.Runtime { return s.rt }

// Plugins are the wasm plugins serving now, in listener and filter order.
func (s *Server) Plugins() []*host.Plugin {
	out := make([]*host.Plugin, 0, len(s.slots))
	for _, slot := range s.slots {
		slot.mu.RLock()
		if slot.cur.p != nil {
			out = append(out, slot.cur.p)
		}
		slot.mu.RUnlock()
	}
	return out
}

// Quit is closed when the admin /quitquitquit endpoint is hit.
func (s *Server) Quit() <-chan struct{} { return s.quit }

// Errors reports listeners that stopped serving on their own.
func (s *Server) Errors() <-chan error { return s.serveErrs }

// Shutdown stops accepting connections, lets in-flight requests finish
// until ctx ends, then stops the plugins.
func (s *Server) Shutdown(ctx context.Context) error {
	s.live.Store(false)
	s.log.Logf(LevelInfo, "main", "shutting down server")
	return s.closeAll(ctx)
}

func (s *Server) closeAll(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() { err = s.doClose(ctx) })
	return err
}

func (s *Server) doClose(ctx context.Context) error {
	s.mu.Lock()
	servers := s.servers
	s.servers = nil
	s.mu.Unlock()
	var errs []error
	for _, srv := range servers {
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, err)
			srv.Close()
		}
	}
	close(s.stopWatch)
	s.watchers.Wait()
	s.retiring.Wait()
	defer s.accessLogs.close()
	for _, p := range s.Plugins() {
		if err := p.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.rt != nil {
		if err := s.rt.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.clusters != nil {
		s.clusters.close()
	}
	s.log.Logf(LevelInfo, "main", "exiting")
	return errors.Join(errs...)
}
