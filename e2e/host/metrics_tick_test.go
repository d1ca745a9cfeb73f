package host

import (
	"encoding/binary"
	"testing"
)

const metricImports = `
  (import "env" "proxy_define_metric" (func $define (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_increment_metric" (func $incr (param i32 i64) (result i32)))
  (import "env" "proxy_record_metric" (func $record (param i32 i64) (result i32)))
  (import "env" "proxy_get_metric" (func $getm (param i32 i32) (result i32)))
  (import "env" "proxy_set_tick_period_milliseconds" (func $tick (param i32) (result i32)))
`

func TestMetricHostcallRules(t *testing.T) {
	r, _ := newRT(t, "")
	// Counter id at 8000, gauge at 8004, histogram at 8008; statuses from 8100.
	body := `
	(drop (call $define (i32.const 0) {{"m.counter"}} (i32.const 8000)))
	(drop (call $define (i32.const 1) {{"m.gauge"}} (i32.const 8004)))
	(drop (call $define (i32.const 2) {{"m.histo"}} (i32.const 8008)))
	(i32.store (i32.const 8100) (call $incr (i32.load (i32.const 8000)) (i64.const 0)))
	(i32.store (i32.const 8104) (call $incr (i32.load (i32.const 8000)) (i64.const -1)))
	(i32.store (i32.const 8108) (call $incr (i32.load (i32.const 8000)) (i64.const 2)))
	(i32.store (i32.const 8112) (call $record (i32.load (i32.const 8004)) (i64.const 40)))
	(i32.store (i32.const 8116) (call $incr (i32.load (i32.const 8004)) (i64.const -15)))
	(i32.store (i32.const 8120) (call $incr (i32.load (i32.const 8008)) (i64.const 1)))
	(i32.store (i32.const 8124) (call $record (i32.load (i32.const 8008)) (i64.const 7)))
	(i32.store (i32.const 8128) (call $getm (i32.load (i32.const 8008)) (i32.const 8200)))
	(i32.store (i32.const 8132) (call $getm (i32.load (i32.const 8004)) (i32.const 8208)))
	(i32.store (i32.const 8136) (call $getm (i32.const 999) (i32.const 8200)))
	(i32.store (i32.const 8140) (call $define (i32.const 7) {{"m.bad"}} (i32.const 8012)))
	(i64.store (i32.const 8144) (i64.load (i32.const 8208)))
	(drop (call $set {{"metrics"}} (i32.const 8100) (i32.const 52) (i32.const 0)))`
	if _, err := loadPlugin(t, r, watModule{imports: metricImports, vmStart: body}.build(t)); err != nil {
		t.Fatal(err)
	}
	v, _, ok := r.SharedData("wat-vm", "metrics")
	if !ok {
		t.Fatal("no results")
	}
	u32 := func(i int) Status { return Status(binary.LittleEndian.Uint32(v[i*4:])) }
	for i, want := range []Status{StatusBadArgument, StatusBadArgument, StatusOK, StatusOK, StatusOK,
		StatusBadArgument, StatusOK, StatusBadArgument, StatusOK, StatusNotFound, StatusBadArgument} {
		if got := u32(i); got != want {
			t.Errorf("call %d status = %d, want %d", i, got, want)
		}
	}
	if g := binary.LittleEndian.Uint64(v[44:]); g != 25 {
		t.Errorf("gauge read back %d, want 40-15", g)
	}
	// canary + 1 worker each add 2 to the shared counter and set the gauge.
	if c, _ := r.Stats().Lookup("m.counter"); c != 4 {
		t.Errorf("counter = %d, want 4 (delta <= 0 rejected; canary and worker share it)", c)
	}
	if g, _ := r.Stats().Lookup("m.gauge"); g != 25 {
		t.Errorf("gauge = %d", g)
	}
	for _, m := range r.Stats().Snapshot() {
		if m.Name == "m.histo" && (m.Count != 2 || m.Sum != 14) {
			t.Errorf("histogram %+v", m)
		}
	}
}

func TestTicksPerVMAndStop(t *testing.T) {
	r, _ := newRT(t, "")
	// Each VM ticks every 2 ms and stops its own ticker after 3 ticks; the
	// shared counter then reaches exactly 3 per worker.
	m := watModule{
		imports: metricImports,
		extra: `(global $n (mut i32) (i32.const 0))
		(func (export "proxy_on_tick") (param $root i32)
		  (global.set $n (i32.add (global.get $n) (i32.const 1)))
		  (drop (call $incr (i32.load (i32.const 8000)) (i64.const 1)))
		  (if (i32.eq (global.get $n) (i32.const 3)) (then (drop (call $tick (i32.const 0))))))`,
		config: `(drop (call $define (i32.const 0) {{"ticks"}} (i32.const 8000))) (drop (call $tick (i32.const 2)))`,
	}
	p, err := loadPlugin(t, r, m.build(t), func(c *PluginConfig) { c.Concurrency = 2 })
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "both VMs stopped ticking", func() bool {
		for _, w := range p.workers {
			stopped := false
			if err := w.loop.do(func() { stopped = w.vm.tickTimer == nil }); err != nil {
				t.Fatal(err)
			}
			if !stopped {
				return false
			}
		}
		return true
	})
	// The canary is discarded before it can tick.
	if c, _ := r.Stats().Lookup("ticks"); c != 6 {
		t.Errorf("ticks = %d, want 3 per worker VM", c)
	}
}
