package engine

// The response contract of a local reply: a body template when one is
// configured for its kind, the trailers-only gRPC form for gRPC requests,
// and the static reply_headers (sendLocal). Every local reply of the
// filter is sent from here.

import (
	"strconv"
	"strings"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/filter/request/template"
)

// reject answers the request with the local reply a stage decided on:
// its built-in body, replaced by its kind's template when there is one.
func (h *Stream) reject(a *reply) {
	p := h.plugin
	event, by := a.event, a.by
	if event == "" {
		event = a.kind.String()
	}
	if by == "" {
		by = a.values.limit
	}
	attribute(p.host.Stream, p.log, event, by, a.rule)
	r := &p.cfg.Response
	if !r.PlainGRPC && h.isGRPC() {
		h.sendGRPC(a.kind, a.headers) // trailers-only: no body to render
		return
	}
	ct, body := a.contentType, a.body
	if t := r.Templates; r.Body == config.BodyTemplate && t != nil && t.ByKind[a.kind] != nil {
		ct = t.ContentType
		body = t.ByKind[a.kind].Render(t.Escape, func(ph template.Placeholder, header string) string {
			return h.placeholder(ph, header, a.values, a.status)
		})
	}
	h.sendLocal(a.status, a.headers, ct, body)
}

// placeholder is one placeholder's value. Numbers are the ones the
// headers carry: {retry_after} is Retry-After, {window_seconds} the w of
// RateLimit-Policy.
func (h *Stream) placeholder(ph template.Placeholder, header string, v replyValues, status int) string {
	switch ph {
	case template.PlaceholderLimit:
		return v.limit
	case template.PlaceholderLimitValue:
		return strconv.FormatInt(v.limitValue, 10)
	case template.PlaceholderWindowSeconds:
		return strconv.FormatInt(max(ceilSeconds(v.window), 1), 10)
	case template.PlaceholderRetryAfter:
		return strconv.FormatInt(retryAfterSeconds(v.retryAfter), 10)
	case template.PlaceholderStatus:
		return strconv.Itoa(status)
	case template.PlaceholderUpstream:
		return v.upstream
	case template.PlaceholderMaxInFlight:
		return strconv.FormatInt(v.maxInFlight, 10)
	case template.PlaceholderRoute:
		return h.info.Route()
	case template.PlaceholderPath:
		return h.info.PathOnly()
	case template.PlaceholderHeader:
		return h.info.FirstHeader(header)
	}
	return ""
}

// isGRPC reports a gRPC request: content-type application/grpc, with or
// without a +proto, +json, ... suffix or parameters.
func (h *Stream) isGRPC() bool {
	ct, ok := h.info.Header("content-type")
	return ok && strings.HasPrefix(ct, "application/grpc")
}

// sendGRPC answers a gRPC request trailers-only: HTTP 200 with the status
// in headers and no body, which gRPC clients read as the call's status.
// The HTTP status and the body are dropped (a gRPC client reads neither);
// grpc-message is percent-encoded as the gRPC spec wants.
func (h *Stream) sendGRPC(kind config.ReplyKind, headers [][2]string) {
	h.sendGRPCStatus(grpcStatusOf(kind), grpcMessageOf(kind), headers)
}

// sendGRPCStatus is the one trailers-only reply every gRPC answer of the
// filter goes through.
func (h *Stream) sendGRPCStatus(code int, msg string, headers [][2]string) {
	headers = append(headers,
		[2]string{"content-type", "application/grpc"},
		[2]string{"grpc-status", strconv.Itoa(code)},
		[2]string{"grpc-message", percentEncode(msg)})
	h.sendLocal(200, headers, "", nil)
}

// sendLocal answers the request itself.
func (h *Stream) sendLocal(status int, headers [][2]string, contentType string, body []byte) {
	if contentType != "" {
		headers = append(headers, [2]string{"content-type", contentType})
	}
	// Every local reply carries response.reply_headers.
	headers = append(headers, h.plugin.cfg.Response.ReplyHeaders...)
	h.phase = phaseAnswered
	if err := h.plugin.host.Stream.Reply(status, headers, body); err != nil {
		h.plugin.log.Errorf("sluice: sending local reply: %v", err)
	}
}

// rejectDeadline answers a request whose deadline passed while held: 504,
// or for gRPC a trailers-only DEADLINE_EXCEEDED.
func (h *Stream) rejectDeadline() {
	if !h.plugin.cfg.Response.PlainGRPC && h.isGRPC() {
		h.sendGRPCStatus(grpcDeadlineExceeded, messageDeadline, nil)
		return
	}
	h.sendLocal(504, nil, "text/plain", []byte(messageDeadline+"\n"))
}

// gRPC status codes of the replies (google.golang.org/grpc/codes).
const (
	grpcResourceExhausted = 8
	grpcUnavailable       = 14
	grpcInvalidArgument   = 3
	grpcDeadlineExceeded  = 4
)

// grpcStatusOf maps a reply kind to its gRPC status, as Envoy's
// rate_limited_as_resource_exhausted does for limits: an open circuit is
// UNAVAILABLE, a malformed cost INVALID_ARGUMENT, and the rest
// RESOURCE_EXHAUSTED.
func grpcStatusOf(kind config.ReplyKind) int {
	switch kind {
	case config.ReplyCircuitOpen:
		return grpcUnavailable
	case config.ReplyInvalidCost:
		return grpcInvalidArgument
	}
	return grpcResourceExhausted
}

func grpcMessageOf(kind config.ReplyKind) string {
	switch kind {
	case config.ReplyCircuitOpen:
		return messageCircuitOpen
	case config.ReplyInvalidCost:
		return "Invalid cost header"
	case config.ReplyConcurrencyLimited:
		return "Too many requests in flight"
	case config.ReplyMissingKey:
		return "Missing rate limit key"
	}
	return messageRateLimited
}

// percentEncode encodes a grpc-message: bytes outside printable ASCII and
// '%' become %XX.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&0xf])
	}
	return string(b)
}
