package breaker

import (
	"errors"
	"fmt"
	"github.com/sluice-proxy/sluice/internal/enum"
	"math"
	"time"
)

// Mode says what a breaker does with its decisions.
type Mode uint8

const (
	// ModeEnforce tracks state and rejects while open. It is the zero value.
	ModeEnforce Mode = iota
	// ModeMetricsOnly tracks state exactly like ModeEnforce, but every
	// request is allowed; Decision.Shadowed marks the ones enforce would
	// have rejected, so an operator can see what a breaker would do before
	// trusting it.
	ModeMetricsOnly
	// ModeForcedOpen rejects everything and never touches the store, for
	// an operator who needs to cut off a backend by config.
	ModeForcedOpen
	// ModeDisabled allows everything and records nothing.
	ModeDisabled
)

var modeNames = [...]string{"enforce", "metrics_only", "forced_open", "disabled"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode accepts the config spellings; "" is ModeEnforce.
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return ModeEnforce, nil
	}
	for i, n := range modeNames {
		if s == n {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown mode %q (want enforce, metrics_only, forced_open or disabled)", s)
}

// WindowType selects how the failure and slow-call rates are measured.
type WindowType uint8

const (
	// WindowCount measures the last Window.Size calls. It is the zero value.
	WindowCount WindowType = iota
	// WindowTime measures the calls of the last Window.Duration, in
	// TimeWindowBuckets fixed sub-buckets.
	WindowTime
)

func (w WindowType) String() string {
	return enum.Name(w, "WindowType", "count", "time")
}

// ParseWindowType accepts the config spellings; "" is WindowCount.
func ParseWindowType(s string) (WindowType, error) {
	switch s {
	case "", "count":
		return WindowCount, nil
	case "time":
		return WindowTime, nil
	}
	return 0, fmt.Errorf("unknown window_type %q (want count or time)", s)
}

// ContentionPolicy says what a Check does when it cannot commit the write
// its decision needs: the CAS retries ran out, or the store failed.
type ContentionPolicy uint8

const (
	// FailSafe (the zero value) rejects a request that needed a write, which
	// only happens while the breaker is open or half-open: taking a probe
	// slot or moving to half-open. A closed breaker never writes on Check, so
	// contention can never reject traffic to a healthy backend. When the
	// state could not even be read, the request is allowed untracked.
	FailSafe ContentionPolicy = iota
	// FailOpen allows the request untracked: its outcome is not recorded
	// and it holds no probe slot, so half-open may briefly see more than
	// HalfOpenMaxRequests requests.
	FailOpen
)

// Limits and defaults.
const (
	// MaxCountWindow bounds Window.Size: 1024 calls are two 128-byte bit
	// rings in the encoded state, which keeps every report's CAS write small.
	MaxCountWindow = 1024
	// TimeWindowBuckets is the number of sub-buckets of a time window. The
	// measured span is therefore between 9/10 and all of Window.Duration.
	TimeWindowBuckets = 10

	DefaultFailureThreshold    = 5
	DefaultSuccessThreshold    = 2
	DefaultOpenTimeout         = 30 * time.Second
	DefaultHalfOpenMaxRequests = 1
	DefaultWindowSize          = 100
	DefaultWindowDuration      = 60 * time.Second
	// DefaultMinimumCalls is the minimum number of calls of a time window
	// before its rates are judged; the filter's config uses it as the
	// default of failure_rate.minimum_calls for both window types.
	DefaultMinimumCalls = 20
	// DefaultMaxRetries is high enough that eight workers racing on one key
	// all get through in practice; exhaustion is for a pathological store.
	DefaultMaxRetries = 16
	// MaxCounter bounds thresholds so that counters and products in the
	// decision path never overflow.
	MaxCounter = 1 << 20
	// minWindowDuration keeps a time window's sub-buckets at least 1ms wide.
	minWindowDuration = TimeWindowBuckets * time.Millisecond
)

// Window configures the sliding window that the failure rate and the
// slow-call rate are both measured over. It is only used when
// Settings.FailureRatePercent or Settings.SlowCallDuration is set.
type Window struct {
	// Type is count (the zero value) or time.
	Type WindowType
	// Size is the number of calls of a count window, 1..MaxCountWindow.
	// Zero means DefaultWindowSize. Must be zero for a time window.
	Size uint32
	// Duration is the span of a time window, at least 10ms. Zero means
	// DefaultWindowDuration. Must be zero for a count window.
	Duration time.Duration
	// MinimumCalls is how many calls the window must hold before a rate can
	// trip the breaker. Zero means the whole count window (Size), or
	// DefaultMinimumCalls for a time window. It cannot exceed Size.
	MinimumCalls uint32
}

// Settings configures a breaker. Every zero value is documented; the JSON
// names in errors are the config field names the filter exposes.
type Settings struct {
	// Mode defaults to ModeEnforce.
	Mode Mode

	// FailureThreshold trips the breaker after this many consecutive failed
	// calls. Zero turns it off; DefaultSettings sets DefaultFailureThreshold.
	FailureThreshold uint32

	// FailureRatePercent trips the breaker when at least this percentage of
	// the calls in Window failed (1..100). Zero turns it off.
	FailureRatePercent uint32

	// SlowCallDuration marks a call slower than this as slow (strictly
	// greater, as in resilience4j). Zero turns slow-call tracking off.
	SlowCallDuration time.Duration
	// SlowCallPercent trips the breaker when at least this percentage of
	// the calls in Window were slow (1..100). Zero means 100. Only valid
	// with SlowCallDuration.
	SlowCallPercent uint32

	// Window is the sliding window for both rates.
	Window Window

	// SuccessThreshold is the number of consecutive successful probes that
	// close a half-open breaker. Zero means DefaultSuccessThreshold.
	SuccessThreshold uint32

	// OpenTimeout is how long the breaker stays open before it lets probes
	// through. Zero means DefaultOpenTimeout.
	OpenTimeout time.Duration
	// OpenTimeoutMultiplier grows the open timeout on each re-open without
	// an intervening close: the n-th consecutive open lasts
	// OpenTimeout × multiplier^(n−1), capped at MaxOpenTimeout. Zero (or 1)
	// means no growth; otherwise it must be in (1, 100].
	OpenTimeoutMultiplier float64
	// MaxOpenTimeout caps the grown open timeout. Zero means 10 ×
	// OpenTimeout. It must not be set without a multiplier, where it would
	// have no effect.
	MaxOpenTimeout time.Duration
	// JitterPercent shortens each open timeout by a random share of at
	// most this percent of it (see Jitter), so that instances that opened
	// together do not probe together. Zero means none; at most
	// MaxJitterPercent.
	JitterPercent uint8
	// Random is the jitter's source of uniform uint64s; nil means
	// math/rand/v2. Tests pass a seeded one.
	Random func() uint64

	// HalfOpenMaxRequests is the number of probes that may be in flight at
	// once in half-open, exactly, across all workers sharing the store.
	// Zero means DefaultHalfOpenMaxRequests.
	HalfOpenMaxRequests uint32
	// ProbeTimeout bounds how long probes may stay in flight without an
	// outcome. Once every in-flight probe is older than this (no probe was
	// admitted for ProbeTimeout while some are still out), they count as a
	// failure and the breaker re-opens, so a lost outcome can never wedge
	// half-open. Zero means OpenTimeout.
	ProbeTimeout time.Duration

	// MaxRetries bounds the CAS retries of one Check or Report. Zero means
	// DefaultMaxRetries.
	MaxRetries int
	// OnContention is what Check does when it cannot commit; see
	// ContentionPolicy. The zero value is FailSafe.
	OnContention ContentionPolicy
}

// DefaultSettings returns the defaults of the config, including the
// consecutive-failure trip of DefaultFailureThreshold that the zero
// Settings leave off.
func DefaultSettings() Settings {
	return Settings{FailureThreshold: DefaultFailureThreshold}
}

// FieldError is one invalid setting. Field uses the config's JSON names, so
// the filter can prefix it with the breaker's path.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Validate reports every invalid setting at once, as errors.Join of
// *FieldError.
func (s *Settings) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if s.Mode > ModeDisabled {
		bad("mode", "unknown mode %d", s.Mode)
	}
	if s.FailureThreshold > MaxCounter {
		bad("failure_threshold", "must be <= %d", MaxCounter)
	}
	if s.FailureRatePercent > 100 {
		bad("failure_rate.threshold_percent", "must be between 1 and 100, or 0 for off")
	}
	if s.SlowCallDuration < 0 {
		bad("slow_call.duration", "must be >= 0")
	}
	if s.SlowCallPercent > 100 {
		bad("slow_call.threshold_percent", "must be between 1 and 100")
	}
	if s.SlowCallDuration == 0 && s.SlowCallPercent != 0 {
		bad("slow_call.threshold_percent", "set without slow_call.duration")
	}
	w := s.Window
	switch w.Type {
	case WindowCount:
		if w.Size > MaxCountWindow {
			bad("failure_rate.window", "must be <= %d calls", MaxCountWindow)
		}
		if w.Duration != 0 {
			bad("failure_rate.window_duration", "only used with window_type time")
		}
		size := w.Size
		if size == 0 {
			size = DefaultWindowSize
		}
		if w.MinimumCalls > size {
			bad("failure_rate.minimum_calls", "must be <= the window size %d, or the rate could never trip", size)
		}
	case WindowTime:
		if w.Size != 0 {
			bad("failure_rate.window", "only used with window_type count; use window_duration")
		}
		if w.Duration < 0 || (w.Duration > 0 && w.Duration < minWindowDuration) {
			bad("failure_rate.window_duration", "must be >= %v", minWindowDuration)
		}
		if w.MinimumCalls > MaxCounter {
			bad("failure_rate.minimum_calls", "must be <= %d", MaxCounter)
		}
	default:
		bad("failure_rate.window_type", "unknown window type %d", w.Type)
	}
	if (s.Mode == ModeEnforce || s.Mode == ModeMetricsOnly) &&
		s.FailureThreshold == 0 && s.FailureRatePercent == 0 && s.SlowCallDuration == 0 {
		bad("failure_threshold", "no trip condition: set failure_threshold, failure_rate or slow_call")
	}
	if s.SuccessThreshold > MaxCounter {
		bad("success_threshold", "must be <= %d", MaxCounter)
	}
	if s.OpenTimeout < 0 {
		bad("open_timeout", "must be >= 0")
	}
	m := s.OpenTimeoutMultiplier
	if math.IsNaN(m) || (m != 0 && m < 1) || m > 100 {
		bad("open_timeout_multiplier", "must be in [1, 100], or 0 for no growth")
	}
	if s.JitterPercent > MaxJitterPercent {
		bad("jitter_percent", "must be <= %d", MaxJitterPercent)
	}
	if s.MaxOpenTimeout < 0 {
		bad("max_open_timeout", "must be >= 0")
	}
	if s.MaxOpenTimeout > 0 {
		if m <= 1 {
			bad("max_open_timeout", "has no effect without open_timeout_multiplier > 1")
		}
		open := s.OpenTimeout
		if open == 0 {
			open = DefaultOpenTimeout
		}
		if s.MaxOpenTimeout < open {
			bad("max_open_timeout", "must be >= open_timeout %v", open)
		}
	}
	if s.HalfOpenMaxRequests > MaxCounter {
		bad("half_open_max_requests", "must be <= %d", MaxCounter)
	}
	if s.ProbeTimeout < 0 {
		bad("probe_timeout", "must be >= 0")
	}
	if s.MaxRetries < 0 {
		bad("max_retries", "must be >= 0")
	}
	if s.OnContention > FailOpen {
		bad("on_contention", "unknown policy %d", s.OnContention)
	}
	return errors.Join(errs...)
}
