package envoy

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// Level is an Envoy log level (-l/--log-level).
type Level int

const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarning
	LevelError
	LevelCritical
	LevelOff
)

var levelNames = []string{"trace", "debug", "info", "warning", "error", "critical", "off"}

func (l Level) String() string {
	if l < 0 || int(l) >= len(levelNames) {
		return fmt.Sprintf("level(%d)", int(l))
	}
	return levelNames[l]
}

// ParseLevel accepts Envoy's level names ("warn" too, as Envoy does).
func ParseLevel(s string) (Level, error) {
	s = strings.ToLower(s)
	if s == "warn" {
		return LevelWarning, nil
	}
	for i, n := range levelNames {
		if n == s {
			return Level(i), nil
		}
	}
	return 0, fmt.Errorf("invalid log level %q (want one of %s)", s, strings.Join(levelNames, ", "))
}

// Logger writes lines in Envoy's default format,
// "[time][pid][level][component] message", so logs from this stand-in read
// like Envoy's and the same grep patterns work on both.
type Logger struct {
	mu    sync.Mutex
	w     io.Writer
	level Level
	pid   int
	now   func() time.Time
}

// NewLogger logs to w (nil: stderr) at level and above.
func NewLogger(w io.Writer, level Level) *Logger {
	if w == nil {
		w = os.Stderr
	}
	return &Logger{w: w, level: level, pid: os.Getpid(), now: time.Now}
}

// Enabled reports whether a line at level would be written.
func (l *Logger) Enabled(level Level) bool {
	return l != nil && level >= l.level && l.level != LevelOff
}

// Logf writes one line for component ("main", "config", "wasm", "admin", …).
func (l *Logger) Logf(level Level, component, format string, args ...any) {
	if !l.Enabled(level) {
		return
	}
	msg := fmt.Sprintf(format, args...)
	ts := l.now().Format("2006-01-02 15:04:05.000")
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "[%s][%d][%s][%s] %s\n", ts, l.pid, level, component, msg)
}

// hostLevels maps each level below critical to the host's; critical and
// off are the host's critical.
var hostLevels = []host.LogLevel{
	LevelTrace:   host.LogTrace,
	LevelDebug:   host.LogDebug,
	LevelInfo:    host.LogInfo,
	LevelWarning: host.LogWarn,
	LevelError:   host.LogError,
}

func (l *Logger) hostLevel() host.LogLevel {
	if l.level >= 0 && int(l.level) < len(hostLevels) {
		return hostLevels[l.level]
	}
	return host.LogCritical
}

func fromHostLevel(h host.LogLevel) Level {
	for l, hl := range hostLevels {
		if hl == h {
			return Level(l)
		}
	}
	return LevelCritical
}
