// Command echo-backend is the demo and test upstream for sluice-envoy:
//
//	go run ./e2e/cmd/echo-backend -addr 127.0.0.1:8081
//
//	GET /anything          → 200, the request echoed as JSON
//	GET /status/<code>     → that status, with the echo as body
//	GET /delay/<duration>  → waits (e.g. 250ms, 2s; a bare number is
//	                         seconds), then echoes
//
// A request header "Echo-Response-Header: <name>: <value>" (repeatable)
// adds that header to the response, e.g. "x-tokens-used: 250" to play an
// LLM API reporting its usage.
//
// With -llm it serves an OpenAI-style chat completions API instead
// (internal/fixtures/llm), which reports usage in its JSON body or, when
// asked to stream, in the last of its server-sent events:
//
//	go run ./e2e/cmd/echo-backend -llm -addr 127.0.0.1:8083
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/echo"
	"github.com/sluice-proxy/sluice/internal/fixtures/llm"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "listen address")
	name := flag.String("name", "echo", "instance name reported in every reply (tells endpoints apart)")
	asLLM := flag.Bool("llm", false, "serve the OpenAI-style chat completions stand-in instead of the echo")
	flag.Parse()
	handler := echo.Handler(*name)
	if *asLLM {
		handler = llm.Handler(llm.Options{})
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("echo-backend: %v", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	fmt.Fprintf(os.Stderr, "echo-backend %q listening on %s\n", *name, ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
