package engine

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
	"github.com/sluice-proxy/sluice/filter/limitsvc"
)

// fakeGrpcLimits plays the limits service over gRPC: it reads each lookup
// as a GetLimitsRequest and answers from quotas by tenant, or as reply
// says when set.
type fakeGrpcLimits struct {
	t      *testing.T
	quotas map[string]limitsvc.Limits
	// reply, when set, answers instead: a message, or a status when code
	// is not 0; answered false leaves the call without an answer.
	reply func(c *hosttest.GrpcCall) (msg []byte, code int, answered bool)
	calls map[string]int
	seen  map[*hosttest.GrpcCall]bool
	last  *hosttest.GrpcCall
}

func newGrpcExtHarness(t *testing.T, cfg string, quotas map[string]limitsvc.Limits) (*distHarness, *fakeGrpcLimits) {
	d := newDistHarness(t, cfg, nil)
	f := &fakeGrpcLimits{t: t, quotas: quotas, calls: map[string]int{}, seen: map[*hosttest.GrpcCall]bool{}}
	d.grpcLimits = f
	return d, f
}

// pumpGrpc answers the gRPC callouts not seen yet, in the root context.
func (d *distHarness) pumpGrpc() int {
	answered := 0
	for _, c := range d.f.Caller.PendingGrpc() {
		f := d.grpcLimits
		if f == nil {
			d.t.Fatalf("gRPC callout to %q with no gRPC service in the test", c.ServiceName)
		}
		if f.seen[c] {
			continue
		}
		f.seen[c] = true
		d.callouts++
		d.f.Stream.Current = 0
		if f.answer(c) {
			answered++
		}
	}
	return answered
}

func (f *fakeGrpcLimits) answer(c *hosttest.GrpcCall) bool {
	f.t.Helper()
	f.last = c
	parse := limitsvc.ParseLookupProto
	if bytes.HasPrefix(c.Msg, []byte("{")) {
		parse = limitsvc.ParseLookupJSON // codec "json"
	}
	l, err := parse(c.Msg)
	if err != nil {
		f.t.Fatalf("lookup %q is neither form of the request: %v", c.Msg, err)
	}
	tenant := ""
	for _, kv := range l.Headers {
		if kv[0] == "x-tenant-id" {
			tenant = kv[1]
		}
	}
	f.calls[tenant]++
	if f.reply != nil {
		msg, code, ok := f.reply(c)
		switch {
		case !ok:
			return false
		case code != 0:
			c.Close(code, "from the test")
		default:
			c.Reply(msg)
		}
		return true
	}
	q, ok := f.quotas[tenant]
	if !ok {
		c.Close(5, "no such tenant") // NOT_FOUND
		return true
	}
	c.Reply(q.AppendProto(nil))
	return true
}

// grpcExtConfig is extConfig reaching the service over gRPC.
func grpcExtConfig(grpc, extra string) string {
	return `{"external":{"grpc":` + grpc + `,"timeout":"100ms","forward_headers":["x-tenant-id"],"cache_ttl":"60s",` +
		`"stale_ttl":"10s","fallback":{"limit":4,"window":"1h","key":["header:x-tenant-id"]}` + extra + `}}`
}

var grpcQuotas = map[string]limitsvc.Limits{
	"acme":    {Average: 3, Period: "1h", TenantKey: "acme"},
	"initech": {Average: 5, Period: "1h", TenantKey: "initech"},
}

// TestExternalGrpcTenantsGetTheirQuotas: over gRPC, each tenant gets the
// answered quota, one call per tenant (the rest are cache hits), sent to
// the configured cluster as a GrpcService with its metadata and timeout.
func TestExternalGrpcTenantsGetTheirQuotas(t *testing.T) {
	d, f := newGrpcExtHarness(t, grpcExtConfig(`{"cluster":"limits-grpc","authority":"limits.internal",`+
		`"initial_metadata":{"x-api-key":"s3cret"}}`, ""), grpcQuotas)
	if got := admitted(t, d, "acme", 6); got != 3 {
		t.Fatalf("acme admitted %d of 6, want its quota 3", got)
	}
	if got := admitted(t, d, "initech", 8); got != 5 {
		t.Fatalf("initech admitted %d of 8, want its quota 5", got)
	}
	if f.calls["acme"] != 1 || f.calls["initech"] != 1 || len(d.f.Caller.Calls) != 0 {
		t.Fatalf("gRPC lookups %v and %d HTTP callouts, want one gRPC lookup per tenant", f.calls, len(d.f.Caller.Calls))
	}
	c := f.last
	if want := host.AppendGrpcService(nil, "limits-grpc", "limits.internal"); !bytes.Equal(c.Service, want) {
		t.Fatalf("service %x, want the GrpcService %x", c.Service, want)
	}
	if c.ServiceName != "edgequota.ratelimit.v1.RateLimitService" || c.Method != "GetLimits" || c.From != 0 {
		t.Fatalf("call to %s/%s from context %d", c.ServiceName, c.Method, c.From)
	}
	if len(c.Metadata) != 1 || c.Metadata[0] != [2]string{"x-api-key", "s3cret"} || c.Timeout.Milliseconds() != 100 {
		t.Fatalf("metadata %v, timeout %v", c.Metadata, c.Timeout)
	}
	l, _ := limitsvc.ParseLookupProto(c.Msg)
	if l.Method != "GET" || l.Path != "/api" || len(l.Headers) != 1 || l.Headers[0] != [2]string{"x-tenant-id", "initech"} {
		t.Fatalf("lookup %+v", l)
	}
	if hits, misses := d.counter("sluice.external.cache_hits"), d.counter("sluice.external.cache_misses"); hits != 12 || misses != 2 {
		t.Fatalf("cache hits %d, misses %d; want 12 and 2", hits, misses)
	}
}

// TestExternalGrpcCacheFields: cache_max_age_seconds and cache_no_store
// of the message decide the answer's life as over HTTP.
func TestExternalGrpcCacheFields(t *testing.T) {
	quotas := map[string]limitsvc.Limits{
		"acme":    {Average: 100, Period: "1h", TenantKey: "acme"},
		"short":   {Average: 100, Period: "1h", TenantKey: "short", CacheMaxAgeSeconds: 5},
		"nostore": {Average: 100, Period: "1h", TenantKey: "nostore", CacheNoStore: true},
	}
	d, f := newGrpcExtHarness(t, grpcExtConfig(`{"cluster":"limits-grpc"}`, ""), quotas)
	for _, tenant := range []string{"acme", "short", "nostore"} {
		admitted(t, d, tenant, 3)
	}
	if f.calls["acme"] != 1 || f.calls["short"] != 1 || f.calls["nostore"] != 3 {
		t.Fatalf("lookups %v: want acme and short cached, nostore asked every time", f.calls)
	}
	d.now = d.now.Add(6e9)
	for _, tenant := range []string{"acme", "short"} {
		admitted(t, d, tenant, 1)
	}
	if f.calls["acme"] != 1 || f.calls["short"] != 2 {
		t.Fatalf("lookups %v after 6s: want short (max age 5s) asked again, acme (cache_ttl 60s) not", f.calls)
	}
}

// TestExternalGrpcFailuresFallBack: every way a gRPC lookup fails (each
// status, the timeout, a refused call, a malformed reply) leaves the
// request to the fallback (4 per hour) with no answer cached, counted
// under its kind; with an answer within stale_ttl, that answer decides.
func TestExternalGrpcFailuresFallBack(t *testing.T) {
	cases := []struct {
		name, kind string
		code       int
		msg        []byte
		refuse     bool
	}{
		{"deadline exceeded", "timeout", host.GrpcDeadlineExceeded, nil, false},
		{"unavailable", "unavailable", host.GrpcUnavailable, nil, false},
		{"internal", "http_status", 13, nil, false},
		{"unimplemented", "http_status", 12, nil, false},
		{"permission denied", "http_status", 7, nil, false},
		{"empty message", "malformed", 0, []byte{}, false},
		{"garbage", "malformed", 0, []byte("\xff\xff\xff"), false},
		{"refused", "unavailable", 0, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, f := newGrpcExtHarness(t, grpcExtConfig(`{"cluster":"limits-grpc"}`, ""), nil)
			f.reply = func(*hosttest.GrpcCall) ([]byte, int, bool) { return tc.msg, tc.code, true }
			if tc.refuse {
				d.f.Caller.Fail = errTest
			}
			if got := admitted(t, d, "acme", 6); got != 4 {
				t.Fatalf("admitted %d of 6, want the fallback's 4", got)
			}
			if got := d.counter("sluice.external.errors." + tc.kind); got == 0 {
				t.Fatalf("errors.%s not counted: %v", tc.kind, d.f.Metrics.Values)
			}
			if got := d.counter("sluice.external.fallback_used"); got != 6 {
				t.Fatalf("fallback_used %d, want 6", got)
			}
		})
	}
	t.Run("stale answer", func(t *testing.T) {
		d, f := newGrpcExtHarness(t, grpcExtConfig(`{"cluster":"limits-grpc"}`, ""),
			map[string]limitsvc.Limits{"acme": {Average: 100, Period: "1h", TenantKey: "acme", CacheMaxAgeSeconds: 1}})
		admitted(t, d, "acme", 1)
		d.now = d.now.Add(2e9)
		f.reply = func(*hosttest.GrpcCall) ([]byte, int, bool) { return nil, host.GrpcUnavailable, true }
		if got := admitted(t, d, "acme", 10); got != 10 {
			t.Fatalf("admitted %d of 10, want the stale answer's 100 per hour", got)
		}
		if d.counter("sluice.external.stale_used") == 0 {
			t.Fatal("stale_used not counted")
		}
	})
}

// TestExternalGrpcUnansweredCallTimesOut: a call whose close never comes
// is given up by the watchdog after the timeout, and the request is
// decided by the fallback.
func TestExternalGrpcUnansweredCallTimesOut(t *testing.T) {
	d, f := newGrpcExtHarness(t, grpcExtConfig(`{"cluster":"limits-grpc"}`, ""), nil)
	f.reply = func(*hosttest.GrpcCall) ([]byte, int, bool) { return nil, 0, false }
	o := d.doHeaders(tenantHeaders("acme"))
	if o.status != 200 || d.counter("sluice.external.errors.timeout") != 1 || d.counter("sluice.external.fallback_used") != 1 {
		t.Fatalf("status %d, metrics %v: want a timeout and the fallback", o.status, d.f.Metrics.Values)
	}
}

// TestExternalGrpcBreakerOpens: five failed calls for a key open its
// breaker; no call is made while it is open, and another key still asks.
func TestExternalGrpcBreakerOpens(t *testing.T) {
	d, f := newGrpcExtHarness(t, grpcExtConfig(`{"cluster":"limits-grpc"}`, ""), grpcQuotas)
	f.reply = func(*hosttest.GrpcCall) ([]byte, int, bool) { return nil, host.GrpcUnavailable, true }
	admitted(t, d, "acme", 8)
	if f.calls["acme"] != 5 || d.counter("sluice.external.breaker.opens") != 1 {
		t.Fatalf("calls %v, opens %d: want 5 calls, then the breaker open", f.calls, d.counter("sluice.external.breaker.opens"))
	}
	f.reply = nil
	if got := admitted(t, d, "initech", 1); got != 1 || f.calls["initech"] != 1 {
		t.Fatalf("initech: admitted %d, calls %v: another key's breaker is its own", got, f.calls)
	}
}

// TestExternalGrpcJSONCodec: with codec "json" the message is the HTTP
// form's JSON body, and the answer is read as JSON.
func TestExternalGrpcJSONCodec(t *testing.T) {
	d, f := newGrpcExtHarness(t, grpcExtConfig(`{"cluster":"limits-grpc","codec":"json"}`, ""), nil)
	f.reply = func(c *hosttest.GrpcCall) ([]byte, int, bool) {
		if !strings.HasPrefix(string(c.Msg), `{"method":"GET","path":"/api","headers":{"x-tenant-id":"acme"}}`) {
			t.Fatalf("message %q, want the JSON lookup", c.Msg)
		}
		return []byte(`{"average":2,"period":"1h","tenant_key":"acme"}`), 0, true
	}
	if got := admitted(t, d, "acme", 5); got != 2 {
		t.Fatalf("admitted %d of 5, want the answered 2", got)
	}
}

// TestExternalGrpcHostileReplies: replies a broken or hostile service
// could send are failed lookups or the answer they state, never a panic:
// none admits more than the fallback or the stated rate, and none
// touches another tenant's bucket.
func TestExternalGrpcHostileReplies(t *testing.T) {
	field := func(num protowire.Number, typ protowire.Type, v uint64, s string) []byte {
		b := protowire.AppendTag(nil, num, typ)
		switch typ {
		case protowire.VarintType:
			return protowire.AppendVarint(b, v)
		case protowire.BytesType:
			return protowire.AppendString(b, s)
		case protowire.Fixed64Type:
			return protowire.AppendFixed64(b, v)
		}
		return protowire.AppendFixed32(b, uint32(v))
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	period := field(3, protowire.BytesType, 0, "1h")
	replies := map[string][]byte{
		"no average":               period,
		"negative average":         cat(field(1, protowire.VarintType, uint64(1<<64-5), ""), period),
		"huge average":             cat(field(1, protowire.VarintType, 1<<62, ""), period),
		"average as bytes":         cat(field(1, protowire.BytesType, 0, "100"), period),
		"period as varint":         cat(field(1, protowire.VarintType, 2, ""), field(3, protowire.VarintType, 1, "")),
		"period nonsense":          cat(field(1, protowire.VarintType, 2, ""), field(3, protowire.BytesType, 0, "soon")),
		"tenant_key not UTF-8":     cat(field(1, protowire.VarintType, 2, ""), period, field(4, protowire.BytesType, 0, "initech\xff")),
		"tenant_key too long":      cat(field(1, protowire.VarintType, 2, ""), period, field(4, protowire.BytesType, 0, strings.Repeat("i", 257))),
		"failure_code 200":         cat(field(1, protowire.VarintType, 2, ""), period, field(6, protowire.VarintType, 200, "")),
		"truncated":                cat(field(1, protowire.VarintType, 2, ""), period)[:5],
		"group":                    cat(protowire.AppendTag(nil, 1, protowire.StartGroupType), period),
		"max age over a week":      cat(field(1, protowire.VarintType, 2, ""), period, field(8, protowire.VarintType, 1<<40, "")),
		"fixed64 average":          cat(field(1, protowire.Fixed64Type, 2, ""), period),
		"over 64 KiB":              cat(field(1, protowire.VarintType, 2, ""), period, field(99, protowire.BytesType, 0, strings.Repeat("x", 70000))),
		"malformed, names initech": cat(field(1, protowire.VarintType, 1000, ""), period, field(4, protowire.BytesType, 0, "initech"), field(6, protowire.VarintType, 1, "")),
	}
	for name, msg := range replies {
		t.Run(name, func(t *testing.T) {
			d, f := newGrpcExtHarness(t, grpcExtConfig(`{"cluster":"limits-grpc"}`, ""), grpcQuotas)
			f.reply = func(c *hosttest.GrpcCall) ([]byte, int, bool) {
				for _, kv := range mustLookup(t, c).Headers {
					if kv[1] == "mallory" {
						return msg, 0, true
					}
				}
				q := grpcQuotas["initech"]
				return q.AppendProto(nil), 0, true
			}
			if got := admitted(t, d, "mallory", 8); got != 4 {
				t.Fatalf("mallory admitted %d of 8, want the fallback's 4", got)
			}
			if d.counter("sluice.external.errors.malformed") == 0 {
				t.Fatalf("not counted as malformed: %v", d.f.Metrics.Values)
			}
			if got := admitted(t, d, "initech", 8); got != 5 {
				t.Fatalf("initech admitted %d of 8, want its whole quota 5", got)
			}
		})
	}
}

var errTest = errors.New("refused by the test")

func mustLookup(t *testing.T, c *hosttest.GrpcCall) limitsvc.Lookup {
	t.Helper()
	l, err := limitsvc.ParseLookupProto(c.Msg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestExternalGrpcBackendURLRoutes: an answer's backend_url routes its
// tenant over gRPC as over HTTP, only when allowed.
func TestExternalGrpcBackendURLRoutes(t *testing.T) {
	quotas := map[string]limitsvc.Limits{
		"acme":    {Average: 100, Period: "1h", TenantKey: "acme", BackendURL: "backend_a"},
		"mallory": {Average: 100, Period: "1h", TenantKey: "mallory", BackendURL: "http://attacker.example/"},
	}
	d, _ := newGrpcExtHarness(t, grpcExtConfig(`{"cluster":"limits-grpc"}`,
		`,"route_header":"x-sluice-backend","allowed_routes":["backend_a"]`), quotas)
	if o := d.doHeaders(tenantHeaders("acme")); o.status != 200 {
		t.Fatalf("acme: %d", o.status)
	}
	if got := routeValues(d.f.Stream.Headers); len(got) != 1 || got[0] != "backend_a" {
		t.Fatalf("acme: route header %q, want [backend_a]", got)
	}
	if o := d.doHeaders(tenantHeaders("mallory", [2]string{"x-sluice-backend", "backend_a"})); o.status != 200 {
		t.Fatalf("mallory: %d", o.status)
	}
	if got := routeValues(d.f.Stream.Headers); len(got) != 0 || d.counter("sluice.external.routes_disallowed") != 1 {
		t.Fatalf("mallory: route header %q, routes_disallowed %d; want none and 1", got, d.counter("sluice.external.routes_disallowed"))
	}
}
