package request

import (
	"strings"

	"github.com/sluice-proxy/sluice/filter/config"
)

// conditionHolds reports whether c holds for v, found or not.
func conditionHolds(c *config.ValueCondition, v string, found bool) bool {
	if c.HasValue {
		return found && opHolds(c.Op, v, c.Value, c.Regex)
	}
	return found == c.Present
}

// opHolds applies op to v.
func opHolds(op config.ValueOp, v, operand string, re *config.Regex) bool {
	switch op {
	case config.OpPrefix:
		return strings.HasPrefix(v, operand)
	case config.OpSuffix:
		return strings.HasSuffix(v, operand)
	case config.OpContains:
		return strings.Contains(v, operand)
	case config.OpRegex:
		return re.MatchString(v)
	}
	return v == operand
}

// ValueTest tests a header or query condition against each reading of a
// value that a request may give more than once: each value sent, the
// values joined, and absent where some upstream reads none. Upstreams
// disagree on which reading is the request's (Go, Flask and servlets take
// the first value, PHP and Rails the last, WSGI servers join headers), so
// a match must not depend on one: it holds when the condition holds for
// some reading, so that a request is limited under every reading an
// upstream could serve it as; under a not, the nested match is tested for
// every reading instead (see Matches). The request's source calls
// Read and ReadAbsent, and may stop once Decided.
type ValueTest struct {
	c         *config.ValueCondition
	every     bool
	read      bool
	some, all bool
}

// NewValueTest starts a ValueTest of c: for some reading, or every
// reading with every.
func NewValueTest(c *config.ValueCondition, every bool) ValueTest {
	return ValueTest{c: c, every: every, all: true}
}

// Read adds a reading in which the value is v.
func (t *ValueTest) Read(v string) { t.add(conditionHolds(t.c, v, true)) }

// ReadAbsent adds a reading in which the value is absent.
func (t *ValueTest) ReadAbsent() { t.add(conditionHolds(t.c, "", false)) }

func (t *ValueTest) add(held bool) {
	t.read = true
	t.some = t.some || held
	t.all = t.all && held
}

// Decided reports whether no further reading can change Holds.
func (t *ValueTest) Decided() bool {
	if t.every {
		return !t.all
	}
	return t.some
}

// Holds is the result: the condition holds for some (every) reading; with
// no reading at all, the value is absent.
func (t *ValueTest) Holds() bool {
	if !t.read {
		t.ReadAbsent()
	}
	if t.every {
		return t.all
	}
	return t.some
}
