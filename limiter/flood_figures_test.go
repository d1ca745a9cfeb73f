package limiter

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// TestFloodFigures measures issue #13's flood (SLUICE_BENCH=1, -v): a
// 5-per-minute limit with the default table, one existing key that made
// one request just before, then 200,000 distinct keys with one request
// each spread evenly over 15s across two workers, then 10 requests of the
// existing key. It prints how many first requests of new keys were
// refused and what the existing key got; it asserts nothing about them
// (TestTableActiveKeyKeepsStateUnderFlood does). It uses only the API
// the table had before the fix, so the same file measures both.
func TestFloodFigures(t *testing.T) {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 to measure")
	}
	const keys = 200_000
	l := Limit{Rate: 5, Period: time.Minute}
	s := store.NewMemory()
	workers := [2]*Table{}
	for i := range workers {
		tab, err := NewTable(s, l, TableConfig{})
		if err != nil {
			t.Fatal(err)
		}
		workers[i] = tab
	}
	if r, _ := workers[0].AllowN("existing", t0, 1); !r.Allowed {
		t.Fatal("existing key's first request refused")
	}
	span := int64(15 * time.Second)
	refused := 0
	for i := 0; i < keys; i++ {
		now := t0 + 1 + span*int64(i)/keys
		r, err := workers[i%2].AllowN("new-"+strconv.Itoa(i), now, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			refused++
		}
	}
	end := t0 + span
	got := 0
	for i := 0; i < 10; i++ {
		if r, _ := workers[i%2].AllowN("existing", end, 1); r.Allowed {
			got++
		}
	}
	own, _ := l.Decide(State{}, t0, 1)
	t.Logf("new keys: %d of %d first requests refused (%.1f%%)", refused, keys, 100*float64(refused)/keys)
	t.Logf("existing key: %d of 10 requests admitted after the flood; its own bucket holds %d", got, pureDrain(l, own, end))
	t.Logf("shared-data keys: %d; worker stats %+v / %+v", s.Len(), workers[0].Stats(), workers[1].Stats())
}
