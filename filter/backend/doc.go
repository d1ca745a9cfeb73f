// Package backend is the Redis-over-HTTP side of distributed limits: the
// Lua scripts that decide (and lease) atomically inside Redis with the
// same semantics as package limiter, the encoding of their calls for
// Webdis and Upstash REST, and the strict parsing of the replies into
// decisions or classified errors.
//
// It performs no I/O: the filter sends each Request with proxy_http_call
// and hands the status and body to ParseReply. It imports nothing from
// proxy-wasm and builds for GOOS=wasip1 and natively.
//
// A call goes:
//
//	cmd, err := backend.Decide(limit, key, cost)      // or backend.Lease, backend.Charge
//	req, err := endpoint.EvalSHA(cmd)                  // send it
//	reply, err := backend.ParseReply(endpoint.Protocol, status, body) // ParseLeaseReply for Lease
//	if backend.KindOf(err) == backend.KindNoScript {
//	        // send endpoint.LoadScript(cmd.Script), check it with
//	        // ParseScriptLoad, then send EvalSHA again (or Eval once).
//	}
//
// # Semantics
//
// Decide's scripts give the decision limiter.Limit.Decide gives at the
// instant Redis TIME reports (µs resolution), for the key's state: the
// same allowed/denied, reason and remaining, and retry/reset times equal
// to the limiter's rounded up to the millisecond. That includes costs
// below 1 or above capacity, denials consuming nothing, and the limiter's
// handling of a clock that stepped back (limiter.ClockStepTolerance).
// Limits whose period is not a whole number of µs, or whose products
// reach 2^53 (Lua numbers are float64), are refused with ErrOutOfRange;
// every limit with round numbers up to billions per period fits.
//
// A fixed window may count calendar periods (limiter.Calendar): the
// script finds the day, week or month holding Redis TIME in the limit's
// UTC offset with the limiter's civil-date arithmetic, stores the
// period's span with its count, and expires the key a minute after the
// period ends. A change of period, offset or rate keeps the count while
// its span overlaps the current window, as the local limiter does.
//
// Lease of a fixed window (hybrid calendar quotas) takes up to want units
// of what is left in the current window, all spendable at once; its reply's
// ResetAfter is when the window ends, which the holder must not spend past.
//
// Lease of a token bucket is limiter.Limit.Lease in one atomic step, from the same state
// Decide uses: it takes up to want tokens, reserving up to a given time of
// future refill beyond an empty bucket, and says when the last granted
// token may be spent (tokens become spendable one refill interval apart
// up to then). A holder that spends each token no earlier than that
// admits, with every other holder and decision, no more than one bucket,
// so leasing cannot over-admit beyond the bucket's own capacity. Tokens a
// lease holder never uses are not returned.
//
// Charge takes n units from a token bucket whether or not they are there,
// as limiter.Limit.Charge does (a cost reported after the work was done):
// the bucket may go up to one full bucket into debt, and Decide and Lease
// then wait for it to be repaid. Its reply is granted with no retry time;
// ChargeRetryAfter derives the wait for the next unit from the reset time.
//
// State that is not a number the scripts wrote (hand-edited, or from an
// older format) reads as a fresh key; a key of another Redis type is a
// KindRedis error (WRONGTYPE). A key expires no earlier than its reset
// time, so expiry never hands out allowance early.
package backend
