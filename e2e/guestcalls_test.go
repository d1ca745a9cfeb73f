package e2e_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// callCounter counts calls into every guest function by name: where a
// request's guest work goes, as call counts (a listener's timing would
// weigh its own overhead, not the function's).
type callCounter struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (c *callCounter) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	return &countedFunction{c: c, name: def.Name()}
}

type countedFunction struct {
	c    *callCounter
	name string
}

func (f *countedFunction) Before(context.Context, api.Module, api.FunctionDefinition, []uint64, experimental.StackIterator) {
	f.c.mu.Lock()
	f.c.n[f.name]++
	f.c.mu.Unlock()
}

func (f *countedFunction) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}

func (f *countedFunction) Abort(context.Context, api.Module, api.FunctionDefinition, error) {}

// TestGuestCallsReport counts, per request after warm-up, the guest
// functions one limit + one breaker calls in our host, and the same for
// the Go floor making its hostcalls, and logs the counts by function and
// by package: the per-guest-function side of the real-host breakdown
// (BENCHMARKS.md section 1b). Run it alone (wazero keeps the listener of a
// module's first instrumented compilation): SLUICE_BENCH=1 go test
// -run '^TestGuestCallsReport$' ./e2e/. It asserts no timings.
func TestGuestCallsReport(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 to count")
	}
	const n = 2000
	counter := &callCounter{n: map[string]uint64{}}
	ctx := experimental.WithFunctionListenerFactory(context.Background(), counter)
	env := &lifecycleEnv{codes: map[string][]byte{"sluice": wasmModule(t, "sluice"), "noop": wasmModule(t, "noop")}}
	var out strings.Builder
	for _, name := range []string{"hostcall floor of one limit + one breaker", "one limit + one breaker"} {
		c := lifecycleCaseNamed(t, name)
		_, p, step := startLifecycle(t, ctx, c, env, nil)
		counter.mu.Lock()
		clear(counter.n)
		counter.mu.Unlock()
		for range n {
			step()
			if r, err := p.Serve(ctx, benchRequest, benchUpstream); err != nil || r.Status != 200 {
				t.Fatalf("%s: response %+v, err %v", name, r, err)
			}
		}
		counter.mu.Lock()
		total, byPkg := 0.0, map[string]float64{}
		type fn struct {
			name string
			per  float64
		}
		var fns []fn
		for f, k := range counter.n {
			per := float64(k) / n
			total += per
			fns = append(fns, fn{f, per})
			byPkg[guestPackage(f)] += per
		}
		counter.mu.Unlock()
		slices.SortFunc(fns, func(a, b fn) int { return cmp.Or(cmp.Compare(b.per, a.per), strings.Compare(a.name, b.name)) })
		fmt.Fprintf(&out, "\n%s: %.1f guest calls per request\n\nby package:\n", name, total)
		pkgs := slices.SortedFunc(maps.Keys(byPkg), func(a, b string) int {
			return cmp.Or(cmp.Compare(byPkg[b], byPkg[a]), strings.Compare(a, b))
		})
		for _, p := range pkgs {
			fmt.Fprintf(&out, "  %6.1f  %s\n", byPkg[p], p)
		}
		fmt.Fprintf(&out, "\nfunctions called at least once a request:\n")
		for _, f := range fns {
			if f.per >= 1 {
				fmt.Fprintf(&out, "  %6.1f  %s\n", f.per, f.name)
			}
		}
	}
	t.Log(out.String())
	if path := os.Getenv("SLUICE_BENCH_OUT_GUESTCALLS"); path != "" {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// guestPackage is the Go package of a guest function's symbol as the
// wasm names it, e.g. "github.com_sluice_proxy_sluice_limiter" for
// "github.com_sluice_proxy_sluice_limiter.__Table_.parseSlot": the text up
// to the first dot after the module host's own.
func guestPackage(name string) string {
	from := 0
	if strings.HasPrefix(name, "github.com_") {
		from = len("github.com_")
	}
	if dot := strings.IndexByte(name[from:], '.'); dot >= 0 {
		return name[:from+dot]
	}
	return name
}
