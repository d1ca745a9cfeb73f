// Command noop is a proxy-wasm filter that does nothing, built through the
// same bridge as Sluice. Benchmarks divide Sluice's per-request cost by its
// cost, measured in the same run, so host and machine noise cancel out.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func init() { proxywasm.SetVMContext(&vm{}) }

func main() {}

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext { return &plugin{} }

type plugin struct{ types.DefaultPluginContext }

func (*plugin) NewHttpContext(uint32) types.HttpContext { return &types.DefaultHttpContext{} }
