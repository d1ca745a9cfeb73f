// Package limiter makes exact rate-limit decisions whose per-key state lives
// in proxy-wasm shared data. It has no proxy-wasm imports: time is passed
// in, storage is a store.Store, and the decision functions (Limit.Decide,
// the codec, Hash) allocate nothing.
//
// This comment is the specification. Other implementations of the same
// limits (the Redis scripts) must reproduce it decision for decision.
//
// # Units and arithmetic
//
// now is Unix time in nanoseconds (int64). A decision asks for n ≥ 1 whole
// units. L = Limit.Rate, P = Limit.Period in ns, C = Limit.Capacity()
// (L + Burst for the token bucket, L for windows). All arithmetic is exact
// integer arithmetic with 128-bit intermediates: no floats, no rounding
// until a duration is reported, so nothing drifts however long a key lives.
// Durations in a Result are rounded up to the next nanosecond. (For ports:
// Unix nanoseconds exceed 2^53, so a Lua port cannot hold now or a TAT in a
// double; it has to split them, e.g. into seconds and nanoseconds.)
//
// Common to every algorithm:
//   - n < 1 is denied with ReasonInvalidCost; n > C is denied with
//     ReasonCostExceedsCapacity. Both have RetryAfter 0 (waiting cannot help)
//     and consume nothing.
//   - A denied decision (any reason) consumes nothing and leaves the state
//     unchanged.
//   - Result.Limit is L. Result.Remaining is the whole units that one more
//     decision at the same now could still get (after this decision's units
//     are taken, if it was allowed). RetryAfter is the least wait after which
//     the same n would be allowed (0 when allowed). ResetAfter is the least
//     wait until the key is idle (indistinguishable from a key never seen).
//
// # token_bucket (GCRA)
//
// Capacity C, continuous refill of L units per P: one unit is worth the
// emission interval τ = P/L ns (a rational number) and a full bucket spans
// Σ = C·τ ns. The state is the theoretical arrival time TAT, kept exactly as
// State.At + State.N/L ns (0 ≤ N < L). The zero State (TAT = 0) is a full
// bucket. At now:
//
//	D  = max(0, TAT − now)          the debt; tokens = C − D/τ
//	if D > 2Σ + ClockStepTolerance: D = Σ   (implausible state: treat as empty)
//	allowed   ⇔ D + n·τ ≤ Σ
//	on allow:   TAT' = now + D + n·τ,  D' = D + n·τ
//	Remaining = ⌊(Σ − D')/τ⌋   (D' = D when denied; 0 if negative)
//	RetryAfter= ⌈D + n·τ − Σ⌉ ns   (when limited)
//	ResetAfter= ⌈D'⌉ ns
//
// For non-decreasing now this is exactly the textbook bucket (level starts
// at C, grows by L/P per ns up to C, n is granted iff level ≥ n, and then
// level −= n). With R=100/s and B=20 a fresh key gets 120 at once, then 100
// per second. If the clock goes backwards the debt is measured from the
// earlier now: the bucket looks emptier, never fuller (no refill, no panic).
// Unlike the "if now < last then last = now" guard in some Lua scripts, no
// separate last-refill time exists; a step back larger than
// ClockStepTolerance beyond the most debt a charge can leave (2Σ, see
// Charges) is treated as an empty bucket at the new now, which is what the
// codec check stores (see below).
//
// # Charges
//
// Limit.Charge takes n ≥ 1 units that cannot be refused, for costs known
// only after the work is done (a response reporting the tokens it used):
//
//	token_bucket:  D' = min(D + n·τ, 2Σ), but never below D
//	windows:       used' = min(used + n, L)   (prev unchanged)
//
// A token bucket thus goes into debt, at most one full bucket past empty,
// and later decisions wait until it is repaid; a window fills up and
// forgets the excess at its end. The Result reads like an allowed decision
// (Remaining and ResetAfter after the charge) except that RetryAfter is
// the wait for one unit, and n < 1 is ReasonInvalidCost with nothing
// charged. Table.Charge applies it with the CAS loop of AllowN; a charge
// whose retries run out is lost and reported with ReasonContention.
//
// # token_bucket leases
//
// Limit.Lease(st, now, want, A) takes up to want units in one step, for a
// holder that spends them later (the hybrid mode's lease). It may reserve
// refill up to A (0 ≤ A ≤ MaxLeaseAhead) beyond an empty bucket:
//
//	k = min(want, ⌊(Σ + A − D)/τ⌋)   granted; 0 if D + τ > Σ + A
//	on k ≥ 1:   TAT' = now + D + k·τ,  D' = D + k·τ
//	Remaining = ⌊(Σ − D')/τ⌋ (0 if negative)
//	ReadyAfter= ⌈D' − Σ⌉ ns (0 if not positive)
//	RetryAfter= ⌈D + τ − Σ − A⌉ ns   (when k = 0)
//	ResetAfter= ⌈D'⌉ ns
//
// Unit j of the grant (1 ≤ j ≤ k) may be spent from now + max(0, D + j·τ −
// Σ), the first instant a single-unit Decide would allow it; the last one
// ReadyAfter from now, and each earlier one τ before the next. Spending
// every unit no earlier than that is the same as single-unit decisions at
// those instants, which are in time order (the TAT never moves back), so
// leases admit no more than the bucket over any window, however many
// holders share it. With A = 0 a lease is the largest k that one Decide of
// cost k would admit. want < 1 is ReasonInvalidCost; k = 0 is
// ReasonLimited. A ≤ MaxLeaseAhead ≪ ClockStepTolerance keeps a reserved
// debt from ever being reset as implausible.
//
// # fixed_window
//
// At most L units per window [k·P, (k+1)·P), aligned to the Unix epoch,
// k = ⌊max(now,0)/P⌋. State: At = window index, N = units used in it. A
// state for an older window counts as 0 used. Allowed ⇔ used + n ≤ L.
// RetryAfter and ResetAfter run to the end of the window (ResetAfter is 0
// when nothing is used). Burst is a config error.
//
// # sliding_window
//
// The weighted two-window counter. With the current window k, elapsed
// e = now − k·P, cur = units in window k and prev = units in window k−1:
//
//	allowed ⇔ prev·(P−e)/P + cur + (n−1) < L
//
// which is the rule "prev×(1−e/P) + cur < L" applied to each of the n
// units as if admitted one at a time. On allow, cur += n. Computed as
// prev·(P−e) + (cur+n−1)·P < L·P. State: At = k, N = cur, Prev = prev; a
// state one window old becomes prev = N, cur = 0; older states are 0/0.
// Remaining = ⌈(L·P − prev·(P−e) − cur·P)/P⌉ (0 if not positive).
// RetryAfter is the least wait until the rule holds; the weighted count is
// non-increasing in time and continuous across window boundaries, so it is
// found in closed form: inside window k at e' = P − ⌈need·P/prev⌉ + 1 with
// need = L − cur − n + 1, or else in window k+1 (prev := cur, cur := 0).
// ResetAfter is the end of window k+1 when cur > 0, the end of window k
// when only prev > 0, else 0. Burst is a config error.
//
// # sliding_log
//
// At most L units in any window of length P, exactly (the sliding
// window's counter only approximates that). State.Log holds the
// admissions, oldest first, one entry per microsecond: its time in Unix
// µs and the units admitted then. Times are recorded at the end of their
// microsecond and decided at its start (f = ⌊max(now,0)/1µs⌋), so an
// entry stays up to 1µs longer than the nanosecond rule would keep it,
// never shorter; P must be a whole number of microseconds. An entry at a
// is live while a + P > f, including entries ahead of the clock after it
// went back (a backwards step releases nothing). With used = live units:
//
//	allowed   ⇔ used + n ≤ L;  on allow the live entries are kept and n is added at ⌈now⌉
//	Remaining = L − used (− n when allowed)
//	RetryAfter= until the entry whose departure frees the last needed unit leaves: (a+P)·1µs − now
//	ResetAfter= until the newest live entry leaves (0 when none is live)
//
// L ≤ MaxLogLimit (1,000): a log has at most L entries. A log with more
// than L live units, entries out of order or one more than
// ClockStepTolerance ahead is implausible and decided as Empty: one entry
// of L units at ⌈now⌉. Charge adds min(n, L) units at ⌈now⌉ and keeps the
// newest L; Merge keeps the newest L units of both logs, which at every
// later instant holds at least as many as either. Burst is a config
// error. Limit.Decide on a log allocates the new log (one string, which
// keeps State comparable and a decision's input intact); a Table's
// AllowN and Charge build it in a buffer the table reuses and decide from
// the scan its read of the slot made, so a decision near the limit costs
// one pass over the log and no allocation (the lifecycle benchmark's
// "sliding log at limit 100" case).
//
// A decoded log shares the bytes the store returned (DecodeState checks
// only its length; its order and counts are checked with the Limit, in
// the pass that finds the live entries).
//
// For both windows, if the state's window is later than now's window (the
// clock went back), the decision is evaluated at the start of the state's
// window and durations include the wait until then: no units are released
// by a backwards clock. A state window more than ClockStepTolerance ahead is
// implausible and evaluated as a fully used current window.
//
// # Codec
//
// One value per state, at most MaxStateLen (16) bytes except a sliding
// log (MaxLogStateLen), little-endian, byte
// 0 = version(1)<<4 | algorithm:
//
//	token_bucket   13 bytes: hdr, At int64 (TAT ns), N uint32 (TAT remainder, < L)
//	fixed_window   13 bytes: hdr, At int64 (window ≥ 0), N uint32 (≤ L)
//	sliding_window 16 bytes: hdr, At int56 (window ≥ 0), N uint32 (≤ L), Prev uint32 (≤ L)
//	sliding_log    1 + 8k bytes (k ≤ 1,000, so at most 8,001): hdr, k entries
//	               uint64 µs<<10 | units, strictly increasing in time, at most L live units
//
// DecodeState rejects bad length, unknown version or algorithm and negative
// windows (ErrMalformed); Limit.DecodeState additionally rejects states this
// Limit could not have produced by now (ErrImpossible): another algorithm,
// counts above L, N ≥ L for a TAT, or state further ahead than a bucket
// charged one full bucket past empty (2Σ) or a window, plus
// ClockStepTolerance. On any error the caller
// continues from Limit.Empty(now), a bucket or window used up at now: never
// more than a fresh key, refilling normally from then. (One exception, in
// the Table: a token-bucket state whose remainder is not below a lowered
// Rate, as after a config reload, is kept with its TAT rounded up to the
// next nanosecond, which never shrinks the debt.)
//
// # Bounded keys: the slot Table
//
// Shared data cannot delete keys, so a Table stores every client key of one
// Limit in a fixed number of slots (TableConfig.Slots, a power of two,
// default 16384) plus a few overflow buckets (TableConfig.OverflowSlots,
// default Slots/16, at least 1); the shared-data key of slot i is
// Prefix + decimal(i) and that of overflow bucket j is Prefix + "of." +
// decimal(j), so at most Slots + OverflowSlots keys ever exist however many
// clients appear. A slot's value is an 8-byte little-endian fingerprint
// (Hash(Seed, clientKey)) followed by the encoded State; an overflow
// bucket's is a fixed fingerprint followed by the State. A client key may
// live in Ways candidate slots (default 2): slot_j = (h + j·(h>>32 | 1))
// mod Slots for j < Ways; its overflow bucket is a fixed function of h.
//
// To decide, all candidates are read. The first slot holding the key's
// fingerprint is its slot; if a later candidate also holds it with live
// state (two workers that read at different moments placed a new key in
// different slots at once: one saw a candidate held, the other free) the
// two states are merged by adding their consumption (Limit.Merge) and the
// duplicate is reset to idle after the commit. Reading only the first
// candidate when it holds the key would save a read, but a copy in a later
// candidate could then go unseen for as long as it stays live, which is
// over-admission; the table pays the read instead.
//
// If no candidate holds the key, it is placed in the first candidate that
// is missing, else the first whose state was already idle one refill span
// ago (lossless: a full bucket carries no information;
// Stats.LosslessTakeovers), else the first whose value is unreadable even
// after healing (Stats.Evictions), else the one whose key has used the
// least, if at most TableConfig.ForgetMaxUsed units (by default any; see
// "Forgetting the least-used key"). The refill span is how long a used-up
// key takes to become full: Σ for a token bucket, P for the windows. Under
// a lower ForgetMaxUsed a slot holding a key that has used more is never
// taken over, however many new keys arrive, and a key with no slot and no
// such candidate is homeless: it is decided on its overflow bucket, with the same Limit and
// the same CAS commit (Stats.Overflow, Stats.OverflowDenied, which also
// count keys placed from an overflow bucket that was not full). Homeless
// keys sharing an overflow bucket share its allowance: they are refused
// once it is used up, while keys holding slots are unaffected.
//
// # Forgetting the least-used key
//
// A newcomer whose candidates all hold live state of other keys forgets
// one of them rather than share an overflow bucket: a per-key limit bounds
// each key, and a flood's aggregate is a global limit's job. Limit.Used is
// what forgetting a state gives back, in whole units:
//
//	token_bucket:   ⌈D/τ⌉ (the debt; up to 2C after charges)
//	fixed_window:   used in now's window
//	sliding_window: cur + prev, unweighted
//	sliding_log:    the live units
//
// The candidate with the least use is forgotten if Used ≤ ForgetMaxUsed
// (default ForgetAny: whatever it used; ForgetNone forgets nothing, and
// the table then never over-admits); among equals the first. "Least" is finer than Used where
// the state says more: the debt itself for a token bucket (a unit used
// earlier is mostly refilled), the weighted count for a sliding window.
// The forget is the placement's CAS on the victim's slot: an update by the
// victim's worker between the read and the write makes it fail, and the
// newcomer reads and decides again, so the units forgotten are exactly
// those of the state the CAS replaced (Stats.Forgotten,
// Stats.ForgottenUnits; a state with Used = 0 is a lossless takeover).
// The forgotten key, if it returns, is a newcomer: it forgets another
// key and starts from its overflow bucket's state, fresh unless homeless
// keys are using that bucket (then it may get less than its own state had
// left, until the bucket refills). Under ForgetAny nobody is ever
// homeless, so the overflow buckets are never written and every
// placement starts fresh.
//
// Why ForgetAny is the default. Under a cap, a flood of keys that each use
// just over it (2 units under a cap of 1) fills every slot with keys that
// may not be forgotten: newcomers are homeless, drain their overflow
// buckets, and a forgotten client that returns starts from a drained
// bucket, locked out. Workers' clocks make the same happen without an
// attacker: a token-bucket state written at t+δ by one worker is read at
// t by another, whose Used counts ⌈(τ+δ)/τ⌉ = 2 units for a key that used
// one, so after a lost CAS the newcomer's retry finds no candidate under
// a cap of 1 and falls to its overflow bucket (TestForgetRaceWithAWorker-
// AheadKeepsTheNewcomerPlaced). Forgetting the least-used whatever it used
// keeps every newcomer in a slot of its own and costs at most the bound
// below; a lower cap trades that for never forgetting the keys above it.
//
// The bound. A key forgotten at f with u = Used units (u ≤ ForgetMaxUsed,
// and u ≤ the key's Capacity, 2·Capacity for a token bucket after
// charges) can be admitted at most u units beyond its limit, in every span
// that contains f:
//
//	token_bucket:   admitted in [s, t] ≤ C + (t−s)·L/P + u
//	fixed_window:   admitted in f's window ≤ L + u
//	sliding_window: cur of f's window ≤ L + u (the weighted count
//	                exceeds L by at most u)
//	sliding_log:    admitted in any (t−P, t] ∋ f ≤ L + u
//
// because forgetting is the same as giving the key u units back at f (the
// stored state never counts less than the key used, see below), and
// nothing else changes. Over several forgettings the u add up: a key
// forgotten k times is over-admitted by at most the sum of its k u's
// (k·min(ForgetMaxUsed, 2·Capacity)), so during a flood that keeps every
// slot churning a key can restart again and again; under a lower cap a key
// above it keeps its state. Stats.ForgottenUnits (the metric
// sluice.limit.<name>.forgotten counts the keys) adds up the u's: the most
// all forgotten keys together can be over-admitted by. TestForgetModel
// checks the bound for every key of a randomized flood with injected
// races, from the writes the store saw, under caps of 1 and 3 and under
// ForgetAny (where it also checks that nobody is homeless).
//
// Never over-admitting otherwise. A key's admissions while homeless are a
// subset of its overflow bucket's admissions (it always maps to the same
// one). For every algorithm a state that admitted a superset of a key's
// admissions under the same Limit is at least as used as the key's own state: a TAT
// only grows with each admission, and window counts only add up (Charge
// caps are monotone too). So a key placed in a slot (a missing one, or
// one taken over or forgotten) starts from its overflow bucket's state,
// not from a fresh bucket: fresh in normal operation, where the overflow
// buckets are idle or missing; drained after homeless keys used them. A
// key whose slot was taken over losslessly lost nothing, as its state was
// idle (full); a forgotten one lost at most the u units above. Two races
// between workers are closed: a decision committed to the overflow bucket
// checks afterwards whether the key has been placed meanwhile and charges
// its units to that slot too (Limit.Charge); a placement rereads the
// overflow bucket after writing the slot and, if it changed since it was
// read, raises the placed state to used up (merged with the bucket's state
// and Limit.Empty; Stats.OverflowRaces). A decision committed to the bucket
// before the placement's reread is seen by the reread; one committed after
// it sees the slot, which was written before the reread. Both can only
// over-count. Slots
// whose value is unreadable are overwritten with Empty(now) (keeping a
// readable fingerprint) and counted in Stats.CorruptStates.
//
// Size Slots to about four times the number of distinct keys seen within
// two refill spans (a key holds its slot for up to two spans after its last
// request: one until its state is full, one more before it may be taken,
// unless it is forgotten): with A such keys, a new key finds every
// candidate held with a probability of about (A/Slots)^Ways, 1/16 with two
// ways at a quarter full, and then forgets a key or is decided on a shared
// overflow bucket.
//
// # CAS discipline
//
// Table.AllowN reads, decides and, only if allowed, writes the slot with the
// CAS it read; a mismatch means another worker wrote first, so it reads and
// decides again, at most MaxRetries (default 8) more times. A slot that did
// not exist is created with a CAS of 2^32−1: shared data ignores the CAS
// when creating, but a racing creator that got there first makes this Set
// fail (Envoy hands out CAS values from a counter starting at 1, so 2^32−1
// matches only after ~4.3e9 writes). No update is ever lost. When retries
// run out, OnContention decides: ContentionDeny (default, since admitting
// without recording is exactly what could exceed the limit on a hot key)
// or ContentionAllow (fail open, nothing consumed).
//
// # Several limits per request
//
// AllowAll reads and decides every (table, key, cost) first and writes
// nothing if any denies, so a request denied by one limit consumes from
// none. If all allow, it commits them in order; a key whose commit loses a
// race is re-read and re-decided. If that re-decision denies, the keys
// already committed are restored to their previous value when they still
// hold exactly what was written; a key written by someone else since keeps
// the units (Stats.RefundsLost). A race can therefore under-admit by at most
// one request's costs; it never over-admits.
//
// A Table is not safe for concurrent use: each worker VM owns one, and the
// shared store's CAS makes the workers exact together.
package limiter
