// Command trapguest is build/sluice.wasm with one addition: a request
// carrying "x-sluice-test-trap: 1" panics in the guest before the filter
// sees it. The real filter never traps on bad input, so the fault matrix
// needs this to show what failure_policy FAIL_RELOAD does with the real
// filter's shared-data state. It lives under testdata so `go build ./...`
// and the shipped module never include it.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/filter"
)

func init() { proxywasm.SetVMContext(trapVM{filter.NewVMContext()}) }

func main() {}

type trapVM struct{ types.VMContext }

func (v trapVM) NewPluginContext(id uint32) types.PluginContext {
	return trapPlugin{v.VMContext.NewPluginContext(id)}
}

type trapPlugin struct{ types.PluginContext }

func (p trapPlugin) NewHttpContext(id uint32) types.HttpContext {
	inner := p.PluginContext.NewHttpContext(id)
	if inner == nil {
		return nil
	}
	return trapStream{inner}
}

type trapStream struct{ types.HttpContext }

func (s trapStream) OnHttpRequestHeaders(n int, eos bool) types.Action {
	if v, err := proxywasm.GetHttpRequestHeader("x-sluice-test-trap"); err == nil && v == "1" {
		panic("sluice test: injected trap")
	}
	return s.HttpContext.OnHttpRequestHeaders(n, eos)
}
