package engine

import (
	"github.com/sluice-proxy/sluice/filter/config"
)

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
