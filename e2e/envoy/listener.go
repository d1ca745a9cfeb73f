package envoy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// maxRequestBody caps a buffered downstream request, since the whole body is
// handed to the filters at once. Envoy's answer to an oversized body on a
// buffering filter is also 413.
const maxRequestBody = 64 << 20

type workerKey struct{}

// listener is one HCM: request header mutation, the wasm filters, and the
// router.
type listener struct {
	s     *Server
	cfg   *Listener
	chain host.Upstream // first filter, ending in the router
	wasm  bool
}

func (s *Server) newListener(ctx context.Context, lc *Listener) (*listener, error) {
	l := &listener{s: s, cfg: lc}
	var slots []*wasmSlot
	// stages are the filters before the router, in chain order: a wasm
	// slot or a header_to_metadata filter.
	type stage struct {
		slot *wasmSlot
		h2m  *HeaderToMetadata
	}
	var stages []stage
	for _, f := range lc.HTTPFilters {
		if f.HeaderToMetadata != nil {
			stages = append(stages, stage{h2m: f.HeaderToMetadata})
			continue
		}
		if f.Wasm == nil {
			continue
		}
		p, err := s.startPlugin(ctx, f.Wasm)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		slot := &wasmSlot{listener: lc.Name, filter: f.Name, file: f.ConfigFile, loaded: f.configStat, wasm: f.Wasm, cur: &pluginRef{p: p}}
		s.slots = append(s.slots, slot)
		slots = append(slots, slot)
		stages = append(stages, stage{slot: slot})
	}
	l.wasm = len(slots) > 0
	next := host.Upstream(l.router)
	for i := len(stages) - 1; i >= 0; i-- {
		if h := stages[i].h2m; h != nil {
			next = h.filter(next)
			continue
		}
		slot, n := stages[i].slot, next
		next = func(ctx context.Context, req *host.Request) (*host.Response, error) {
			ref := slot.acquire()
			defer ref.inflight.Done()
			if ref.p == nil {
				return noVM(ctx, req, n, slot.wasm)
			}
			return ref.p.Serve(ctx, req, n)
		}
	}
	l.chain = next
	return l, nil
}

func (l *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	worker, _ := ctx.Value(workerKey{}).(int)
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err != nil {
		// The client went away mid-body; there is nobody to answer.
		return
	}
	if len(body) > maxRequestBody {
		writeResponse(w, r, localReply(413, "payload_too_large", []byte("Payload Too Large")))
		return
	}
	start := time.Now()
	req := l.request(r, worker, body)
	var resp *host.Response
	if l.wasm {
		resp, err = l.chain(ctx, req)
	} else {
		resp, err = l.router(ctx, req)
		var ue *host.UpstreamError
		if errors.As(err, &ue) {
			resp, err = routerLocalReply(ue), nil
		}
	}
	if err != nil {
		// A reset stream (proxy_close_stream, client gone): HTTP/1 can only
		// say that by dropping the connection.
		panic(http.ErrAbortHandler)
	}
	if l.s.log.Enabled(LevelDebug) {
		l.s.log.Logf(LevelDebug, "http", "[worker %d] %s %s -> %d %s", worker, r.Method, r.RequestURI, resp.Status, resp.Details)
	}
	writeResponse(w, r, resp)
	if len(l.cfg.AccessLogs) > 0 {
		// Written once the response is complete, as Envoy's onLog runs at
		// stream end.
		e := &logEntry{start: start, duration: time.Since(start), req: req, resp: resp}
		for _, a := range l.cfg.AccessLogs {
			if err := l.s.accessLogs.write(a.Path, a.line(e)); err != nil {
				l.s.log.Logf(LevelError, "http", "access log %s: %v", a.Path, err)
			}
		}
	}
}
