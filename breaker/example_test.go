package breaker_test

import (
	"fmt"
	"time"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/limiter/store"
)

func Example() {
	m, err := breaker.NewMachine(breaker.Settings{
		FailureThreshold: 2,
		OpenTimeout:      10 * time.Second,
		SuccessThreshold: 1,
	})
	if err != nil {
		panic(err)
	}
	// One Breaker per worker; they share the store.
	b := breaker.NewBreaker(m, store.NewMemory(), "sluice.cb.backend")
	_ = b.Init()

	now := time.Unix(1_700_000_000, 0)
	for i := 0; i < 2; i++ {
		ticket, _, _ := b.Check(now)
		tr, _ := b.Report(ticket, breaker.Outcome{Failure: true}, now)
		fmt.Println("report:", tr)
	}
	_, d, _ := b.Check(now.Add(3 * time.Second))
	fmt.Println("allowed:", d.Allowed, "retry after:", d.RetryAfter)

	probe, d, _ := b.Check(now.Add(10 * time.Second))
	fmt.Println("probe:", probe.Probe(), d.Transition)
	tr, _ := b.Report(probe, breaker.Outcome{Duration: 20 * time.Millisecond}, now.Add(10*time.Second))
	fmt.Println("report:", tr)
	// Output:
	// report: none
	// report: opened
	// allowed: false retry after: 7s
	// probe: true half_opened
	// report: recovered
}
