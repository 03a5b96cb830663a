package buffer

import "github.com/redis/go-redis/v9"

// Every script touches only keys of one partition, which all carry the
// partition's hash tag, so each runs on one Redis Cluster slot.
//
// A buffered-write entry is "<seq>|<ms>|<kind>|<json>": the per-partition
// sequence number, the Redis time it was buffered at, and the change body
// from change.Encode.

// luaHeadSeq parses the sequence and time of a buffered-write entry.
const luaEntry = `
local function entry_seq_ms(e)
  local p = string.find(e, '|', 1, true)
  local q = string.find(e, '|', p + 1, true)
  return tonumber(string.sub(e, 1, p - 1)), tonumber(string.sub(e, p + 1, q - 1)), string.sub(e, q + 1, q + 1)
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// luaPop removes the entries with seq <= last from the head of the
// buffered write bw, keeps the partition's counters exact and re-scores or
// removes the document in the pending index. It returns how many entries it
// removed.
const luaPop = `
local function pop_prefix(bw, pending, stats, member, last)
  local popped, bytes = 0, 0
  while true do
    local head = redis.call('LINDEX', bw, 0)
    if not head then break end
    local s = entry_seq_ms(head)
    if s > last then break end
    redis.call('LPOP', bw)
    popped = popped + 1
    bytes = bytes + #head
  end
  if popped > 0 then
    redis.call('HINCRBY', stats, 'changes', -popped)
    redis.call('HINCRBY', stats, 'bytes', -bytes)
  end
  local head = redis.call('LINDEX', bw, 0)
  if not head then
    if redis.call('ZREM', pending, member) == 1 then
      redis.call('HINCRBY', stats, 'docs', -1)
    end
  elseif popped > 0 then
    local _, ms = entry_seq_ms(head)
    redis.call('ZADD', pending, 'XX', ms, member)
  end
  return popped
end
`

// writeScript buffers one change.
//
// KEYS: 1 cache entry (hash), 2 buffered write (list), 3 pending index
// (zset), 4 partition stats (hash), 5 partition sequence, 6 I leases (hash).
// ARGV: 1 kind (P U D), 2 pending member, 3 body, 4 cache TTL ms,
// 5 cache mode ("u" update the entry, "x" invalidate it) followed by flags
// (below), 6 I-lease token, 7 I-lease lifetime ms, 8 base: "-" none, "0" the
// store has no such document, "n" n base field pairs follow; then the base
// pairs; then the cache operations: for P field/value pairs, for U triples
// op/field/value (op S set, I integer increment, X float increment:
// invalidate the entry).
//
// Returns {seq} when buffered, {0} when the document's existence is unknown
// (no cache entry, nothing pending: the caller must read the store and call
// again with the base and the same token, which this call registered as an I
// lease), {-1} when a patch targets a missing document, {-2} when the token
// was voided by a concurrent write (start over).
//
// Flags, for the Redis-protocol front door, whose replies report what a
// write found (HSET's count of new fields, HINCRBY's new value, DEL's count),
// exactly and atomically with the write:
//
//   - "c" (counting): the answer is computed against the cache entry in the
//     same step as the write. A patch needs the entry cached (or its base
//     installed by this call): when the document exists only as a buffered
//     write it returns {-4} and buffers nothing; the caller reads it through
//     (which installs the entry) and tries again. A delete of a document
//     that does not exist returns {-1} and buffers nothing. The change of a
//     counting patch is either only S operations or exactly one I or X
//     operation. An I that would overflow, or an X that would make the
//     float infinite, returns {-5} and buffers nothing. Buffered, it returns
//     {seq, added, removed, value}: added counts the S operations that gave
//     a value to a field that was absent or null, removed those that made a
//     non-null field null; value is the field's new value for I and its old
//     value (nil when null) for X.
//   - "a" (if absent): a put that only creates. If the document exists it
//     returns {-3} and buffers nothing; existence is decided like a patch's,
//     with {0} asking for the base.
var writeScript = redis.NewScript(luaEntry + `
-- A missing sequence means Redis lost it: INCR would restart at 1, below
-- the seqs the store recorded as applied, and the change would be skipped
-- as a duplicate. Refuse before touching anything; the caller reseeds.
if redis.call('EXISTS', KEYS[5]) == 0 then return {-6} end
local kind, member, body = ARGV[1], ARGV[2], ARGV[3]
local ttl, token, lease = tonumber(ARGV[4]), ARGV[6], ARGV[7]
local mode = string.sub(ARGV[5], 1, 1)
local counting = string.find(ARGV[5], 'c', 2, true) ~= nil
local ifabsent = string.find(ARGV[5], 'a', 2, true) ~= nil
local cached = redis.call('EXISTS', KEYS[1]) == 1
local blen = redis.call('LLEN', KEYS[2])
local i = 9
local nbase = 0
if ARGV[8] ~= '-' then nbase = tonumber(ARGV[8]) end
local base_at = i
i = i + 2 * nbase
if (kind == 'U' or counting or ifabsent) and not cached then
  local exists
  if blen > 0 then
    local _, _, k = entry_seq_ms(redis.call('LINDEX', KEYS[2], -1))
    exists = k ~= 'D'
  elseif ARGV[8] == '-' then
    redis.call('HSET', KEYS[6], token, 1)
    redis.call('PEXPIRE', KEYS[6], lease)
    return {0}
  elseif redis.call('HEXISTS', KEYS[6], token) == 0 then
    return {-2}
  else
    redis.call('HDEL', KEYS[6], token)
    exists = nbase > 0
    if exists and (mode == 'u' or counting) and kind ~= 'D' then
      for j = base_at, base_at + 2 * nbase - 1, 2 do
        redis.call('HSET', KEYS[1], ARGV[j], ARGV[j + 1])
      end
      redis.call('PEXPIRE', KEYS[1], ttl)
      cached = true
    end
  end
  if not exists then
    if kind ~= 'P' then return {-1} end
  elseif ifabsent then
    return {-3}
  elseif counting and kind == 'U' and not cached then
    return {-4}
  end
elseif ifabsent and cached then
  return {-3}
end
-- Counting: look at the entry before the write, and refuse what Redis
-- would refuse before anything is buffered.
local added, removed, value = 0, 0, false
if counting and kind == 'U' then
  for j = i, #ARGV, 3 do
    local op, f, v = ARGV[j], ARGV[j + 1], ARGV[j + 2]
    local cur = redis.call('HGET', KEYS[1], f)
    local was = cur and cur ~= 'null'
    if op == 'S' then
      if v == 'null' then
        if was then removed = removed + 1 end
      elseif not was then
        added = added + 1
      end
    elseif op == 'I' then
      -- The only operation: applied to the entry here, where an overflow
      -- can still be refused (HINCRBY changes nothing when it fails).
      if not was then
        redis.call('HSET', KEYS[1], f, v)
      else
        local r = redis.pcall('HINCRBY', KEYS[1], f, v)
        if type(r) == 'table' and r.err then return {-5} end
      end
      -- Read back as a string: Lua numbers are doubles.
      value = redis.call('HGET', KEYS[1], f)
    else
      if was then
        local sum = tonumber(cur) + tonumber(v)
        if sum ~= sum or sum == math.huge or sum == -math.huge then return {-5} end
        value = cur
      end
    end
  end
end
local seq = redis.call('INCR', KEYS[5])
local e = seq .. '|' .. now_ms() .. '|' .. body
redis.call('RPUSH', KEYS[2], e)
redis.call('HINCRBY', KEYS[4], 'changes', 1)
redis.call('HINCRBY', KEYS[4], 'bytes', #e)
if blen == 0 then
  redis.call('ZADD', KEYS[3], 'NX', string.match(e, '^%d+|(%d+)|'), member)
  redis.call('HINCRBY', KEYS[4], 'docs', 1)
end
-- A reader that missed before this write may be computing an older value:
-- void its I lease so that it cannot install it.
redis.call('DEL', KEYS[6])
if mode == 'x' or kind == 'D' then
  redis.call('DEL', KEYS[1])
elseif kind == 'P' then
  redis.call('DEL', KEYS[1])
  for j = i, #ARGV, 2 do
    redis.call('HSET', KEYS[1], ARGV[j], ARGV[j + 1])
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
elseif cached then
  for j = i, #ARGV, 3 do
    local op, f, v = ARGV[j], ARGV[j + 1], ARGV[j + 2]
    if op == 'S' then
      redis.call('HSET', KEYS[1], f, v)
    elseif op == 'I' then
      if not counting then
        local cur = redis.call('HGET', KEYS[1], f)
        if (not cur) or cur == 'null' then
          redis.call('HSET', KEYS[1], f, v)
        else
          -- An entry that does not hold an integer here cannot be patched
          -- in place; drop it and let the next read recompute it.
          local r = redis.pcall('HINCRBY', KEYS[1], f, v)
          if type(r) == 'table' and r.err then
            redis.call('DEL', KEYS[1])
            break
          end
        end
      end
    else
      redis.call('DEL', KEYS[1])
      break
    end
  end
end
if counting then return {seq, added, removed, value} end
return {seq}
`)

// readScript returns the cache entry on a hit; on a miss it registers an I
// lease for the caller's token and returns the buffered write, read in the
// same atomic step.
//
// KEYS: 1 cache entry, 2 buffered write, 3 I leases. ARGV: 1 token,
// 2 I-lease lifetime ms. Returns {1, fields} or {0, entries}.
var readScript = redis.NewScript(`
local h = redis.call('HGETALL', KEYS[1])
if #h > 0 then return {1, h} end
redis.call('HSET', KEYS[3], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return {0, redis.call('LRANGE', KEYS[2], 0, -1)}
`)

// fillScript installs a value computed after a miss, but only if the
// caller's I lease survived: every write since the miss voided it.
//
// KEYS: 1 cache entry, 2 I leases. ARGV: 1 token, 2 TTL ms, then field/value
// pairs (none: just give the lease back). Returns 1 when installed.
var fillScript = redis.NewScript(`
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then return 0 end
if #ARGV < 3 then return 0 end
redis.call('DEL', KEYS[1])
for j = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[j], ARGV[j + 1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// trimScript removes applied prefixes after the store committed them.
//
// KEYS: 1 pending index, 2 stats, then one buffered write per document.
// ARGV: per document its pending member and the last applied seq.
var trimScript = redis.NewScript(luaEntry + luaPop + `
local total = 0
for k = 3, #KEYS do
  local a = 2 * (k - 3) + 1
  total = total + pop_prefix(KEYS[k], KEYS[1], KEYS[2], ARGV[a], tonumber(ARGV[a + 1]))
end
return total
`)

// deadScript moves a prefix the store rejected for good to the partition's
// dead-letter list, and drops the document's cache entry, which contains
// the rejected changes.
//
// KEYS: 1 pending index, 2 stats, 3 buffered write, 4 cache entry, 5 dead
// letters, 6 I leases. ARGV: 1 member, 2 last seq, 3 dead-letter record ("" to drop
// without a record). Returns how many entries it removed.
var deadScript = redis.NewScript(luaEntry + luaPop + `
local n = pop_prefix(KEYS[3], KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]))
redis.call('DEL', KEYS[4])
-- A reader that missed while the rejected change was buffered computed a
-- value containing it: void its I lease so that it cannot install it.
redis.call('DEL', KEYS[6])
if ARGV[3] ~= '' and n > 0 then
  redis.call('RPUSH', KEYS[5], ARGV[3])
  redis.call('HINCRBY', KEYS[2], 'dead', 1)
end
return n
`)

// raiseSeqScript makes the partition's sequence at least ARGV[1], so that
// sequence numbers stay above every seq the store has recorded as applied
// even if Redis lost the counter.
var raiseSeqScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
local cur = tonumber(v or '0')
local min = tonumber(ARGV[1])
if (not v) or cur < min then redis.call('SET', KEYS[1], math.max(cur, min)) return math.max(cur, min) end
return cur
`)

// acquireScript takes or renews the ownership lease of a partition.
// KEYS: 1 owner key. ARGV: 1 instance id, 2 lifetime ms. Returns 1 if owned.
var acquireScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseScript gives up ownership if still held. KEYS: 1 owner key.
// ARGV: 1 instance id.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// heartbeatScript registers a live sidecar and returns how many are live.
// KEYS: 1 sidecar registry (zset). ARGV: 1 instance id, 2 lifetime ms.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return redis.call('ZCARD', KEYS[1])
`)
