package importtest

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/ratelimitsvc"
)

// TB is what Compare needs of a test.
type TB interface {
	Helper()
	Fatal(args ...any)
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// Compare sends sc's traffic to the real service (asked with the
// descriptors Envoy's actions make) and to Sluice (sluice answers whether
// it admits request i, sent at the time the service was asked), and
// reports every request they decide differently. Both count in the wall
// clock's windows: it returns false, having judged nothing, when a request
// straddled a window edge, and the caller runs the scenario again on
// fresh state.
func Compare(t TB, sc RatelimitScenario, svc *ratelimitsvc.Service, sluice func(i int, r *RatelimitRequest, at time.Time) bool) bool {
	t.Helper()
	// Start well inside a second, so that a run of a few hundred
	// requests rarely straddles one.
	if ms := time.Now().Nanosecond() / 1e6; ms > 600 {
		time.Sleep(time.Duration(1000-ms+5) * time.Millisecond)
	}
	var mismatches []string
	denials, overcounted := 0, 0
	for i, req := range sc.Traffic {
		if req == nil {
			// The next window of a per-second rule.
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 5*time.Millisecond)))
			continue
		}
		descs, err := Descriptors(sc.RateLimits, req)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		over, err := svc.ShouldRateLimit(sc.Domain, descs)
		if err != nil {
			t.Fatal(err)
		}
		admitted := sluice(i, req, t0)
		t1 := time.Now()
		for _, u := range sc.Units {
			if t0.UnixNano()/int64(u) != t1.UnixNano()/int64(u) {
				t.Logf("request %d straddled a %v window edge; running again", i, u)
				return false
			}
		}
		if over {
			denials++
		}
		switch {
		case admitted == over && admitted && sc.Overcounts:
			overcounted++
		case admitted == over:
			mismatches = append(mismatches, fmt.Sprintf("request %d %v %v: service over limit %v, Sluice admitted %v", i, req.Client, req.Headers, over, admitted))
		}
	}
	if len(mismatches) > 0 {
		t.Errorf("%d of %d requests decided differently:\n%s", len(mismatches), len(sc.Traffic), strings.Join(mismatches[:min(len(mismatches), 10)], "\n"))
	}
	if sc.Overcounts && overcounted == 0 {
		t.Errorf("the service never refused what Sluice admitted: the traffic does not show the documented difference")
	}
	if sc.WantDenials && denials == 0 {
		t.Errorf("the service refused nothing: the traffic does not reach the limits")
	}
	if !sc.WantDenials && denials > 0 {
		t.Errorf("the service refused %d requests of a config that should never apply", denials)
	}
	return true
}
