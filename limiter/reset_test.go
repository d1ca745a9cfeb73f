package limiter

import (
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// Reset refills the key's own slot, for every algorithm, and nothing else:
// another key keeps its consumption, and a key without a slot of its own
// (never seen, or homeless on an overflow bucket it shares) is reported
// as not held and leaves the bucket as it was.
func TestResetRefillsOnlyTheKeysOwnSlot(t *testing.T) {
	for _, l := range []Limit{
		{Algorithm: TokenBucket, Rate: 5, Period: time.Hour},
		{Algorithm: FixedWindow, Rate: 5, Period: time.Hour},
		{Algorithm: SlidingWindow, Rate: 5, Period: time.Hour},
	} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			tab := newTable(t, store.NewMemory(), l, TableConfig{Prefix: "r.", Slots: 16})
			now := time.Unix(1_700_000_000, 0).UnixNano()
			drain(t, tab, "tenant", now)
			drain(t, tab, "other", now)
			held, err := tab.Reset("tenant", now)
			if err != nil || !held {
				t.Fatalf("Reset: held %v, %v", held, err)
			}
			if r, _ := tab.Peek("tenant", now, 0); r.Remaining != 5 {
				t.Fatalf("remaining after the reset %d, want 5", r.Remaining)
			}
			if n := drain(t, tab, "tenant", now); n != 5 {
				t.Fatalf("admitted %d after the reset, want 5", n)
			}
			if r, _ := tab.Peek("other", now, 0); r.Remaining != 0 {
				t.Fatalf("the other key has %d after tenant's reset, want 0", r.Remaining)
			}
			if held, err := tab.Reset("never-seen", now); held || err != nil {
				t.Fatalf("Reset of an unseen key: held %v, %v", held, err)
			}
		})
	}
}

// A key decided on its overflow bucket holds no slot: Reset must not
// refill that bucket, which other homeless keys share.
func TestResetLeavesTheOverflowBucket(t *testing.T) {
	l := Limit{Rate: 2, Period: time.Hour}
	tab := newTable(t, store.NewMemory(), l, TableConfig{Prefix: "o.", Slots: 1, OverflowSlots: 1, ForgetMaxUsed: 1})
	now := time.Unix(1_700_000_000, 0).UnixNano()
	drain(t, tab, "resident", now) // takes the only slot, live for an hour
	if n := drain(t, tab, "homeless", now); n != 2 {
		t.Fatalf("the homeless key was admitted %d on the overflow bucket, want 2", n)
	}
	if held, err := tab.Reset("homeless", now); held || err != nil {
		t.Fatalf("Reset of a homeless key: held %v, %v", held, err)
	}
	if r, _ := tab.Peek("another-homeless", now, 1); r.Allowed {
		t.Fatal("the shared overflow bucket was refilled")
	}
}
