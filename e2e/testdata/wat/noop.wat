;; The WAT no-op: a proxy-wasm filter that exports the ABI and does nothing,
;; written by hand so nothing runs between the host and the callbacks. Its
;; cost is what the host spends on a stream's callbacks alone.
(module
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 4096))
  (func (export "proxy_abi_version_0_2_0"))
  ;; A bump allocator; the host never asks this module for memory, but the
  ;; ABI wants the export.
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32) (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (i32.and (i32.add (local.get $n) (i32.const 7)) (i32.const -8))))
    (local.get $p))
  (func (export "_initialize"))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_log") (param i32))
  (func (export "proxy_on_done") (param i32) (result i32) (i32.const 1))
  (func (export "proxy_on_delete") (param i32)))
