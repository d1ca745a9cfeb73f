package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/breaker"
	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/host/hosttest"
)

// Each cluster has its own breaker instance, found by its name whether it
// is among the indexed first instances or only in the map: a failure
// opens the breaker of its own cluster and no other's.
func TestBreakerInstancesPerCluster(t *testing.T) {
	p, f := newNativePlugin(t, `{"breakers":[{"name":"b","failure_threshold":1}]}`)
	const clusters = indexedBreakerInstances + 3
	request := func(id uint32, cluster, status string) Verdict {
		f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}
		f.Stream.Properties = map[string]string{"xds.cluster_name": cluster}
		f.Stream.ResponseHeaderMap = [][2]string{{":status", status}}
		s := &Stream{}
		p.Begin(s, id)
		v := s.RequestHeaders()
		if v == Continue {
			s.ResponseHeaders()
		}
		s.Done()
		return v
	}
	id := uint32(1)
	for i := 0; i < clusters; i++ {
		if v := request(id, fmt.Sprintf("c%d", i), "200"); v != Continue {
			t.Fatalf("first request to c%d: %v", i, v)
		}
		id++
	}
	for _, failing := range []int{2, clusters - 1} {
		if v := request(id, fmt.Sprintf("c%d", failing), "503"); v != Continue {
			t.Fatalf("failing request to c%d: %v", failing, v)
		}
		id++
	}
	for i := 0; i < clusters; i++ {
		v := request(id, fmt.Sprintf("c%d", i), "200")
		id++
		if open := i == 2 || i == clusters-1; (v == Pause) != open {
			t.Errorf("c%d: verdict %v, want open=%v", i, v, open)
		}
	}
}

// A request through a limit and a breaker reads the clock once when its
// response is a quiet success, and reads it again at the response only
// when the breaker records the outcome: a failure is still reported, at
// the time it arrived.
func TestBreakerOutcomeReadsTheClockOnlyWhenRecorded(t *testing.T) {
	hc, f := hosttest.New(time.Unix(1_700_000_000, 0))
	reads := 0
	hc.Clock = func() time.Time { reads++; return f.Clock.Now }
	p := NewVM(hc).NewPlugin()
	cfg, err := config.Parse([]byte(`{"limits":[{"name":"l","key":[],"requests_per_second":1000}],
		"breakers":[{"name":"b","failure_threshold":2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.configure(cfg); err != nil {
		t.Fatal(err)
	}
	f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}
	f.Stream.Properties = map[string]string{"xds.cluster_name": "c"}
	for i, status := range []string{"200", "503", "204"} {
		f.Stream.ResponseHeaderMap = [][2]string{{":status", status}}
		reads = 0
		s := &Stream{}
		p.Begin(s, uint32(i+1))
		if v := s.RequestHeaders(); v != Continue {
			t.Fatalf("request %d: %v", i, v)
		}
		f.Clock.Advance(time.Millisecond)
		s.ResponseHeaders()
		s.Done()
		want := 1
		if status == "503" || i > 1 {
			// The failure, and a success after it (no longer quiet: it
			// ends a failure streak), are recorded at the response.
			want = 2
		}
		if reads != want {
			t.Errorf("status %s after %d requests: %d clock reads, want %d", status, i, reads, want)
		}
	}
	if got := f.Metrics.Values["sluice.breaker.b.failures"]; got != 1 {
		t.Fatalf("breaker failures %d, want 1", got)
	}
}

// TestHealthyBreakerLeavesRecordUnwritten: a breaker whose requests all
// succeed never writes its shared record, so each check's read finds
// nothing and returns no data (in the proxy, no call into the guest's
// allocator); a missing record reads as the fresh closed breaker, and the
// first failure creates it (breaker.TestBreakerCreationRaceWithoutInit
// covers two workers creating it at once).
func TestHealthyBreakerLeavesRecordUnwritten(t *testing.T) {
	p, f := newNativePlugin(t, `{"breakers":[{"name":"backend","failure_threshold":2}]}`)
	f.Stream.Headers = [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}
	f.Stream.Properties = map[string]string{"source.address": "10.0.0.1:5000", "xds.cluster_name": "backend"}
	s := &Stream{}
	serve := func(id uint32, status string) {
		t.Helper()
		f.Stream.ResponseHeaderMap = [][2]string{{":status", status}}
		f.Clock.Advance(time.Millisecond)
		p.Begin(s, id)
		if s.RequestHeaders() != Continue {
			t.Fatalf("request %d not admitted", id)
		}
		s.ResponseHeaders()
		s.Done()
	}
	for id := uint32(1); id <= 10; id++ {
		serve(id, "200")
	}
	if n := f.Store.Len(); n != 0 {
		t.Fatalf("%d shared-data keys after 10 successes, want none: a healthy breaker writes nothing", n)
	}
	serve(11, "503")
	if n := f.Store.Len(); n != 1 {
		t.Fatalf("%d shared-data keys after a failure, want the breaker's record", n)
	}
	serve(12, "503")
	if s := p.breakers[0].instance("backend"); s == nil {
		t.Fatal("no breaker instance")
	} else if st, err := s.Peek(); err != nil || st != breaker.Open {
		t.Fatalf("breaker %v %v after two failures, want open", st, err)
	}
}
