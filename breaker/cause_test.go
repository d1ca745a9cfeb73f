package breaker

import (
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter/store"
)

func TestTransitionCauses(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	call := func(b *Breaker, fail bool) (Transition, Cause) {
		tk, d, err := b.Check(now)
		if err != nil {
			t.Fatal(err)
		}
		checked := b.LastCause()
		tr, err := b.Report(tk, Outcome{Failure: fail, Duration: time.Millisecond}, now)
		if err != nil {
			t.Fatal(err)
		}
		if tr == NoTransition {
			return d.Transition, checked
		}
		return tr, b.LastCause()
	}
	b := NewBreaker(mustMachine(t, Settings{FailureThreshold: 3, SuccessThreshold: 2, OpenTimeout: time.Second, HalfOpenMaxRequests: 1}), store.NewMemory(), "k")
	call(b, true)
	call(b, true)
	if tr, c := call(b, true); tr != Opened || c != (Cause{ReasonConsecutiveFailures, 3, 3}) {
		t.Fatalf("trip: %v %+v", tr, c)
	}
	now = now.Add(time.Second)
	if tr, c := call(b, false); tr != HalfOpened || c.Reason != ReasonOpenTimeout {
		t.Fatalf("half-open: %v %+v", tr, c)
	}
	if tr, c := call(b, true); tr != Reopened || c != (Cause{ReasonProbeFailed, 1, 2}) {
		t.Fatalf("failed probe after one success: %v %+v", tr, c)
	}
	now = now.Add(2 * time.Second)
	call(b, false) // half-opens, and a first successful probe
	if tr, c := call(b, false); tr != Recovered || c != (Cause{ReasonProbesSucceeded, 0, 2}) {
		t.Fatalf("recovery: %v %+v", tr, c)
	}

	rate := NewBreaker(mustMachine(t, Settings{FailureRatePercent: 50, Window: Window{Size: 4}, SuccessThreshold: 1, OpenTimeout: time.Second, HalfOpenMaxRequests: 1}), store.NewMemory(), "r")
	call(rate, true)
	call(rate, false)
	call(rate, false)
	if tr, c := call(rate, true); tr != Opened || c != (Cause{ReasonFailureRate, 2, 4}) {
		t.Fatalf("rate trip: %v %+v", tr, c)
	}
}
