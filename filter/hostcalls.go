package filter

import (
	"time"
	"unsafe"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/engine"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/limiter/store"
)

// This file is the only place the filter makes proxy-wasm hostcalls: it
// implements the interfaces of package host over the SDK, so what a
// request costs in hostcalls can be read off in one place. Besides it,
// only the contexts and callbacks (filter.go, http.go) see the SDK, for
// its types.

// proxyHost is the host as proxy-wasm gives it. The store and the stream
// are pointers: a method with a value receiver called through an interface
// goes through a generated pointer wrapper, on GOARCH=wasm one more call
// each (a request makes about seven of these calls).
func proxyHost(now host.Clock) host.Host {
	return host.Host{
		Store:   &sharedData{},
		Clock:   now,
		Stream:  &proxyStream{},
		Caller:  proxyCaller{},
		Ticker:  proxyTicker{},
		Metrics: proxyMetrics{},
		Log:     proxyLog{},
	}
}

// sharedData is store.Store over proxy-wasm shared data.
type sharedData struct{}

// The SDK returns its status errors as the bare sentinels of package types
// (StatusToError), never wrapped, so they are compared directly: errors.Is
// is a call on every Set and two on a Get that finds nothing.
func (*sharedData) Get(key string) ([]byte, uint32, error) {
	v, cas, err := proxywasm.GetSharedData(key)
	switch err {
	case nil:
		return v, cas, nil
	case types.ErrorStatusNotFound:
		return nil, 0, store.ErrNotFound
	default:
		return nil, 0, err
	}
}

func (*sharedData) Set(key string, value []byte, cas uint32) error {
	err := proxywasm.SetSharedData(key, value, cas)
	if err == types.ErrorStatusCasMismatch {
		return store.ErrCASMismatch
	}
	return err
}

// headersOrNil is a header map the host gave, or nil when it had none.
func headersOrNil(hs [][2]string, err error) [][2]string {
	if err != nil {
		return nil
	}
	return hs
}

// found is a header value the host gave and whether it had one.
func found(v string, err error) (string, bool) { return v, err == nil }

// proxyStream is host.Stream on the SDK's current (effective) context.
type proxyStream struct{}

func (*proxyStream) RequestHeaders() [][2]string {
	return headersOrNil(proxywasm.GetHttpRequestHeaders())
}

func (*proxyStream) RequestHeader(name string) (string, bool) {
	return found(proxywasm.GetHttpRequestHeader(name))
}

func (*proxyStream) Property(path []string) string {
	v, err := proxywasm.GetProperty(path)
	if err != nil || len(v) == 0 {
		return ""
	}
	// The host wrote v into memory the bridge hands out again only from
	// the next callback on, which is as long as package host promises
	// any value to live, so it can back a string without a copy.
	return unsafe.String(&v[0], len(v))
}

func (*proxyStream) ResponseHeaders() [][2]string {
	return headersOrNil(proxywasm.GetHttpResponseHeaders())
}

func (*proxyStream) ResponseHeader(name string) (string, bool) {
	return found(proxywasm.GetHttpResponseHeader(name))
}

// ResponseBody reads the body the current proxy_on_response_body was
// given; like every value here it lives until the callback returns.
func (*proxyStream) ResponseBody(size int) []byte {
	if size <= 0 {
		return nil
	}
	b, err := proxywasm.GetHttpResponseBody(0, size)
	if err != nil {
		return nil
	}
	return b
}

// ReplaceRequestHeader sets a request header before the request goes
// upstream (deadline propagation, upstream_headers_when_limited).
func (*proxyStream) ReplaceRequestHeader(name, value string) error {
	return proxywasm.ReplaceHttpRequestHeader(name, value)
}

// RemoveRequestHeader removes a request header the client sent (the
// external limit's route_header).
func (*proxyStream) RemoveRequestHeader(name string) error {
	return proxywasm.RemoveHttpRequestHeader(name)
}

// ClearRouteCache calls Envoy's clear_route_cache foreign function
// (source/extensions/common/wasm/foreign.cc). Envoys that clear the route
// cache on every request header write lack it or make it redundant; both
// are fine, so its status is not looked at.
func (*proxyStream) ClearRouteCache() {
	_, _ = proxywasm.CallForeignFunction("clear_route_cache", nil)
}

func (*proxyStream) ReplaceResponseHeader(name, value string) error {
	return proxywasm.ReplaceHttpResponseHeader(name, value)
}

// SetFilterState is proxy_set_property on the one-segment path name.
func (*proxyStream) SetFilterState(name, value string) error {
	return proxywasm.SetProperty([]string{name}, []byte(value))
}

// Reply sends a local response. The SDK's send_local_response sets no
// details, so Envoy records these replies under its default.
func (*proxyStream) Reply(status int, headers [][2]string, body []byte) error {
	return proxywasm.SendHttpResponse(uint32(status), headers, body, -1)
}

func (*proxyStream) Resume() error { return proxywasm.ResumeHttpRequest() }

func (*proxyStream) Select(id uint32) error { return proxywasm.SetEffectiveContext(id) }

type proxyCaller struct{}

func (proxyCaller) Call(cluster string, headers [][2]string, body []byte, timeout time.Duration,
	done func(status int, body []byte, err error)) error {
	ms := uint32(timeout / time.Millisecond)
	if ms == 0 {
		ms = 1
	}
	_, err := proxywasm.DispatchHttpCall(cluster, headers, body, nil, ms, func(numHeaders, bodySize, _ int) {
		if numHeaders == 0 {
			done(0, nil, backend.Timeout())
			return
		}
		status := 0
		hs, err := proxywasm.GetHttpCallResponseHeaders()
		if err == nil {
			for _, kv := range hs {
				if kv[0] == ":status" {
					status = engine.StatusCode(kv[1])
					break
				}
			}
		}
		// The headers stay readable through ReplyHeader while done runs.
		replyHeaders = hs
		defer func() { replyHeaders = nil }()
		if bodySize > host.MaxReplyBody {
			// No script result or limits answer comes near the limit. Its
			// first MaxReplyBody bytes may well parse, but they are not the
			// reply, so none of it is read.
			done(status, nil, backend.TooLarge(status, bodySize, host.MaxReplyBody))
			return
		}
		var b []byte
		if bodySize > 0 {
			// A copy: what done is given may be kept past this callback
			// (a reply that settles a lookup or a lease the streams
			// waiting for it read later), and the host's copy lives only
			// until the callback returns.
			if hb, err := proxywasm.GetHttpCallResponseBody(0, bodySize); err == nil {
				b = append([]byte(nil), hb...)
			}
		}
		done(status, b, nil)
	})
	return err
}

// replyHeaders are the headers of the callout reply being delivered; a VM
// runs one callback at a time.
var replyHeaders [][2]string

// ReplyHeader implements host.ReplyHeaders: a header of the reply being
// delivered, repeated values joined with commas.
func (proxyCaller) ReplyHeader(name string) (string, bool) {
	value, found := "", false
	for _, kv := range replyHeaders {
		if kv[0] != name {
			continue
		}
		if found {
			value += ","
		}
		value, found = value+kv[1], true
	}
	return value, found
}

type proxyTicker struct{}

func (proxyTicker) SetTick(period time.Duration) error {
	return proxywasm.SetTickPeriodMilliSeconds(uint32(period / time.Millisecond))
}

// proxyMetrics defines proxy-wasm metrics. Handles are the SDK's ids; a
// gauge is set through proxy_record_metric, which the SDK reaches only
// through its histogram type (its gauge type only adds), whose id is the
// same kind of handle.
type proxyMetrics struct{}

type (
	proxyCounter   proxywasm.MetricCounter
	proxyGauge     proxywasm.MetricGauge
	proxyHistogram proxywasm.MetricHistogram
)

func (proxyMetrics) Counter(name string) host.Counter {
	return proxyCounter(proxywasm.DefineCounterMetric(name))
}

func (proxyMetrics) Gauge(name string) host.Gauge {
	return proxyGauge(proxywasm.DefineGaugeMetric(name))
}

func (proxyMetrics) Histogram(name string) host.Histogram {
	return proxyHistogram(proxywasm.DefineHistogramMetric(name))
}

func (c proxyCounter) Increment(n uint64) { proxywasm.MetricCounter(c).Increment(n) }
func (g proxyGauge) Set(v uint64)         { proxywasm.MetricHistogram(g).Record(v) }
func (h proxyHistogram) Record(v uint64)  { proxywasm.MetricHistogram(h).Record(v) }

type proxyLog struct{}

func (proxyLog) Debugf(format string, args ...any)    { proxywasm.LogDebugf(format, args...) }
func (proxyLog) Info(msg string)                      { proxywasm.LogInfo(msg) }
func (proxyLog) Warn(msg string)                      { proxywasm.LogWarn(msg) }
func (proxyLog) Warnf(format string, args ...any)     { proxywasm.LogWarnf(format, args...) }
func (proxyLog) Errorf(format string, args ...any)    { proxywasm.LogErrorf(format, args...) }
func (proxyLog) Criticalf(format string, args ...any) { proxywasm.LogCriticalf(format, args...) }

// pluginConfiguration reads the plugin's configuration; nil when it has
// none.
func pluginConfiguration() ([]byte, error) {
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && err != types.ErrorStatusNotFound {
		return nil, err
	}
	// A copy, once per configuration: the plugin lives far longer than
	// this callback, and nothing should have to know whether the parsed
	// configuration views the bytes it was parsed from.
	return append([]byte(nil), data...), nil
}
