package backend

import (
	"crypto/sha1"
	"encoding/hex"
)

// Script is one Lua script the backend runs with EVALSHA. SHA1 is the hex
// digest Redis uses to name it; it is computed from Source at init so the
// two can never disagree.
type Script struct {
	Name   string
	Source string
	SHA1   string
}

func newScript(name, body string) *Script {
	src := luaPrelude + body
	sum := sha1.Sum([]byte(src))
	return &Script{Name: name, Source: src, SHA1: hex.EncodeToString(sum[:])}
}

// The scripts below mirror limiter.Limit.Decide exactly. Lua in Redis has
// only float64 numbers, which are exact integers below 2^53, so:
//   - time is in microseconds (Redis TIME's resolution; now ≈ 2^50.6);
//   - token-bucket quantities are in units of 1/R' µs where R'/P' is
//     Rate/Period reduced by their gcd (see tokenBucketArgs), which keeps
//     Capacity×P' small for every ordinary limit;
//   - the sliding window's "first passing instant" is searched in ns like
//     the local limiter, so its retry time matches to the nanosecond;
//   - the Go side refuses limits whose products could reach 2^53
//     (ErrOutOfRange), so nothing here needs overflow checks.
//
// Every script returns the same flat integer array (Webdis turns nested
// arrays into null):
//
//	{granted, remaining, retry_after_ms, reset_after_ms, reason, now_us}
//
// granted is 0/1 for decisions and the token count for leases. reason is
// 0 allowed, 1 limited, 2 cost exceeds capacity, 3 invalid cost. For a
// lease that granted tokens, retry_after_ms is when the last of them may
// be spent. Durations are rounded up to the millisecond.
//
// Expiry: the state of a key stops mattering once its reset time has
// passed (a stale TAT or an old window reads as a fresh key), so a key may
// outlive that safely but must never expire before it: expiring early
// would hand out a full allowance too soon. Seed 003 refreshes EXPIRE only
// when the TTL is below half a fixed target, which can drop a key that is
// still owed refill time; here PEXPIRE is sent only when the current PTTL
// would end before the new reset time, and then set to twice it so that a
// steady stream of requests refreshes it about once per reset period
// instead of on every call.
const luaPrelude = `
local function divmod(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1; r = r + b elseif r >= b then q = q + 1; r = r - b end
  return q, r
end
local function ceildiv(a, b)
  local q, r = divmod(a, b)
  if r > 0 then q = q + 1 end
  return q
end
local function num(s)
  local v = tonumber(s)
  if v == nil or v ~= v or v < 0 or v >= 9007199254740992 or v ~= math.floor(v) then return nil end
  return v
end
local function str(v) return string.format('%.0f', v) end
local function clock(override)
  if override ~= nil and override ~= '' then return num(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function keep(key, ms)
  if ms < 1 then ms = 1 end
  local ttl = redis.call('PTTL', key)
  if ttl < ms then redis.call('PEXPIRE', key, str(2 * ms)) end
end
local TOLERANCE_US = 60000000
-- bucketDebt mirrors limiter's: the TAT's lead over now in 1/R' µs, where
-- a charge can leave up to two full buckets; more than that plus the
-- clock tolerance is implausible and reads as an empty bucket.
local function bucketDebt(st, now, R, full)
  local at, fr = num(st[1]), num(st[2])
  if not (at and fr and (at > now or (at == now and fr > 0))) then return 0 end
  local debt = (at - now) * R + fr
  if debt > 2 * full + TOLERANCE_US * R then return full end
  return debt
end
`

// ARGV: R' P' capacity cost [now_us]. KEYS[1]: the bucket.
// State: hash {at = TAT integer µs, n = TAT fraction in 1/R' µs}.
const tokenBucketBody = `
local R, P, C, n = num(ARGV[1]), num(ARGV[2]), num(ARGV[3]), num(ARGV[4])
if not (R and P and C and n) or R < 1 or P < 1 or C < 1 then
  return redis.error_reply('ERR sluice: bad token_bucket arguments')
end
local now = clock(ARGV[5])
if not now then return redis.error_reply('ERR sluice: bad time argument') end
local key = KEYS[1]
local full = C * P
local st = redis.call('HMGET', key, 'at', 'n')
local at, fr = num(st[1]), num(st[2])
local debt = bucketDebt(st, now, R, full)
local reason, remaining, retry = 0, 0, 0
if n < 1 then
  reason = 3
elseif n > C then
  reason = 2
else
  -- over, not debt + n×P: a charged debt can be 2×full, and the sum
  -- could leave the exact range.
  local over = (debt - full) + n * P
  if over <= 0 then
    local after = full + over
    local q, r = divmod(after, R)
    redis.call('HSET', key, 'at', str(now + q), 'n', str(r))
    local reset = ceildiv(after, R)
    keep(key, ceildiv(reset, 1000))
    return {1, divmod(-over, P), 0, ceildiv(reset, 1000), 0, now}
  end
  reason = 1
  retry = ceildiv(ceildiv(over, R), 1000)
end
if debt < full then remaining = divmod(full - debt, P) end
return {0, remaining, retry, ceildiv(ceildiv(debt, R), 1000), reason, now}
`

// ARGV: R' P' capacity want ahead_us [now_us]. limiter.Limit.Lease on the
// same bucket state as tokenBucketBody: takes min(want, what fits up to
// ahead_us of refill beyond an empty bucket) in one step, so leases and
// decisions together never admit more than the bucket. For a grant,
// retry_after_ms is when the last granted token may be spent (0: all now);
// for an empty grant, when one token could be leased.
const leaseBody = `
local R, P, C, want, A = num(ARGV[1]), num(ARGV[2]), num(ARGV[3]), num(ARGV[4]), num(ARGV[5])
if not (R and P and C and want and A) or R < 1 or P < 1 or C < 1 or A > TOLERANCE_US then
  return redis.error_reply('ERR sluice: bad lease arguments')
end
local now = clock(ARGV[6])
if not now then return redis.error_reply('ERR sluice: bad time argument') end
local key = KEYS[1]
local full = C * P
local st = redis.call('HMGET', key, 'at', 'n')
local debt = bucketDebt(st, now, R, full)
if want < 1 then
  return {0, 0, 0, ceildiv(ceildiv(debt, R), 1000), 3, now}
end
local top = full + A * R
if debt + P > top then
  return {0, 0, ceildiv(ceildiv(debt + P - top, R), 1000), ceildiv(ceildiv(debt, R), 1000), 1, now}
end
local fit = divmod(top - debt, P)
local grant = math.min(want, fit)
local after = debt + grant * P
local q, r = divmod(after, R)
redis.call('HSET', key, 'at', str(now + q), 'n', str(r))
local reset = ceildiv(after, R)
keep(key, ceildiv(reset, 1000))
local remaining, ready = 0, 0
if after < full then remaining = divmod(full - after, P) end
if after > full then ready = ceildiv(ceildiv(after - full, R), 1000) end
return {grant, remaining, ready, ceildiv(reset, 1000), 0, now}
`

// ARGV: R' P' capacity n [now_us]. Mirrors limiter.Limit.Charge on the
// state of tokenBucketBody: n units are taken whether or not they are
// there, leaving at most two full buckets of debt and never lowering one.
// The caller clamps n to 2×capacity, past which every charge is the same,
// so n×P' stays exact. A charge is granted, so it reports no retry time
// (the reply format ties a retry time to a refusal); the caller derives
// the wait from the reset time.
const chargeBody = `
local R, P, C, n = num(ARGV[1]), num(ARGV[2]), num(ARGV[3]), num(ARGV[4])
if not (R and P and C and n) or R < 1 or P < 1 or C < 1 then
  return redis.error_reply('ERR sluice: bad charge arguments')
end
local now = clock(ARGV[5])
if not now then return redis.error_reply('ERR sluice: bad time argument') end
local key = KEYS[1]
local full = C * P
local st = redis.call('HMGET', key, 'at', 'n')
local debt = bucketDebt(st, now, R, full)
local after = debt
if n >= 1 then
  local most = 2 * full
  if n * P > most - debt then
    after = math.max(most, debt)
  else
    after = debt + n * P
  end
  local q, r = divmod(after, R)
  redis.call('HSET', key, 'at', str(now + q), 'n', str(r))
  keep(key, ceildiv(ceildiv(after, R), 1000))
end
local remaining = 0
if after < full then remaining = divmod(full - after, P) end
local reset = ceildiv(ceildiv(after, R), 1000)
if n < 1 then return {0, remaining, 0, reset, 3, now} end
return {1, remaining, 0, reset, 0, now}
`

// window mirrors limiter's window(): the evaluation window is the one
// holding now, or the stored one if the clock went back a little; a stored
// window further ahead than the clock tolerance is implausible.
const windowPrelude = `
local function window(w, now, P)
  local cur, elapsed = divmod(now, P)
  if w == nil or w <= cur then return cur, elapsed, 0, true end
  local ahead = w - cur
  if ahead > math.floor(TOLERANCE_US / P) + 1 then return cur, elapsed, 0, false end
  return w, 0, ahead * P - elapsed, true
end
`

// fixedWindowPrelude holds what every fixed-window script shares. period
// mirrors limiter.Calendar.Period on Redis's clock: the
// span [start, stop) in µs of the period of calendar cal (1 day, 2 week
// from Monday, 3 month) holding now, in the fixed UTC offset off (seconds
// east), by the same integer civil-date arithmetic (400-year eras of
// 146097 days, years starting in March so that February is last). Every
// quantity is an integer far below 2^53 (day numbers of a few 10^4, µs
// near 2^51), so Lua's float64 computes it exactly; divmod floors.
const fixedWindowPrelude = windowPrelude + `
local DAY = 86400
local MAX_OFFSET = 64800
-- CAL_FLOOR_US is limiter's calendarFloor: 40 days after the epoch, so a
-- period's start is never before it.
local CAL_FLOOR_US = 40 * DAY * 1000000
local function firstOfMonth(y, m)
  if m <= 2 then y = y - 1 end
  local era = divmod(y, 400)
  local yoe = y - era * 400
  local doy = divmod(153 * ((m + 9) % 12) + 2, 5)
  return era * 146097 + yoe * 365 + divmod(yoe, 4) - divmod(yoe, 100) + doy - 719468
end
local function monthOf(day)
  local z = day + 719468
  local era = divmod(z, 146097)
  local doe = z - era * 146097
  local yoe = divmod(doe - divmod(doe, 1460) + divmod(doe, 36524) - divmod(doe, 146096), 365)
  local doy = doe - (365 * yoe + divmod(yoe, 4) - divmod(yoe, 100))
  local m = divmod(5 * doy + 2, 153) + 3
  if m > 12 then m = m - 12 end
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m
end
local function period(now, cal, off)
  local day = divmod(divmod(now, 1000000) + off, DAY)
  local first, nxt = day, day + 1
  if cal == 2 then
    first = divmod(day + 3, 7) * 7 - 3
    nxt = first + 7
  elseif cal == 3 then
    local y, m = monthOf(day)
    first = firstOfMonth(y, m)
    if m == 12 then nxt = firstOfMonth(y + 1, 1) else nxt = firstOfMonth(y, m + 1) end
  end
  return (first * DAY - off) * 1000000, (nxt * DAY - off) * 1000000
end
-- calendarArgs reads the calendar and offset arguments every fixed-window
-- script takes (cal 0: windows of P since the epoch, offset 0).
local function calendarArgs(c, o)
  local cal, off = num(c), tonumber(o)
  if not cal or cal > 3 or not off or off ~= math.floor(off) or off < -MAX_OFFSET or off > MAX_OFFSET or (cal == 0 and off ~= 0) then
    return nil
  end
  return cal, off
end
-- PERIOD_MARGIN_MS: a calendar period's key expires this long after the
-- period ends (see keepUntil).
local PERIOD_MARGIN_MS = TOLERANCE_US / 1000
-- keepUntil makes a calendar key expire PERIOD_MARGIN_MS after its period
-- ends, untilEnd µs from now, where keep doubles: a period's state is
-- worth nothing once it is over. The TTL is set again only when it would
-- end less than half the margin after the period or more than a margin
-- late (a longer TTL of another state), so admissions within a period
-- normally write it once.
local function keepUntil(key, untilEnd)
  local ms = ceildiv(untilEnd, 1000) + PERIOD_MARGIN_MS
  local ttl = redis.call('PTTL', key)
  if ttl < ms - PERIOD_MARGIN_MS / 2 or ttl > ms + PERIOD_MARGIN_MS then
    redis.call('PEXPIRE', key, str(ms))
  end
end
-- fixedWindow finds what a fixed window decides in, as limiter's window,
-- calendarWindow and inWindow do: st is the HMGET of w, c, s, e. A window
-- of P (cal 0) is stored as its index w, a calendar period as its span
-- [s, e) in µs; a count stored under one kind counts under the other, and
-- across a change of calendar or offset, while its span overlaps the
-- current window, so a change of period keeps what a key used; a duration
-- window's index says nothing of its length and counts for no calendar
-- period. Returns used (L when the state is implausible), µs until the
-- window ends, and the fields an admission writes.
local function fixedWindow(st, now, L, P, cal, off)
  local w, c, s0, e0 = num(st[1]), num(st[2]), num(st[3]), num(st[4])
  if not c then w, s0, e0, c = nil, nil, nil, 0 end
  if not (s0 and e0 and s0 < e0) then s0, e0 = 0, 0 end
  if cal == 0 then
    local win, elapsed, delay, plausible = window(w, now, P)
    local used = 0
    if not plausible then
      used = L
    elseif w == win or (w == nil and s0 < (win + 1) * P and e0 > win * P) then
      used = c
    end
    return used, delay + P - elapsed, {'w', str(win)}, 's'
  end
  local t = math.max(now, CAL_FLOOR_US)
  local start, stop = period(t, cal, off)
  if s0 < stop then
    local used = 0
    if e0 > start then used = c end
    return used, stop - t, {'s', str(start), 'e', str(stop)}, 'w'
  elseif s0 == stop then
    -- The clock went back across the period's end: decide in the stored
    -- period, from its start, as the local limiter does.
    return c, stop - t + e0 - s0, {'s', str(s0), 'e', str(e0)}, 'w'
  end
  return L, stop - t, {'s', str(start), 'e', str(stop)}, 'w'
end
-- record writes a fixed window's count after an admission: the fields
-- fixedWindow named, the count, the other kind's fields deleted, the TTL.
local function record(key, st, fields, other, used, untilEnd)
  fields[#fields + 1] = 'c'
  fields[#fields + 1] = str(used)
  redis.call('HSET', key, unpack(fields))
  if other == 'w' then
    if st[1] then redis.call('HDEL', key, 'w') end
    keepUntil(key, untilEnd)
  else
    if st[3] or st[4] then redis.call('HDEL', key, 's', 'e') end
    keep(key, ceildiv(untilEnd, 1000))
  end
end
-- fixedStart reads the arguments every fixed-window script takes (L P_us
-- n calendar offset [now_us]) and the key's state, and finds its window
-- (fixedWindow): a table of them, or nil and the error reply.
local function fixedStart(script)
  local L, P, n = num(ARGV[1]), num(ARGV[2]), num(ARGV[3])
  local cal, off = calendarArgs(ARGV[4], ARGV[5])
  if not (L and P and n and cal) or L < 1 or P < 1 then
    return nil, redis.error_reply('ERR sluice: bad ' .. script .. ' arguments')
  end
  local now = clock(ARGV[6])
  if not now then return nil, redis.error_reply('ERR sluice: bad time argument') end
  local st = redis.call('HMGET', KEYS[1], 'w', 'c', 's', 'e')
  local used, untilEnd, fields, other = fixedWindow(st, now, L, P, cal, off)
  return {L = L, n = n, now = now, st = st, used = used, untilEnd = untilEnd, fields = fields, other = other}
end
`

// ARGV: L P_us cost calendar offset [now_us]. calendar 0 counts windows of
// P since the epoch, state hash {w = window index, c = used}; calendar 1,
// 2, 3 (limiter.Calendar) counts days, weeks or months in the UTC offset
// offset (seconds east), state hash {s, e = the period's span in µs, c =
// used}. P is then the calendar's longest period, unused but checked.
const fixedWindowBody = fixedWindowPrelude + `
local f, bad = fixedStart('fixed_window')
if not f then return bad end
local L, n, used, untilEnd = f.L, f.n, f.used, f.untilEnd
local reason, retry, remaining, reset = 0, 0, 0, 0
if n < 1 then
  reason = 3
elseif n > L then
  reason = 2
elseif used + n <= L then
  used = used + n
  record(KEYS[1], f.st, f.fields, f.other, used, untilEnd)
  return {1, L - used, 0, ceildiv(untilEnd, 1000), 0, f.now}
else
  reason = 1
  retry = ceildiv(untilEnd, 1000)
end
if used < L then remaining = L - used end
if used > 0 then reset = ceildiv(untilEnd, 1000) end
return {0, remaining, retry, reset, reason, f.now}
`

// ARGV: L P_us want calendar offset [now_us]. A hybrid lease of a fixed
// window (a calendar period's quota), on the state fixedWindowBody keeps:
// it takes min(want, what is left in the current window) in one step,
// every unit spendable at once (retry_after_ms 0), so leases and decisions
// together never count more than L in a window. reset_after_ms is when the
// window ends, which a lease must not outlive. An empty grant's
// retry_after_ms is that too: nothing can be leased before.
const windowLeaseBody = fixedWindowPrelude + `
local f, bad = fixedStart('fixed_window lease')
if not f then return bad end
local L, want, used = f.L, f.n, f.used
local reset = ceildiv(f.untilEnd, 1000)
if want < 1 then return {0, 0, 0, reset, 3, f.now} end
if used >= L then return {0, 0, reset, reset, 1, f.now} end
local grant = math.min(want, L - used)
record(KEYS[1], f.st, f.fields, f.other, used + grant, f.untilEnd)
return {grant, L - used - grant, 0, reset, 0, f.now}
`

// ARGV: L P_us cost [now_us]. State: hash {w = window index, c = used in
// w, p = used in w-1}. Rule: prev×(P−e) + (cur+n−1)×P < L×P.
const slidingWindowBody = windowPrelude + `
local L, P, n = num(ARGV[1]), num(ARGV[2]), num(ARGV[3])
if not (L and P and n) or L < 1 or P < 1 then
  return redis.error_reply('ERR sluice: bad sliding_window arguments')
end
local now = clock(ARGV[4])
if not now then return redis.error_reply('ERR sluice: bad time argument') end
local key = KEYS[1]
local st = redis.call('HMGET', key, 'w', 'c', 'p')
local w, c, p = num(st[1]), num(st[2]), num(st[3])
if not (w and c and p) then w, c, p = nil, 0, 0 end
local win, e, delay, plausible = window(w, now, P)
local cur, prev = 0, 0
if not plausible then cur = L
elseif w == win then cur, prev = c, p
elseif w == win - 1 then prev = c end
local capacity = L * P
local function headroom(x)
  local used = prev * (P - e) + x * P
  if used >= capacity then return nil end
  return capacity - used
end
local function remaining(x)
  local h = headroom(x)
  if h then return ceildiv(h, P) end
  return 0
end
local function resetAfter(x)
  if x > 0 then return ceildiv(delay + 2 * P - e, 1000) end
  if prev > 0 then return ceildiv(delay + P - e, 1000) end
  return 0
end
-- firstPass(q, need): smallest e (ns) with q×(P−e) < need×P, as in limiter.
local Pns = P * 1000
local function firstPass(q, need)
  local q0, r0 = divmod(need * P, q)
  local t = q0 * 1000 + ceildiv(r0 * 1000, q)
  if t > Pns then return 0 end
  return Pns - t + 1
end
local function wait(x, q, k)
  local ens = e * 1000
  if x + k <= L and q > 0 then
    local f = firstPass(q, L - x - k + 1)
    if f < Pns and f > ens then return f - ens end
  end
  local untilNext = Pns - ens
  local need = L - k + 1
  if x < need then return untilNext end
  return untilNext + firstPass(x, need)
end
local reason, retry = 0, 0
if n < 1 then
  reason = 3
elseif n > L then
  reason = 2
elseif headroom(cur + n - 1) then
  cur = cur + n
  redis.call('HSET', key, 'w', str(win), 'c', str(cur), 'p', str(prev))
  local reset = resetAfter(cur)
  keep(key, reset)
  return {1, remaining(cur), 0, reset, 0, now}
else
  reason = 1
  retry = ceildiv(delay * 1000 + wait(cur, prev, n), 1000000)
end
return {0, remaining(cur), retry, resetAfter(cur), reason, now}
`

// ARGV: capacity [now_us]. An operator's reset (sluicectl quota reset):
// the key is deleted, which every script reads as a fresh key with its
// full allowance, whatever the algorithm. The reply is the one a peek
// (a decision of cost 0, see Peek) of that fresh key gives, so it is
// parsed like every other reply.
const resetBody = `
local C = num(ARGV[1])
if not C or C < 1 then return redis.error_reply('ERR sluice: bad reset arguments') end
local now = clock(ARGV[2])
if not now then return redis.error_reply('ERR sluice: bad time argument') end
redis.call('DEL', KEYS[1])
return {0, C, 0, 0, 3, now}
`

// ARGV: L P_us cost [now_us]. State: a sorted set of one member per
// admitted unit, scored by its time in µs (seed 000's sliding log), so a
// cost of n adds n members with names unique within the key. limiter's
// sliding_log with the time in whole µs: live members score above
// now − P, including members ahead of a clock that went back; a newest
// member beyond the clock tolerance or more than L live members make the
// set implausible, decided as L units at now. Like the local log, only an
// admission removes expired members (ZREMRANGEBYSCORE): a denial writes
// nothing, so a clock that goes back sees the same members in both.
const slidingLogBody = `
local L, P, n = num(ARGV[1]), num(ARGV[2]), num(ARGV[3])
if not (L and P and n) or L < 1 or P < 1 then
  return redis.error_reply('ERR sluice: bad sliding_log arguments')
end
local now = clock(ARGV[4])
if not now then return redis.error_reply('ERR sluice: bad time argument') end
local key = KEYS[1]
local since = '(' .. str(now - P)
local used = redis.call('ZCOUNT', key, since, '+inf')
local newest = now
local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if top[2] then newest = tonumber(top[2]) end
local plausible = used <= L and newest <= now + TOLERANCE_US
if not plausible then used, newest = L, now end
local function untilGone(score) return ceildiv(score + P - now, 1000) end
local reset = 0
if used > 0 then reset = untilGone(newest) end
local reason, retry = 0, 0
if n < 1 then
  reason = 3
elseif n > L then
  reason = 2
elseif used + n <= L then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', str(now - P))
  -- ZADD NX skips a name already taken (possible only after the clock
  -- went back), and the loop tries the next one, so n units are n members.
  local added, j = 0, used
  while added < n do
    added = added + redis.call('ZADD', key, 'NX', str(now), str(now) .. ':' .. str(j))
    j = j + 1
  end
  if newest < now then newest = now end
  reset = untilGone(newest)
  keep(key, reset)
  return {1, L - used - n, 0, reset, 0, now}
else
  reason = 1
  -- The live unit whose departure leaves room for n.
  local gone = now
  if plausible then
    gone = tonumber(redis.call('ZRANGEBYSCORE', key, since, '+inf', 'WITHSCORES', 'LIMIT', used + n - L - 1, 1)[2])
  end
  retry = untilGone(gone)
end
return {0, L - used, retry, reset, reason, now}
`

// The registered scripts. Their SHA1s are what EVALSHA sends.
var (
	TokenBucketScript   = newScript("token_bucket", tokenBucketBody)
	FixedWindowScript   = newScript("fixed_window", fixedWindowBody)
	SlidingWindowScript = newScript("sliding_window", slidingWindowBody)
	SlidingLogScript    = newScript("sliding_log", slidingLogBody)
	LeaseScript         = newScript("token_bucket_lease", leaseBody)
	WindowLeaseScript   = newScript("fixed_window_lease", windowLeaseBody)
	ChargeScript        = newScript("token_bucket_charge", chargeBody)
	ResetScript         = newScript("reset", resetBody)
)

// IsLease reports a lease script, whose replies ParseLeaseReply reads.
func (s *Script) IsLease() bool { return s == LeaseScript || s == WindowLeaseScript }

// Scripts lists every registered script, for loading them all at once.
func Scripts() []*Script {
	return []*Script{TokenBucketScript, FixedWindowScript, SlidingWindowScript, SlidingLogScript, LeaseScript, WindowLeaseScript, ChargeScript, ResetScript}
}

// ScriptBySHA1 finds a registered script by its digest, or nil.
func ScriptBySHA1(sha string) *Script {
	for _, s := range Scripts() {
		if s.SHA1 == sha {
			return s
		}
	}
	return nil
}
