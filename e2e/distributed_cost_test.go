package e2e_test

import (
	"io"
	"net/http"
	"strconv"
	"testing"
)

// TestDistributedCostFromResponse runs a global token budget over two
// instances and a real Redis: each response's reported cost is charged in
// Redis with the charge script, so the key goes into debt for every
// instance, and the instance that charged it also stops asking Redis.
func TestDistributedCostFromResponse(t *testing.T) {
	forBothProtocols(t, func(t *testing.T, p distProtocol) {
		be := startDistBackend(t, p)
		// 100 per hour: nothing refills during the test.
		cfg := `{"limits":[{"name":"tokens","key":["header:x-key"],"limit":100,"window":"1h","mode":"global",
		  "failure_policy":"deny","cost_from_response":{"header":"x-tokens-used"}}],` +
			be.backendBlock(`"timeout":"500ms","retries":1`) + `}`
		insts := startDistInstances(t, 2, cfg, be.addr)
		key := uniqueKey("budget")
		send := func(in *distInstance, tokens string) (int, http.Header) {
			t.Helper()
			req, _ := http.NewRequest("GET", in.base+"/v1/chat", nil)
			req.Header.Set("x-key", key)
			if tokens != "" {
				req.Header.Set("Echo-Response-Header", "x-tokens-used: "+tokens)
			}
			resp, err := distClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, resp.Header
		}
		be.preloadScripts(t)
		// Charges are sent from the tick after the response: wait for
		// Redis to have run them.
		before := be.evalCalls(t)
		waitCalls := func(n int64) { t.Helper(); be.waitEvalCalls(t, before, n) }
		if st, _ := send(insts[0], "60"); st != 200 {
			t.Fatalf("first: %d", st)
		}
		waitCalls(2) // its decision and its charge
		// 40 left: admitted on one unit, then charged 59: 20 past empty.
		if st, _ := send(insts[1], "60"); st != 200 {
			t.Fatalf("second, on the other instance: %d", st)
		}
		waitCalls(4)
		st, h := send(insts[0], "")
		if st != 429 {
			t.Fatalf("in debt: %d", st)
		}
		// 21 units at 100 per hour: 756s.
		if ra, _ := strconv.Atoi(h.Get("retry-after")); ra < 750 || ra > 760 {
			t.Fatalf("retry-after %q, want about 756s", h.Get("retry-after"))
		}
		// The instance that charged the debt knows it: no Redis call.
		if st, _ := send(insts[1], ""); st != 429 {
			t.Fatalf("in debt on the charging instance: %d", st)
		}
		if got := be.evalCalls(t) - before; got != 5 {
			t.Fatalf("%d script calls, want 5 (2 decisions, 2 charges, 1 refusal)", got)
		}
		if got := insts[1].metric("sluice.backend.negative_cache_hits"); got != 1 {
			t.Fatalf("negative cache hits %d, want 1", got)
		}
		if got := sumMetric(insts, "sluice.limit.tokens.response_cost"); got != 120 {
			t.Fatalf("response_cost %d, want 120", got)
		}
	})
}
