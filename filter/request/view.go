package request

import (
	"net/netip"

	"github.com/sluice-proxy/sluice/filter/config"
)

// View is what Matches looks at: the pseudo-headers and route as
// values, and the headers and the request's other attributes through
// interfaces that read them only when a condition asks. Info.View makes
// one; tests may fill one by hand.
type View struct {
	Method string
	// Path may include the query string; it is ignored.
	Path string
	// Host may include a port; it is ignored.
	Host   string
	Route  string
	Header HeaderSource
	// Attributes serves client_cidrs, query and metadata conditions; nil
	// means no client address, no query and no metadata.
	Attributes Attributes
}

// HeaderSource tests header conditions on a request. It is an interface
// rather than a func so that the filter can pass a pointer it already has
// without allocating a closure per request.
type HeaderSource interface {
	// MatchHeader reports whether c holds for some reading (every: for
	// every reading) of the lower-case header name, as ValueTest defines.
	MatchHeader(name string, c *config.ValueCondition, every bool) bool
}

// HeaderFunc adapts a function giving each header's one value to
// HeaderSource.
type HeaderFunc func(name string) (string, bool)

// MatchHeader tests c against f's one reading of name.
func (f HeaderFunc) MatchHeader(name string, c *config.ValueCondition, every bool) bool {
	t := NewValueTest(c, every)
	if v, ok := f(name); ok {
		t.Read(v)
	}
	return t.Holds()
}

// Attributes gives what conditions read of a request besides its
// pseudo-headers, route and headers: the client address (per
// client_ip), the decoded query parameters and the dynamic metadata.
// Info computes each lazily.
type Attributes interface {
	ClientAddr() (netip.Addr, bool)
	// MatchQuery reports whether c holds for some reading (every: for
	// every reading) of query parameter name, as ValueTest defines.
	MatchQuery(name string, c *config.ValueCondition, every bool) bool
	// Metadata gives the dynamic metadata value at property path prop as
	// a key renders it; ok is false when it is absent or not a scalar.
	Metadata(prop []string) (string, bool)
}

// headerHolds, queryHolds and metadata read what conditions test, absent
// when r has no source for it.
func (r *View) headerHolds(h *config.HeaderMatch, every bool) bool {
	if r.Header == nil {
		t := NewValueTest(&h.ValueCondition, every)
		return t.Holds()
	}
	return r.Header.MatchHeader(h.Name, &h.ValueCondition, every)
}

func (r *View) queryHolds(q *config.QueryMatch, every bool) bool {
	if r.Attributes == nil {
		t := NewValueTest(&q.ValueCondition, every)
		return t.Holds()
	}
	return r.Attributes.MatchQuery(q.Name, &q.ValueCondition, every)
}

func (r *View) metadata(property []string) (string, bool) {
	if r.Attributes == nil {
		return "", false
	}
	return r.Attributes.Metadata(property)
}

// clientAddr is the client address, absent without Attributes.
func (r *View) clientAddr() (netip.Addr, bool) {
	if r.Attributes == nil {
		return netip.Addr{}, false
	}
	return r.Attributes.ClientAddr()
}
