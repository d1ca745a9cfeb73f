// Package redistest starts real redis-server and webdis processes for
// tests, on free ports of 127.0.0.1, and stops them when the test ends.
//
// A missing binary skips the test, except under CI=true where it fails
// it: CI installs both, so a skip there would hide a broken setup.
package redistest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a process may take to answer after start.
const startTimeout = 10 * time.Second

// pollInterval is the pause between readiness probes.
const pollInterval = 10 * time.Millisecond

// Binary returns the path of name, skipping the test when it is missing
// (failing it under CI=true).
func Binary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found (CI=true, so this fails instead of skipping): %v", name, err)
		}
		t.Skipf("%s not installed: %v", name, err)
	}
	return p
}

// freePort asks the kernel for a port that was free a moment ago. Another
// process can take it before ours binds, so starters retry on failure.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// proc is a child process whose exit is observable.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
}

func startProc(bin, logPath string, args ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), log: f}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) kill() {
	if p == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// waitReady polls ready until it succeeds, the process exits or the
// deadline passes.
func (p *proc) waitReady(ready func() error) error {
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		if last = ready(); last == nil {
			return nil
		}
		if errors.Is(last, errNotOurs) {
			return last
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", startTimeout, last)
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited before becoming ready (last probe: %v)", last)
		case <-tick.C:
		}
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Redis is a redis-server child process.
type Redis struct {
	t    testing.TB
	bin  string
	dir  string
	port int

	mu   sync.Mutex
	proc *proc
}

// StartRedis starts redis-server without persistence on a free port and
// waits until it answers PING. It is killed when the test ends.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	r := &Redis{t: t, bin: Binary(t, "redis-server"), dir: t.TempDir()}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if r.port, err = freePort(); err != nil {
			continue
		}
		if err = r.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redis-server: %v\n%s", err, tail(r.logPath()))
	}
	t.Cleanup(r.Kill)
	return r
}

func (r *Redis) logPath() string { return filepath.Join(r.dir, "redis.log") }

func (r *Redis) start() error {
	p, err := startProc(r.bin, r.logPath(),
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--daemonize", "no")
	if err != nil {
		return err
	}
	if err := p.waitReady(func() error { return ourRedis(r.Addr(), p.cmd.Process.Pid) }); err != nil {
		p.kill()
		return err
	}
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
	return nil
}

// Addr is host:port.
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// Kill stops redis-server with SIGKILL and waits for it to exit.
func (r *Redis) Kill() {
	r.mu.Lock()
	p := r.proc
	r.proc = nil
	r.mu.Unlock()
	p.kill()
}

// Restart kills redis-server if it runs and starts it again on the same
// port with empty data (persistence is off), as after a crash.
func (r *Redis) Restart() {
	r.t.Helper()
	r.Kill()
	if err := r.start(); err != nil {
		r.t.Fatalf("redis-server restart: %v\n%s", err, tail(r.logPath()))
	}
}

// Client returns a go-redis client for r, closed when the test ends.
func (r *Redis) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	r.t.Cleanup(func() { c.Close() })
	return c
}

// Ping sends one PING to addr on a fresh connection.
// errNotOurs means another process answers on the port we chose: our
// server lost the race for it, and talking to it would share someone
// else's data.
var errNotOurs = errors.New("another server answers on this port")

// ourRedis succeeds once the Redis at addr answers and is the process pid.
func ourRedis(addr string, pid int) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if v != strconv.Itoa(pid) {
				return fmt.Errorf("%w: %s is pid %s, not %d", errNotOurs, addr, v, pid)
			}
			return nil
		}
	}
	return fmt.Errorf("INFO server from %s has no process_id", addr)
}

func Ping(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	return c.Ping(context.Background()).Err()
}

// CommandStats returns the calls per command from INFO commandstats, keyed
// by lower-case command name ("evalsha", "script|load", …).
func CommandStats(addr string) (map[string]int64, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return parseCommandStats(info)
}

// parseCommandStats reads lines like
// "cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,…".
func parseCommandStats(info string) (map[string]int64, error) {
	stats := make(map[string]int64)
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			if k != "calls" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("commandstats %q: %v", line, err)
			}
			stats[strings.TrimPrefix(name, "cmdstat_")] = n
		}
	}
	return stats, sc.Err()
}

// Webdis is a webdis child process in front of one Redis.
type Webdis struct {
	t    testing.TB
	port int
	proc *proc
}

// WebdisOptions are the optional settings of StartWebdisWith.
type WebdisOptions struct {
	// BasicAuth, "user:pass", makes every command require that login.
	BasicAuth string
	// PoolSize is the Redis connections per thread; 0 means 4.
	PoolSize int
}

// StartWebdis starts webdis (2 threads, foreground) for the Redis at
// redisAddr on a free port and waits until it answers HTTP.
func StartWebdis(t testing.TB, redisAddr string) *Webdis {
	return StartWebdisWith(t, redisAddr, WebdisOptions{})
}

// StartWebdisWith is StartWebdis with options.
func StartWebdisWith(t testing.TB, redisAddr string, opts WebdisOptions) *Webdis {
	t.Helper()
	bin := Binary(t, "webdis")
	host, portStr, err := net.SplitHostPort(redisAddr)
	if err != nil {
		t.Fatalf("webdis: bad redis address %q: %v", redisAddr, err)
	}
	redisPort, err := strconv.Atoi(portStr)
	if err != nil {
		t.Fatalf("webdis: bad redis port %q", portStr)
	}
	if opts.PoolSize == 0 {
		opts.PoolSize = 4
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "webdis.log")
	w := &Webdis{t: t}
	for attempt := 0; attempt < 3; attempt++ {
		if w.port, err = freePort(); err != nil {
			continue
		}
		cfg := map[string]any{
			"redis_host": host, "redis_port": redisPort, "redis_auth": nil,
			"http_host": "127.0.0.1", "http_port": w.port,
			"threads": 2, "pool_size": opts.PoolSize,
			"daemonize": false, "database": 0,
			"verbosity": 3, "logfile": logPath,
		}
		if opts.BasicAuth != "" {
			cfg["acl"] = []any{
				map[string]any{"disabled": []string{"*"}},
				map[string]any{"http_basic_auth": opts.BasicAuth, "enabled": []string{"*"}},
			}
		}
		b, _ := json.Marshal(cfg)
		cfgPath := filepath.Join(dir, "webdis.json")
		if err = os.WriteFile(cfgPath, b, 0o644); err != nil {
			break
		}
		var p *proc
		if p, err = startProc(bin, filepath.Join(dir, "stdout.log"), cfgPath); err != nil {
			continue
		}
		if err = p.waitReady(w.probe); err != nil {
			p.kill()
			continue
		}
		w.proc = p
		break
	}
	if err != nil {
		t.Fatalf("webdis: %v\n%s", err, tail(logPath))
	}
	t.Cleanup(w.Kill)
	return w
}

// probe succeeds once webdis answers any HTTP status: it must be usable
// even while its Redis is down, for the failure tests.
func (w *Webdis) probe() error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(w.URL() + "/PING")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Addr is host:port of the HTTP listener.
func (w *Webdis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(w.port)) }

// URL is "http://" + Addr().
func (w *Webdis) URL() string { return "http://" + w.Addr() }

// Stop freezes webdis with SIGSTOP: connections stay open and requests
// hang, which is what a stalled backend looks like to a caller. It returns
// once the kernel reports the process stopped, because a signal is
// delivered asynchronously and a request sent right after kill(2) could
// still be served.
func (w *Webdis) Stop() {
	w.signal(syscall.SIGSTOP)
	w.waitState(func(state byte) bool { return state == 'T' || state == 't' }, "stopped")
}

// Cont resumes webdis after Stop and returns once it runs again.
func (w *Webdis) Cont() {
	w.signal(syscall.SIGCONT)
	w.waitState(func(state byte) bool { return state != 'T' && state != 't' }, "running")
}

// waitState polls /proc/<pid>/stat until ok(state) holds. Without /proc
// (not Linux) it returns at once.
func (w *Webdis) waitState(ok func(byte) bool, what string) {
	path := fmt.Sprintf("/proc/%d/stat", w.proc.cmd.Process.Pid)
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		// The state follows the parenthesised command name.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && ok(b[i+2]) {
			return
		}
		if time.Now().After(deadline) {
			w.t.Errorf("webdis did not become %s within %v", what, startTimeout)
			return
		}
		<-tick.C
	}
}

func (w *Webdis) signal(s syscall.Signal) {
	if err := w.proc.cmd.Process.Signal(s); err != nil {
		w.t.Errorf("webdis: signal %v: %v", s, err)
	}
}

// Kill stops webdis with SIGKILL and waits for it to exit.
func (w *Webdis) Kill() { w.proc.kill() }
