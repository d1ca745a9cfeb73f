package limiter

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// TestWithLimitSharesSlots decides keys under many rates. With room, each
// key gets exactly its own rate at once; crowded, they stay within the one
// table's slots, and a key arriving after the others refilled takes an
// idle slot over losslessly, counted in the base table's stats.
func TestWithLimitSharesSlots(t *testing.T) {
	for _, tc := range []struct {
		slots, keys int
		spread      time.Duration
	}{{1024, 20, 0}, {64, 200, 2 * time.Minute}} {
		s := store.NewMemory()
		base := newTable(t, s, Limit{Rate: 1, Period: time.Second}, TableConfig{Slots: tc.slots, Prefix: "p."})
		for i := range tc.keys {
			rate := int64(1 + i%7)
			tab, err := base.WithLimit(Limit{Rate: rate, Period: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			key := "tenant-" + strconv.Itoa(i)
			if got := drain(t, tab, key, t0+int64(i)*int64(tc.spread)); got != int(rate) {
				t.Fatalf("%d slots: %s at rate %d admitted %d", tc.slots, key, rate, got)
			}
		}
		if s.Len() > tc.slots {
			t.Fatalf("%d shared-data keys, want at most the base table's %d slots", s.Len(), tc.slots)
		}
		if tc.spread > 0 && base.Stats().LosslessTakeovers == 0 {
			t.Fatal("200 keys in 64 slots took no slot over, or the derived tables' stats are not shared")
		}
	}
}

// TestWithLimitCarriesState checks that a key whose rate changes (a tenant
// changing plan) does not start full: a token bucket's state is a time, so
// the share of the bucket used is what carries over.
func TestWithLimitCarriesState(t *testing.T) {
	s := store.NewMemory()
	base := newTable(t, s, Limit{Rate: 1, Period: time.Second}, TableConfig{})
	small, err := base.WithLimit(Limit{Rate: 10, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	big, err := base.WithLimit(Limit{Rate: 20, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if r, _ := small.AllowN("acme", t0, 1); !r.Allowed {
			t.Fatalf("request %d of the small plan denied", i)
		}
	}
	// Half of the small bucket is used, so half of the big one is left.
	if got := drain(t, big, "acme", t0); got != 10 {
		t.Fatalf("after an upgrade admitted %d more, want 10", got)
	}
	if _, err := base.WithLimit(Limit{Rate: 0, Period: time.Second}); err == nil {
		t.Fatal("an invalid limit was accepted")
	}
}
