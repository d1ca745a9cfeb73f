package host

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// watModule assembles a minimal proxy-wasm module. parts fill the slots
// below; {{"text"}} inside a slot becomes "(i32.const off) (i32.const len)"
// of that text placed in a data segment.
type watModule struct {
	abi      string // default proxy_abi_version_0_2_0
	imports  string
	memory   string // default (memory (export "memory") 2)
	extra    string // extra functions/exports
	alloc    string // runs at the start of the allocator
	malloc   bool   // also export "malloc" (logs "malloc")
	init     string // body of _initialize; "-" omits the export
	main     string // body of main, exported if non-empty
	start    string // body of _start, exported if non-empty
	create   string
	vmStart  string
	config   string
	reqHdrs  string
	respHdrs string
	onLog    string
	onDone   string
	onDelete string
}

var strLit = regexp.MustCompile(`\{\{"([^"]*)"\}\}`)

func (m watModule) source() string {
	var data strings.Builder
	off := 1024
	seen := map[string]int{}
	fill := func(s string) string {
		return strLit.ReplaceAllStringFunc(s, func(x string) string {
			lit := strLit.FindStringSubmatch(x)[1]
			o, ok := seen[lit]
			if !ok {
				o = off
				seen[lit] = o
				fmt.Fprintf(&data, "  (data (i32.const %d) %q)\n", o, lit)
				off += len(lit) + 1
			}
			return fmt.Sprintf("(i32.const %d) (i32.const %d)", o, len(lit))
		})
	}
	abi := m.abi
	if abi == "" {
		abi = "proxy_abi_version_0_2_0"
	}
	mem := m.memory
	if mem == "" {
		mem = `(memory (export "memory") 2)`
	}
	var b strings.Builder
	b.WriteString("(module\n")
	b.WriteString(`  (import "env" "proxy_log" (func $log (param i32 i32 i32) (result i32)))
  (import "env" "proxy_set_shared_data" (func $set (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_shared_data" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_buffer_bytes" (func $getbuf (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_header_map_pairs" (func $pairs (param i32 i32 i32) (result i32)))
`)
	b.WriteString(m.imports + "\n")
	b.WriteString("  " + mem + "\n")
	b.WriteString("  (global $heap (mut i32) (i32.const 32768))\n")
	b.WriteString(`  (func $say (param $p i32) (param $n i32) (drop (call $log (i32.const 2) (local.get $p) (local.get $n))))
  (func $bump (param $n i32) (result i32) (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (i32.add (local.get $n) (i32.const 8))))
    (local.get $p))
`)
	if abi != "-" {
		fmt.Fprintf(&b, "  (func (export %q))\n", abi)
	}
	fmt.Fprintf(&b, "  (func (export \"proxy_on_memory_allocate\") (param $n i32) (result i32) %s (call $bump (local.get $n)))\n", fill(m.alloc))
	if m.malloc {
		b.WriteString(fill("  (func (export \"malloc\") (param $n i32) (result i32) (call $say {{\"malloc\"}}) (call $bump (local.get $n)))\n"))
	}
	if m.init != "-" {
		fmt.Fprintf(&b, "  (func (export \"_initialize\") %s)\n", fill(m.init))
	}
	if m.main != "" {
		fmt.Fprintf(&b, "  (func (export \"main\") (param i32 i32) (result i32) %s (i32.const 0))\n", fill(m.main))
	}
	if m.start != "" {
		fmt.Fprintf(&b, "  (func (export \"_start\") %s)\n", fill(m.start))
	}
	fmt.Fprintf(&b, "  (func (export \"proxy_on_context_create\") (param $id i32) (param $root i32) %s)\n", fill(m.create))
	fmt.Fprintf(&b, "  (func (export \"proxy_on_vm_start\") (param $root i32) (param $size i32) (result i32) %s (i32.const 1))\n", fill(m.vmStart))
	fmt.Fprintf(&b, "  (func (export \"proxy_on_configure\") (param $root i32) (param $size i32) (result i32) %s (i32.const 1))\n", fill(m.config))
	fmt.Fprintf(&b, "  (func (export \"proxy_on_request_headers\") (param $id i32) (param $n i32) (param $eos i32) (result i32) %s (i32.const 0))\n", fill(m.reqHdrs))
	fmt.Fprintf(&b, "  (func (export \"proxy_on_response_headers\") (param $id i32) (param $n i32) (param $eos i32) (result i32) %s (i32.const 0))\n", fill(m.respHdrs))
	fmt.Fprintf(&b, "  (func (export \"proxy_on_log\") (param $id i32) %s)\n", fill(m.onLog))
	fmt.Fprintf(&b, "  (func (export \"proxy_on_done\") (param $id i32) (result i32) %s (i32.const 1))\n", fill(m.onDone))
	fmt.Fprintf(&b, "  (func (export \"proxy_on_delete\") (param $id i32) %s)\n", fill(m.onDelete))
	b.WriteString(fill(m.extra) + "\n")
	b.WriteString(data.String())
	b.WriteString(")\n")
	return b.String()
}

func (m watModule) build(t testing.TB) []byte {
	t.Helper()
	return wat(t, m.source())
}
