// Package engine decides requests: the limits, breakers and concurrency
// limits of a configuration, over the limiter and breaker cores and the
// distributed and external packages. It has no proxy-wasm import; it
// reaches the proxy through package host, and package filter adapts
// Envoy's callbacks to it.
//
// The request path is pipeline.go, in this order (the same numbering as
// there):
//  0. the admin route, when configured: a request under its prefix that
//     passes its checks is answered and goes no further; one that fails
//     them (phaseAdminDenied) goes through 1-5 as any request, previewing
//     the breakers without a ticket, and where it would be forwarded is
//     answered an empty 404 (admin.go);
//  1. external lookup: when the external block applies, the request first
//     learns from the limits service (or its cache) which bucket that
//     limit is (external.go, package external); it may wait for it;
//  2. limits: every limit whose match holds applies, minus the limits
//     named in the replaces of another applying limit (the most specific
//     wins); keys and costs are built, the enforcing limits are decided
//     together with limiter.AllowAll, so a request denied by any of them
//     consumes from none (the most restrictive wins), and shadow limits
//     are decided on their own and only counted (limits.go);
//  3. remote wait: global and hybrid limits are decided in Redis or from
//     their leases, the request waiting (remote.go; package distributed
//     states what "consumes from none" still means then);
//  4. breakers guarding the request's cluster (or route): an admitted
//     request carries a ticket whose outcome is reported when the stream
//     ends, from the response code and its details (breakers.go);
//  5. concurrency limits (bulkheads) that apply take a slot each, given
//     back when the stream ends (concurrency.go);
//  6. then the response headers, the end of the stream, and the tick.
//
// Each stage returns an outcome (outcome.go): allow; deny, by which limit
// with which result; reject, with which reply; or wait, for what. Only
// pipeline.go turns an outcome into a reply (sent from template.go) or a
// wait: a denial waits under on_limit delay (waiting.go) or is answered. A
// waiting stream is in the one registry of waiting streams (waiting.go),
// where the tick and the replies of lookups, leases and Redis calls find
// it, and pipeline.go's resume is the one path that continues it. What a
// refusal, a delay or a shadow denial decided is also left in filter
// state for the access log (accesslog.go).
//
// Reading the request is not the engine's: package request reads it
// (request.Info: headers, route and cluster, the client address per
// client_ip, query, cookies, path segments and dynamic metadata, each on
// first use, over its own Source interface, which host.Request
// satisfies), composes keys from it (Info.AppendKey) and evaluates the
// conditions of a match (request.Matches); its sub-packages hold the
// CIDR sets, reply templates and path normal form that config builds.
//
// Stream, declared beside Plugin in plugin.go, keeps the request's
// identity (its id, what was read of the request, its start, its quota,
// its generation) and one struct of state per mechanism, owned by that
// mechanism's file: remoteWait (remote.go), breakerHold (breakers.go),
// ccHolds (concurrency.go), charges (cost.go), streamWait and its delay
// (waiting.go), rollDraws (rollout.go) and the external lookup
// (external.go). Stream's methods are in five files: pipeline.go (the
// callbacks and the stages in order), limits.go, remote.go, admin.go and
// template.go (local replies).
//
// Tokens taken by a request that an open breaker then rejects stay taken,
// as with Envoy's own local rate limit filter in front of the router's
// circuit breaking.
//
// A limit's cost per request may come from a request header, and a limit
// with cost_from_response is charged again from the response headers
// (cost.go) or at the end of the response body (cost.go, usage.go).
package engine
