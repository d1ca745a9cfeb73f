// Package engine decides requests: the limits, breakers and concurrency
// limits of a configuration, over the limiter and breaker cores and the
// distributed and external packages. It has no proxy-wasm import; it
// reaches the proxy through package host, and package filter adapts
// Envoy's callbacks to it. pipeline.go is the request path, in order.
//
// Per request, in order:
//  1. every limit whose match holds applies, minus the limits named in the
//     replaces of another applying limit (the most specific wins); when the
//     external block applies, the request first learns from the limits
//     service (or its cache) which bucket that limit is (external.go);
//  2. the enforcing limits are decided together with limiter.AllowAll, so a
//     request denied by any of them consumes from none (the most
//     restrictive wins); shadow limits are then decided on their own and
//     only counted. Global and hybrid limits are decided in Redis first,
//     with the request paused (remote.go; package distributed states what
//     "consumes from none" still means then);
//  3. breakers guarding the request's cluster (or route) are checked; an
//     admitted request carries a ticket whose outcome is reported when the
//     stream ends, from the response code and its details;
//  4. concurrency limits (bulkheads) that apply take a slot each, given
//     back when the stream ends (concurrency.go).
//
// Tokens taken by a request that an open breaker then rejects stay taken,
// as with Envoy's own local rate limit filter in front of the router's
// circuit breaking.
//
// A limit's cost per request may come from a request header, and a limit
// with cost_from_response is charged again from the response headers
// (cost.go) or at the end of the response body (body.go, usage.go).
package engine
