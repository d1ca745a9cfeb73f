// Command probe is a test guest for the host: each request's x-probe header
// picks a behaviour that exercises one part of the ABI, and results come
// back in headers, so the host tests can assert Envoy's semantics through
// the real SDK and bridge.
package main

import (
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func init() { proxywasm.SetVMContext(&vm{}) }

func main() {}

type vm struct{ types.DefaultVMContext }

func (*vm) NewPluginContext(uint32) types.PluginContext {
	return &plugin{paused: map[uint32]bool{}}
}

type plugin struct {
	types.DefaultPluginContext
	paused  map[uint32]bool
	calls   map[uint32]uint32 // http call token → stream context id
	ticks   int
	counter proxywasm.MetricCounter
	gauge   proxywasm.MetricGauge
	histo   proxywasm.MetricHistogram
}

func (p *plugin) OnPluginStart(int) types.OnPluginStartStatus {
	cfg, err := proxywasm.GetPluginConfiguration()
	if err != nil {
		proxywasm.LogCriticalf("probe: no configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.calls = map[uint32]uint32{}
	// Created before traffic: on a missing key the CAS is not checked, so
	// two first writers would both succeed.
	if _, _, err := proxywasm.GetSharedData("counter"); err != nil {
		_ = proxywasm.SetSharedData("counter", make([]byte, 8), 0)
	}
	p.counter = proxywasm.DefineCounterMetric("probe.requests")
	p.gauge = proxywasm.DefineGaugeMetric("probe.level")
	p.histo = proxywasm.DefineHistogramMetric("probe.sizes")
	for _, kv := range strings.Split(string(cfg), ";") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "tick":
			n, _ := strconv.Atoi(v)
			_ = proxywasm.SetTickPeriodMilliSeconds(uint32(n))
		case "fail":
			return types.OnPluginStartStatusFailed
		case "configured":
			// Counts configurations, canary included.
			increment("configured")
		}
	}
	return types.OnPluginStartStatusOK
}

// increment adds one to the 8-byte counter in shared data key: a
// read-modify-write with CAS retries, as a rate limiter does. It returns
// the new value and the attempts it took.
func increment(key string) (uint64, int) {
	for attempt := 1; ; attempt++ {
		old, cas, err := proxywasm.GetSharedData(key)
		n := uint64(0)
		if err == nil && len(old) == 8 {
			n = binary.LittleEndian.Uint64(old)
		}
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, n+1)
		if proxywasm.SetSharedData(key, b, cas) == nil {
			return n + 1, attempt
		}
	}
}

func (p *plugin) OnTick() {
	p.ticks++
	for id := range p.paused {
		delete(p.paused, id)
		if err := proxywasm.SetEffectiveContext(id); err != nil {
			proxywasm.LogErrorf("probe: effective context %d: %v", id, err)
			continue
		}
		_ = proxywasm.AddHttpRequestHeader("x-resumed-by", "tick")
		_ = proxywasm.ResumeHttpRequest()
	}
}

func (p *plugin) NewHttpContext(id uint32) types.HttpContext {
	return &stream{id: id, p: p}
}

type stream struct {
	types.DefaultHttpContext
	id    uint32
	p     *plugin
	probe string
	// bodies records each response body callback as size/end_of_stream.
	bodies string
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func (s *stream) reply(status uint32, headers [][2]string, body string) types.Action {
	if err := proxywasm.SendHttpResponse(status, headers, []byte(body), -1); err != nil {
		proxywasm.LogErrorf("probe: send local response: %v", err)
	}
	return types.ActionPause
}

func (s *stream) OnHttpRequestHeaders(n int, eos bool) types.Action {
	// A copy: s.probe is read again in later callbacks, and what the
	// host returns lives only until this one returns.
	probe, _ := proxywasm.GetHttpRequestHeader("x-probe")
	s.probe = strings.Clone(probe)
	hdr := func(k string) string { v, _ := proxywasm.GetHttpRequestHeader(k); return v }
	_ = proxywasm.AddHttpRequestHeader("x-probe-eos", strconv.FormatBool(eos))
	switch s.probe {
	case "metrics":
		s.p.counter.Increment(1)
		s.p.gauge.Add(5)
		s.p.gauge.Add(-2)
		s.p.histo.Record(42)
		return types.ActionContinue
	case "cas":
		return s.cas(hdr("x-key"))
	case "incr":
		n, attempts := increment("counter")
		_ = proxywasm.AddHttpRequestHeader("x-counter", strconv.FormatUint(n, 10))
		_ = proxywasm.AddHttpRequestHeader("x-attempts", strconv.Itoa(attempts))
		return types.ActionContinue
	case "local":
		st, _ := strconv.Atoi(hdr("x-status"))
		return s.reply(uint32(st), [][2]string{{"x-local", "yes"}}, "denied by probe")
	case "badarg":
		_, err := proxywasm.GetHttpResponseHeader("content-type")
		_, err2 := proxywasm.GetHttpCallResponseHeaders()
		_, err3 := proxywasm.GetPluginConfiguration()
		pairs, err4 := proxywasm.GetHttpResponseHeaders()
		return s.reply(200, [][2]string{{"x-result", errText(err) + "|" + errText(err2) + "|" + errText(err3) + "|" + errText(err4) + ":" + strconv.Itoa(len(pairs))}}, "")
	case "pause-headers":
		return types.ActionPause
	case "tick-pause":
		s.p.paused[s.id] = true
		return types.ActionPause
	case "httpcall":
		timeout, _ := strconv.Atoi(hdr("x-timeout"))
		headers := [][2]string{{":method", "GET"}, {":path", hdr("x-call-path")}, {":authority", "backend"}}
		if hdr("x-drop") != "" {
			var kept [][2]string
			for _, h := range headers {
				if h[0] != hdr("x-drop") {
					kept = append(kept, h)
				}
			}
			headers = kept
		}
		token, err := proxywasm.DispatchHttpCall(hdr("x-cluster"), headers, []byte("ping"), nil, uint32(timeout), s.p.onCallResponse)
		if err != nil {
			return s.reply(200, [][2]string{{"x-result", "dispatch:" + errText(err)}}, "")
		}
		s.p.calls[token] = s.id
		return types.ActionPause
	case "props":
		return types.ActionContinue
	case "rewrite":
		_ = proxywasm.ReplaceHttpRequestHeader(":path", "/rewritten")
		_ = proxywasm.RemoveHttpRequestHeader("x-remove-me")
		return types.ActionContinue
	}
	return types.ActionContinue
}

// onCallResponse runs in the root context; it resumes the stream that made
// the call.
func (p *plugin) onCallResponse(nh, bodySize, nt int) {
	// The SDK does not pass the token to the closure; there is at most one
	// call in flight per test stream, so take any.
	var id uint32
	for tok, sid := range p.calls {
		id = sid
		delete(p.calls, tok)
		break
	}
	headers, herr := proxywasm.GetHttpCallResponseHeaders()
	body, berr := proxywasm.GetHttpCallResponseBody(0, bodySize)
	status := ""
	for _, h := range headers {
		if h[0] == ":status" {
			status = h[1]
		}
	}
	result := strconv.Itoa(nh) + "," + strconv.Itoa(bodySize) + "," + strconv.Itoa(nt) + "," + status + "," + string(body)
	if nh == 0 {
		result += "," + errText(herr) + "," + errText(berr)
	}
	if err := proxywasm.SetEffectiveContext(id); err != nil {
		proxywasm.LogErrorf("probe: effective context: %v", err)
		return
	}
	_ = proxywasm.AddHttpRequestHeader("x-call-result", result)
	_ = proxywasm.ResumeHttpRequest()
}

func (s *stream) cas(key string) types.Action {
	var out []string
	_, _, err := proxywasm.GetSharedData(key)
	out = append(out, "get-missing:"+errText(err))
	// A CAS on a missing key is not checked.
	err = proxywasm.SetSharedData(key, []byte("a"), 12345)
	out = append(out, "set-missing-cas:"+errText(err))
	v, c1, err := proxywasm.GetSharedData(key)
	out = append(out, "get:"+errText(err)+":"+string(v)+":nonzero="+strconv.FormatBool(c1 != 0))
	err = proxywasm.SetSharedData(key, []byte("b"), c1+1)
	out = append(out, "set-stale:"+errText(err))
	err = proxywasm.SetSharedData(key, []byte("c"), c1)
	out = append(out, "set-current:"+errText(err))
	v, c2, _ := proxywasm.GetSharedData(key)
	out = append(out, "after:"+string(v)+":newcas="+strconv.FormatBool(c2 != c1 && c2 != 0))
	err = proxywasm.SetSharedData(key, []byte("d"), 0)
	v, c3, _ := proxywasm.GetSharedData(key)
	out = append(out, "unconditional:"+errText(err)+":"+string(v)+":newcas="+strconv.FormatBool(c3 != c2 && c3 != 0))
	return s.reply(200, [][2]string{{"x-result", strings.Join(out, "|")}}, "")
}

func (s *stream) OnHttpRequestBody(size int, eos bool) types.Action {
	if s.probe == "body" {
		b, err := proxywasm.GetHttpRequestBody(0, size)
		if err != nil {
			proxywasm.LogErrorf("probe: body: %v", err)
		}
		_ = proxywasm.ReplaceHttpRequestBody([]byte(strings.ToUpper(string(b))))
	}
	return types.ActionContinue
}

func (s *stream) OnHttpResponseHeaders(n int, eos bool) types.Action {
	_ = proxywasm.AddHttpResponseHeader("x-resp-seen", s.probe)
	if s.probe == "local-resp" {
		return s.reply(502, [][2]string{{"x-local", "response-phase"}}, "replaced")
	}
	if s.probe == "props" {
		for _, path := range []string{"source.address", "destination.address", "request.path", "request.method",
			"response.code", "response.code_details", "xds.cluster_name", "xds.route_name",
			"plugin_name", "plugin_root_id", "plugin_vm_id", "request.headers", "no.such.property"} {
			v, err := proxywasm.GetProperty(strings.Split(path, "."))
			var val string
			switch {
			case err != nil:
				val = "ERR " + err.Error()
			case path == "response.code":
				val = "len" + strconv.Itoa(len(v)) + ":" + strconv.FormatUint(binary.LittleEndian.Uint64(append(v, make([]byte, 8)...)), 10)
			case path == "request.headers":
				m, err := proxywasm.GetPropertyMap([]string{"request", "headers"})
				val = errText(err)
				for _, kv := range m {
					if kv[0] == ":path" {
						val += " " + kv[1]
					}
				}
			default:
				val = string(v)
			}
			_ = proxywasm.AddHttpResponseHeader("x-prop-"+path, val)
		}
	}
	return types.ActionContinue
}

func (s *stream) OnHttpResponseBody(size int, eos bool) types.Action {
	switch s.probe {
	case "body":
		_ = proxywasm.AppendHttpResponseBody([]byte("!"))
	case "buffer-body", "stream-body":
		// Each callback as size/eos; the list ends the body, so the test
		// sees what the filter was handed.
		s.bodies += strconv.Itoa(size) + "/" + strconv.FormatBool(eos) + ";"
		if eos {
			_ = proxywasm.AppendHttpResponseBody([]byte("|" + s.bodies))
		} else if s.probe == "buffer-body" {
			return types.ActionPause // StopIterationAndBuffer
		}
	}
	return types.ActionContinue
}

// OnHttpResponseTrailers reports, in a trailer of its own, the trailers it
// was handed and the body callbacks before them.
func (s *stream) OnHttpResponseTrailers(n int) types.Action {
	if s.probe == "buffer-body" || s.probe == "stream-body" {
		trailers, err := proxywasm.GetHttpResponseTrailers()
		got := strconv.Itoa(n) + ":" + errText(err)
		for _, kv := range trailers {
			got += " " + kv[0] + "=" + kv[1]
		}
		_ = proxywasm.AddHttpResponseTrailer("x-probe-trailers", got+" |"+s.bodies)
	}
	return types.ActionContinue
}

func (s *stream) OnHttpStreamDone() {
	proxywasm.LogInfof("probe: done %d %s", s.id, s.probe)
}
