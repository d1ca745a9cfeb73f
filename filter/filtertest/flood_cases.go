package filtertest

import (
	"strconv"
	"testing"
)

// Cases of a limit's slot table under a flood of new keys (issue #23).

func init() { Cases = append(Cases, floodCases...) }

var floodCases = []Case{
	{
		// With a cap of one unit (the old default) the 2-unit keys could
		// not be forgotten: newcomers shared drained overflow buckets, and
		// clients forgotten earlier came back to them and got 429.
		Name:    "a flood of keys using two units each locks out neither a client nor a newcomer",
		Config:  `{"limits":[{"name":"f","key":["header:x-id"],"limit":5,"window":"1m","slots":64}]}`,
		Workers: 2,
		Run: func(t *testing.T, h Harness) {
			id := func(name string) func(int) Request {
				return func(i int) Request { return get("/").with("x-id", name).on(i % 2) }
			}
			for i := range 10 {
				if got := admitted(t, h, 1, id("client-"+strconv.Itoa(i))); got != 1 {
					t.Fatalf("client %d's first request refused", i)
				}
			}
			for i := range 400 {
				if got := admitted(t, h, 2, id("flood-"+strconv.Itoa(i))); got != 2 {
					t.Fatalf("flood key %d admitted %d of its 2 requests, want both: its own allowance", i, got)
				}
			}
			for i := range 10 {
				// Its own 4 left, or 5 if it was forgotten with its 1 unit.
				if got := admitted(t, h, 6, id("client-"+strconv.Itoa(i))); got != 4 && got != 5 {
					t.Errorf("client %d admitted %d after the flood, want its own 4 (5 if forgotten)", i, got)
				}
				if got := admitted(t, h, 6, id("late-"+strconv.Itoa(i))); got != 5 {
					t.Errorf("newcomer %d admitted %d, want its own 5", i, got)
				}
			}
			wantCounter(t, h, "sluice.limit.f.overflow", 0)
			if h.Counter(t, "sluice.limit.f.forgotten") == 0 {
				t.Fatal("no key forgotten: the flood did not fill the table")
			}
		},
	},
}
