;; The WAT floor: exactly the hostcalls e2e/noop makes with {"floor":true},
;; the ones one local limit plus one breaker cannot do without when state
;; lives in shared data, with no logic around them and a bump allocator.
;; Its cost is the physical limit of the host for that work: 14 hostcalls
;; per request, 5 of which call back into proxy_on_memory_allocate.
;;
;;   request headers:  counter +1; property source.address; get the bucket,
;;                     set it back with its CAS; get the breaker record;
;;                     property xds.cluster_name; counter +1
;;   response headers: :status; replace the default response's five
;;                     rate-limit headers
;;   stream done:      counter +1
(module
  (import "env" "proxy_get_property" (func $prop (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_shared_data" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_set_shared_data" (func $set (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_header_map_value" (func $hdr (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_replace_header_map_value" (func $put (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_define_metric" (func $define (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_increment_metric" (func $inc (param i32 i64) (result i32)))
  (memory (export "memory") 2)

  ;; Constant text, 16-byte aligned.
  (data (i32.const 256) "noop.bucket")
  (data (i32.const 272) "noop.breaker")
  (data (i32.const 288) "source\00address")
  (data (i32.const 304) "xds\00cluster_name")
  (data (i32.const 320) ":status")
  (data (i32.const 336) "noop.floor")
  (data (i32.const 352) "x-ratelimit-limit")
  (data (i32.const 384) "1000")
  (data (i32.const 400) "x-ratelimit-remaining")
  (data (i32.const 432) "999")
  (data (i32.const 448) "x-ratelimit-reset")
  (data (i32.const 480) "1795000000")
  (data (i32.const 496) "ratelimit-policy")
  (data (i32.const 512) "\22per-ip\22;q=1000;w=1")
  (data (i32.const 544) "ratelimit")
  (data (i32.const 560) "\22per-ip\22;r=999;t=1")

  ;; Scratch words the host writes results into: value pointer, value
  ;; length, CAS; the counter's id; 16 zero bytes, the initial records.
  (global $retPtr i32 (i32.const 1024))
  (global $retLen i32 (i32.const 1028))
  (global $retCAS i32 (i32.const 1032))
  (global $counter i32 (i32.const 1036))
  (global $zeros i32 (i32.const 1040))

  ;; The heap starts above the scratch; nothing a callback is handed
  ;; outlives it, so each callback starts the heap over.
  (global $heap (mut i32) (i32.const 4096))
  (func $reset (global.set $heap (i32.const 4096)))

  (func (export "proxy_abi_version_0_2_0"))
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32) (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (i32.and (i32.add (local.get $n) (i32.const 7)) (i32.const -8))))
    (local.get $p))
  (func (export "_initialize"))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (i32.const 1))
  ;; As e2e/noop's OnPluginStart: the counter, and both records created.
  (func (export "proxy_on_configure") (param i32 i32) (result i32)
    (drop (call $define (i32.const 0) (i32.const 336) (i32.const 10) (global.get $counter)))
    (drop (call $set (i32.const 256) (i32.const 11) (global.get $zeros) (i32.const 16) (i32.const 0)))
    (drop (call $set (i32.const 272) (i32.const 12) (global.get $zeros) (i32.const 16) (i32.const 0)))
    (i32.const 1))

  (func $count (drop (call $inc (i32.load (global.get $counter)) (i64.const 1))))

  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (call $reset)
    (call $count)
    (drop (call $prop (i32.const 288) (i32.const 14) (global.get $retPtr) (global.get $retLen)))
    (if (i32.eqz (call $get (i32.const 256) (i32.const 11) (global.get $retPtr) (global.get $retLen) (global.get $retCAS)))
      (then (drop (call $set (i32.const 256) (i32.const 11)
        (i32.load (global.get $retPtr)) (i32.load (global.get $retLen)) (i32.load (global.get $retCAS))))))
    (drop (call $get (i32.const 272) (i32.const 12) (global.get $retPtr) (global.get $retLen) (global.get $retCAS)))
    (drop (call $prop (i32.const 304) (i32.const 16) (global.get $retPtr) (global.get $retLen)))
    (call $count)
    (i32.const 0))

  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32)
    (call $reset)
    (drop (call $hdr (i32.const 2) (i32.const 320) (i32.const 7) (global.get $retPtr) (global.get $retLen)))
    (drop (call $put (i32.const 2) (i32.const 352) (i32.const 17) (i32.const 384) (i32.const 4)))
    (drop (call $put (i32.const 2) (i32.const 400) (i32.const 21) (i32.const 432) (i32.const 3)))
    (drop (call $put (i32.const 2) (i32.const 448) (i32.const 17) (i32.const 480) (i32.const 10)))
    (drop (call $put (i32.const 2) (i32.const 496) (i32.const 16) (i32.const 512) (i32.const 19)))
    (drop (call $put (i32.const 2) (i32.const 544) (i32.const 9) (i32.const 560) (i32.const 18)))
    (i32.const 0))

  (func (export "proxy_on_log") (param i32))
  (func (export "proxy_on_done") (param i32) (result i32) (call $count) (i32.const 1))
  (func (export "proxy_on_delete") (param i32)))
