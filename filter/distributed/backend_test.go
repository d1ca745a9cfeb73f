package distributed

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
	"github.com/sluice-proxy/sluice/limiter"
)

// These tests drive the backend natively over the host fakes: the test
// plays Envoy (it answers each callout and runs the tick) and Redis (it
// writes the script replies).

type rig struct {
	b      *Backend
	f      *hosttest.Fakes
	wakes  int
	leases int
	lim    *Limit
}

func newRig(t *testing.T, retries int) *rig {
	t.Helper()
	return newRigFrom(t, `{"limits":[{"name":"api","key":[],"requests_per_second":10,"mode":"hybrid"}],
		"backend":{"cluster":"redis","timeout":"50ms","retries":`+string(rune('0'+retries))+`,
		"breaker":{"failure_threshold":3,"window":"30s","open_timeout":"1s","half_open_max_requests":1}}}`)
}

// rigSeed seeds the jitter source of every rig; jitterDraws replays it.
var rigSeed = [2]uint64{1, 2}

func jitterDraws() *rand.Rand { return rand.New(rand.NewPCG(rigSeed[0], rigSeed[1])) }

func newRigFrom(t *testing.T, cfgJSON string) *rig {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgJSON))
	if err != nil {
		t.Fatal(err)
	}
	hc, f := hosttest.New(time.Unix(1_700_000_000, 0))
	r := &rig{f: f, lim: NewLimit("api")}
	r.b, err = New(&hc, cfg.Backend, func() { r.wakes++ }, func(time.Time) { r.leases++ })
	if err != nil {
		t.Fatal(err)
	}
	r.b.random = jitterDraws().Uint64
	return r
}

// pending is the one callout out.
func (r *rig) pending(t *testing.T) *hosttest.Call {
	t.Helper()
	p := r.f.Caller.Pending()
	if len(p) != 1 {
		t.Fatalf("%d calls out, want 1", len(p))
	}
	return p[0]
}

func (r *rig) tick(d time.Duration) {
	r.f.Clock.Advance(d)
	r.b.Tick(r.f.Clock.Now)
}

var (
	tenPerSecond      = limiter.Limit{Rate: 10, Period: time.Second}
	thousandPerSecond = limiter.Limit{Rate: 1000, Period: time.Second}
)

type decision struct {
	n   int
	res limiter.Result
	err error
}

func (r *rig) decide(t *testing.T, key string) *decision {
	t.Helper()
	d := &decision{}
	k := r.lim.Key(key, tenPerSecond)
	_, err := r.b.Decide(&k, 1, r.f.Clock.Now, func(_ time.Time, res limiter.Result, err error) {
		d.n++
		d.res, d.err = res, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDecideRetriesAFailedCallWithinItsBudget(t *testing.T) {
	r := newRig(t, 1)
	d := r.decide(t, "k")
	call := r.pending(t)
	if call.Cluster != "redis" || !strings.Contains(call.Headers[1][1], "EVALSHA") {
		t.Fatalf("call to %q, headers %v", call.Cluster, call.Headers)
	}
	call.Answer(503, []byte("busy"), nil)
	if d.n != 0 || len(r.f.Caller.Pending()) != 0 {
		t.Fatalf("a retryable failure ended the decision (%d) or retried at once", d.n)
	}
	wait := breaker.Jitter(Backoff(0), config.DefaultBackendJitterPercent, jitterDraws().Uint64())
	r.tick(wait - 1)
	if len(r.f.Caller.Pending()) != 0 {
		t.Fatal("retried before its backoff")
	}
	r.tick(1)
	r.pending(t).Answer(200, []byte(`{"EVALSHA":[0,0,250,2000,1,17]}`), nil)
	if d.n != 1 || d.err != nil || d.res.Allowed || d.res.RetryAfter != 250*time.Millisecond || d.res.Period != time.Second {
		t.Fatalf("decision %+v", *d)
	}
	if r.f.Metrics.Values["sluice.backend.calls"] != 2 || r.f.Metrics.Values["sluice.backend.errors.unavailable"] != 1 {
		t.Fatalf("metrics %v", r.f.Metrics.Values)
	}
}

func TestWatchdogEndsALostReply(t *testing.T) {
	r := newRig(t, 0)
	d := r.decide(t, "k")
	lost := r.pending(t)
	r.tick(50*time.Millisecond + host.WatchdogSlack - time.Millisecond)
	if d.n != 0 {
		t.Fatal("timed out before timeout + slack")
	}
	r.tick(time.Millisecond)
	if d.n != 1 || backend.KindOf(d.err) != backend.KindTimeout {
		t.Fatalf("decision %+v, want a timeout", *d)
	}
	lost.Answer(200, []byte(`{"EVALSHA":[1,5,0,1000,0,17]}`), nil)
	if d.n != 1 {
		t.Fatal("a reply after the watchdog decided again")
	}
}

func TestCancelledCallIsNeitherDecidedNorRetried(t *testing.T) {
	r := newRig(t, 1)
	d := &decision{}
	k := r.lim.Key("k", tenPerSecond)
	c, err := r.b.Decide(&k, 1, r.f.Clock.Now, func(time.Time, limiter.Result, error) { d.n++ })
	if err != nil {
		t.Fatal(err)
	}
	r.b.Cancel(c)
	r.pending(t).Answer(503, nil, nil)
	r.tick(time.Second)
	if d.n != 0 || len(r.f.Caller.Pending()) != 0 || r.b.Busy() {
		t.Fatalf("cancelled call: %d decisions, %d calls out, busy %v", d.n, len(r.f.Caller.Pending()), r.b.Busy())
	}
}

func TestBackendBreakerOpensAndRejectsWithoutACall(t *testing.T) {
	r := newRig(t, 0)
	for i := range 3 {
		d := r.decide(t, "k")
		r.pending(t).Answer(0, nil, backend.Timeout())
		if d.n != 1 || d.err == nil {
			t.Fatalf("failure %d: %+v", i, *d)
		}
	}
	calls := len(r.f.Caller.Calls)
	d := r.decide(t, "k")
	if len(r.f.Caller.Calls) != calls || d.n != 1 || !errors.Is(d.err, ErrBreakerOpen) {
		t.Fatalf("open breaker: %d new calls, decision %+v", len(r.f.Caller.Calls)-calls, *d)
	}
	if r.f.Metrics.Values["sluice.backend.breaker.opens"] != 1 || r.f.Metrics.Values["sluice.backend.breaker.state"] != 1 {
		t.Fatalf("metrics %v", r.f.Metrics.Values)
	}
}

func TestNegativeCacheIsPerKeyAndExpires(t *testing.T) {
	r := newRig(t, 0)
	a, b := r.lim.Key("a", tenPerSecond), r.lim.Key("b", tenPerSecond)
	now := r.f.Clock.Now
	r.b.Denied(&a, limiter.Result{RetryAfter: 300 * time.Millisecond}, now)
	if got := r.b.DeniedUntil(&a); got != now.Add(300*time.Millisecond).UnixNano() {
		t.Fatalf("a denied until %d", got)
	}
	if got := r.b.DeniedUntil(&b); got != 0 {
		t.Fatalf("b is denied until %d: a denial spilled over", got)
	}
	r.b.Denied(&a, limiter.Result{Allowed: true, RetryAfter: time.Hour}, now)
	if got := r.b.DeniedUntil(&a); got != now.Add(300*time.Millisecond).UnixNano() {
		t.Fatal("an admission moved the negative cache")
	}
}

// A first request claims the lease call and waits; the call goes out from
// the tick; the grant lands in shared data and wakes the waiters, which
// then spend it without another call.
func TestLeaseIsClaimedOnceFilledAndSpent(t *testing.T) {
	r := newRig(t, 0)
	k := r.lim.Key("k", thousandPerSecond)
	start := r.f.Clock.Now.UnixNano()
	out, _, _ := r.b.TryLease(&k, 1, start, true, r.f.Clock.Now)
	if out != LeaseWait || len(r.f.Caller.Calls) != 0 || r.wakes == 0 {
		t.Fatalf("first try: %v, %d calls, %d wakes; want a wait and a queued call", out, len(r.f.Caller.Calls), r.wakes)
	}
	if out, _, _ := r.b.TryLease(&k, 1, start, true, r.f.Clock.Now); out != LeaseWait {
		t.Fatalf("second try: %v", out)
	}
	r.tick(0)
	call := r.pending(t)
	if len(r.f.Caller.Calls) != 1 {
		t.Fatal("two lease calls for one key")
	}
	// The first lease of a key is a twentieth of its capacity.
	call.Answer(200, []byte(`{"EVALSHA":[50,950,0,50,0,9]}`), nil)
	if r.leases != 1 {
		t.Fatalf("onLease ran %d times", r.leases)
	}
	for i := range 5 {
		out, res, err := r.b.TryLease(&k, 1, start, false, r.f.Clock.Now)
		if out != LeaseTaken || !res.Allowed || res.Remaining != int64(49-i) || err != nil {
			t.Fatalf("spend %d: %v %+v %v", i, out, res, err)
		}
	}
	if len(r.f.Caller.Calls) != 1 {
		t.Fatal("spending the lease called Redis")
	}
	// Returned tokens are spendable again.
	r.b.ReturnTokens(&k, 1)
	if out, _, _ := r.b.TryLease(&k, 1, start, true, r.f.Clock.Now); out != LeaseTaken {
		t.Fatalf("after a return: %v", out)
	}
}

func TestLeaseWaitGivesUpWithinTheBudget(t *testing.T) {
	r := newRig(t, 0)
	k := r.lim.Key("k", tenPerSecond)
	start := r.f.Clock.Now.UnixNano()
	r.b.TryLease(&k, 1, start, true, r.f.Clock.Now)
	r.f.Clock.Advance(r.b.Budget)
	out, _, err := r.b.TryLease(&k, 1, start, false, r.f.Clock.Now)
	if out != LeaseFailed || backend.KindOf(err) != backend.KindTimeout {
		t.Fatalf("past the budget: %v %v", out, err)
	}
}
