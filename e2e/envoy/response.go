package envoy

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-proxy/sluice/e2e/host"
)

// respBodyStream is resp's streamed upstream body, if it has one.
func respBodyStream(resp *host.Response) (*upstreamBody, bool) {
	if resp == nil {
		return nil, false
	}
	ub, ok := resp.BodyStream.(*upstreamBody)
	return ub, ok
}

func localReply(status int, details string, body []byte) *host.Response {
	r := &host.Response{Status: status, Body: body, Details: details, Local: true}
	if len(body) > 0 {
		r.Headers = [][2]string{{"content-length", strconv.Itoa(len(body))}, {"content-type", "text/plain"}}
	}
	return r
}

// routerLocalReply renders the router's error the way the wasm host does,
// so a chain without wasm filters answers identically.
func routerLocalReply(ue *host.UpstreamError) *host.Response {
	return localReply(ue.Status, ue.Details, ue.Body)
}

func writeResponse(w http.ResponseWriter, r *http.Request, resp *host.Response) {
	h := w.Header()
	var upstreamLength string
	for _, kv := range resp.Headers {
		k := strings.ToLower(kv[0])
		switch {
		case strings.HasPrefix(k, ":"), hopByHop[k]:
		case k == "content-length":
			upstreamLength = kv[1]
		default:
			ck := canonicalKey(k)
			h[ck] = append(h[ck], kv[1])
		}
	}
	// Envoy's default server_header_transformation is OVERWRITE.
	h.Set("Server", "envoy")
	status := resp.Status
	if status < 100 || status > 999 {
		status = http.StatusBadGateway
	}
	bodyAllowed := status >= 200 && status != 204 && status != 304
	switch {
	case r.Method == http.MethodHead && upstreamLength != "":
		h.Set("Content-Length", upstreamLength)
	case bodyAllowed && resp.BodyStream == nil && len(resp.Trailers) == 0:
		// A body with trailers goes chunked: HTTP/1.1 carries trailers
		// only after a chunked body.
		h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	}
	if bodyAllowed && resp.BodyStream == nil && r.Method != http.MethodHead {
		// Before the headers: net/http decides on a chunked body, which
		// alone carries trailers in HTTP/1.1, when the headers go out.
		writeTrailers(w, resp.Trailers)
	}
	w.WriteHeader(status)
	if resp.BodyStream != nil {
		writeStreamed(w, r, resp.BodyStream)
		return
	}
	if bodyAllowed && r.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
}

// writeTrailers has trailers follow the body: net/http writes what the
// handler sets under http.TrailerPrefix as the chunked body's trailer
// section (HTTP/1.1) or the trailing HEADERS frame (HTTP/2).
func writeTrailers(w http.ResponseWriter, trailers [][2]string) {
	h := w.Header()
	for _, kv := range trailers {
		k := strings.ToLower(kv[0])
		if strings.HasPrefix(k, ":") || hopByHop[k] || k == "content-length" {
			continue
		}
		ck := http.TrailerPrefix + canonicalKey(k)
		h[ck] = append(h[ck], kv[1])
	}
}

// writeStreamed sends a streamed body chunk by chunk, flushing each, as
// Envoy sends each data frame the filters let through, then its trailers. The stream is
// read to its end even when the client has gone, so the filters see the
// stream end; a reset (any error but io.EOF) drops the connection.
func writeStreamed(w http.ResponseWriter, r *http.Request, body host.BodyStream) {
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush() // the headers go now, ahead of the first chunk
	}
	gone := false
	for {
		b, err := body.Next(r.Context())
		if len(b) > 0 && !gone {
			if _, werr := w.Write(b); werr != nil {
				gone = true
			} else if flusher != nil {
				flusher.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			if tb, ok := body.(host.TrailingBody); ok && !gone {
				writeTrailers(w, tb.Trailers())
			}
			return
		}
		if err != nil {
			panic(http.ErrAbortHandler)
		}
	}
}
