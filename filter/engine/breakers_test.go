package engine

import (
	"fmt"
	"testing"
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
