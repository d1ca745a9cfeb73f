//go:build sluice_bridge

package internal

import (
	"errors"
	"strconv"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The ABI's enumerations, with the values the proxy-wasm 0.2 spec gives
// them, written for the bridge; make build drops the SDK's abi_enums.go
// from its copy. They are here for StatusToError, which every hostcall of
// the SDK's public API passes its status through.

type BufferType uint32

const (
	BufferTypeHttpRequestBody      BufferType = 0
	BufferTypeHttpResponseBody     BufferType = 1
	BufferTypeDownstreamData       BufferType = 2
	BufferTypeUpstreamData         BufferType = 3
	BufferTypeHttpCallResponseBody BufferType = 4
	BufferTypeGrpcReceiveBuffer    BufferType = 5
	BufferTypeVMConfiguration      BufferType = 6
	BufferTypePluginConfiguration  BufferType = 7
	BufferTypeCallData             BufferType = 8
)

type LogLevel uint32

const (
	LogLevelTrace LogLevel = iota
	LogLevelDebug
	LogLevelInfo
	LogLevelWarn
	LogLevelError
	LogLevelCritical
	LogLevelMax
)

var logLevelNames = [...]string{"trace", "debug", "info", "warn", "error", "critical"}

func (l LogLevel) String() string {
	if int(l) < len(logLevelNames) {
		return logLevelNames[l]
	}
	return "level " + strconv.Itoa(int(l))
}

type MapType uint32

const (
	MapTypeHttpRequestHeaders       MapType = 0
	MapTypeHttpRequestTrailers      MapType = 1
	MapTypeHttpResponseHeaders      MapType = 2
	MapTypeHttpResponseTrailers     MapType = 3
	MapTypeHttpCallResponseHeaders  MapType = 6
	MapTypeHttpCallResponseTrailers MapType = 7
)

type MetricType uint32

const (
	MetricTypeCounter   = 0
	MetricTypeGauge     = 1
	MetricTypeHistogram = 2
)

type StreamType uint32

const (
	StreamTypeRequest    StreamType = 0
	StreamTypeResponse   StreamType = 1
	StreamTypeDownstream StreamType = 2
	StreamTypeUpstream   StreamType = 3
)

type Status uint32

const (
	StatusOK              Status = 0
	StatusNotFound        Status = 1
	StatusBadArgument     Status = 2
	StatusEmpty           Status = 7
	StatusCasMismatch     Status = 8
	StatusInternalFailure Status = 10
	StatusUnimplemented   Status = 12
)

// StatusToError is small enough to inline, so a hostcall that succeeds
// pays one compare for it in the SDK's wrapper: no call, no switch, and no
// error value on the hot path. Failures are looked up in a table of the
// SDK's sentinel errors.
func StatusToError(status Status) error {
	if status == StatusOK {
		return nil
	}
	return statusError(status)
}

var statusErrors = [...]error{
	StatusNotFound:        types.ErrorStatusNotFound,
	StatusBadArgument:     types.ErrorStatusBadArgument,
	StatusEmpty:           types.ErrorStatusEmpty,
	StatusCasMismatch:     types.ErrorStatusCasMismatch,
	StatusInternalFailure: types.ErrorInternalFailure,
	StatusUnimplemented:   types.ErrorUnimplemented,
}

func statusError(status Status) error {
	if int(status) < len(statusErrors) && statusErrors[status] != nil {
		return statusErrors[status]
	}
	return errors.New("unknown status code: " + strconv.Itoa(int(status)))
}
