// Command noop is a proxy-wasm filter that does nothing, built through the
// same bridge as Sluice. Benchmarks divide Sluice's per-request cost by its
// cost, measured in the same run, so host and machine noise cancel out.
//
// With the plugin configuration {"floor":true} it instead makes, with no
// logic around them, the hostcalls that one local limit plus one breaker
// cannot do without in any design that keeps state in shared data: the
// client address, one read and one write of the bucket, one read of the
// breaker, the response status and cluster, the five rate-limit headers of
// the default response and three counters. Its cost is the floor under
// that benchmark case. {"floor":"minimal"} keeps only what the request
// and the default response need whatever the design, even one keeping all
// state inside the worker: the client address, the response status, the
// five headers and one counter.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func init() { proxywasm.SetVMContext(&vm{}) }

func main() {}

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext { return &plugin{} }

type plugin struct {
	types.DefaultPluginContext
	floor, minimal bool
	counter        proxywasm.MetricCounter
}

func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	cfg, _ := proxywasm.GetPluginConfiguration()
	if c := string(cfg); c == `{"floor":true}` || c == `{"floor":"minimal"}` {
		p.floor, p.minimal = true, c == `{"floor":"minimal"}`
		p.counter = proxywasm.DefineCounterMetric("noop.floor")
		_ = proxywasm.SetSharedData(bucketKey, make([]byte, 16), 0)
		_ = proxywasm.SetSharedData(breakerKey, make([]byte, 16), 0)
	}
	return types.OnPluginStartStatusOK
}

func (p *plugin) NewHttpContext(uint32) types.HttpContext {
	if p.floor {
		return &floorContext{p: p}
	}
	return &types.DefaultHttpContext{}
}

const (
	bucketKey  = "noop.bucket"
	breakerKey = "noop.breaker"
)

var (
	propSourceAddress = []string{"source", "address"}
	propClusterName   = []string{"xds", "cluster_name"}
	rateLimitHeaders  = [5][2]string{
		{"x-ratelimit-limit", "1000"}, {"x-ratelimit-remaining", "999"}, {"x-ratelimit-reset", "1795000000"},
		{"ratelimit-policy", `"per-ip";q=1000;w=1`}, {"ratelimit", `"per-ip";r=999;t=1`},
	}
)

type floorContext struct {
	types.DefaultHttpContext
	p *plugin
}

func (f *floorContext) OnHttpRequestHeaders(int, bool) types.Action {
	f.p.counter.Increment(1)
	_, _ = proxywasm.GetProperty(propSourceAddress)
	if f.p.minimal {
		return types.ActionContinue
	}
	if v, cas, err := proxywasm.GetSharedData(bucketKey); err == nil {
		_ = proxywasm.SetSharedData(bucketKey, v, cas)
	}
	_, _, _ = proxywasm.GetSharedData(breakerKey)
	_, _ = proxywasm.GetProperty(propClusterName)
	f.p.counter.Increment(1)
	return types.ActionContinue
}

func (f *floorContext) OnHttpResponseHeaders(int, bool) types.Action {
	_, _ = proxywasm.GetHttpResponseHeader(":status")
	for _, kv := range rateLimitHeaders {
		_ = proxywasm.ReplaceHttpResponseHeader(kv[0], kv[1])
	}
	return types.ActionContinue
}

func (f *floorContext) OnHttpStreamDone() {
	if !f.p.minimal {
		f.p.counter.Increment(1)
	}
}
