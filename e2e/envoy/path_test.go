package envoy

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// lineRecorder is an HTTP/1.1 backend on 127.0.0.1 that answers 200 to
// every request and records its request line exactly as it arrived, which
// no net/http server shows for a line like "GET //x HTTP/1.1".
func lineRecorder(t *testing.T) (port string, lines <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 64)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					ch <- strings.TrimRight(line, "\r\n")
					// Upstream requests here are GETs without a body.
					for {
						h, err := br.ReadString('\n')
						if err != nil {
							return
						}
						if h == "\r\n" {
							break
						}
					}
					if _, err := c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port, ch
}

// rawGet sends requestTarget as written (net/http's client would rewrite
// a target starting with "//") and returns the status.
func rawGet(t *testing.T, addr, requestTarget string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET " + requestTarget + " HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", requestTarget, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestPathForwardedUnchanged: Envoy forwards :path as it came, "//" and
// escapes included, unless merge_slashes is set.
func TestPathForwardedUnchanged(t *testing.T) {
	port, lines := lineRecorder(t)
	env := startEnv(t, routerOnly{bPort: port}, 1)
	for _, target := range []string{
		"//.sluice/x",
		"//a//b/?c=//d",
		"//a%2Fb%20c?",
		"///",
		"/a//b",
		"/a%2Fb?x=%",
	} {
		if st := rawGet(t, env.srv.ListenerAddr("main"), target); st != 200 {
			t.Errorf("GET %s: status %d", target, st)
			continue
		}
		if got, want := <-lines, "GET "+target+" HTTP/1.1"; got != want {
			t.Errorf("upstream got %q, want %q", got, want)
		}
	}
}

// TestMergeSlashes: with merge_slashes, runs of "/" in the path (not the
// query) become one before routing and forwarding, as Envoy's
// PathUtil::mergeSlashes does.
func TestMergeSlashes(t *testing.T) {
	port, lines := lineRecorder(t)
	env := startEnv(t, routerOnly{bPort: port, mergeSlashes: true}, 1)
	for target, want := range map[string]string{
		"//.sluice/x":   "/.sluice/x",
		"//a//b/?c=//d": "/a/b/?c=//d",
		"/a/b":          "/a/b",
		"/a/b?x=//":     "/a/b?x=//",
		"///":           "//", // Envoy keeps a leading and a trailing slash
	} {
		if st := rawGet(t, env.srv.ListenerAddr("main"), target); st != 200 {
			t.Errorf("GET %s: status %d", target, st)
			continue
		}
		if got := <-lines; got != "GET "+want+" HTTP/1.1" {
			t.Errorf("GET %s: upstream got %q, want the path %q", target, got, want)
		}
	}
}

func TestMergeSlashesFunc(t *testing.T) {
	for in, want := range map[string]string{
		"":           "",
		"/":          "/",
		"//":         "//",
		"/a//b":      "/a/b",
		"a//b//":     "a/b/",
		"//a?b//c":   "/a?b//c",
		"/a?b//c":    "/a?b//c",
		"/a///b///c": "/a/b/c",
	} {
		if got := mergeSlashes(in); got != want {
			t.Errorf("mergeSlashes(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUpstreamURL: every request line is the path as given, or an error;
// never a different path.
func TestUpstreamURL(t *testing.T) {
	for _, path := range []string{"/", "/a?b", "//.sluice/x", "//a%2Fb?", "//a?b=%zz", "/a{b}%zz", "*"} {
		u, err := upstreamURL("c", path)
		if err != nil {
			t.Errorf("%q: %v", path, err)
			continue
		}
		if got := u.RequestURI(); got != path {
			t.Errorf("%q is sent as %q", path, got)
		}
	}
	// net/http would escape the braces of a path that starts with "//".
	if u, err := upstreamURL("c", "//x/a{b}"); err == nil {
		t.Errorf(`"//x/a{b}" is sent as %q, want an error`, u.RequestURI())
	}
}
