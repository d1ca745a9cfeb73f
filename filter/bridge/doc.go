//go:build sluice_bridge

// Package internal is Sluice's ABI bridge between standard Go's wasip1 port
// and proxy-wasm-go-sdk v0.24.0.
//
// The SDK as published wires its ABI only for TinyGo (//export comments and
// bodyless declarations). Standard Go needs //go:wasmimport for hostcalls and
// //go:wasmexport for callbacks, so `make build` copies the SDK out of the
// module cache into build/sdk, drops its native mock of the hostcalls, and
// drops these files into build/sdk/proxywasm/internal, where they also
// replace the SDK's context registry and callbacks (contexts.go), its map
// and property-path encoding (maps.go) and its enums and StatusToError
// (enums.go), whose files make build removes from the copy (SDK_REPLACED
// in the Makefile).
// The SDK has no gRPC callouts: grpc.go adds them (proxy_grpc_call, its
// status, proxy_on_grpc_receive and proxy_on_grpc_close), and
// filter/bridge/proxywasm/grpc.go, which make build copies into the SDK's
// public package, is their API (DispatchGrpcCall and the readers of a
// reply and a status). Nothing here is ever
// compiled in place: the sluice_bridge tag is only set by that build.
//
// Four rules the ABI forces on standard Go:
//   - int is 64 bits on GOARCH=wasm, while every size and pointer in the
//     proxy-wasm ABI is 32 bits, so every crossing converts explicitly.
//   - Memory the host asks for through proxy_on_memory_allocate is referenced
//     only by an integer address inside the host until the hostcall that asked
//     for it returns, so it comes from a static arena the GC never moves or
//     frees (memory.go), which starts over at each callback: what the host
//     returns lives until the callback returns, and whatever keeps it longer
//     copies it.
//   - Out-parameters live in package-level variables, never on a goroutine
//     stack: the host calls back into the allocator during a hostcall, that
//     Go code may grow and move the stack, and the host would then write
//     through a stale address.
//   - A callback never blocks, so the Go scheduler never runs unless the
//     bridge yields to it; see yield.go for why the GC needs it to, and
//     why it may not on Envoys whose poll_oneoff answers ENOSYS.
package internal
