// Package breaker is Sluice's circuit breaker: a closed / open / half-open
// state machine whose state lives in proxy-wasm shared data, so that all of
// Envoy's worker VMs share one breaker per upstream.
//
// The package is pure: time is passed in and storage is a store.Store. It has
// three layers:
//
//   - Settings and Machine: the configuration, validated and compiled once.
//     Machine.Check and Machine.Report are the decision functions; they work
//     on a fixed-size Record and never allocate.
//   - Record.Encode and Record.Decode: a compact, versioned, canonical codec.
//     Decode rejects anything malformed; the key then restarts as a fresh
//     closed breaker (Machine.Reset).
//   - Breaker: a bounded CAS loop that reads a Record from the store, decides,
//     and writes back only when the decision changed it.
//
// Every transition bumps the Record's generation. Check hands out a Ticket
// carrying the generation that admitted the request; Report ignores tickets
// of an earlier generation, as gobreaker does, so an outcome from before a
// trip cannot close or re-trip the new state.
//
// Half-open admits at most HalfOpenMaxRequests probes in flight. The count is
// part of the shared Record and changes only through CAS, so the bound is
// exact across workers. A probe whose outcome never arrives cannot wedge
// half-open: once no probe has been admitted for ProbeTimeout while some are
// still out, the lost probes count as a failure and the breaker re-opens.
//
// The one race shared data leaves open is key creation: a write to a missing
// key ignores the CAS. A missing key is written with store.CreateCAS, which
// the host never hands out, so a worker that lost the race to create it
// gets a CAS mismatch and decides again on what the winner wrote. Until a
// decision changes it the key need not exist at all: a missing key reads
// as a fresh closed breaker, so a healthy one is never written, and
// Breaker.Init (writing that fresh state up front) is optional.
package breaker
