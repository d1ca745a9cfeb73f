// Command sluice is the wasm entry point. It is built with
// GOOS=wasip1 -buildmode=c-shared, where init runs inside _initialize and
// main never runs, so registration happens in init.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/sluice-proxy/sluice/filter"
)

func init() { proxywasm.SetVMContext(filter.NewVMContext()) }

func main() {}
