// Package host runs proxy-wasm modules on wazero the way Envoy (through
// proxy-wasm-cpp-host) runs them: same imports, same start-up sequence, same
// restrictions, same status codes. It is the stand-in for Envoy in our tests,
// so wherever Envoy has a rule this package follows it rather than doing what
// would be convenient.
//
// The parts and the Envoy code they follow:
//   - loading (host.go): ABI marker, malloc or proxy_on_memory_allocate,
//     missing imports refused with Envoy's wording, 16384-page cap
//     (cpp-host src/wasm.cc, src/v8/v8.cc);
//   - start-up (vm.go): _initialize then main, else _start, under the
//     restricted-callback list of WasmBase::startVm; a canary VM is
//     started, configured and discarded before one VM per worker;
//   - WASI (wasi.go): Envoy's implementations, per profile (envoy-1.33 is
//     the set before cpp-host #533 plus #427, envoy-1.39 the full preview1
//     stub set);
//   - hostcalls (abi.go, shared.go, stats.go): Envoy's statuses and
//     encodings (source/extensions/common/wasm/context.cc);
//   - streams (stream.go): the HTTP filter callbacks, pause/continue,
//     deferred local replies, fail-open/closed/reload.
//
// Concurrency (loop.go): like an Envoy worker thread, each worker is one
// event loop, a goroutine that runs every callback of its VMs. Callers post
// work to it and wait for the reply; a paused stream waits off the loop, so
// the worker keeps serving other streams, ticks and http-call responses.
package host

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/sluice-proxy/sluice/internal/enum"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Profile selects which Envoy release the host imitates. The profiles differ
// in the WASI surface (proxy-wasm-cpp-host PR #533 added the full preview1
// stub set and made poll_oneoff succeed).
type Profile string

const (
	ProfileEnvoy133 Profile = "envoy-1.33"
	ProfileEnvoy139 Profile = "envoy-1.39"
)

// ParseProfile accepts the flag spelling; "" means the default (envoy-1.39).
func ParseProfile(s string) (Profile, error) {
	switch Profile(s) {
	case "", ProfileEnvoy139:
		return ProfileEnvoy139, nil
	case ProfileEnvoy133:
		return ProfileEnvoy133, nil
	}
	return "", fmt.Errorf("unknown host profile %q (want %q or %q)", s, ProfileEnvoy133, ProfileEnvoy139)
}

// LogLevel is the proxy-wasm log level (trace 0 … critical 5).
type LogLevel int32

const (
	LogTrace LogLevel = iota
	LogDebug
	LogInfo
	LogWarn
	LogError
	LogCritical
)

func (l LogLevel) String() string {
	return enum.Name(l, "level", "trace", "debug", "info", "warning", "error", "critical")
}

// RuntimeOptions configure a Runtime.
type RuntimeOptions struct {
	// Profile is the Envoy release imitated. Zero value: ProfileEnvoy139.
	Profile Profile
	// Logger receives plugin logs (proxy_log, fd_write to stdout/stderr) and
	// host errors about a plugin. Nil: lines go to stderr.
	Logger func(level LogLevel, plugin, msg string)
	// LogLevel is what proxy_get_log_level reports and the threshold below
	// which proxy_log messages are dropped. Zero value: LogTrace (everything
	// is passed to Logger, which can filter).
	LogLevel LogLevel
	// Clock, if set, is what the WASI clocks read instead of the real
	// clock, so a test can step the guest's time exactly. Both the
	// realtime and the monotonic clock follow it; it must not go back.
	Clock func() time.Time
	// Monotonic, if set, is what WASI's monotonic clock reads (nanoseconds;
	// it must not go back), overriding Clock for that clock only. The Go
	// runtime times its garbage collector with it and the filter never
	// reads it, so a test can make time pass inside the guest's GC alone.
	Monotonic func() int64
	// ManualTicks stops the host from firing proxy_on_tick on its own;
	// the test fires ticks with Plugin.Tick after moving Clock.
	ManualTicks bool
	// Hostcall, if set, is called with an import's module-qualified name
	// ("env.proxy_get_property") before each hostcall a guest makes, and
	// with "proxy_on_memory_allocate" before each allocator callback the
	// host makes into a guest, so a test can count what a request costs
	// in host crossings. It runs on the worker's loop.
	Hostcall func(name string)
}

// Runtime holds what all plugins of one proxy process share: the wazero
// runtime and compiled modules, shared data and queues (per vm_id), stats.
type Runtime struct {
	profile     Profile
	clock       func() time.Time
	monotonic   func() int64
	manualTicks bool
	hostcall    func(name string)
	logger      func(level LogLevel, plugin, msg string)
	logLevel    LogLevel
	wz          wazero.Runtime
	baseCtx     context.Context
	stats       *Stats

	mu       sync.Mutex
	compiled map[[32]byte]*compiled
	shared   map[string]*sharedStore
	queues   *queueRegistry
	cas      uint32 // guarded by mu-free atomic
	closed   bool
	plugins  map[*Plugin]struct{}
	hostDefs map[string]api.FunctionDefinition // "module.name" → host signature
	// workerLoops[i] runs worker i of every plugin.
	workerLoops []*loop
}

type compiled struct {
	mod        wazero.CompiledModule
	abi        string
	hasMalloc  bool
	importErrs error
}

// NewRuntime creates a Runtime. It never fails: host modules are built from
// static definitions.
func NewRuntime(opts RuntimeOptions) *Runtime {
	p, err := ParseProfile(string(opts.Profile))
	if err != nil {
		p = ProfileEnvoy139
	}
	logger := opts.Logger
	if logger == nil {
		logger = func(level LogLevel, plugin, msg string) {
			fmt.Fprintf(os.Stderr, "[%s][wasm][%s] %s\n", level, plugin, msg)
		}
	}
	ctx := context.Background()
	// 16384 pages (1 GiB) is the cap proxy-wasm-cpp-host puts on every engine.
	cfg := wazero.NewRuntimeConfigCompiler().WithMemoryLimitPages(maxMemoryPages).WithCompilationCache(sharedCompilationCache)
	r := &Runtime{
		profile:     p,
		clock:       opts.Clock,
		monotonic:   opts.Monotonic,
		manualTicks: opts.ManualTicks,
		hostcall:    opts.Hostcall,
		logger:      logger,
		logLevel:    opts.LogLevel,
		wz:          wazero.NewRuntimeWithConfig(ctx, cfg),
		baseCtx:     ctx,
		stats:       newStats(),
		compiled:    map[[32]byte]*compiled{},
		shared:      map[string]*sharedStore{},
		queues:      newQueueRegistry(),
		plugins:     map[*Plugin]struct{}{},
		hostDefs:    map[string]api.FunctionDefinition{},
	}
	if err := r.instantiateHostModules(ctx); err != nil {
		// Only a programming error in the static tables can get here.
		panic(fmt.Sprintf("host: building host modules: %v", err))
	}
	return r
}

const maxMemoryPages = 16384

// sharedCompilationCache lets every Runtime in the process reuse machine
// code: compiling a 3 MB Go module takes seconds, and tests and the admin
// command create many runtimes for the same modules.
var sharedCompilationCache = wazero.NewCompilationCache()

// Tick fires proxy_on_tick on worker's VM now, if the plugin has set a tick
// period there; it reports whether it did. For RuntimeOptions.ManualTicks.
// Like a timer firing, the tick runs on the worker's loop, after whatever
// the loop was doing.
func (p *Plugin) Tick(worker int) bool {
	if worker < 0 || worker >= len(p.workers) {
		return false
	}
	w := p.workers[worker]
	fired := false
	_ = w.loop.do(func() {
		v := w.vm
		if v == nil || v.failed || v.closed || v.tickPeriod <= 0 {
			return
		}
		v.call(rootContextID, v.fnTick, rootContextID)
		fired = true
	})
	return fired
}

// ParkedStreams counts streams on worker that are paused and waiting for
// the plugin to continue or answer them. It reads a count the loop keeps,
// so it never waits for the worker.
func (p *Plugin) ParkedStreams(worker int) int {
	if worker < 0 || worker >= len(p.workers) {
		return 0
	}
	v := p.workers[worker].cur.Load()
	if v == nil {
		return 0
	}
	return int(v.parked.Load())
}

// Profile reports the imitated Envoy release.
func (r *Runtime) Profile() Profile { return r.profile }

// Stats is the process-wide stats store.
func (r *Runtime) Stats() *Stats { return r.stats }

// SharedDataKeys reports how many keys the shared-data store of vmID holds.
func (r *Runtime) SharedDataKeys(vmID string) int {
	s := r.sharedStore(vmID)
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// SharedData reads a shared-data entry of vmID (for tests and admin views).
func (r *Runtime) SharedData(vmID, key string) (value []byte, cas uint32, ok bool) {
	e, ok := r.sharedStore(vmID).get(key)
	if !ok {
		return nil, 0, false
	}
	return append([]byte(nil), e.val...), e.cas, true
}

// Close stops every plugin and releases the wazero runtime.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	plugins := make([]*Plugin, 0, len(r.plugins))
	for p := range r.plugins {
		plugins = append(plugins, p)
	}
	r.mu.Unlock()
	var errs []error
	for _, p := range plugins {
		errs = append(errs, p.Close(ctx))
	}
	// No plugin is left to post work, so the loops can end.
	r.mu.Lock()
	loops := r.workerLoops
	r.mu.Unlock()
	for _, l := range loops {
		l.stop()
	}
	errs = append(errs, r.wz.Close(ctx))
	return errors.Join(errs...)
}

func (r *Runtime) nextCAS() uint32 {
	for {
		v := atomic.AddUint32(&r.cas, 1)
		if v != 0 {
			return v
		}
	}
}

func (r *Runtime) sharedStore(vmID string) *sharedStore {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.shared[vmID]
	if s == nil {
		s = &sharedStore{m: map[string]sharedEntry{}}
		r.shared[vmID] = s
	}
	return s
}

// compile compiles code once per Runtime and checks it the way
// proxy-wasm-cpp-host does before instantiating anything.
func (r *Runtime) compile(ctx context.Context, code []byte) (*compiled, error) {
	key := sha256.Sum256(code)
	r.mu.Lock()
	c := r.compiled[key]
	r.mu.Unlock()
	if c != nil {
		return c, c.importErrs
	}
	mod, err := r.wz.CompileModule(ctx, code)
	if err != nil {
		return nil, fmt.Errorf("Failed to load Wasm bytecode: %w", err)
	}
	c = &compiled{mod: mod}
	exports := mod.ExportedFunctions()
	switch {
	case exports["proxy_abi_version_0_2_1"] != nil:
		c.abi = "0_2_1"
	case exports["proxy_abi_version_0_2_0"] != nil:
		c.abi = "0_2_0"
	case exports["proxy_abi_version_0_1_0"] != nil:
		c.importErrs = errors.New("Proxy-Wasm ABI version 0.1.0 is not supported by this host")
	default:
		c.importErrs = errors.New("Missing or unknown Proxy-Wasm ABI version")
	}
	if c.importErrs == nil {
		c.importErrs = r.checkImports(mod, c.abi)
	}
	if c.importErrs == nil {
		if exports["malloc"] == nil && exports["proxy_on_memory_allocate"] == nil {
			c.importErrs = errors.New("Wasm module is missing malloc function.")
		}
		if len(mod.ExportedMemories()) == 0 {
			c.importErrs = errors.New("Wasm module does not export its memory")
		}
	}
	r.mu.Lock()
	if prev := r.compiled[key]; prev != nil {
		r.mu.Unlock()
		_ = mod.Close(ctx)
		return prev, prev.importErrs
	}
	r.compiled[key] = c
	r.mu.Unlock()
	return c, c.importErrs
}

func (r *Runtime) checkImports(mod wazero.CompiledModule, abi string) error {
	for _, def := range mod.ImportedFunctions() {
		m, n, _ := def.Import()
		full := m + "." + n
		hd, ok := r.hostDefs[full]
		if ok && m == "env" && n == "proxy_get_log_level" && abi != "0_2_1" {
			// cpp-host only registers proxy_get_log_level for ABI 0.2.1.
			ok = false
		}
		if !ok || !r.profileHas(m, n) {
			return fmt.Errorf("Failed to load Wasm module due to a missing import: %s", full)
		}
		if !sameSignature(def, hd) {
			return fmt.Errorf("Failed to load Wasm module due to an import type mismatch for %s: want %s, but host exports %s",
				full, sigString(def), sigString(hd))
		}
	}
	for _, def := range mod.ImportedMemories() {
		m, n, _ := def.Import()
		return fmt.Errorf("Failed to load Wasm module due to a missing import: %s.%s", m, n)
	}
	return nil
}

func sameSignature(a, b api.FunctionDefinition) bool {
	pa, pb, ra, rb := a.ParamTypes(), b.ParamTypes(), a.ResultTypes(), b.ResultTypes()
	if len(pa) != len(pb) || len(ra) != len(rb) {
		return false
	}
	for i := range pa {
		if pa[i] != pb[i] {
			return false
		}
	}
	for i := range ra {
		if ra[i] != rb[i] {
			return false
		}
	}
	return true
}

func sigString(d api.FunctionDefinition) string {
	s := "("
	for i, t := range d.ParamTypes() {
		if i > 0 {
			s += " "
		}
		s += api.ValueTypeName(t)
	}
	s += ") -> ("
	for i, t := range d.ResultTypes() {
		if i > 0 {
			s += " "
		}
		s += api.ValueTypeName(t)
	}
	return s + ")"
}

// Caller gives plugins access to clusters for proxy_http_call.
type Caller interface {
	HasCluster(name string) bool
	// Call performs an HTTP request to the named cluster. headers include
	// the pseudo headers :method, :path, :authority (:scheme optional).
	Call(ctx context.Context, cluster string, headers [][2]string, body []byte, trailers [][2]string, timeout time.Duration) (*Response, error)
}

// PluginConfig mirrors the parts of Envoy's envoy.extensions.wasm.v3.PluginConfig
// (and its VmConfig) that the host honours.
type PluginConfig struct {
	Name, RootID, VMID string
	// Code is the wasm module.
	Code []byte
	// Configuration is the plugin configuration, readable only during
	// proxy_on_configure (buffer type 7). Zero value: empty.
	Configuration []byte
	// VMConfiguration is readable only during proxy_on_vm_start (buffer 6).
	VMConfiguration []byte
	// Environment is vm_config.environment_variables.key_values; only these
	// are visible through WASI environ_*. Nil: no variables.
	Environment map[string]string
	// FailOpen is the legacy fail_open flag. It is overridden by
	// FailurePolicy when that is set.
	FailOpen bool
	// FailurePolicy is "", "FAIL_CLOSED", "FAIL_OPEN" or "FAIL_RELOAD".
	// "" means FailOpen decides (false → FAIL_CLOSED).
	FailurePolicy string
	// Concurrency is the number of worker VMs. Zero value: 1.
	Concurrency int
	// Caller reaches clusters for proxy_http_call. Nil: every cluster is
	// unknown, so proxy_http_call returns BadArgument.
	Caller Caller
}

type failurePolicy int

const (
	failClosed failurePolicy = iota
	failOpen
	failReload
)

func (c *PluginConfig) policy() (failurePolicy, error) {
	switch c.FailurePolicy {
	case "":
		if c.FailOpen {
			return failOpen, nil
		}
		return failClosed, nil
	case "FAIL_CLOSED", "UNSPECIFIED":
		return failClosed, nil
	case "FAIL_OPEN":
		return failOpen, nil
	case "FAIL_RELOAD":
		return failReload, nil
	}
	return 0, fmt.Errorf("unknown failure_policy %q (want FAIL_CLOSED, FAIL_OPEN or FAIL_RELOAD)", c.FailurePolicy)
}

// Plugin is one configured wasm filter: a VM per worker.
type Plugin struct {
	rt      *Runtime
	cfg     PluginConfig
	code    *compiled
	policy  failurePolicy
	workers []*worker
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	shared  *sharedStore
	grpc    grpcConns

	traps   atomic.Uint64
	reloads atomic.Uint64
	closed  atomic.Bool
}

// worker is a plugin's VM on one worker loop.
type worker struct {
	loop *loop
	// vm is the worker's current VM; only the loop reads or replaces it.
	vm *vm
	// cur mirrors vm for readers off the loop (admin, tests).
	cur atomic.Pointer[vm]
}

// setVM installs v as the worker's VM. Loop only.
func (w *worker) setVM(v *vm) {
	w.vm = v
	w.cur.Store(v)
}

// NewPlugin loads cfg.Code, runs a canary VM through start-up and
// configuration and discards it (as Envoy does), then starts one VM per
// worker.
func (r *Runtime) NewPlugin(ctx context.Context, cfg PluginConfig) (*Plugin, error) {
	pol, err := cfg.policy()
	if err != nil {
		return nil, err
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if len(cfg.Code) == 0 {
		return nil, errors.New("plugin has no wasm code")
	}
	c, err := r.compile(ctx, cfg.Code)
	if err != nil {
		return nil, fmt.Errorf("plugin %q: %w", cfg.Name, err)
	}
	pctx, cancel := context.WithCancel(r.baseCtx)
	p := &Plugin{rt: r, cfg: cfg, code: c, policy: pol, ctx: pctx, cancel: cancel, shared: r.sharedStore(cfg.VMID)}

	// The canary runs on the caller's goroutine, as Envoy runs it on the
	// main thread.
	canary, err := p.newVM(ctx, -1)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("plugin %q: %w", cfg.Name, err)
	}
	canary.close()

	loops, err := r.loops(cfg.Concurrency)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("plugin %q: %w", cfg.Name, err)
	}
	// Workers exist before their VMs start so that ticks and queue
	// notifications set up during start-up find them.
	p.workers = make([]*worker, cfg.Concurrency)
	for i := range p.workers {
		p.workers[i] = &worker{loop: loops[i]}
	}
	// As Envoy creates each worker's VM on that worker's thread, start-up
	// runs on the worker's loop.
	for i, w := range p.workers {
		var err error
		if stopped := w.loop.do(func() {
			var v *vm
			if v, err = p.newVM(ctx, i); err == nil {
				w.setVM(v)
			}
		}); stopped != nil {
			err = stopped
		}
		if err != nil {
			p.closed.Store(true)
			cancel()
			for _, w := range p.workers[:i] {
				_ = w.loop.do(func() { w.vm.close() })
			}
			p.wg.Wait()
			return nil, fmt.Errorf("plugin %q worker %d: %w", cfg.Name, i, err)
		}
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = p.Close(ctx)
		return nil, errors.New("runtime is closed")
	}
	r.plugins[p] = struct{}{}
	r.mu.Unlock()
	return p, nil
}

// Close stops ticks and pending http calls and closes every worker VM.
func (p *Plugin) Close(ctx context.Context) error {
	if p.closed.Swap(true) {
		return nil
	}
	defer p.cancel()
	for _, w := range p.workers {
		// A loop stops only after Runtime.Close closed every plugin, so
		// an error here means this already ran.
		_ = w.loop.do(func() {
			v := w.vm
			if v == nil {
				return
			}
			// WasmBase::startShutdown: the root context gets on_done and
			// on_delete before the VM goes away.
			if !v.failed && !v.closed {
				v.call(rootContextID, v.fnDone, rootContextID)
				v.call(rootContextID, v.fnDelete, rootContextID)
			}
			v.close()
		})
	}
	p.wg.Wait()
	p.grpc.close()
	p.rt.mu.Lock()
	delete(p.rt.plugins, p)
	p.rt.mu.Unlock()
	return nil
}

// Name is the plugin name.
func (p *Plugin) Name() string { return p.cfg.Name }

// Concurrency is the number of worker VMs.
func (p *Plugin) Concurrency() int { return len(p.workers) }

// Traps counts VM failures (traps, restricted hostcalls) in this plugin's
// worker VMs.
func (p *Plugin) Traps() uint64 { return p.traps.Load() }

// Reloads counts VMs re-created under FAIL_RELOAD.
func (p *Plugin) Reloads() uint64 { return p.reloads.Load() }

// MemoryPages is the linear memory size (64 KiB pages) of a worker VM as of
// its last callback; it does not wait for the worker.
func (p *Plugin) MemoryPages(worker int) uint32 {
	if worker < 0 || worker >= len(p.workers) {
		return 0
	}
	if v := p.workers[worker].cur.Load(); v != nil {
		return v.pages.Load()
	}
	return 0
}

// Failed reports whether the worker's current VM has failed; it does not
// wait for the worker.
func (p *Plugin) Failed(worker int) bool {
	if worker < 0 || worker >= len(p.workers) {
		return false
	}
	if v := p.workers[worker].cur.Load(); v != nil {
		return v.hasFailed.Load()
	}
	return false
}

func (r *Runtime) log(level LogLevel, plugin, msg string) {
	if level < r.logLevel {
		return
	}
	r.logger(level, plugin, msg)
}
