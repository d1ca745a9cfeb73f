package e2e_test

import (
	"strconv"
	"testing"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/filtertest"
	"github.com/sluice-proxy/sluice/filter/ops"
)

// explainingHarness is the wasm harness with sluicectl explain asked
// first about each case's first request, the one that meets fresh state
// as explain assumes: its prediction (admitted, or rejected with which
// status; which limits decided) must be what the wasm does.
type explainingHarness struct {
	*wasmHarness
	config   []byte
	limits   []string
	asked    bool
	compared *int
}

func (e *explainingHarness) Do(t testing.TB, req filtertest.Request) filtertest.Response {
	t.Helper()
	return filtertest.StartAndFinish(t, e, req)
}

func (e *explainingHarness) Start(t testing.TB, req filtertest.Request) (filtertest.Flight, filtertest.Response) {
	t.Helper()
	if e.asked {
		return e.wasmHarness.Start(t, req)
	}
	e.asked = true
	ex, err := ops.Explain(e.config, explainRequest(req), e.clock(), true)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	before := e.decisions(t)
	f, resp := e.wasmHarness.Start(t, req)
	if ex.Outcome == "waits" {
		return f, resp // decided by Redis or the limits service, which explain does not call
	}
	reached := f != nil || !resp.Local
	switch {
	case ex.Outcome == "admitted" && !reached:
		t.Fatalf("explain predicts admitted; the wasm answered %d %s", resp.Status, resp.Body)
	case ex.Outcome != "admitted" && (reached || resp.Status != ex.Status):
		t.Fatalf("explain predicts %s %d (%s); the wasm: reached upstream %v, status %d %s", ex.Outcome, ex.Status, ex.Body, reached, resp.Status, resp.Body)
	}
	after := e.decisions(t)
	for i, l := range ex.Limits {
		// A limit explain says decided the request (a decision, a missing
		// key, an unlimited or blocked override, or an invalid cost: a key
		// but no rate) counted one in the wasm; every other limit none.
		decided := l.Decision != "" || l.MissingKey || l.Action != "" || l.Evaluated && l.Rate == nil
		if moved := after[i] > before[i]; moved != decided {
			t.Fatalf("limit %s: explain says decided=%v (%+v); the wasm counted %d decisions", l.Name, decided, l, after[i]-before[i])
		}
	}
	*e.compared++
	return f, resp
}

// decisions sums, per configured limit, the counters of decisions made.
func (e *explainingHarness) decisions(t testing.TB) []uint64 {
	out := make([]uint64, len(e.limits))
	for i, name := range e.limits {
		for _, c := range []string{"allowed", "limited", "shadow_limited", "missing_key", "invalid_cost"} {
			out[i] += e.Counter(t, "sluice.limit."+name+"."+c)
		}
	}
	return out
}

// explainRequest is a filtertest request as explain takes it, with the
// defaults both harnesses use.
func explainRequest(r filtertest.Request) ops.Request {
	out := ops.Request{Method: r.Method, Authority: r.Host, Path: r.Path, Headers: r.Headers,
		Client: or(r.Peer, "10.0.0.1:40000"), Route: or(r.Route, "default"), Cluster: or(r.Cluster, "backend")}
	for _, m := range r.Metadata {
		v := ""
		switch x := m.Value.(type) {
		case string:
			v = x
		case float64:
			// A number and its shortest decimal text make the same key
			// and match the same conditions (filter/request/metadata.go).
			v = strconv.FormatFloat(x, 'g', -1, 64)
		}
		out.Metadata = append(out.Metadata, ops.Metadatum{Namespace: m.Namespace, Path: m.Path, Value: v})
	}
	return out
}

// or is s, or def when s is empty.
func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestExplainAgreesWithWasm runs filtertest.Cases on build/sluice.wasm,
// asking explain about each case's first request before the wasm decides
// it. Cases with partial rollouts are left out: both draw at random.
func TestExplainAgreesWithWasm(t *testing.T) {
	code := wasmModule(t, "sluice")
	compared, eligible := 0, 0
	for _, c := range filtertest.Cases {
		cfg, err := config.Parse([]byte(c.Config))
		if err != nil {
			continue // a case about a refused configuration
		}
		random := false
		var limits []string
		for _, l := range cfg.Limits {
			random = random || l.Rollout != config.FullRollout
			limits = append(limits, l.Name)
		}
		if random {
			continue
		}
		eligible++
		t.Run(c.Name, func(t *testing.T) {
			w := newWasmHarness(t, code, c)
			c.Run(t, &explainingHarness{wasmHarness: w, config: []byte(c.Config), limits: limits, compared: &compared})
		})
	}
	// Most cases decide their first request locally; if few were compared,
	// the comparison above stopped looking.
	if compared < eligible*2/3 {
		t.Fatalf("explain compared on %d of %d cases", compared, eligible)
	}
	t.Logf("explain agreed with the wasm on the first request of %d of %d cases", compared, eligible)
}
