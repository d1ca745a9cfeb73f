package filter

import (
	"errors"
	"time"
	"unsafe"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/limiter/store"
)

// This file is the only place the request path makes proxy-wasm hostcalls
// other than metrics, so what a request costs in hostcalls can be read off
// in one place.

// sharedData is store.Store over proxy-wasm shared data.
type sharedData struct{}

func (sharedData) Get(key string) ([]byte, uint32, error) {
	v, cas, err := proxywasm.GetSharedData(key)
	switch {
	case err == nil:
		return v, cas, nil
	case errors.Is(err, types.ErrorStatusNotFound):
		return nil, 0, store.ErrNotFound
	default:
		return nil, 0, err
	}
}

func (sharedData) Set(key string, value []byte, cas uint32) error {
	err := proxywasm.SetSharedData(key, value, cas)
	if errors.Is(err, types.ErrorStatusCasMismatch) {
		return store.ErrCASMismatch
	}
	return err
}

// hostAccess is what requestInfo reads from the current stream.
type hostAccess interface {
	requestHeaders() [][2]string
	// requestHeader returns one header's first value; for headers that
	// never repeat, such as the pseudo-headers.
	requestHeader(name string) (string, bool)
	// property returns a string property, or "" when the host has none.
	// Paths are package-level values, so a read allocates no slice.
	property(path []string) string
}

type proxyHost struct{}

func (proxyHost) requestHeaders() [][2]string {
	hs, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		return nil
	}
	return hs
}

// responseHeaders returns the current response's headers; only limits
// charging a cost from the response read them.
func responseHeaders() [][2]string {
	hs, err := proxywasm.GetHttpResponseHeaders()
	if err != nil {
		return nil
	}
	return hs
}

func (proxyHost) requestHeader(name string) (string, bool) {
	v, err := proxywasm.GetHttpRequestHeader(name)
	return v, err == nil
}

func (proxyHost) property(path []string) string {
	v, err := proxywasm.GetProperty(path)
	if err != nil || len(v) == 0 {
		return ""
	}
	// The host wrote v into memory allocated for this call alone, and
	// nothing writes it again, so it can back a string without a copy.
	return unsafe.String(&v[0], len(v))
}

// Property paths read on the request path.
var (
	propSourceAddress = []string{"source", "address"}
	propRouteName     = []string{"xds", "route_name"}
	propClusterName   = []string{"xds", "cluster_name"}
	propCodeDetails   = []string{"response", "code_details"}
)

// clock is the filter's time source. Tests replace it; in the wasm it is
// wallClock, which reads the host's WASI clock directly.
type clock func() time.Time

// httpCaller sends proxy_http_call requests. done runs once per accepted
// call, from the host's http_call_response callback, with the reply's
// status and body, or with err set when there is no reply to parse:
// backend.Timeout() when the host reports no response (timeout, reset, no
// healthy host), which Envoy signals with an empty header map, and
// backend.TooLarge when the body is over maxReplyBody.
type httpCaller interface {
	call(cluster string, headers [][2]string, body []byte, timeout time.Duration,
		done func(status int, body []byte, err error)) error
}

type proxyCaller struct{}

func (proxyCaller) call(cluster string, headers [][2]string, body []byte, timeout time.Duration,
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
		if hs, err := proxywasm.GetHttpCallResponseHeaders(); err == nil {
			for _, kv := range hs {
				if kv[0] == ":status" {
					status = atoiStatus(kv[1])
					break
				}
			}
		}
		if bodySize > maxReplyBody {
			// No script result or limits answer comes near the limit. Its
			// first maxReplyBody bytes may well parse, but they are not the
			// reply, so none of it is read.
			done(status, nil, backend.TooLarge(status, bodySize, maxReplyBody))
			return
		}
		var b []byte
		if bodySize > 0 {
			b, _ = proxywasm.GetHttpCallResponseBody(0, bodySize)
		}
		done(status, b, nil)
	})
	return err
}

// maxReplyBody bounds the backend and limits-service replies read; a
// larger one is malformed.
const maxReplyBody = 64 << 10

func atoiStatus(s string) int {
	if len(s) == 0 || len(s) > 3 {
		return 0
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0
		}
		n = n*10 + int(s[i]-'0')
	}
	return n
}

// switchTo makes a paused stream the target of the next stream hostcalls,
// when a callback of another context (the tick, a call reply) acts on it.
// It fails when the stream is gone.
func switchTo(id uint32) error { return proxywasm.SetEffectiveContext(id) }
