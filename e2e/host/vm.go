package host

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

type vmKey struct{}

// Context ids as proxy-wasm-cpp-host allocates them: the VM context is 0, the
// plugin's root context is the first allocated id.
const (
	vmContextID   = 0
	rootContextID = 1
)

// buffer/map availability for the callback that is running.
type callScope struct {
	vmConfig     bool
	pluginConfig bool
	httpCall     *Response // http call response readable (map 6/7, buffer 4)
	grpcMessage  *[]byte   // gRPC message readable (buffer 5)
	grpcMetadata *[][2]string
	grpcMapType  uint32 // map type of grpcMetadata (4 or 5)
	grpcStatus   *grpcStatusScope
}

// vm is one instance of the module. Only the owning worker's loop touches
// it (the canary: only NewPlugin), except for the atomics, which readers off
// the loop use.
type vm struct {
	p      *Plugin
	worker int // -1 for the canary
	mod    api.Module
	mem    api.Memory
	ctx    context.Context
	cancel context.CancelFunc
	closed bool

	failed  bool
	failMsg string

	// Envoy fails the VM when a disallowed hostcall runs during start-up or
	// an allocator call; allowed is nil when nothing is restricted.
	allowed map[string]bool

	fnMalloc, fnInitialize, fnMain, fnStart                   api.Function
	fnContextCreate, fnVMStart, fnConfigure                   api.Function
	fnReqHeaders, fnReqBody, fnReqTrailers                    api.Function
	fnRespHeaders, fnRespBody, fnRespTrailers                 api.Function
	fnLog, fnDone, fnDelete, fnTick, fnHTTPResp, fnQueueReady api.Function
	fnGrpcInitial, fnGrpcReceive, fnGrpcTrailing, fnGrpcClose api.Function

	callStack  [8]uint64
	allocStack [2]uint64
	scratch    []byte
	pairBuf    []byte

	current   uint32 // context id of the running callback
	effective uint32 // set by proxy_set_effective_context; 0 = current
	scope     callScope
	nextID    uint32
	streams   map[uint32]*stream

	tickPeriod time.Duration
	tickTimer  *time.Timer
	tickGen    uint64 // bumped whenever the tick is re-armed or stopped

	// For readers off the loop (admin, tests): the linear memory size in
	// pages after the last callback, whether the VM failed, and how many
	// of its streams are parked waiting for the plugin.
	pages     atomic.Uint32
	hasFailed atomic.Bool
	parked    atomic.Int32

	nextToken uint32
	// gRPC callouts in flight, by token; see grpc.go.
	grpcCallouts             map[uint32]*grpcCallout
	grpcCallID, grpcStreamID uint32
	metrics                  map[uint32]*metric
	nextMID                  uint32
}

func (p *Plugin) newVM(ctx context.Context, worker int) (*vm, error) {
	r := p.rt
	// Anonymous modules can be instantiated any number of times.
	mcfg := wazero.NewModuleConfig().WithName("").WithStartFunctions()
	mod, err := r.wz.InstantiateModule(ctx, p.code.mod, mcfg)
	if err != nil {
		return nil, fmt.Errorf("Failed to instantiate Wasm module: %w", err)
	}
	vctx, cancel := context.WithCancel(p.ctx)
	v := &vm{
		p: p, worker: worker, mod: mod, mem: mod.ExportedMemory("memory"),
		cancel: cancel, nextID: rootContextID + 1,
		streams: map[uint32]*stream{}, metrics: map[uint32]*metric{},
		grpcCallouts: map[uint32]*grpcCallout{},
		grpcCallID:   calloutGrpcCall, grpcStreamID: calloutGrpcStream,
	}
	if v.mem == nil {
		for name := range p.code.mod.ExportedMemories() {
			v.mem = mod.ExportedMemory(name)
			break
		}
	}
	v.ctx = context.WithValue(vctx, vmKey{}, v)
	get := func(name string) api.Function { return mod.ExportedFunction(name) }
	v.fnInitialize = get("_initialize")
	if v.fnInitialize != nil {
		v.fnMain = get("main")
	} else {
		v.fnStart = get("_start")
	}
	v.fnMalloc = get("malloc")
	if v.fnMalloc == nil {
		v.fnMalloc = get("proxy_on_memory_allocate")
	}
	v.fnContextCreate = get("proxy_on_context_create")
	v.fnVMStart = get("proxy_on_vm_start")
	v.fnConfigure = get("proxy_on_configure")
	v.fnReqHeaders = get("proxy_on_request_headers")
	v.fnReqBody = get("proxy_on_request_body")
	v.fnReqTrailers = get("proxy_on_request_trailers")
	v.fnRespHeaders = get("proxy_on_response_headers")
	v.fnRespBody = get("proxy_on_response_body")
	v.fnRespTrailers = get("proxy_on_response_trailers")
	v.fnLog = get("proxy_on_log")
	v.fnDone = get("proxy_on_done")
	v.fnDelete = get("proxy_on_delete")
	v.fnTick = get("proxy_on_tick")
	v.fnHTTPResp = get("proxy_on_http_call_response")
	v.fnQueueReady = get("proxy_on_queue_ready")
	v.fnGrpcInitial = get("proxy_on_grpc_receive_initial_metadata")
	v.fnGrpcReceive = get("proxy_on_grpc_receive")
	v.fnGrpcTrailing = get("proxy_on_grpc_receive_trailing_metadata")
	v.fnGrpcClose = get("proxy_on_grpc_close")

	if err := v.startup(); err != nil {
		v.close()
		return nil, err
	}
	return v, nil
}

// startup is WasmBase::startVm followed by ContextBase::onStart and
// onConfigure for the plugin's root context.
func (v *vm) startup() error {
	v.allowed = startAllowed(v.p.rt.profile)
	v.current = vmContextID
	if v.fnInitialize != nil {
		v.callRaw(v.fnInitialize)
		if !v.failed && v.fnMain != nil {
			v.callRaw(v.fnMain, 0, 0)
		}
	} else if v.fnStart != nil {
		v.callRaw(v.fnStart)
	}
	v.allowed = nil
	if v.failed {
		return fmt.Errorf("Failed to initialize Wasm code: %s", v.failMsg)
	}

	cfg := &v.p.cfg
	v.call(rootContextID, v.fnContextCreate, rootContextID, 0)
	if err := v.startPhase(v.fnVMStart, callScope{vmConfig: true}, len(cfg.VMConfiguration),
		"Failed to start base Wasm plugin", "proxy_on_vm_start"); err != nil {
		return err
	}
	return v.startPhase(v.fnConfigure, callScope{pluginConfig: true}, len(cfg.Configuration),
		"Failed to configure base Wasm plugin", "proxy_on_configure")
}

// startPhase calls fn, the export of one start phase, if the guest has it,
// with the size of the configuration that scope lets it read. A trap, or
// false from fn, fails the VM with Envoy's message for the phase.
func (v *vm) startPhase(fn api.Function, scope callScope, size int, failure, export string) error {
	if fn != nil && !v.failed {
		v.scope = scope
		ok := v.call(rootContextID, fn, rootContextID, uint64(size))
		v.scope = callScope{}
		if !v.failed && uint32(ok) == 0 {
			return errors.New(failure + ": " + export + " returned false")
		}
	}
	if v.failed {
		return fmt.Errorf("%s: %s", failure, v.failMsg)
	}
	return nil
}

func (v *vm) close() {
	if v.closed {
		return
	}
	v.closed = true
	v.stopTicker()
	v.cancel() // also ends every gRPC callout
	_ = v.mod.Close(context.Background())
}

// fail marks the VM failed; nothing runs in it afterwards.
func (v *vm) fail(msg string) {
	if v.failed {
		return
	}
	v.failed = true
	v.hasFailed.Store(true)
	v.failMsg = msg
	v.stopTicker()
	if v.worker >= 0 {
		v.p.traps.Add(1)
	}
	v.p.rt.log(LogCritical, v.p.cfg.Name, "wasm VM failed: "+msg)
}

// callRaw runs an export with the VM context current, marking the VM failed
// on any trap. It returns the first result (0 if none or failed).
func (v *vm) callRaw(fn api.Function, args ...uint64) uint64 {
	if v.failed || v.closed || fn == nil {
		return 0
	}
	stack := v.callStack[:]
	n := copy(stack, args)
	_ = n
	err := fn.CallWithStack(v.ctx, stack)
	// Memory only grows while guest code runs, so this keeps the admin view
	// current without anyone reading the memory off the loop.
	if v.mem != nil {
		v.pages.Store(v.mem.Size() / 65536)
	}
	if err != nil {
		v.fail(trapMessage(err))
		return 0
	}
	return stack[0]
}

// call runs a proxy_on_* callback with contextID as the current context.
func (v *vm) call(contextID uint32, fn api.Function, args ...uint64) uint64 {
	if fn == nil {
		return 0
	}
	prevCur, prevEff := v.current, v.effective
	v.current, v.effective = contextID, 0
	res := v.callRaw(fn, args...)
	v.current, v.effective = prevCur, prevEff
	return res
}

func trapMessage(err error) string {
	var rv restrictedViolation
	if errors.As(err, &rv) {
		return "restricted_callback: " + string(rv)
	}
	return err.Error()
}

type restrictedViolation string

func (r restrictedViolation) Error() string { return "restricted_callback " + string(r) }

// alloc calls the module's allocator under Envoy's allocation restrictions.
// A failure aborts the whole host call (the VM is marked failed by the
// caller's trap handling).
func (v *vm) alloc(ctx context.Context, size uint32) uint32 {
	if h := v.p.rt.hostcall; h != nil {
		h("proxy_on_memory_allocate")
	}
	prev := v.allowed
	v.allowed = mallocAllowed(v.p.rt.profile)
	stack := v.allocStack[:]
	stack[0] = uint64(size)
	err := v.fnMalloc.CallWithStack(ctx, stack)
	v.allowed = prev
	if err != nil {
		panic(err)
	}
	addr := uint32(stack[0])
	if addr == 0 && size > 0 {
		panic(errors.New("proxy_on_memory_allocate returned a null pointer"))
	}
	if uint64(addr)+uint64(size) > uint64(v.mem.Size()) {
		panic(errors.New("proxy_on_memory_allocate returned memory out of bounds"))
	}
	return addr
}

// ---- ticks ----

// setTick arms the VM's timer. As Envoy's tick timer (Wasm::tickHandler),
// it fires on the worker's loop and is re-armed after each proxy_on_tick,
// so a slow tick delays the next one instead of queueing ticks up.
func (v *vm) setTick(period time.Duration) {
	v.stopTicker()
	v.tickPeriod = period
	if period <= 0 || v.worker < 0 || v.closed || v.p.rt.manualTicks {
		return
	}
	v.armTick(v.tickGen)
}

func (v *vm) armTick(gen uint64) {
	w := v.p.workers[v.worker]
	v.tickTimer = time.AfterFunc(v.tickPeriod, func() {
		w.loop.post(taskFunc(func() {
			// A newer setTick, a stop, a failure or a reload since
			// the timer was armed makes this firing stale.
			if v.tickGen != gen || w.vm != v || v.failed || v.closed {
				return
			}
			v.call(rootContextID, v.fnTick, rootContextID)
			if v.tickGen == gen && !v.failed && !v.closed {
				v.armTick(gen)
			}
		}))
	})
}

func (v *vm) stopTicker() {
	v.tickGen++
	if v.tickTimer != nil {
		v.tickTimer.Stop()
		v.tickTimer = nil
	}
}

// ---- http calls ----

func (v *vm) startHTTPCall(cluster string, headers [][2]string, body []byte, trailers [][2]string, timeout time.Duration) uint32 {
	v.nextToken++
	if v.nextToken == 0 {
		v.nextToken++
	}
	token := v.nextToken
	caller := v.p.cfg.Caller
	worker := v.worker
	v.p.wg.Add(1)
	go func() {
		defer v.p.wg.Done()
		ctx := v.ctx
		var cancel context.CancelFunc
		if timeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, timeout)
		} else {
			ctx, cancel = context.WithCancel(ctx)
		}
		resp, err := caller.Call(ctx, cluster, headers, body, trailers, timeout)
		timedOut := ctx.Err() != nil
		cancel()
		if v.ctx.Err() != nil || worker < 0 {
			return
		}
		if err != nil || timedOut {
			resp = nil
		}
		if resp != nil {
			// The response header map carries :status, as in Envoy.
			hs := make([][2]string, 0, len(resp.Headers)+1)
			hs = append(hs, [2]string{":status", itoa(resp.Status)})
			for _, h := range resp.Headers {
				if h[0] == ":status" {
					continue
				}
				hs = append(hs, [2]string{lower(h[0]), h[1]})
			}
			resp = &Response{Status: resp.Status, Headers: hs, Body: resp.Body, Trailers: lowerPairs(resp.Trailers)}
		}
		// The reply is an event on the worker's loop, as Envoy's async
		// client calls back on the worker's dispatcher.
		w := v.p.workers[worker]
		w.loop.post(taskFunc(func() { v.httpCallDone(w, token, resp) }))
	}()
	return token
}

// httpCallDone delivers a proxy_http_call reply (nil: transport failure or
// timeout) to the root context. Loop only.
func (v *vm) httpCallDone(w *worker, token uint32, resp *Response) {
	if w.vm != v || v.failed || v.closed {
		return
	}
	var nh, nb, nt int
	if resp != nil {
		nh, nb, nt = len(resp.Headers), len(resp.Body), len(resp.Trailers)
	} else {
		// Envoy reports transport failures as an empty response.
		resp = &Response{}
	}
	v.scope = callScope{httpCall: resp}
	v.call(rootContextID, v.fnHTTPResp, rootContextID, uint64(token), uint64(nh), uint64(nb), uint64(nt))
	v.scope = callScope{}
}
