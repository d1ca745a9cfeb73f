// Package inflight counts requests in flight per key, exactly across the
// worker VMs of one Envoy, in proxy-wasm shared data, and gives back the
// slots of a VM that died without ending its streams. It is the core of
// the filter's concurrency limits (bulkheads). Like its parent package it
// has no proxy-wasm imports: time is passed in and storage is a
// store.Store.
//
// This comment is the specification.
//
// # Instances and entries
//
// Every VM that counts is an Instance with an id unique among all VMs that
// share the store: a 32-bit counter in shared data (InstanceConfig.IDKey),
// incremented with CAS the first time the instance needs it. A VM that
// traps and is reloaded (Envoy's FAIL_RELOAD) is a new Instance with a new
// id; nothing it inherits can be confused with what the dead VM held.
//
// A key's count is not one number but one Entry per instance that has
// requests of that key in flight: {FP, Instance, Count, Beat}, where FP is
// the key's fingerprint (limiter.Hash with the table's seed), Count ≥ 1 the
// instance's requests in flight and Beat the time (Unix ns) of the
// instance's last write of the entry. The count of a key at now is the sum
// of the Counts of its entries that are fresh: now − Beat ≤ StaleAfter.
//
// Each instance keeps its own counts in memory as well, and those are the
// truth for its entries: every write an instance makes to a record
// rewrites all of its own entries there from memory (adding any that are
// missing, dropping those that reached zero) with Beat = now, and keeps
// every other instance's fresh entries unchanged. An entry that has gone
// stale belongs to an instance that stopped writing: it is ignored when
// counting and dropped by the next write; the Counts dropped this way are
// Stats.Reclaimed.
//
// # Heartbeat
//
// A live instance must not go stale while it holds requests, however long
// they last. Instance.Refresh, called from the VM's timer, rewrites every
// record in which the instance holds entries whose last write is at least
// RefreshAfter old, and every record a failed write left out of date. So
// with a timer period P, a live instance's entries are never older than
// RefreshAfter + P, and they are counted as long as the timer is not late
// by more than StaleAfter − RefreshAfter − P. The filter uses
// StaleAfter 10s, RefreshAfter 2s and P 1s: a worker whose timer stalls for
// 7s is taken for dead and its requests stop counting until its next
// write (over-admission by at most what it holds, for at most that long).
//
// # Bounds
//
//   - While every instance is alive (timely), a key never has more than
//     max requests admitted in flight: an admission reads the record,
//     counts every fresh entry plus its own in-memory count, and writes
//     its incremented entry with the CAS it read, so two admissions that
//     race for the last slot cannot both commit; the loser re-reads and
//     re-decides.
//   - An instance that dies stops counting at most StaleAfter after its
//     last write, hence at most StaleAfter after it died, whether or not
//     anyone writes the record; the memory its entries take is given back
//     by the next write to the record.
//   - A stale own entry (a live instance whose writes failed for longer
//     than StaleAfter) is restored from memory by the instance's next
//     write or Refresh.
//
// # Records and bounded memory
//
// A Table stores the entries of every key of one limit in a fixed number
// of buckets (TableConfig.Slots, a power of two, default 4096); the
// shared-data key of bucket i is Prefix + decimal(i) and key k lives in
// bucket FP mod Slots. A bucket's record holds the entries of every key
// hashed to it, so keys never share a count and no key is ever evicted;
// an entry exists only while requests are in flight, so a record holds at
// most as many entries as there are (key, instance) pairs in flight.
// MaxEntries (default 128) caps a record; an admission that would add an
// entry to a full record is denied (ReasonFull). At most Slots shared-data
// keys are ever created per table, plus one tally key per limit and the
// instance counter.
//
// A record is byte 0 = version (1), then 24 bytes per entry, little
// endian: FP uint64, Instance uint32, Count uint32, Beat int64. A record
// that does not decode (wrong length or version), or holds an impossible
// entry (Instance 0, Count 0 or above MaxCount, Beat more than StaleAfter
// ahead of now), is treated as holding no entries and overwritten by the
// next write (Stats.CorruptRecords). The live instances restore their own
// entries on their next write or Refresh, so such a record can under-count
// for at most RefreshAfter plus a timer period. After a backwards clock
// step of more than StaleAfter every entry is ahead of now and so
// impossible; Refresh rewrites entries whose beat is ahead of now at once,
// so that lasts at most one timer period.
//
// # CAS discipline
//
// Every change is read, modify, write with the CAS read; a missing record
// is created with CAS 2^32−1 so that a racing creator makes the write fail
// (see the limiter package). A mismatch re-reads and re-decides, at most
// MaxRetries (default 8) more times for an admission, which is then denied
// (ReasonContention), and ReleaseRetries times for a release. A release
// that still cannot be written is done in memory and the record is marked
// for the next Refresh: until then the record over-counts, which never
// over-admits.
//
// # The in-flight gauge
//
// Instance.Report keeps a per-limit tally record with one entry per
// instance (FP 0, Count = that instance's requests in flight under the
// limit) under the same freshness rule, and returns the sum of the fresh
// entries: the number of requests in flight for the limit across all live
// VMs, whatever happened to dead ones.
//
// # Alternatives considered
//
//   - One counter per key: exact and cheap, but a VM that dies mid-request
//     never decrements it, and the slot leaks forever.
//   - A lease per request with an expiry: reclaims leaks, but a request
//     longer than the lease would have to renew it, and nothing tells a
//     long request from a leaked one without per-request writes.
//   - Per-instance heartbeat keys next to counts per instance: one read per
//     instance on every admission, and shared data cannot delete the
//     heartbeat keys of dead instances, so they grow with every reload.
//
// Per-instance entries with their own beat cost one read and one write per
// admission and per release, like a plain counter, plus at most one write
// per held record every RefreshAfter for requests that outlast it.
package inflight
