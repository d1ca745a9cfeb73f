package e2e_test

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-proxy/sluice/filter/external/grpcserver"
	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
	"github.com/sluice-proxy/sluice/internal/fixtures/testkit"
)

// The external limit over gRPC end to end: build/sluice.wasm on our host,
// its gRPC callouts over real HTTP/2 to a service on 127.0.0.1 built with
// filter/external/grpcserver, as a team would build theirs.

// grpcLimits is a limits service on grpcserver with the faults the tests
// need: a status to fail with, or a hang until the call's deadline.
type grpcLimits struct {
	addr    string
	plans   map[string]grpcserver.Limits
	arrived atomic.Int64
	fail    atomic.Int32 // a codes.Code to fail every call with; 0 answers
	hang    atomic.Bool
	// gate holds calls, like a slow database.
	gate *holdGate

	mu      sync.Mutex
	calls   map[string]int
	lookups []*grpcserver.Request
	md      []metadata.MD
}

func startGrpcLimits(t *testing.T, plans map[string]grpcserver.Limits) *grpcLimits {
	t.Helper()
	g := &grpcLimits{plans: plans, calls: map[string]int{}, gate: newHoldGate()}
	srv := grpcserver.New(grpcserver.Func(g.getLimits))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		g.gate.release()
		srv.Stop()
	})
	g.addr = lis.Addr().String()
	return g
}

func (g *grpcLimits) getLimits(ctx context.Context, r *grpcserver.Request) (*grpcserver.Limits, error) {
	g.arrived.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	tenant := r.Header("x-tenant-id")
	g.mu.Lock()
	g.calls[tenant]++
	g.lookups = append(g.lookups, r)
	g.md = append(g.md, md)
	g.mu.Unlock()
	if !g.gate.wait(ctx) {
		return nil, ctx.Err()
	}
	if g.hang.Load() {
		<-ctx.Done() // the caller's deadline
		return nil, ctx.Err()
	}
	if c := codes.Code(g.fail.Load()); c != codes.OK {
		return nil, status.Error(c, "limits database unavailable")
	}
	l, ok := g.plans[tenant]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such tenant")
	}
	return &l, nil
}

func (g *grpcLimits) count(tenant string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[tenant]
}

func grpcExternalJSON(grpc, extra string) string {
	return `{"external":{"grpc":` + grpc + `,"timeout":"2s","forward_headers":["x-tenant-id","x-plan"],` +
		`"cache_ttl":"60s","stale_ttl":"10s","max_cached":1000,` +
		`"fallback":{"limit":4,"window":"1h","key":["header:x-tenant-id"]}` + extra + `}}`
}

func grpcHourPlans() map[string]grpcserver.Limits {
	return map[string]grpcserver.Limits{
		"acme":    {Average: 3, Period: "1h", TenantKey: "acme"},
		"initech": {Average: 6, Period: "1h"},
		"warm-up": {Average: 6, Period: "1h"},
		"ten":     {Average: 10, Period: "1h", TenantKey: "ten"},
		"short":   {Average: 100, Period: "1h", TenantKey: "short", CacheMaxAgeSeconds: 5},
		"nostore": {Average: 100, Period: "1h", TenantKey: "nostore", CacheNoStore: true},
		// Hostile answers: each is a failed lookup, never a limit.
		"negative": {Average: -5, Period: "1h", TenantKey: "acme"},
		"badkey":   {Average: 1000, Period: "1h", TenantKey: "acme\xff"},
		// Over the 64 KiB a reply may take: not read at all (and its
		// backend_url would be refused too; the native tests tell the two
		// apart with an unknown field).
		"huge": {Average: 1000, Period: "1h", TenantKey: "acme", BackendURL: strings.Repeat("b", 70000)},
	}
}

// TestExternalGrpcEndToEnd: tenants get their answered quotas on two
// workers with one call each (the rest cache hits) carrying the lookup and
// the configured metadata; an unknown tenant (NOT_FOUND) gets the
// fallback until its breaker opens.
func TestExternalGrpcEndToEnd(t *testing.T) {
	for _, codec := range []string{"proto", "json"} {
		t.Run(codec, func(t *testing.T) {
			g := startGrpcLimits(t, grpcHourPlans())
			e := startExternal(t, 1, grpcExternalJSON(`{"cluster":"limits-grpc","codec":"`+codec+`",`+
				`"initial_metadata":{"x-sluice-token":"s3cret"}}`, ""), map[string]string{"limits-grpc": g.addr})
			clients := twoWorkers(t, e)
			if got := e.admitted(t, clients, "acme", 5); got != 3 {
				t.Errorf("acme admitted %d of 5 on two workers, want its quota 3", got)
			}
			if got := e.admitted(t, clients, "initech", 8); got != 6 {
				t.Errorf("initech admitted %d of 8, want its quota 6", got)
			}
			if a, i := g.count("acme"), g.count("initech"); a != 1 || i != 1 {
				t.Errorf("calls: acme %d, initech %d; want 1 each, the rest cache hits", a, i)
			}
			g.mu.Lock()
			for i, l := range g.lookups {
				if l.Header("x-plan") != "standard" || l.Path != "/api/orders" || l.Method != "GET" || l.Header("authorization") != "" {
					t.Errorf("lookup %+v: want method, path without query, x-plan and no authorization", l)
				}
				if v := g.md[i].Get("x-sluice-token"); len(v) != 1 || v[0] != "s3cret" {
					t.Errorf("metadata %v, want x-sluice-token", g.md[i])
				}
			}
			g.mu.Unlock()
			if got := e.admitted(t, clients, "hooli", 7); got != 4 {
				t.Errorf("unknown tenant admitted %d of 7, want the fallback's 4", got)
			}
			if got := g.count("hooli"); got != 5 {
				t.Errorf("%d calls for the unknown tenant, want 5 before the breaker opens", got)
			}
			if e.metric("sluice.external.breaker.opens") != 1 || e.metric("sluice.external.errors.http_status") != 5 {
				t.Errorf("breaker opens %d, errors.http_status %d", e.metric("sluice.external.breaker.opens"),
					e.metric("sluice.external.errors.http_status"))
			}
		})
	}
}

// TestExternalGrpcOneLookupAcrossWorkers: while the service holds its
// calls, first requests of one tenant on both workers make one call, and
// all resume when it answers.
func TestExternalGrpcOneLookupAcrossWorkers(t *testing.T) {
	g := startGrpcLimits(t, grpcHourPlans())
	e := startExternal(t, 1, grpcExternalJSON(`{"cluster":"limits-grpc"}`, ""), map[string]string{"limits-grpc": g.addr})
	g.gate.hold()
	oneLookupAcrossWorkers(t, e, g.arrived.Load, g.gate.release, func() int { return g.count("initech") })
}

// TestExternalGrpcCacheEndToEnd: the answer's cache_max_age_seconds and
// cache_no_store decide how long it is used.
func TestExternalGrpcCacheEndToEnd(t *testing.T) {
	g := startGrpcLimits(t, grpcHourPlans())
	e := startExternal(t, 1, grpcExternalJSON(`{"cluster":"limits-grpc"}`, ""), map[string]string{"limits-grpc": g.addr})
	clients := twoWorkers(t, e)
	for _, tenant := range []string{"ten", "short", "nostore"} {
		e.admitted(t, clients, tenant, 3)
	}
	if g.count("ten") != 1 || g.count("short") != 1 || g.count("nostore") != 3 {
		t.Fatalf("calls ten %d, short %d, nostore %d; want 1, 1, 3", g.count("ten"), g.count("short"), g.count("nostore"))
	}
	e.advance(6 * time.Second)
	e.admitted(t, clients, "ten", 1)
	e.admitted(t, clients, "short", 1)
	if g.count("ten") != 1 || g.count("short") != 2 {
		t.Fatalf("after 6s calls ten %d, short %d; want short (5s) asked again, ten (60s) not", g.count("ten"), g.count("short"))
	}
}

// TestExternalGrpcFailuresEndToEnd: each way the service fails (a status,
// the timeout, a hostile answer, the service down) leaves requests to the
// fallback, counted under the failure's kind; an answer within stale_ttl
// decides instead while there is one.
func TestExternalGrpcFailuresEndToEnd(t *testing.T) {
	cases := []struct {
		name, kind, tenant string
		code               codes.Code
		hang, down         bool
		// cluster, when set, is the configured cluster instead.
		cluster string
	}{
		{name: "unavailable", kind: "unavailable", tenant: "ten", code: codes.Unavailable},
		{name: "internal", kind: "http_status", tenant: "ten", code: codes.Internal},
		{name: "permission denied", kind: "http_status", tenant: "ten", code: codes.PermissionDenied},
		{name: "resource exhausted", kind: "http_status", tenant: "ten", code: codes.ResourceExhausted},
		{name: "timeout", kind: "timeout", tenant: "ten", hang: true},
		{name: "negative average", kind: "malformed", tenant: "negative"},
		{name: "tenant_key not UTF-8", kind: "malformed", tenant: "badkey"},
		{name: "reply over 64 KiB", kind: "malformed", tenant: "huge"},
		{name: "service down", kind: "unavailable", tenant: "ten", down: true},
		// Envoy refuses a call to a cluster it does not have.
		{name: "unknown cluster", kind: "unavailable", tenant: "ten", cluster: "nowhere"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := startGrpcLimits(t, grpcHourPlans())
			addr := g.addr
			if tc.down {
				addr = testkit.ClosedAddr(t)
			}
			timeout := `,"timeout":"2s"`
			if tc.hang {
				timeout = `,"timeout":"150ms"`
			}
			cluster := "limits-grpc"
			if tc.cluster != "" {
				cluster = tc.cluster
			}
			cfg := strings.Replace(grpcExternalJSON(`{"cluster":"`+cluster+`"}`, ""), `,"timeout":"2s"`, timeout, 1)
			e := startExternal(t, 1, cfg, map[string]string{"limits-grpc": addr})
			clients := []*http.Client{oneConn(), oneConn()}
			g.fail.Store(int32(tc.code))
			g.hang.Store(tc.hang)
			if got := e.admitted(t, clients, tc.tenant, 6); got != 4 {
				t.Fatalf("admitted %d of 6, want the fallback's 4", got)
			}
			if got := e.metric("sluice.external.errors." + tc.kind); got != 5 {
				t.Fatalf("errors.%s = %d, want 5 (then the breaker is open); lookups %d, timeout %d, unavailable %d, http_status %d, other %d, limited %d", tc.kind, got,
					e.metric("sluice.external.lookups"), e.metric("sluice.external.errors.timeout"), e.metric("sluice.external.errors.unavailable"),
					e.metric("sluice.external.errors.http_status"), e.metric("sluice.external.errors.other"), e.metric("sluice.external.lookups_limited"))
			}
			if e.metric("sluice.external.fallback_used") != 6 {
				t.Fatalf("fallback_used %d, want 6", e.metric("sluice.external.fallback_used"))
			}
		})
	}
	t.Run("stale answer", func(t *testing.T) {
		g := startGrpcLimits(t, grpcHourPlans())
		e := startExternal(t, 1, grpcExternalJSON(`{"cluster":"limits-grpc"}`, ""), map[string]string{"limits-grpc": g.addr})
		clients := []*http.Client{oneConn(), oneConn()}
		e.admitted(t, clients, "ten", 1)
		e.advance(61 * time.Second) // past cache_ttl, within stale_ttl
		g.fail.Store(int32(codes.Unavailable))
		if got := e.admitted(t, clients, "ten", 6); got != 6 {
			t.Fatalf("under the stale answer admitted %d of 6, want 6 (ten per hour, one used)", got)
		}
		if e.metric("sluice.external.stale_used") != 6 {
			t.Fatalf("stale_used %d", e.metric("sluice.external.stale_used"))
		}
	})
}

// TestExampleExternalLimitsGrpc runs examples/external-limits-grpc as
// shipped: its envoy.yaml on our host, and its service, main.go, built and
// started as a team would run it.
func TestExampleExternalLimitsGrpc(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "limits-grpc")
	if out, err := exec.Command("go", "build", "-o", bin, "../examples/external-limits-grpc").CombinedOutput(); err != nil {
		t.Fatalf("building the example's service: %v\n%s", err, out)
	}
	addr := testkit.ClosedAddr(t)
	var logs testkit.SyncBuffer
	svc := exec.Command(bin, "-addr", addr)
	svc.Stdout, svc.Stderr = &logs, &logs
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = svc.Process.Kill()
		_ = svc.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "limits service on") {
		if time.Now().After(deadline) {
			t.Fatalf("the example's service did not start: %s", logs.String())
		}
		time.Sleep(10 * time.Millisecond) // polling a real condition with a deadline
	}
	env := startExampleWith(t, "external-limits-grpc", echo.Handler("external-limits-grpc"), map[string]string{"limits-grpc": addr})
	c := clientFrom("127.0.0.1")
	tenant := func(id string) map[string]string { return map[string]string{"x-tenant-id": id} }
	got, el := env.burst(t, c, 40, "GET", "/", tenant("acme"))
	wantWithinBucket(t, "acme (gold)", got, 30, 20, el)
	got, el = env.burst(t, c, 6, "GET", "/", tenant("globex"))
	wantWithinBucket(t, "globex (free)", got, 2, 1, el)
	// Without a tenant the service refuses the lookup: the fallback's
	// 100/s with a burst of 50 applies.
	got, el = env.burst(t, c, 20, "GET", "/", nil)
	if got != 20 {
		t.Fatalf("without a tenant admitted %d of 20 in %v, want all under the fallback", got, el)
	}
	prom := env.prometheus(t)
	if n := metric(t, prom, "sluice_external_errors_http_status"); n < 1 {
		t.Fatalf("the refused lookups were not counted: %v", n)
	}
	if n := metric(t, prom, "sluice_external_lookups"); n < 3 {
		t.Fatalf("%v lookups, want one per tenant and the refused ones", n)
	}
}
