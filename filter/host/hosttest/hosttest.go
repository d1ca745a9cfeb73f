// Package hosttest has fakes of the host interfaces, so code written
// against package host is tested natively, without the SDK or its
// emulator. Each fake records what it was asked and lets the test decide
// what the host answers; none is safe for concurrent use, like a worker
// VM, which runs one callback at a time.
package hosttest

import (
	"fmt"
	"time"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/filter/host"
	"github.com/sluice-proxy/sluice/limiter/store"
)

// New returns a host of fakes over a fresh in-memory store, its clock at
// start.
func New(start time.Time) (host.Host, *Fakes) {
	stream := &Stream{}
	f := &Fakes{
		Store:   store.NewMemory(),
		Clock:   &Clock{Now: start},
		Stream:  stream,
		Caller:  &Caller{Stream: stream},
		Ticker:  &Ticker{},
		Metrics: &Metrics{Values: map[string]uint64{}},
		Log:     &Log{},
	}
	return host.Host{
		Store: f.Store, Clock: f.Clock.Read, Stream: f.Stream, Caller: f.Caller,
		Ticker: f.Ticker, Metrics: f.Metrics, Log: f.Log,
	}, f
}

// Fakes are the fakes behind a host.Host of New.
type Fakes struct {
	Store   *store.Memory
	Clock   *Clock
	Stream  *Stream
	Caller  *Caller
	Ticker  *Ticker
	Metrics *Metrics
	Log     *Log
}

// Clock is a clock the test steps.
type Clock struct{ Now time.Time }

// Read is the host.Clock.
func (c *Clock) Read() time.Time { return c.Now }

// Advance steps the clock.
func (c *Clock) Advance(d time.Duration) { c.Now = c.Now.Add(d) }

// Reply is a local reply a Stream sent.
type Reply struct {
	Stream  uint32
	Status  int
	Headers [][2]string
	Body    []byte
}

// Stream is one request and response at a time; Select records the
// stream a later Reply or Resume is for, and fails for ids in Gone.
type Stream struct {
	Headers    [][2]string
	Properties map[string]string
	// FilterState is what the filter set for the access log
	// (SetFilterState), by name.
	FilterState       map[string]string
	ResponseHeaderMap [][2]string
	// ResponseBodyBytes is what the current body callback may read.
	ResponseBodyBytes []byte
	Current           uint32
	Gone              map[uint32]bool
	Replies           []Reply
	Resumed           []uint32
	// Reads counts request header and property reads, ResponseReads
	// response header reads, BodyReads body reads: each is one hostcall
	// in the adapter.
	Reads, ResponseReads, BodyReads int
	// RouteClears counts ClearRouteCache calls; RouteClearedAt is
	// Headers as the last one saw them.
	RouteClears    int
	RouteClearedAt [][2]string
}

// SetFilterState records name's value in FilterState.
func (s *Stream) SetFilterState(name, value string) error {
	if s.FilterState == nil {
		s.FilterState = map[string]string{}
	}
	s.FilterState[name] = value
	return nil
}

// ClearRouteCache records that the route would be selected again from
// Headers as they are now.
func (s *Stream) ClearRouteCache() {
	s.RouteClears++
	s.RouteClearedAt = append([][2]string(nil), s.Headers...)
}

func (s *Stream) RequestHeaders() [][2]string { s.Reads++; return s.Headers }

func (s *Stream) RequestHeader(name string) (string, bool) {
	s.Reads++
	return lookup(s.Headers, name)
}

func (s *Stream) Property(path []string) string {
	s.Reads++
	key := ""
	for i, p := range path {
		if i > 0 {
			key += "."
		}
		key += p
	}
	return s.Properties[key]
}

func (s *Stream) ResponseHeaders() [][2]string { s.ResponseReads++; return s.ResponseHeaderMap }

// ResponseBody returns the start of ResponseBodyBytes and counts the read.
func (s *Stream) ResponseBody(size int) []byte {
	s.BodyReads++
	return s.ResponseBodyBytes[:min(size, len(s.ResponseBodyBytes))]
}

func (s *Stream) ResponseHeader(name string) (string, bool) {
	s.ResponseReads++
	return lookup(s.ResponseHeaderMap, name)
}

func (s *Stream) ReplaceResponseHeader(name, value string) error {
	s.ResponseHeaderMap = replace(s.ResponseHeaderMap, name, value)
	return nil
}

// ReplaceRequestHeader changes Headers, which the upstream would see: the
// first value becomes value and the others go, as Envoy's setCopy does.
func (s *Stream) ReplaceRequestHeader(name, value string) error {
	for i := range s.Headers {
		if s.Headers[i][0] == name {
			s.Headers[i][1] = value
			s.Headers = append(s.Headers[:i+1], removeHeader(s.Headers[i+1:], name)...)
			return nil
		}
	}
	s.Headers = append(s.Headers, [2]string{name, value})
	return nil
}

// RemoveRequestHeader removes every value of name from Headers.
func (s *Stream) RemoveRequestHeader(name string) error {
	s.Headers = removeHeader(s.Headers, name)
	return nil
}

func removeHeader(hs [][2]string, name string) [][2]string {
	out := hs[:0]
	for _, kv := range hs {
		if kv[0] != name {
			out = append(out, kv)
		}
	}
	return out
}

func (s *Stream) Reply(status int, headers [][2]string, body []byte) error {
	s.Replies = append(s.Replies, Reply{Stream: s.Current, Status: status, Headers: headers, Body: body})
	return nil
}

func (s *Stream) Resume() error {
	s.Resumed = append(s.Resumed, s.Current)
	return nil
}

func (s *Stream) Select(id uint32) error {
	if s.Gone[id] {
		return fmt.Errorf("stream %d is gone", id)
	}
	s.Current = id
	return nil
}

// replace sets the first header name of hs to value, or adds it.
func replace(hs [][2]string, name, value string) [][2]string {
	for i := range hs {
		if hs[i][0] == name {
			hs[i][1] = value
			return hs
		}
	}
	return append(hs, [2]string{name, value})
}

func lookup(hs [][2]string, name string) (string, bool) {
	for _, kv := range hs {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

// Call is one callout a Caller accepted, waiting for the test to answer.
type Call struct {
	Cluster string
	Headers [][2]string
	Body    []byte
	Timeout time.Duration
	// From is the stream that was current (Stream.Current) when the call
	// was sent: the context a proxy-wasm host files it under, 0 for the
	// root (the tick, a reply) unless the caller had selected a stream.
	From   uint32
	done   func(status int, body []byte, err error)
	caller *Caller
	// Answered is set once Answer ran.
	Answered bool
}

// AnswerWithHeaders delivers a reply with headers, readable through
// Caller.ReplyHeader while the callback runs.
func (c *Call) AnswerWithHeaders(status int, headers [][2]string, body []byte) {
	c.caller.replyHeaders = headers
	defer func() { c.caller.replyHeaders = nil }()
	c.Answer(status, body, nil)
}

// Reply delivers status and body as a proxy-wasm host does under the
// host.Caller contract: a body over host.MaxReplyBody is not read and is
// reported as backend.TooLarge, and what is read is a copy, since the
// host's lives only as long as the callback.
func (c *Call) Reply(status int, body []byte) {
	if len(body) > host.MaxReplyBody {
		c.Answer(status, nil, backend.TooLarge(status, len(body), host.MaxReplyBody))
		return
	}
	c.Answer(status, append([]byte(nil), body...), nil)
}

// NoReply reports that no response came (a timeout, a reset, no healthy
// host), as the host would.
func (c *Call) NoReply() { c.Answer(0, nil, backend.Timeout()) }

// Answer delivers the reply, as the host's callback would; once.
func (c *Call) Answer(status int, body []byte, err error) {
	if c.Answered {
		panic("hosttest: a call answered twice")
	}
	c.Answered = true
	c.done(status, body, err)
}

// Caller records calls; Fail, when set, refuses them. Stream, when set,
// is read for the Call's From.
type Caller struct {
	Calls  []*Call
	Fail   error
	Stream *Stream
	// replyHeaders are the headers of the reply being delivered.
	replyHeaders [][2]string
}

// ReplyHeader implements host.ReplyHeaders.
func (c *Caller) ReplyHeader(name string) (string, bool) { return lookup(c.replyHeaders, name) }

func (c *Caller) Call(cluster string, headers [][2]string, body []byte, timeout time.Duration,
	done func(status int, body []byte, err error)) error {
	if c.Fail != nil {
		return c.Fail
	}
	call := &Call{Cluster: cluster, Headers: headers, Body: append([]byte(nil), body...), Timeout: timeout, done: done, caller: c}
	if c.Stream != nil {
		call.From = c.Stream.Current
	}
	c.Calls = append(c.Calls, call)
	return nil
}

// Pending returns the calls not answered yet, oldest first.
func (c *Caller) Pending() []*Call {
	var p []*Call
	for _, call := range c.Calls {
		if !call.Answered {
			p = append(p, call)
		}
	}
	return p
}

// Ticker records the tick period.
type Ticker struct{ Period time.Duration }

func (t *Ticker) SetTick(d time.Duration) error { t.Period = d; return nil }

// Metrics keeps every metric's value by name: counters add, gauges and
// histograms keep the last value.
type Metrics struct{ Values map[string]uint64 }

type metric struct {
	m    *Metrics
	name string
}

func (m *Metrics) Counter(name string) host.Counter     { return metric{m, name} }
func (m *Metrics) Gauge(name string) host.Gauge         { return metric{m, name} }
func (m *Metrics) Histogram(name string) host.Histogram { return metric{m, name} }

func (c metric) Increment(n uint64) { c.m.Values[c.name] += n }
func (c metric) Set(v uint64)       { c.m.Values[c.name] = v }
func (c metric) Record(v uint64)    { c.m.Values[c.name] = v }

// Log keeps every line, prefixed with its level.
type Log struct{ Lines []string }

func (l *Log) add(level, msg string) { l.Lines = append(l.Lines, level+" "+msg) }

func (l *Log) Debugf(format string, args ...any)    { l.add("debug", fmt.Sprintf(format, args...)) }
func (l *Log) Info(msg string)                      { l.add("info", msg) }
func (l *Log) Warn(msg string)                      { l.add("warn", msg) }
func (l *Log) Warnf(format string, args ...any)     { l.add("warn", fmt.Sprintf(format, args...)) }
func (l *Log) Errorf(format string, args ...any)    { l.add("error", fmt.Sprintf(format, args...)) }
func (l *Log) Criticalf(format string, args ...any) { l.add("critical", fmt.Sprintf(format, args...)) }

var (
	_ host.Stream  = (*Stream)(nil)
	_ host.Caller  = (*Caller)(nil)
	_ host.Ticker  = (*Ticker)(nil)
	_ host.Metrics = (*Metrics)(nil)
	_ host.Log     = (*Log)(nil)
)
