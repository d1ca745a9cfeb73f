// Package distributed is Sluice's global and hybrid limits: the Redis
// backend reached through callouts (script calls with retries, a watchdog
// and the backend breaker), the per-key shared-data slots holding the
// negative cache and hybrid leases, global decisions, shadow decisions and
// charges. It has no proxy-wasm import: it reaches the proxy through
// package host, and its tests run natively against hosttest's fakes.
//
// Mode global decides every request with one atomic Redis script call,
// reached over HTTP (Webdis or Upstash) through proxy_http_call; mode
// hybrid serves requests from token leases kept in shared data (lease.go).
//
// Guarantees when a request has several applying limits, some local and
// some global or hybrid ("denied by any limit consumes from none"); the
// request path (package filter) keeps them, with what this package gives:
//   - local limits are checked first without consuming (Table.Peek); a
//     local denial rejects before any Redis call, and nothing is consumed;
//   - a key in the negative cache (known over its global limit until its
//     retry time) rejects before any call, and nothing is consumed;
//   - hybrid limits are decided before any global call is made: their
//     decisions come from shared data, so a hybrid denial stops the
//     request without a call;
//   - hybrid tokens taken from a lease are returned to the lease when the
//     request is then denied by any other limit;
//   - global decisions cannot be undone: when one global limit admits and
//     another global limit (or a local limit that a concurrent request
//     drained between the peek and the final commit) denies, the admitting
//     global limit keeps the units consumed. Under-admission by at most the
//     cost of that request per such race, never over-admission.
//   - the local limits are committed with limiter.AllowAll only after every
//     remote limit admitted, so a remote denial consumes nothing locally.
package distributed
