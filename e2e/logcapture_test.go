package e2e_test

import (
	"fmt"
	"strings"
	"sync"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// logCapture keeps the host's and plugin's log lines at or above a level,
// up to a size, for a test to print when something went wrong: a trap's
// panic arrives as many short writes, too many to log as they come.
type logCapture struct {
	min  host.LogLevel
	max  int
	mu   sync.Mutex
	text strings.Builder
}

func newLogCapture(min host.LogLevel, max int) *logCapture {
	return &logCapture{min: min, max: max}
}

// logger is the host.RuntimeOptions Logger.
func (c *logCapture) logger(level host.LogLevel, _, msg string) {
	if level < c.min {
		return
	}
	c.mu.Lock()
	if c.text.Len() < c.max {
		fmt.Fprintf(&c.text, "[%v] %s\n", level, msg)
	}
	c.mu.Unlock()
}

func (c *logCapture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.text.String()
}
