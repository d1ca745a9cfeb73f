// Package host is what the filter needs from the proxy it runs in, as
// interfaces and nothing else: the current stream's request and response,
// resuming and answering a paused stream, callouts to a cluster, the tick,
// metrics, logs, shared data (store.Store) and the clock.
//
// The adapter (package filter, hostcalls.go) implements them over
// proxy-wasm; everything else programs against them, so it compiles and is
// tested natively without the SDK. Package hosttest has fakes.
//
// The interfaces are on the request path, so none of their methods may
// need an allocation of the caller: arguments are strings, byte slices and
// package-level paths, and metric handles are defined once, at
// configuration, and then cost one indirect call.
//
// What a method returns (header values and maps, properties, shared-data
// values, a call's reply body) is valid only until the callback that read
// it returns: proxy-wasm hosts write returned values into memory the guest
// hands out per call, and the bridge reuses that memory from the next
// callback on. Whatever keeps a value longer copies it first.
package host

import (
	"time"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// Store is proxy-wasm shared data; see store.Store for its contract.
type Store = store.Store

// Clock returns the current wall time.
type Clock func() time.Time

// Request reads the current stream's request: its headers and the
// attributes the host knows of it. A missing header or property reads as
// absent, never as an error.
type Request interface {
	// RequestHeaders returns the whole request header map.
	RequestHeaders() [][2]string
	// RequestHeader returns one header's first value; for headers that
	// never repeat, such as the pseudo-headers.
	RequestHeader(name string) (string, bool)
	// Property returns a string property, or "" when the host has none.
	// Paths are package-level values, so a read allocates no slice. The
	// string is valid until the callback returns, as every value here.
	Property(path []string) string
}

// Stream is the stream a callback runs for, or the one Select made
// current.
type Stream interface {
	Request
	// ResponseHeaders returns the whole response header map.
	ResponseHeaders() [][2]string
	// ResponseHeader returns one response header's first value.
	ResponseHeader(name string) (string, bool)
	// ResponseBody returns the first size bytes of the response body the
	// current body callback was given: the chunk, or everything buffered
	// so far when the filter asked the host to buffer.
	ResponseBody(size int) []byte
	// ReplaceResponseHeader sets a response header, replacing any value.
	ReplaceResponseHeader(name, value string) error
	// ReplaceRequestHeader sets a request header before the request goes
	// upstream, replacing any value the client sent.
	ReplaceRequestHeader(name, value string) error
	// RemoveRequestHeader removes every value of a request header before
	// the request goes upstream.
	RemoveRequestHeader(name string) error
	// ClearRouteCache asks the proxy to select the route again from the
	// request headers, after they were changed to route the request.
	ClearRouteCache()
	// SetFilterState sets a value of the stream's filter state
	// (proxy_set_property): Envoy keeps it as the object "wasm." and the
	// name, which access logs print with %FILTER_STATE(wasm.<name>:PLAIN)%.
	SetFilterState(name, value string) error
	// Reply answers the request with a local response.
	Reply(status int, headers [][2]string, body []byte) error
	// Resume lets a paused request continue to the upstream.
	Resume() error
	// Select makes the stream id the target of the calls above, when a
	// callback of another context (the tick, a call reply) acts on it. It
	// fails when the stream is gone.
	Select(id uint32) error
}

// Caller sends callouts (proxy_http_call). done runs once per accepted
// call, from the host's reply callback, with the reply's status and body,
// or with err set when there is no reply to parse: backend.Timeout() when
// the host reports no response (timeout, reset, no healthy host), and
// backend.TooLarge when the body is over MaxReplyBody.
type Caller interface {
	Call(cluster string, headers [][2]string, body []byte, timeout time.Duration,
		done func(status int, body []byte, err error)) error
}

// ReplyHeaders is implemented by a Caller that can show the headers of
// the reply it is delivering; ReplyHeader is only valid inside a done
// callback, and reads a header by lower-case name.
type ReplyHeaders interface {
	ReplyHeader(name string) (string, bool)
}

// WatchdogSlack is how long past its timeout a callout may stay
// unanswered before its caller declares it timed out itself; Envoy
// normally reports the timeout first, so this only matters when a reply
// is lost.
const WatchdogSlack = 10 * time.Millisecond

// MaxReplyBody bounds the callout replies read; a larger one is malformed.
const MaxReplyBody = 64 << 10

// Ticker sets the period of the plugin's tick; 0 stops it.
type Ticker interface {
	SetTick(period time.Duration) error
}

// Counter is a metric that only grows.
type Counter interface{ Increment(n uint64) }

// Gauge is a metric set to a value.
type Gauge interface{ Set(v uint64) }

// Histogram is a metric recording a distribution.
type Histogram interface{ Record(v uint64) }

// Metrics defines metrics by name; called at configuration, never per
// request.
type Metrics interface {
	Counter(name string) Counter
	Gauge(name string) Gauge
	Histogram(name string) Histogram
}

// Log writes to the proxy's log. The formatting variants are for error
// paths; what a request writes routinely is built into one string first.
type Log interface {
	Debugf(format string, args ...any)
	Info(msg string)
	Warn(msg string)
	Warnf(format string, args ...any)
	Errorf(format string, args ...any)
	Criticalf(format string, args ...any)
}

// Host is everything the filter reaches through its host.
type Host struct {
	Store   Store
	Clock   Clock
	Stream  Stream
	Caller  Caller
	Ticker  Ticker
	Metrics Metrics
	Log     Log
	// Rand returns uniform random draws (the rollout fractions); nil uses
	// math/rand/v2, which the runtime seeds from the host's random_get.
	// Tests step it.
	Rand func() uint64
}
