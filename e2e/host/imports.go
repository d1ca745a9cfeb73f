package host

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero/api"
)

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// hostFunc is one import the host provides.
type hostFunc struct {
	name    string
	params  []api.ValueType
	results []api.ValueType
	fn      func(v *vm, ctx context.Context, stack []uint64)
}

func sig(n int) []api.ValueType {
	s := make([]api.ValueType, n)
	for i := range s {
		s[i] = i32
	}
	return s
}

var oneI32 = []api.ValueType{i32}

// WASI function sets. wasi133 is the set proxy-wasm-cpp-host registered
// before PR #533 (what Envoy 1.33 ships); the envoy-1.39 profile provides the
// whole preview1 surface, mostly as ENOSYS stubs.
var wasi133 = map[string]bool{
	"fd_write": true, "fd_read": true, "fd_seek": true, "fd_close": true, "fd_fdstat_get": true,
	"environ_get": true, "environ_sizes_get": true, "args_get": true, "args_sizes_get": true,
	"clock_time_get": true, "random_get": true, "proc_exit": true, "path_open": true,
	"fd_prestat_get": true, "fd_prestat_dir_name": true,
	// Added by cpp-host #427 (Go SDK bring-up), before #533.
	"sched_yield": true, "poll_oneoff": true, "fd_fdstat_set_flags": true,
}

func (r *Runtime) profileHas(module, name string) bool {
	switch module {
	case "env":
		return true
	case "wasi_snapshot_preview1", "wasi_unstable":
		if r.profile == ProfileEnvoy133 {
			return wasi133[name]
		}
		return true
	}
	return false
}

// Hostcalls allowed while _initialize/main/_start run (WasmBase::startVm).
// Go runs package initialisers inside _initialize, which is why PR #533
// opened the whole WASI surface there.
var startAllowed133 = map[string]bool{}
var startAllowed139 = map[string]bool{}

// Hostcalls allowed inside the allocator (WasmBase::allocMemory). PR #533
// added poll_oneoff because the Go runtime sleeps inside its allocator.
var mallocAllowed133 = map[string]bool{}
var mallocAllowed139 = map[string]bool{}

func init() {
	both := func(m map[string]bool, names ...string) {
		for _, n := range names {
			m["wasi_unstable."+n] = true
			m["wasi_snapshot_preview1."+n] = true
		}
	}
	startAllowed133["env.proxy_log"] = true
	both(startAllowed133, "fd_write", "args_sizes_get", "args_get", "environ_sizes_get", "environ_get",
		"fd_prestat_get", "fd_prestat_dir_name", "clock_time_get", "random_get",
		// cpp-host #427: the Go runtime's initialisation.
		"fd_fdstat_get", "fd_fdstat_set_flags")
	startAllowed139["env.proxy_log"] = true
	for _, f := range wasiFuncs() {
		both(startAllowed139, f.name)
	}
	mallocAllowed133["env.proxy_log"] = true
	both(mallocAllowed133, "fd_write", "clock_time_get")
	mallocAllowed139["env.proxy_log"] = true
	both(mallocAllowed139, "fd_write", "clock_time_get", "poll_oneoff")
}

func startAllowed(p Profile) map[string]bool {
	if p == ProfileEnvoy133 {
		return startAllowed133
	}
	return startAllowed139
}

func mallocAllowed(p Profile) map[string]bool {
	if p == ProfileEnvoy133 {
		return mallocAllowed133
	}
	return mallocAllowed139
}

func (r *Runtime) instantiateHostModules(ctx context.Context) error {
	modules := map[string][]hostFunc{
		"env":                    envFuncs(),
		"wasi_snapshot_preview1": wasiFuncs(),
		"wasi_unstable":          wasiFuncs(),
	}
	for mod, funcs := range modules {
		b := r.wz.NewHostModuleBuilder(mod)
		for _, f := range funcs {
			full := mod + "." + f.name
			impl := f.fn
			b.NewFunctionBuilder().
				WithGoFunction(api.GoFunc(func(ctx context.Context, stack []uint64) {
					v, _ := ctx.Value(vmKey{}).(*vm)
					if v == nil {
						panic(fmt.Errorf("%s called outside a VM", full))
					}
					if v.allowed != nil && !v.allowed[full] {
						panic(restrictedViolation(full))
					}
					if r.hostcall != nil {
						r.hostcall(full)
					}
					impl(v, ctx, stack)
				}), f.params, f.results).
				Export(f.name)
		}
		cm, err := b.Compile(ctx)
		if err != nil {
			return err
		}
		for name, def := range cm.ExportedFunctions() {
			r.hostDefs[mod+"."+name] = def
		}
		if _, err := r.wz.InstantiateModule(ctx, cm, nilModuleConfig(mod)); err != nil {
			return err
		}
	}
	return nil
}
