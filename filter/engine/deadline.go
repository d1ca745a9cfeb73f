package engine

import (
	"strconv"
	"time"

	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/filter/request"
)

// Deadline propagation: a request the filter held (a delay, a wait for
// Redis or for the limits service) must not give the upstream more time
// than its client has left. When it resumes, grpc-timeout and
// x-envoy-upstream-rq-timeout-ms are lowered by the time it was held;
// when that time is already spent the filter answers 504, or
// DEADLINE_EXCEEDED for gRPC, instead of forwarding. Requests the filter
// did not hold are never touched.

const (
	headerGRPCTimeout     = "grpc-timeout"
	headerUpstreamTimeout = "x-envoy-upstream-rq-timeout-ms"

	metricDeadlineLowered  = "sluice.deadline.lowered"
	metricDeadlineExceeded = "sluice.deadline.exceeded"
	metricDeadlineInvalid  = "sluice.deadline.invalid"

	messageDeadline = "The request's deadline passed while it was held by the rate limiter"
)

type deadlineMetrics struct {
	lowered, exceeded, invalid host.Counter
}

func defineDeadlineMetrics(hm host.Metrics) deadlineMetrics {
	return deadlineMetrics{
		lowered:  hm.Counter(metricDeadlineLowered),
		exceeded: hm.Counter(metricDeadlineExceeded),
		invalid:  hm.Counter(metricDeadlineInvalid),
	}
}

// lower lowers the deadline headers of request info, held for held,
// just before it is resumed, through rep, and counts what it did. False
// means the deadline was spent: the request is to be answered
// (rejectDeadline) instead.
func (m *deadlineMetrics) lower(rep host.Stream, info *request.Info, held time.Duration) bool {
	if held <= 0 {
		return true
	}
	if v, ok := info.Header(headerGRPCTimeout); ok {
		switch d, valid := parseGRPCTimeout(v); {
		case !valid:
			m.invalid.Increment(1) // forwarded as it came: Envoy decides
		case d <= held:
			m.exceeded.Increment(1)
			return false
		default:
			if s, ok := formatGRPCTimeout(d - held); ok && rep.ReplaceRequestHeader(headerGRPCTimeout, s) == nil {
				m.lowered.Increment(1)
			}
		}
	}
	if v, ok := info.Header(headerUpstreamTimeout); ok {
		switch ms, valid := parseTimeoutMillis(v); {
		case !valid:
			m.invalid.Increment(1)
		case ms == 0:
			// Envoy reads 0 as "no timeout": nothing to lower.
		case time.Duration(ms)*time.Millisecond <= held:
			m.exceeded.Increment(1)
			return false
		default:
			// Rounded down: the upstream never gets more than is left.
			left := (time.Duration(ms)*time.Millisecond - held) / time.Millisecond
			if left < 1 {
				m.exceeded.Increment(1)
				return false
			}
			if rep.ReplaceRequestHeader(headerUpstreamTimeout, strconv.FormatInt(int64(left), 10)) == nil {
				m.lowered.Increment(1)
			}
		}
	}
	return true
}

// grpcTimeoutUnits is the length of each TimeoutUnit; 0 for other bytes.
var grpcTimeoutUnits = [256]time.Duration{
	'H': time.Hour, 'M': time.Minute, 'S': time.Second,
	'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond,
}

// parseGRPCTimeout reads gRPC's TimeoutValue TimeoutUnit: 1 to 8 ASCII
// digits and one of H M S m u n.
func parseGRPCTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	digits, unit := v[:len(v)-1], v[len(v)-1]
	var n int64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	u := grpcTimeoutUnits[unit]
	if u == 0 {
		return 0, false
	}
	// 99999999 hours is past time.Duration's range: saturate, it only
	// means "very long".
	if n > int64(1<<63-1)/int64(u) {
		return 1<<63 - 1, true
	}
	return time.Duration(n) * u, true
}

// grpcUnits are the units of grpc-timeout, finest first.
var grpcUnits = [...]struct {
	d    time.Duration
	unit byte
}{{time.Nanosecond, 'n'}, {time.Microsecond, 'u'}, {time.Millisecond, 'm'}, {time.Second, 'S'}, {time.Minute, 'M'}, {time.Hour, 'H'}}

// formatGRPCTimeout writes d in the finest unit whose value fits the 8
// digits gRPC allows, rounded down so that the upstream never gets more
// than is left; false when nothing is left at that unit.
func formatGRPCTimeout(d time.Duration) (string, bool) {
	const maxValue = 99_999_999
	for _, u := range grpcUnits {
		if v := d / u.d; v <= maxValue {
			if v == 0 {
				return "", false
			}
			return strconv.FormatInt(int64(v), 10) + string(u.unit), true
		}
	}
	return strconv.Itoa(maxValue) + "H", true
}

// parseTimeoutMillis reads x-envoy-upstream-rq-timeout-ms: a non-negative
// decimal integer, bounded so it stays a Duration.
func parseTimeoutMillis(v string) (int64, bool) {
	if v == "" || len(v) > 12 {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || v[0] == '+' || v[0] == '-' {
		return 0, false
	}
	return n, true
}
