// Package filter is the Sluice proxy-wasm plugin: the adapter between
// Envoy's callbacks and the engine. It holds the contexts the SDK drives,
// the callbacks in phase order (http.go), each of which reads Envoy, asks
// the engine and acts on its verdict, and every hostcall, in
// hostcalls.go, which implements package host over the SDK. Together
// with filter/bridge and filter/cmd it is the only code that imports the
// SDK; what a request is decided by is in package engine.
package filter

import (
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/filter/engine"
)

// NewVMContext returns the root of the plugin, registered from main's init.
func NewVMContext() types.VMContext { return NewVMContextWithClock(wallClock) }

// NewVMContextWithClock is NewVMContext with a time source, so native tests
// can step time exactly.
func NewVMContextWithClock(now func() time.Time) types.VMContext {
	return &vmContext{vm: engine.NewVM(proxyHost(now))}
}

type vmContext struct {
	types.DefaultVMContext
	vm *engine.VM
}

func (vm *vmContext) NewPluginContext(uint32) types.PluginContext {
	return &pluginContext{plugin: vm.vm.NewPlugin()}
}

type pluginContext struct {
	types.DefaultPluginContext
	plugin *engine.Plugin
	// freeContexts are contexts of ended streams, for reuse.
	freeContexts []*httpContext
}

// httpContext is one stream: the SDK's context around the engine's.
type httpContext struct {
	types.DefaultHttpContext
	engine.Stream
	plugin *pluginContext
}

// maxFreeContexts bounds the contexts kept for reuse per worker: enough
// for the streams a worker ends between two of its new ones.
const maxFreeContexts = 64
