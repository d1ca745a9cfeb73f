package engine

import (
	"reflect"
	"testing"
)

// A traced stream is decided exactly as an untraced one, and its trace
// holds what the pipeline decided with: the same requests through two
// plugins, one traced, leave the same replies and metrics.
func TestTraceIsWhatThePipelineDecided(t *testing.T) {
	const cfg = `{"limits":[
		{"name":"all","key":[],"requests_per_second":100},
		{"name":"api","key":["method"],"requests_per_second":2,"replaces":["all"],"match":{"path_prefix":"/"}},
		{"name":"watch","key":[],"requests_per_second":1,"shadow":true}],
		"breakers":[{"name":"b"}],"concurrency":[{"name":"c","key":["method"],"max_in_flight":5}]}`
	traced, ft := newNativePlugin(t, cfg)
	plain, fp := newNativePlugin(t, cfg)
	var last Trace
	for id := uint32(1); id <= 4; id++ {
		s := begin(traced, ft, id)
		last = Trace{}
		s.TraceInto(&last)
		vt := s.RequestHeaders()
		vp := begin(plain, fp, id).RequestHeaders()
		if vt != vp {
			t.Fatalf("request %d: traced %v, untraced %v", id, vt, vp)
		}
	}
	if !reflect.DeepEqual(ft.Stream.Replies, fp.Stream.Replies) || !reflect.DeepEqual(ft.Metrics.Values, fp.Metrics.Values) {
		t.Fatalf("traced replies %v metrics %v\nuntraced replies %v metrics %v", ft.Stream.Replies, ft.Metrics.Values, fp.Stream.Replies, fp.Metrics.Values)
	}
	all, api, watch := last.Limits[0], last.Limits[1], last.Limits[2]
	if !all.Matched || all.Applied || !reflect.DeepEqual(all.ReplacedBy, []int{1}) || all.Evaluated {
		t.Fatalf("all: %+v", all)
	}
	if !api.Applied || api.Key != "GET" || !api.KeyOK || api.Cost != 1 || api.Rate.Limit != 2 || !api.Decided || api.Allowed ||
		len(api.Conditions) != 1 || !api.Conditions[0].Held {
		t.Fatalf("api on the fourth request: %+v", api)
	}
	// Every applying limit's key is built before any decision; the
	// enforcing limit's denial then ends the request before the shadow
	// one is decided, the breakers and the bulkheads.
	if !watch.Evaluated || !watch.Shadow || watch.Decided || len(last.Breakers) != 0 || len(last.Concurrency) != 0 {
		t.Fatalf("watch %+v, breakers %v, concurrency %v", watch, last.Breakers, last.Concurrency)
	}
}
