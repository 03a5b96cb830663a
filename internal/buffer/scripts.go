package buffer

import "github.com/redis/go-redis/v9"

// Every script touches only keys of one partition, which all carry the
// partition's hash tag, so each runs on one Redis Cluster slot.
//
// A buffered-write entry is "<seq>|<ms>|<kind>|<json>": the per-partition
// sequence number (a hybrid logical clock: the next number, or Redis's
// clock in µs if that is higher; writeScript), the Redis time it was
// buffered at, and the change body from change.Encode.

// luaEntry parses the sequence, time and kind of a buffered-write entry, and
// reads Redis's clock in milliseconds.
const luaEntry = `
local function entry_seq_ms(e)
  local p = string.find(e, '|', 1, true)
  local q = string.find(e, '|', p + 1, true)
  return tonumber(string.sub(e, 1, p - 1)), tonumber(string.sub(e, p + 1, q - 1)), string.sub(e, q + 1, q + 1)
end
-- lease_field splits a holder's field of a lease record, "expiry:gen"
-- (expiry in ms on Redis's clock); nil for the writers' mark 'x'.
local function lease_field(v)
  local c = string.find(v, ':', 1, true)
  if not c then return nil end
  return tonumber(string.sub(v, 1, c - 1)), string.sub(v, c + 1)
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// luaPop removes the entries with seq <= last from the head of the
// buffered write bw (pop_entries, which returns how many entries and bytes
// it removed: the counters to take off the partition's stats, which a
// caller popping many documents updates once) and re-scores or removes the
// document in the pending index (reindex); pop_prefix does both for one
// document, updates the counters and returns how many entries it removed.
// The pending documents are not counted: the pending index's ZCARD is
// their number.
//
// pop_entries' n is how many entries the caller expects the prefix to
// hold (the entries its store applied; 0: unknown). It pops one more than
// that with one LPOP and puts back, in order, what it popped past last —
// the next change, or changes buffered since the caller read the list —
// so that it knows the new head without asking; then, should the prefix
// be longer than n, it pops one by one while the head is at or below
// last. A wrong n costs commands, never an entry. A document whose applied
// changes were all it had costs one LPOP.
//
// pop_entries records in index (member → the new head's ms, false when
// nothing is left) what reindex then does to the pending index in one ZREM
// and one ZADD for all the documents popped, instead of a command per
// document.
const luaPop = `
local function entry_seq(e)
  return tonumber(string.sub(e, 1, string.find(e, '|', 1, true) - 1))
end
local function pop_entries(bw, index, member, last, n)
  local popped, bytes = 0, 0
  local head, known = false, false -- the head after the pops, once known
  while n and n > 0 do
    local want = math.min(n + 1, 1000)
    local es = redis.call('LPOP', bw, want)
    if not es then
      known = true
      break
    end
    local k = #es
    while k > 0 and entry_seq(es[k]) > last do k = k - 1 end
    for j = 1, k do bytes = bytes + #es[j] end
    popped = popped + k
    if k < #es then
      local back = {}
      for j = #es, k + 1, -1 do back[#back + 1] = es[j] end
      redis.call('LPUSH', bw, unpack(back))
      head, known = es[k + 1], true
      break
    end
    if #es < want then
      known = true
      break
    end
    n = n - k
  end
  if not known then head = redis.call('LINDEX', bw, 0) end
  while head do
    if entry_seq(head) > last then break end
    redis.call('LPOP', bw)
    popped = popped + 1
    bytes = bytes + #head
    head = redis.call('LINDEX', bw, 0)
  end
  if not head then
    index[member] = false
  elseif popped > 0 then
    local _, ms = entry_seq_ms(head)
    index[member] = ms
  end
  return popped, bytes
end
local function reindex(pending, index)
  local gone, moved = {}, {}
  for member, ms in pairs(index) do
    if ms then
      moved[#moved + 1] = ms
      moved[#moved + 1] = member
    else
      gone[#gone + 1] = member
    end
  end
  for s = 1, #gone, 1000 do
    redis.call('ZREM', pending, unpack(gone, s, math.min(s + 999, #gone)))
  end
  for s = 1, #moved, 1000 do
    redis.call('ZADD', pending, 'XX', unpack(moved, s, math.min(s + 999, #moved)))
  end
end
local function take_stats(stats, popped, bytes)
  if popped > 0 then
    redis.call('HINCRBY', stats, 'changes', -popped)
    redis.call('HINCRBY', stats, 'bytes', -bytes)
  end
end
local function pop_prefix(bw, pending, stats, member, last)
  local index = {}
  local popped, bytes = pop_entries(bw, index, member, last, 0)
  reindex(pending, index)
  take_stats(stats, popped, bytes)
  return popped
end
`

// writeScript buffers changes. One call carries several writes and runs
// each as its own step, in order, exactly as if each were a call of its
// own; the writes come in groups, one per partition, whose keys all carry
// the partition's hash tag (in a Redis Cluster a call holds one group).
// What a call costs Redis beyond its writes' commands — parsing, setting
// up the script, the reply, the clock — is paid once per call, and the
// sequence check and the counter updates once per group.
//
// ARGV[1] is the I-lease lifetime in ms, ARGV[2] this sidecar's instance
// id (a near-cache lease holder), ARGV[3] the prefix of the holders'
// channels (near.go). Then, per group: KEYS pending index (zset),
// partition stats (hash), partition sequence, membership token (string,
// Buffer.MembershipTokens: deleted with every put or delete buffered, in
// the same atomic step); ARGV the number of writes in
// the group and the partition's floor (the highest seq the caller knows it
// gave out or its store applied; {-6} below it). Then, per write of the
// group: KEYS cache entry (hash), buffered write (list), I leases (hash),
// named as buffer.go names them (the cache entry is the tag, "c:" and the
// pending member; the pending index is the tag and "pending"); ARGV the
// number n of the write's arguments that follow, then n arguments: 1 body
// (its first byte is the kind: P U D), 2 cache mode ("u" update the entry,
// "x" invalidate it) followed by flags (below), 3 cache TTL ms, 4 I-lease
// token, 5 base: "-" none, "0" the store has no such document, "m" m base
// field pairs follow; then the base pairs; then the cache operations: for
// P field/value pairs, for U triples op/field/value (op S set, I integer
// increment, X float increment: invalidate the entry).
//
// Returns one reply per write, in order: {seq} when buffered, {0} when the
// document's existence is unknown (no cache entry, nothing pending: the
// caller must read the store and call again with the base and the same
// token, which this call registered as an I lease), {-1} when a patch
// targets a missing document, {-2} when the token was voided by a
// concurrent write (start over), {-6} when the partition's sequence is
// missing or below the floor (below), {-7, message} when Redis refused one
// of the write's commands (out of memory, say): the other writes go on.
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
//   - "n<ms>" (near, last of the flags): the collection has a near cache
//     with a hot window of ms. If sidecars other than this one hold live
//     read leases on the document, nothing is written: the script blocks new
//     leases until theirs expire, publishes a revocation to each and
//     returns {-8, ms to the last expiry} (near.go). Otherwise it drops the
//     lease record (this sidecar's own lease too: its writer dropped its
//     copy first) and, once the write is buffered, marks the document hot
//     for ms. "n<ms>g<gen>:<ttl>" (ms 0) also grants the writer a read
//     lease of generation gen for ttl ms on the entry the write leaves, and
//     the reply ends with the entry (near_grant); without a grant it ends
//     with nothing. "n0g<gen>:<ttl>:<copygen>" says the writer holds a
//     copy leased under copygen and the write only sets fields: if the
//     entry is the copy (near_grant) the reply ends with 1 instead of the
//     entry, which the writer computes (WriteOptions.Copy).
//   - "a" (if absent): a put that only creates. If the document exists it
//     returns {-3} and buffers nothing; existence is decided like a patch's,
//     with {0} asking for the base.
//
// A counting HSET of a cached document costs three commands (HGET, RPUSH,
// HSET), plus ZADD when it makes the document pending; each group adds a
// SET of its sequence (two when it buffers several writes), one DEL of the
// I leases its writes void, one
// DEL of its membership token when it buffered a put or a delete, and the
// counters.
var writeScript = redis.NewScript(luaReplies + luaEntry + `
local lease = ARGV[1]
local holder, nearchan = ARGV[2], ARGV[3]
-- The writes of a call are buffered at one time, read once: in ms for the
-- entries and the pending index, in µs for the sequence (below).
local t = redis.call('TIME')
local ms = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- The current group's counters, and its sequence: seq is the last one
-- given out, written back once at the end of the group.
local changes, bytes = 0, 0
local seq = 0
-- Whether the current group buffered a put or a delete: only those change
-- which documents exist (a patch of a missing document is NOT_FOUND).
local members = false
-- The I leases the group's writes void, deleted in one DEL at the end of
-- the group (or before the group touches one of them otherwise): the
-- script is atomic, so no reader sees them in between.
local voids, voided = {}, {}
local function void_now()
  if #voids > 0 then
    redis.call('DEL', unpack(voids))
    voids, voided = {}, {}
  end
end

-- Commands with many arguments go in slices: unpack puts them all on the
-- Lua stack, which holds a few thousand.
local function hset_argv(key, from, to)
  for s = from, to, 1000 do
    redis.call('HSET', key, unpack(ARGV, s, math.min(s + 999, to)))
  end
end
local function hset_list(key, list)
  for s = 1, #list, 1000 do
    redis.call('HSET', key, unpack(list, s, math.min(s + 999, #list)))
  end
end
-- read_olds returns the values of the fields of hash key (nil: absent)
-- and whether any is present.
local function read_olds(key, fields)
  local vals = {}
  if #fields == 1 then
    vals[1] = redis.call('HGET', key, fields[1])
  else
    for s = 1, #fields, 1000 do
      local part = redis.call('HMGET', key, unpack(fields, s, math.min(s + 999, #fields)))
      for n = 1, #part do vals[s + n - 1] = part[n] end
    end
  end
  for n = 1, #fields do
    if vals[n] then return vals, true end
  end
  return vals, false
end

` + luaNearCheck + `
-- write buffers one write of the partition whose pending index and
-- sequence are pending and seqk: its keys are ck, bw, il and its arguments
-- ARGV[a..z].
local function write(pending, seqk, ck, bw, il, a, z)
  near_keep = false -- an earlier write's, which returned before buffering
  local body, flags, ttl, token = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local kind = string.sub(body, 1, 1)
  local mode = string.sub(flags, 1, 1)
  local counting = string.find(flags, 'c', 2, true) ~= nil
  local ifabsent = string.find(flags, 'a', 2, true) ~= nil
  -- Near cache: no write to a document other sidecars hold read leases on
  -- becomes visible before they all released or expired (near_check).
  local np = string.find(flags, 'n', 2, true)
  local hotkey, hotms, grant, grantms, copygen
  if np then
    local gp = string.find(flags, 'g', np + 1, true)
    if gp then
      local colon = string.find(flags, ':', gp + 1, true)
      local c2 = string.find(flags, ':', colon + 1, true)
      hotms = tonumber(string.sub(flags, np + 1, gp - 1))
      grant = string.sub(flags, gp + 1, colon - 1)
      if c2 then
        grantms, copygen = tonumber(string.sub(flags, colon + 1, c2 - 1)), string.sub(flags, c2 + 1)
      else
        grantms = tonumber(string.sub(flags, colon + 1))
      end
    else
      hotms = tonumber(string.sub(flags, np + 1))
    end
    local r
    r, hotkey = near_check(pending, ck, hotms)
    if r then return r end
  else
    -- A write that does not wait for holders (its sidecar runs without
    -- this collection's near cache, against the deployment's rule) still
    -- leaves no lease naming the value it replaces: a holder's renewal
    -- reads the document again rather than extend its copy's lease
    -- (extendScript), so a stale copy lasts at most one lease.
    local tag, member = near_keys(pending, ck)
    redis.call('DEL', tag .. 'l:' .. member)
  end
  local nbase = 0
  if ARGV[a + 4] ~= '-' then nbase = tonumber(ARGV[a + 4]) end
  local base_at = a + 5
  local i = base_at + 2 * nbase -- the first cache operation
  -- A counting patch reads the fields it sets before writing them; one
  -- found tells that the entry exists, which saves asking (entries hold
  -- every column, so it is found whenever the entry exists).
  local fields, olds
  if counting and kind == 'U' then
    fields = {}
    for j = i, z, 3 do
      if ARGV[j] == 'S' then fields[#fields + 1] = ARGV[j + 1] end
    end
  end
  local needs = kind == 'U' or counting or ifabsent
  local cached = false
  if fields and #fields > 0 then
    olds, cached = read_olds(ck, fields)
  end
  if needs and not cached then
    cached = redis.call('EXISTS', ck) == 1
  end
  if needs and not cached then
    local exists
    if voided[il] then void_now() end
    local last = redis.call('LINDEX', bw, -1)
    if last then
      local _, _, lk = entry_seq_ms(last)
      exists = lk ~= 'D'
    elseif ARGV[a + 4] == '-' then
      redis.call('HSET', il, token, 1)
      redis.call('PEXPIRE', il, lease)
      return {NEED_BASE}
    elseif redis.call('HEXISTS', il, token) == 0 then
      return {VOIDED}
    else
      redis.call('HDEL', il, token)
      exists = nbase > 0
      if exists and (mode == 'u' or counting) and kind ~= 'D' then
        hset_argv(ck, base_at, i - 1)
        redis.call('PEXPIRE', ck, ttl)
        cached = true
        olds = nil -- read before the base was installed
      end
    end
    if not exists then
      if kind ~= 'P' then return {NOT_FOUND} end
    elseif ifabsent then
      return {EXISTS}
    elseif counting and kind == 'U' and not cached then
      return {NEED_CACHE}
    end
  elseif ifabsent and cached then
    return {EXISTS}
  end
  -- Counting: look at the entry before the write, and refuse what Redis
  -- would refuse before anything is buffered.
  local added, removed, value = 0, 0, false
  local only_sets = false -- the write only set fields of the entry it found, and kept it
  if counting and kind == 'U' then
    if not olds then olds = read_olds(ck, fields) end
    local n = 0
    for j = i, z, 3 do
      local op, f, v = ARGV[j], ARGV[j + 1], ARGV[j + 2]
      if op == 'S' then
        n = n + 1
        local cur = olds[n]
        local was = cur and cur ~= 'null'
        if v == 'null' then
          if was then removed = removed + 1 end
        elseif not was then
          added = added + 1
        end
      else
        local cur = redis.call('HGET', ck, f)
        local was = cur and cur ~= 'null'
        if op == 'I' then
          -- The only operation: applied to the entry here, where an
          -- overflow can still be refused (HINCRBY changes nothing when it
          -- fails).
          if not was then
            redis.call('HSET', ck, f, v)
          else
            local r = redis.pcall('HINCRBY', ck, f, v)
            if type(r) == 'table' and r.err then return {OVERFLOW} end
          end
          -- Read back as a string: Lua numbers are doubles.
          value = redis.call('HGET', ck, f)
        elseif was then
          local sum = tonumber(cur) + tonumber(v)
          if sum ~= sum or sum == math.huge or sum == -math.huge then return {OVERFLOW} end
          value = cur
        end
      end
    end
  end
  if hotkey then redis.call('SET', hotkey, '1', 'PX', hotms) end
  -- The next seq, but never below Redis's clock in µs (a hybrid logical
  -- clock): a Redis that came back with an older counter (an older
  -- snapshot, a lagging replica, DEBUG RELOAD) still hands out seqs above
  -- every seq it gave out before it went back, so no new write is at or
  -- below an applied record and skipped as a duplicate — even when no
  -- rollback check has run yet. string.format: Lua's own conversion keeps
  -- 14 digits.
  local s = math.max(seq + 1, us)
  local e = string.format('%d', s) .. '|' .. ms .. '|' .. body
  local len = redis.call('RPUSH', bw, e)
  seq = s
  if kind ~= 'U' then members = true end
  changes, bytes = changes + 1, bytes + #e
  if len == 1 then
    -- Pending from now on; the member is the cache entry's name after the
    -- tag and "c:".
    redis.call('ZADD', pending, 'NX', ms, string.sub(ck, #pending - 4))
  end
  -- A reader that missed before this write may be computing an older value:
  -- void its I lease so that it cannot install it.
  if not voided[il] then
    voided[il] = true
    voids[#voids + 1] = il
  end
  if mode == 'x' or kind == 'D' then
    redis.call('DEL', ck)
  elseif kind == 'P' then
    redis.call('DEL', ck)
    hset_argv(ck, i, z)
    redis.call('PEXPIRE', ck, ttl)
  elseif cached then
    -- The sets go in one HSET, after the increments: a column is never in
    -- both.
    local sets, dels = {}, {}
    only_sets = true
    for j = i, z, 3 do
      local op, f, v = ARGV[j], ARGV[j + 1], ARGV[j + 2]
      if op ~= 'S' then only_sets = false end
      if op == 'S' then
        sets[#sets + 1] = f
        sets[#sets + 1] = v
      elseif op == 'C' then
        -- Compare-and-set (WriteOptions.Replace): the writer computed the
        -- field from the value it read; if the entry no longer holds that
        -- value, a concurrent write changed it, and the entry goes.
        local pos, old = 2, false
        if string.sub(v, 1, 1) == 'p' then
          local colon = string.find(v, ':', 2, true)
          local n = tonumber(string.sub(v, 2, colon - 1))
          old = string.sub(v, colon + 1, colon + n)
          pos = colon + n + 1
        end
        if redis.call('HGET', ck, f) ~= old then
          redis.call('DEL', ck)
          sets = nil
          break
        end
        if string.sub(v, pos, pos) == 'p' then
          sets[#sets + 1] = f
          sets[#sets + 1] = string.sub(v, pos + 1)
        else
          dels[#dels + 1] = f
        end
      elseif op == 'I' then
        if not counting then
          local cur = redis.call('HGET', ck, f)
          if (not cur) or cur == 'null' then
            redis.call('HSET', ck, f, v)
          else
            -- An entry that does not hold an integer here cannot be
            -- patched in place; drop it and let the next read recompute
            -- it.
            local r = redis.pcall('HINCRBY', ck, f, v)
            if type(r) == 'table' and r.err then
              redis.call('DEL', ck)
              sets = nil
              break
            end
          end
        end
      else
        redis.call('DEL', ck)
        sets = nil
        break
      end
    end
    if sets and #sets > 0 then hset_list(ck, sets) end
    if sets and #dels > 0 then redis.call('HDEL', ck, unpack(dels)) end
    if not sets then only_sets = false end
  end
  local entry
  if grant and not hotkey then
    -- The entry is the copy with this write's sets only if the write did
    -- nothing but set fields of the entry it found (no base installed by
    -- this call, no other operation, the entry kept). The caller asks only
    -- then; this holds the script to it. (A first attempt never carries a
    -- base: an attempt that asks for one deletes the holder's field.)
    if not (only_sets and kind == 'U' and mode == 'u' and ARGV[a + 4] == '-') then copygen = nil end
    entry = near_grant(pending, ck, grant, grantms, copygen)
  end
  near_done()
  if counting then return {s, added, removed, value, entry} end
  return {s, entry}
end

local out = {}
local a, k = 4, 0
while k < #KEYS do
  local pending, sk, seqk, memk = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local nw, floor = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  a, k = a + 2, k + 4
  members = false
  -- A missing sequence means Redis lost it; one below floor, the highest
  -- seq the caller knows this partition gave out or its store applied,
  -- means the node went back to older data (an older snapshot, a lagging
  -- replica, DEBUG RELOAD) without the caller seeing a new server: its
  -- cache entries may be older than the store. Refuse before touching
  -- anything; the caller checks the node (CheckRollback) and tries again.
  --
  -- The group's first seq is almost always Redis's clock (below): one SET
  -- stores it and returns the sequence before; when that sequence is
  -- missing, below floor or not behind the clock, the SET is undone or
  -- corrected before anything else happens (the script is atomic), and the
  -- end of the group stores the last seq given out if it is above what
  -- the key holds. A write the group does not buffer may leave the
  -- sequence at the clock: seqs only have to grow.
  local cur = redis.call('SET', seqk, string.format('%d', us), 'GET')
  local seqok = cur ~= false and tonumber(cur) >= floor
  local stored = us
  if not seqok then
    if cur then redis.call('SET', seqk, cur) else redis.call('DEL', seqk) end
  else
    seq = tonumber(cur)
    if seq >= us then
      redis.call('SET', seqk, cur)
      stored = seq
    end
  end
  changes, bytes = 0, 0
  for w = 1, nw do
    local n = tonumber(ARGV[a])
    local ok, r = true, {LOST_SEQ}
    if seqok then
      -- A command Redis refuses fails this write only, as it would fail
      -- its own call: the writes before it are buffered, and reported so.
      ok, r = pcall(write, pending, seqk, KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], a + 1, a + n)
      if not ok then
        if type(r) == 'table' then r = r.err end
        r = {REFUSED, tostring(r)}
      end
    end
    out[#out + 1] = r
    a, k = a + n + 1, k + 3
  end
  -- The sequence, the voided leases and the counters of every write
  -- buffered above, whatever became of the writes after it.
  if seqok and seq > stored then redis.call('SET', seqk, string.format('%d', seq)) end
  void_now()
  -- A put or a delete may have changed which documents exist: scans
  -- cached under the partition's membership token are stale from now on.
  if members then redis.call('DEL', memk) end
  if changes > 0 then
    redis.call('HINCRBY', sk, 'changes', changes)
    redis.call('HINCRBY', sk, 'bytes', bytes)
  end
end
return out
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

// luaFill installs a value computed after a miss, but only if the caller's
// I lease survived: every write since the miss voided it. fill(ck, il,
// token, ttl, from) installs ARGV[from..] (field/value pairs; none: just
// give the lease back) as cache entry ck and returns 1, or returns 0.
const luaFill = `
local function fill(ck, il, token, ttl, from)
  if redis.call('HDEL', il, token) == 0 then return 0 end
  if #ARGV < from then return 0 end
  redis.call('DEL', ck)
  -- In slices: unpack puts its values on the Lua stack.
  for s = from, #ARGV, 1000 do
    redis.call('HSET', ck, unpack(ARGV, s, math.min(s + 999, #ARGV)))
  end
  redis.call('PEXPIRE', ck, ttl)
  return 1
end
`

// fillScript is luaFill's call.
//
// KEYS: 1 cache entry, 2 I leases. ARGV: 1 token, 2 TTL ms, then field/value
// pairs. Returns 1 when installed.
var fillScript = redis.NewScript(luaFill + `
return fill(KEYS[1], KEYS[2], ARGV[1], ARGV[2], 3)
`)

// fillLeaseScript is fillScript for a near-cached collection: once the
// value is installed it also grants the caller a read lease on it
// (luaGrant), as a lease request on a hit would, so that the reader keeps
// the value it computed as its near-cache copy without a round trip of its
// own.
//
// KEYS: 1 cache entry, 2 I leases, 3 lease record, 4 hot mark. ARGV:
// 1 token, 2 TTL ms, 3 holder, 4 generation, 5 lease lifetime ms, then
// field/value pairs. Returns 0 when nothing was installed, else the
// lease's outcome (LeaseGranted, LeaseHot, LeaseRevoking).
var fillLeaseScript = redis.NewScript(luaEntry + luaGrant + luaFill + `
if fill(KEYS[1], KEYS[2], ARGV[1], ARGV[2], 6) == 0 then return 0 end
return grant_lease(KEYS[3], KEYS[4], ARGV[3], ARGV[4], ARGV[5])
`)

// trimScript removes applied prefixes after the store committed them.
//
// KEYS: 1 pending index, 2 stats, then one buffered write per document.
// ARGV: per document its pending member, the last applied seq and how many
// entries the applied prefix holds (0: unknown; pop_entries).
var trimScript = redis.NewScript(luaEntry + luaPop + `
local total, bytes, index = 0, 0, {}
for k = 3, #KEYS do
  local a = 3 * (k - 3) + 1
  local p, b = pop_entries(KEYS[k], index, ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
  total, bytes = total + p, bytes + b
end
reindex(KEYS[1], index)
take_stats(KEYS[2], total, bytes)
return total
`)

// deadScript moves a prefix the store rejected for good to the partition's
// dead-letter list, and drops the document's cache entry, which contains
// the rejected changes, and its near-cache lease record: a holder's copy
// may contain them too, and a lease record that still named the copy would
// let the holder extend its lease on it (extendScript) instead of reading
// the document again.
//
// KEYS: 1 pending index, 2 stats, 3 buffered write, 4 cache entry, 5 dead
// letters, 6 I leases, 7 membership token, 8 lease record. ARGV: 1 member,
// 2 last seq, 3 dead-letter record ("" to drop without a record), 4 the
// most records the partition keeps (0: no cap). Returns how many entries
// it removed.
var deadScript = redis.NewScript(luaEntry + luaPop + `
local n = pop_prefix(KEYS[3], KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]))
redis.call('DEL', KEYS[4], KEYS[8])
-- A reader that missed while the rejected change was buffered computed a
-- value containing it: void its I lease so that it cannot install it.
redis.call('DEL', KEYS[6])
-- A rejected put or delete never reaches the store: which documents exist
-- may change back, so scans cached under the membership token go.
if n > 0 then redis.call('DEL', KEYS[7]) end
if ARGV[3] ~= '' and n > 0 then
  local len = redis.call('RPUSH', KEYS[5], ARGV[3])
  redis.call('HINCRBY', KEYS[2], 'dead', 1)
  -- Over the cap the oldest records go, counted: dead letters are pinned
  -- memory too.
  local cap = tonumber(ARGV[4])
  if cap > 0 and len > cap then
    redis.call('LPOP', KEYS[5], len - cap)
    redis.call('HINCRBY', KEYS[2], 'dead', cap - len)
    redis.call('HINCRBY', KEYS[2], 'deaddropped', len - cap)
  end
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
