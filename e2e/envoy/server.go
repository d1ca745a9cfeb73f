package envoy

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// Version is what /server_info reports.
const Version = "sluice-envoy/0.1 (envoy v3 API subset on wazero)"

// maxRequestBody caps a buffered downstream request, since the whole body is
// handed to the filters at once. Envoy's answer to an oversized body on a
// buffering filter is also 413.
const maxRequestBody = 64 << 20

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

type workerKey struct{}

// listener is one HCM: request header mutation, the wasm filters, and the
// router.
type listener struct {
	s     *Server
	cfg   *Listener
	chain host.Upstream // first filter, ending in the router
	wasm  bool
}

func (s *Server) newListener(ctx context.Context, lc *Listener) (*listener, error) {
	l := &listener{s: s, cfg: lc}
	var slots []*wasmSlot
	// stages are the filters before the router, in chain order: a wasm
	// slot or a header_to_metadata filter.
	type stage struct {
		slot *wasmSlot
		h2m  *HeaderToMetadata
	}
	var stages []stage
	for _, f := range lc.HTTPFilters {
		if f.HeaderToMetadata != nil {
			stages = append(stages, stage{h2m: f.HeaderToMetadata})
			continue
		}
		if f.Wasm == nil {
			continue
		}
		p, err := s.startPlugin(ctx, f.Wasm)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		slot := &wasmSlot{listener: lc.Name, filter: f.Name, file: f.ConfigFile, loaded: f.configStat, wasm: f.Wasm, cur: &pluginRef{p: p}}
		s.slots = append(s.slots, slot)
		slots = append(slots, slot)
		stages = append(stages, stage{slot: slot})
	}
	l.wasm = len(slots) > 0
	next := host.Upstream(l.router)
	for i := len(stages) - 1; i >= 0; i-- {
		if h := stages[i].h2m; h != nil {
			next = h.filter(next)
			continue
		}
		slot, n := stages[i].slot, next
		next = func(ctx context.Context, req *host.Request) (*host.Response, error) {
			ref := slot.acquire()
			defer ref.inflight.Done()
			if ref.p == nil {
				return noVM(ctx, req, n, slot.wasm)
			}
			return ref.p.Serve(ctx, req, n)
		}
	}
	l.chain = next
	return l, nil
}

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

func (l *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	worker, _ := ctx.Value(workerKey{}).(int)
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err != nil {
		// The client went away mid-body; there is nobody to answer.
		return
	}
	if len(body) > maxRequestBody {
		writeResponse(w, r, localReply(413, "payload_too_large", []byte("Payload Too Large")))
		return
	}
	req := l.request(r, worker, body)
	var resp *host.Response
	if l.wasm {
		resp, err = l.chain(ctx, req)
	} else {
		resp, err = l.router(ctx, req)
		var ue *host.UpstreamError
		if errors.As(err, &ue) {
			resp, err = routerLocalReply(ue), nil
		}
	}
	if err != nil {
		// A reset stream (proxy_close_stream, client gone): HTTP/1 can only
		// say that by dropping the connection.
		panic(http.ErrAbortHandler)
	}
	if l.s.log.Enabled(LevelDebug) {
		l.s.log.Logf(LevelDebug, "http", "[worker %d] %s %s -> %d %s", worker, r.Method, r.RequestURI, resp.Status, resp.Details)
	}
	writeResponse(w, r, resp)
}

// request builds the header map filters see, applying the HCM's request
// header mutations (x-forwarded-*, x-request-id, :scheme).
func (l *listener) request(r *http.Request, worker int, body []byte) *host.Request {
	authority := r.Host
	path := r.RequestURI
	if !strings.HasPrefix(path, "/") && path != "*" && r.URL.Host != "" {
		// Absolute-form request line: Envoy splits it into :authority and
		// :path.
		authority = r.URL.Host
		path = r.URL.RequestURI()
	}
	if l.cfg.MergeSlashes {
		path = mergeSlashes(path)
	}
	// Pseudo headers lead the map, as in Envoy's; :scheme is filled in once
	// x-forwarded-proto is settled.
	hs := [][2]string{{":authority", authority}, {":path", path}, {":method", r.Method}, {":scheme", "http"}}
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var xff, xfp, reqID string
	hasXFF := false
	for _, k := range keys {
		lk := strings.ToLower(k)
		if hopByHop[lk] || lk == "host" {
			continue
		}
		vs := r.Header[k]
		switch lk {
		case "x-forwarded-for":
			hasXFF = true
			xff = strings.Join(vs, ",")
			continue // re-added below, possibly with our hop appended
		case "x-forwarded-proto":
			xfp = vs[0]
			continue
		case "x-request-id":
			reqID = vs[0]
			continue
		}
		for _, v := range vs {
			hs = append(hs, [2]string{lk, v})
		}
	}
	if r.ContentLength > 0 && r.Header.Get("Content-Length") == "" {
		hs = append(hs, [2]string{"content-length", strconv.FormatInt(r.ContentLength, 10)})
	}

	remote, _ := netip.ParseAddrPort(r.RemoteAddr)
	source := r.RemoteAddr
	external := false
	if l.cfg.UseRemoteAddress {
		// Envoy appends the peer to x-forwarded-for and, with no trusted
		// hops configured, overwrites x-forwarded-proto.
		if remote.IsValid() {
			ip := remote.Addr().Unmap().String()
			if hasXFF && strings.TrimSpace(xff) != "" {
				xff = xff + "," + ip
			} else {
				xff = ip
			}
			hasXFF = true
			external = !isInternal(remote.Addr())
		}
		xfp = "http"
	} else if hasXFF {
		// Without use_remote_address the downstream address is the last
		// x-forwarded-for entry (zero trusted hops), if it is an IP.
		parts := strings.Split(xff, ",")
		if a, err := netip.ParseAddr(strings.TrimSpace(parts[len(parts)-1])); err == nil {
			source = netip.AddrPortFrom(a, 0).String()
		}
	}
	if xfp == "" {
		xfp = "http"
	}
	if hasXFF {
		hs = append(hs, [2]string{"x-forwarded-for", xff})
	}
	hs = append(hs, [2]string{"x-forwarded-proto", xfp})
	if external {
		// Envoy strips x-envoy-* headers an external client sent and marks
		// where the request came from.
		kept := hs[:0]
		for _, h := range hs {
			if !strings.HasPrefix(h[0], "x-envoy-") {
				kept = append(kept, h)
			}
		}
		hs = append(kept, [2]string{"x-envoy-external-address", remote.Addr().Unmap().String()})
	} else if l.cfg.UseRemoteAddress {
		hs = append(hs, [2]string{"x-envoy-internal", "true"})
	}
	if l.cfg.GenerateRequestID && (reqID == "" || external) {
		reqID = newUUID()
	}
	if reqID != "" {
		hs = append(hs, [2]string{"x-request-id", reqID})
	}
	if xfp == "https" {
		hs[3][1] = "https"
	}

	req := &host.Request{
		Worker:        worker,
		Headers:       hs,
		Body:          body,
		SourceAddress: source,
		RequestID:     reqID,
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		req.DestinationAddress = la.String()
	}
	req.RouteName, req.ClusterName = l.routeNames(hs)
	req.Route = l.routeNames
	return req
}

// selectRoute is Envoy's route selection: the route matching the headers,
// and the cluster it sends to, which for cluster_header is the first value
// of that header (Envoy reads only the first: the header is untrusted), ""
// when it is missing.
func (l *listener) selectRoute(hs [][2]string) (*Route, string) {
	_, rt := l.match(hs)
	switch {
	case rt == nil:
		return nil, ""
	case rt.ClusterHeader != "":
		return rt, headerValue(hs, rt.ClusterHeader)
	}
	return rt, rt.Cluster
}

// routeNames are xds.route_name and xds.cluster_name of a request with
// these headers. The host asks again after a Wasm filter changed the
// request headers, because Envoy's Wasm filter then clears the route
// cache (Context::replaceHeaderMapValue and the other header map writes
// call clearRouteCache for the request headers:
// source/extensions/common/wasm/context.cc, since envoyproxy/envoy#14318).
func (l *listener) routeNames(hs [][2]string) (route, cluster string) {
	rt, cluster := l.selectRoute(hs)
	if rt == nil {
		return "", ""
	}
	return rt.Name, cluster
}

// mergeSlashes is Envoy's PathUtil::mergeSlashes: in the path before any
// "?", runs of "/" become one, keeping a leading and a trailing "/"; the
// query is left alone. Like Envoy's, a path of only slashes becomes "//"
// (the leading and the trailing one), and a path without "//" is returned
// as it is.
func mergeSlashes(p string) string {
	path, query := p, ""
	if i := strings.IndexByte(p, '?'); i >= 0 {
		path, query = p[:i], p[i:]
	}
	if !strings.Contains(path, "//") {
		return p
	}
	var b strings.Builder
	if strings.HasPrefix(path, "/") {
		b.WriteByte('/')
	}
	first := true
	for _, seg := range strings.Split(path, "/") {
		if seg == "" {
			continue
		}
		if !first {
			b.WriteByte('/')
		}
		b.WriteString(seg)
		first = false
	}
	if strings.HasSuffix(path, "/") {
		b.WriteByte('/')
	}
	b.WriteString(query)
	return b.String()
}

// isInternal is Envoy's legacy default internal address set: RFC 1918,
// loopback, and unique-local IPv6.
func isInternal(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsPrivate()
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func headerValue(hs [][2]string, name string) string {
	for _, h := range hs {
		if h[0] == name {
			return h[1]
		}
	}
	return ""
}

// joinedHeader is the value of header name with repeats joined by ",",
// as Envoy joins them, and whether the header is present. A single value
// is returned as it is, without a copy.
func joinedHeader(hs [][2]string, name string) (v string, found bool) {
	for _, kv := range hs {
		if kv[0] != name {
			continue
		}
		if found {
			v += "," + kv[1]
		} else {
			v, found = kv[1], true
		}
	}
	return v, found
}

// match finds the route as Envoy does: the virtual host by :authority
// (exact, then longest suffix wildcard, then longest prefix wildcard, then
// "*"), then the first matching route in order.
func (l *listener) match(hs [][2]string) (*VirtualHost, *Route) {
	vh := l.virtualHost(strings.ToLower(headerValue(hs, ":authority")))
	if vh == nil {
		return nil, nil
	}
	path := headerValue(hs, ":path")
	noQuery := path
	if i := strings.IndexAny(noQuery, "?#"); i >= 0 {
		noQuery = noQuery[:i]
	}
	for _, rt := range vh.Routes {
		if routeMatches(rt, path, noQuery) && headersMatch(rt.Headers, hs) {
			return vh, rt
		}
	}
	return vh, nil
}

// headersMatch is Envoy's HeaderUtility::matchHeaders for the matchers we
// implement: every matcher must hold; a missing header matches only
// present_match false (or present_match true inverted); values of a
// repeated header are joined by "," before an exact comparison.
func headersMatch(ms []HeaderMatch, hs [][2]string) bool {
	for _, m := range ms {
		joined, present := joinedHeader(hs, m.Name)
		var ok bool
		switch {
		case !m.HasExact:
			ok = present == m.Present != m.Invert
		case !present:
			ok = false
		default:
			ok = (joined == m.Exact) != m.Invert
		}
		if !ok {
			return false
		}
	}
	return true
}

func routeMatches(rt *Route, path, noQuery string) bool {
	switch {
	case rt.Regex != nil:
		return rt.Regex.MatchString(noQuery)
	case rt.Path != "":
		if !rt.CaseSensitive {
			return strings.EqualFold(noQuery, rt.Path)
		}
		return noQuery == rt.Path
	case rt.SeparatedPrefix != "":
		p := noQuery
		if !rt.CaseSensitive {
			p = strings.ToLower(p)
		}
		return p == rt.SeparatedPrefix || strings.HasPrefix(p, rt.SeparatedPrefix+"/")
	default:
		p := path
		if !rt.CaseSensitive {
			p = strings.ToLower(p)
		}
		return strings.HasPrefix(p, rt.Prefix)
	}
}

func (l *listener) virtualHost(authority string) *VirtualHost {
	var best *VirtualHost
	bestLen, bestKind := -1, 4
	for _, vh := range l.cfg.VirtualHosts {
		for _, d := range vh.Domains {
			kind, n := -1, len(d)
			switch {
			case d == authority:
				return vh
			case d == "*":
				kind = 3
			case strings.HasPrefix(d, "*") && strings.HasSuffix(authority, d[1:]) && len(authority) > len(d)-1:
				kind = 1
			case strings.HasSuffix(d, "*") && strings.HasPrefix(authority, d[:len(d)-1]) && len(authority) > len(d)-1:
				kind = 2
			}
			if kind < 0 {
				continue
			}
			if kind < bestKind || (kind == bestKind && n > bestLen) {
				best, bestKind, bestLen = vh, kind, n
			}
		}
	}
	return best
}

// router is the terminal filter: it resolves the route from the final
// headers (filters may have changed them; Envoy clears the route cache when
// wasm modifies request headers) and forwards to the cluster.
func (l *listener) router(ctx context.Context, req *host.Request) (*host.Response, error) {
	rt, cluster := l.selectRoute(req.Headers)
	if rt == nil {
		return nil, &host.UpstreamError{Status: 404, Details: "route_not_found", Body: []byte{}}
	}
	c := l.s.clusters.clusters[cluster]
	if c == nil {
		// Only a cluster_header route gets here: Envoy's router counts
		// no_cluster, flags the stream NC and answers
		// cluster_not_found_response_code with an empty body.
		l.s.log.Logf(LevelDebug, "router", "unknown cluster '%s'", cluster)
		return nil, &host.UpstreamError{Status: rt.NotFoundStatus, Details: "cluster_not_found", Body: []byte{}}
	}
	hs := req.Headers
	uctx, cancel := ctx, context.CancelFunc(func() {})
	if rt.Timeout > 0 {
		// The route timeout covers the whole response, a streamed body
		// included, so it is cancelled only when the body has ended.
		uctx, cancel = context.WithTimeout(ctx, rt.Timeout)
		hs = append(hs[:len(hs):len(hs)], [2]string{"x-envoy-expected-rq-timeout-ms", strconv.FormatInt(rt.Timeout.Milliseconds(), 10)})
	}
	start := time.Now()
	resp, err := c.roundTrip(uctx, hs, req.Body, true)
	if ub, ok := respBodyStream(resp); ok {
		ub.done = cancel
	} else {
		defer cancel()
	}
	if err != nil {
		var ce *errConnect
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(uctx.Err(), context.DeadlineExceeded):
			return nil, &host.UpstreamError{Status: 504, Details: "upstream_response_timeout", Body: []byte("upstream request timeout")}
		case errors.As(err, &ce):
			l.s.log.Logf(LevelDebug, "router", "upstream connect error on cluster %s: %v", cluster, err)
			return nil, &host.UpstreamError{Status: 503, Details: "upstream_reset_before_response_started{connection_failure}",
				Body: []byte("upstream connect error or disconnect/reset before headers. reset reason: connection failure")}
		default:
			l.s.log.Logf(LevelDebug, "router", "upstream reset on cluster %s: %v", cluster, err)
			return nil, &host.UpstreamError{Status: 503, Details: "upstream_reset_before_response_started{connection_termination}",
				Body: []byte("upstream connect error or disconnect/reset before headers. reset reason: connection termination")}
		}
	}
	resp.Headers = append(resp.Headers, [2]string{"x-envoy-upstream-service-time", strconv.FormatInt(time.Since(start).Milliseconds(), 10)})
	resp.Details = "via_upstream"
	return resp, nil
}

// respBodyStream is resp's streamed upstream body, if it has one.
func respBodyStream(resp *host.Response) (*upstreamBody, bool) {
	if resp == nil {
		return nil, false
	}
	ub, ok := resp.BodyStream.(*upstreamBody)
	return ub, ok
}

func localReply(status int, details string, body []byte) *host.Response {
	r := &host.Response{Status: status, Body: body, Details: details, Local: true}
	if len(body) > 0 {
		r.Headers = [][2]string{{"content-length", strconv.Itoa(len(body))}, {"content-type", "text/plain"}}
	}
	return r
}

// routerLocalReply renders the router's error the way the wasm host does,
// so a chain without wasm filters answers identically.
func routerLocalReply(ue *host.UpstreamError) *host.Response {
	return localReply(ue.Status, ue.Details, ue.Body)
}

func writeResponse(w http.ResponseWriter, r *http.Request, resp *host.Response) {
	h := w.Header()
	var upstreamLength string
	for _, kv := range resp.Headers {
		k := strings.ToLower(kv[0])
		switch {
		case strings.HasPrefix(k, ":"), hopByHop[k]:
		case k == "content-length":
			upstreamLength = kv[1]
		default:
			ck := canonicalKey(k)
			h[ck] = append(h[ck], kv[1])
		}
	}
	// Envoy's default server_header_transformation is OVERWRITE.
	h.Set("Server", "envoy")
	status := resp.Status
	if status < 100 || status > 999 {
		status = http.StatusBadGateway
	}
	bodyAllowed := status >= 200 && status != 204 && status != 304
	switch {
	case r.Method == http.MethodHead && upstreamLength != "":
		h.Set("Content-Length", upstreamLength)
	case bodyAllowed && resp.BodyStream == nil && len(resp.Trailers) == 0:
		// A body with trailers goes chunked: HTTP/1.1 carries trailers
		// only after a chunked body.
		h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	}
	if bodyAllowed && resp.BodyStream == nil && r.Method != http.MethodHead {
		// Before the headers: net/http decides on a chunked body, which
		// alone carries trailers in HTTP/1.1, when the headers go out.
		writeTrailers(w, resp.Trailers)
	}
	w.WriteHeader(status)
	if resp.BodyStream != nil {
		writeStreamed(w, r, resp.BodyStream)
		return
	}
	if bodyAllowed && r.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
}

// writeTrailers has trailers follow the body: net/http writes what the
// handler sets under http.TrailerPrefix as the chunked body's trailer
// section (HTTP/1.1) or the trailing HEADERS frame (HTTP/2).
func writeTrailers(w http.ResponseWriter, trailers [][2]string) {
	h := w.Header()
	for _, kv := range trailers {
		k := strings.ToLower(kv[0])
		if strings.HasPrefix(k, ":") || hopByHop[k] || k == "content-length" {
			continue
		}
		ck := http.TrailerPrefix + canonicalKey(k)
		h[ck] = append(h[ck], kv[1])
	}
}

// writeStreamed sends a streamed body chunk by chunk, flushing each, as
// Envoy sends each data frame the filters let through, then its trailers. The stream is
// read to its end even when the client has gone, so the filters see the
// stream end; a reset (any error but io.EOF) drops the connection.
func writeStreamed(w http.ResponseWriter, r *http.Request, body host.BodyStream) {
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush() // the headers go now, ahead of the first chunk
	}
	gone := false
	for {
		b, err := body.Next(r.Context())
		if len(b) > 0 && !gone {
			if _, werr := w.Write(b); werr != nil {
				gone = true
			} else if flusher != nil {
				flusher.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			if tb, ok := body.(host.TrailingBody); ok && !gone {
				writeTrailers(w, tb.Trailers())
			}
			return
		}
		if err != nil {
			panic(http.ErrAbortHandler)
		}
	}
}

func sortPairs(p [][2]string) {
	sort.SliceStable(p, func(i, j int) bool { return p[i][0] < p[j][0] })
}

// adminHandler serves the admin endpoints the project relies on.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		if !s.live.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "PRE_INITIALIZING\n")
			return
		}
		io.WriteString(w, "LIVE\n")
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		var re *regexp.Regexp
		if f := r.URL.Query().Get("filter"); f != "" {
			var err error
			if re, err = regexp.Compile(f); err != nil {
				http.Error(w, "Invalid re2 regex", http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		if s.rt == nil {
			return
		}
		if re == nil {
			s.rt.Stats().WriteText(w)
			return
		}
		// Like Envoy's ?filter=, the regex selects stats by name.
		var buf strings.Builder
		s.rt.Stats().WriteText(&buf)
		for _, line := range strings.SplitAfter(buf.String(), "\n") {
			name, _, _ := strings.Cut(line, ":")
			if line != "" && re.MatchString(name) {
				io.WriteString(w, line)
			}
		}
	})
	mux.HandleFunc("/stats/prometheus", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		if s.rt != nil {
			tags := make([]host.TagSpecifier, 0, len(s.cfg.StatsTags))
			for _, t := range s.cfg.StatsTags {
				tags = append(tags, host.TagSpecifier{Name: t.Name, Regex: t.Regex, FixedValue: t.FixedValue})
			}
			s.rt.Stats().WritePrometheus(w, tags)
		}
	})
	mux.HandleFunc("/listeners", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		for _, l := range s.cfg.Listeners {
			fmt.Fprintf(w, "%s::%s\n", l.Name, s.ListenerAddr(l.Name))
		}
	})
	mux.HandleFunc("/server_info", func(w http.ResponseWriter, r *http.Request) {
		state := "PRE_INITIALIZING"
		if s.live.Load() {
			state = "LIVE"
		}
		up := fmt.Sprintf("%ds", int64(time.Since(s.started).Seconds()))
		info := map[string]any{
			"version":             Version,
			"state":               state,
			"hot_restart_version": "disabled",
			"command_line_options": map[string]any{
				"concurrency":  s.opts.Concurrency,
				"config_path":  s.opts.ConfigPath,
				"log_level":    s.log.level.String(),
				"wasm_profile": string(s.rtProfile()),
			},
			"uptime_current_epoch": up,
			"uptime_all_epochs":    up,
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		_ = enc.Encode(info)
	})
	mux.HandleFunc("/quitquitquit", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			// Envoy only performs mutating admin actions on POST.
			w.WriteHeader(http.StatusMethodNotAllowed)
			io.WriteString(w, "This endpoint requires POST\n")
			return
		}
		io.WriteString(w, "OK\n")
		s.quitOnce.Do(func() {
			s.log.Logf(LevelInfo, "main", "caught admin /quitquitquit")
			close(s.quit)
		})
	})
	return mux
}

func (s *Server) rtProfile() host.Profile {
	if s.rt != nil {
		return s.rt.Profile()
	}
	return s.opts.Profile
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
