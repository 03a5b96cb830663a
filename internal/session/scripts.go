package session

import (
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/lease"
)

// Every script but recordScript touches keys of one queue partition only
// (see Keys); recordScript touches one session record. The scripts include
// the lease library (lease.Lua), so that a lease is granted, checked or
// voided in the same atomic step as the change it guards.

// recordScript notes the keys a session reads, and the lease it takes on
// each, in the session's record, if the session exists; an X is never
// downgraded. It returns the session's start (its age for the wound-wait
// rule) and the deadline of a wait for these leases on Redis's clock: the
// lease wait from now, but never past the time the session's first lease
// expires (field "f": when it was asked for), since a session that
// outwaits its own leases is voided anyway.
//
// Each call counts itself in the record's field "n": a process that saw
// every note of a session knows its record without reading it (see
// knownSessions), and commitScript checks that count.
//
// KEYS: 1 record. ARGV: 1 record TTL ms, 2 lease wait ms, 3 lease lifetime
// ms, 4 the start of a session to begin here ("0": none, the session must
// exist), then pairs of field ("k:<key>") and mode.
// Returns 0 when the session does not exist, else {start, deadline, first,
// notes} where first is 1 when these are the session's first leases and
// notes is the record's count of notes, this one included.
var recordScript = redis.NewScript(eachLua + `
local begin = ARGV[4] ~= '0'
if begin then
  if redis.call('HSETNX', KEYS[1], '_', ARGV[4]) == 0 then return 0 end
elseif redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- One HMGET reads the record's start, its first lease's time, its count
-- of notes and what it says of each key (a record begun here holds only
-- its start: nothing to read), one HSET notes the keys, the first lease's
-- time and the count (each: in chunks if many).
local ask = {'_', 'f', 'n'}
for i = 5, #ARGV, 2 do ask[#ask + 1] = ARGV[i] end
local cur = {ARGV[4]}
if not begin then cur = each('HMGET', KEYS[1], ask) end
local set, x = {}, {}
for n = 4, #ask do
  local f, m = ask[n], ARGV[2 * n - 2] -- ask[n] is ARGV[2n - 3]
  if cur[n] ~= 'X' and not x[f] then
    set[#set + 1] = f
    set[#set + 1] = m
    if m == 'X' then x[f] = true end
  end
end
local deadline, first = now + tonumber(ARGV[2]), 0
local f = tonumber(cur[2])
if f then
  deadline = math.min(deadline, f + tonumber(ARGV[3]))
else
  set[#set + 1] = 'f'
  set[#set + 1] = now
  first = 1
end
local n = (tonumber(cur[3]) or 0) + 1
set[#set + 1] = 'n'
set[#set + 1] = n
each('HSET', KEYS[1], set)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {tonumber(cur[1]) or 0, deadline, first, n}
`)

// readScript reads a cache entry, taking the session's lease first and,
// on a miss, an I lease for the filler and the key's mapping — all in one
// step, so that a fill computed from the store after applying the queue
// through the mapped session can be installed exactly when no commit
// changed the key in between (every such commit voids the I lease).
//
// The session's lease is asked for with lease_request: granted (wounding
// younger X holders), queued behind the key's holders and earlier waiters
// (the caller runs the script again after a release or a pause, with the
// same deadline), refused (a golden S) or out of time.
//
// KEYS: 1 lease record, 2 entry, 3 mapping, 4 wait queue. ARGV: 1 session
// ("" none), 2 mode ("S", "X" or "" for none), 3 lifetime ms, 4 I token,
// 5 session start, 6 wait deadline ms on Redis's clock, or "+ms": that
// long from now (a session's first leases, requested in the round trip
// that creates its record).
// Returns {-1, conflict} when the lease is refused, {-2, conflict,
// deadline} when the session waits, {-3, conflict, deadline} when its wait
// is over; {1, value} on a hit, {0, mapped seq, filler 0/1} on a miss.
var readScript = redis.NewScript(lease.Lua + readLua + `
return session_read(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), ARGV[6], lease_now())
`)

// readAllScript is readScript for several keys of one partition, one
// after another in one step: a multi-read's keys cost one script run per
// partition instead of one each.
//
// KEYS: per key, readScript's four. ARGV: 1 session, 2 mode, 3 lifetime
// ms, 4 session start, 5 wait deadline (as readScript's), then per key
// its I token. Returns per key what readScript returns.
var readAllScript = redis.NewScript(lease.Lua + readLua + `
local now, out = lease_now(), {}
local life, start = tonumber(ARGV[3]), tonumber(ARGV[4])
for i = 0, #KEYS / 4 - 1 do
  local k = 4 * i
  out[i + 1] = session_read(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], ARGV[1], ARGV[2], life, ARGV[6 + i], start, ARGV[5], now)
end
return out
`)

// eachLua runs a command over a list too long for one call: each(cmd,
// key, args) calls cmd with key (nil: none) and args in chunks that Lua's
// unpack takes (an even number, so field-value pairs stay together) and
// returns the replies that are arrays, joined.
const eachLua = `
local function each(cmd, key, args)
  local out = {}
  for c = 1, #args, 4000 do
    local r
    if key then
      r = redis.call(cmd, key, unpack(args, c, math.min(c + 3999, #args)))
    else
      r = redis.call(cmd, unpack(args, c, math.min(c + 3999, #args)))
    end
    if type(r) == 'table' then
      for _, v in ipairs(r) do out[#out + 1] = v end
    end
  end
  return out
end
`

// readLua is readScript's step as a function of its keys and arguments,
// at Redis time now: session_read(lease record, entry, mapping, wait
// queue, session, mode, lifetime, I token, session start, deadline, now).
const readLua = `
local function session_read(lkey, ekey, mkey, wkey, sid, mode, life, token, start, deadline, now)
  local ls = lease_load(lkey, ekey, now)
  if mode ~= '' then
    if string.sub(deadline, 1, 1) == '+' then
      deadline = now + tonumber(string.sub(deadline, 2))
    else
      deadline = tonumber(deadline)
    end
    -- voided fillers leave ls, so they do not count below
    local v, m = lease_request(lkey, wkey, ls, now, sid, mode, start, deadline, life)
    if v ~= 'granted' then
      lease_keep(lkey, ekey, now, ls)
      if v == 'refused' then return {-1, m} end
      if v == 'wait' then return {-2, m, deadline} end
      return {-3, m, deadline}
    end
  end
  local v = redis.call('GET', ekey)
  if v then
    lease_keep(lkey, ekey, now, ls)
    return {1, v}
  end
  local filler = 0
  local others = {}
  for _, l in ipairs(ls) do
    if l.holder ~= sid then others[#others + 1] = l end
  end
  local tok = 'i:' .. token
  if lease_decide(others, tok, 'I') then
    lease_set(lkey, tok, 'I', false, now + life)
    lease_put(ls, {holder = tok, mode = 'I', golden = false, exp = now + life})
    filler = 1
  end
  lease_keep(lkey, ekey, now, ls)
  return {0, redis.call('GET', mkey) or '0', filler}
end
`

// fillScript installs a value computed after a miss if the filler's I
// lease survived, and gives the lease back either way.
//
// KEYS: 1 lease record, 2 entry. ARGV: 1 token, 2 value ("" to only give
// the lease back), 3 TTL ms, 4 "" or when the entry must be gone (ms on
// Redis's clock; it replaces the TTL, and a time already past installs
// nothing). Returns 1 when installed.
var fillScript = redis.NewScript(lease.Lua + `
local now = lease_now()
local ls = lease_load(KEYS[1], KEYS[2], now)
local tok = 'i:' .. ARGV[1]
if not lease_held(ls, tok) then
  lease_keep(KEYS[1], KEYS[2], now, ls)
  return 0
end
redis.call('HDEL', KEYS[1], tok)
local done = 0
local at = tonumber(ARGV[4])
if ARGV[2] ~= '' and not at then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  done = 1
elseif ARGV[2] ~= '' and at > now then
  redis.call('SET', KEYS[2], ARGV[2], 'PXAT', ARGV[4])
  done = 1
end
local rest = {}
for _, l in ipairs(ls) do
  if l.holder ~= tok then rest[#rest + 1] = l end
end
lease_keep(KEYS[1], KEYS[2], now, rest)
return done
`)

// horizonScript finds how far a miss on an entry that may lag its queue
// (mappings.Stale) must apply the queue: through its last session
// committed at least ARGV[1] ms ago, by the commit times the queue's
// entries hold (Redis's clock). The queue is read from its head, where the
// old sessions are, and only as far as they go — at most horizonScan
// entries: past them (a backlog the appliers are far behind on), through
// its last session, as any miss.
//
// KEYS: 1 queue. ARGV: 1 age ms. Returns {now, seq}: Redis's time, and the
// seq of that session (0 when none is that old).
var horizonScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit, seq = now - tonumber(ARGV[1]), 0
for i = 0, ` + strconv.Itoa(horizonScan-64) + `, 64 do
  local es = redis.call('LRANGE', KEYS[1], i, i + 63)
  for _, e in ipairs(es) do
    local s, at = string.match(e, '^(%d+)|(%d+)|')
    if not s or tonumber(at) > limit then return {now, seq} end
    seq = tonumber(s)
  end
  if #es < 64 then return {now, seq} end
end
local last = redis.call('LINDEX', KEYS[1], -1)
return {now, tonumber(last and string.match(last, '^(%d+)|')) or seq}
`)

// horizonScan bounds the queue entries horizonScript reads (a multiple of
// 64).
const horizonScan = 1024

// commitScript commits a session into its queue, atomically: it checks
// the session's leases and takes its X leases (in key order, all or
// nothing), then stores the session object, appends it to the queue,
// indexes the queue as pending, points the mappings of the keys it changes
// at it, applies its cache changes, voids the leases its X leases wound
// (non-golden S, I) and releases its own.
//
// KEYS: 1 registry, 2 queue, 3 counter, 4 object, 5 stats; then per
// written key (lease record, entry, mapping); then per key only read in
// this partition (lease record, entry); then, when ARGV[7] is not empty,
// the session's record.
// ARGV: 1 session, 2 queue name, 3 object, 4 written keys, 5 read keys,
// 6 session start, 7 the notes the record must count ("" none: the caller
// read the record; else it knows it as of that note, knownSessions); then
// per written key: read by the session ("1"/"0"), expected entry ("*" any,
// "-" absent, else the exact value: the patch was computed from it), new
// entry ("-" delete), TTL ms.
// Returns {seq}; {-5} when the record counts other notes (the caller reads
// it and commits again; nothing was changed); {-1, "voided", i} when the session lost its lease on key
// i (1-based over written then read keys); {-2, conflict, i} when an X
// lease is refused (an older session's X: the caller waits for it; a
// golden S); {-3, i} when entry i is not the expected one; {-4} when the
// session is already committed (its object exists: a second commit of the
// same session, which read its record before the first's deletion of it,
// must not queue it twice, nor hear that the session lost its leases —
// the first commit released them — and run the transaction again); the
// object is checked first. X leases of
// younger sessions are wounded (lease_judge). The commit's X leases last
// one step, so it does not queue behind the keys' waiters.
var commitScript = redis.NewScript(lease.Lua + `
local now = lease_now()
local sid, queue = ARGV[1], ARGV[2]
local nw, nr = tonumber(ARGV[4]), tonumber(ARGV[5])
local start = tonumber(ARGV[6])
-- a session committed already (its object is queued) first: a second
-- commit of it is refused as such, whatever became of its leases
if redis.call('EXISTS', KEYS[4]) == 1 then return {-4} end
if ARGV[7] ~= '' and redis.call('HGET', KEYS[#KEYS], 'n') ~= ARGV[7] then return {-5} end
local held = {}
for i = 1, nw do
  local k, a = 6 + 3 * (i - 1), 8 + 4 * (i - 1)
  local ls = lease_load(KEYS[k], KEYS[k + 1], now)
  held[i] = ls
  if ARGV[a] == '1' and not lease_held(ls, sid) then return {-1, 'voided', i} end
  local _, _, _, blocked, refused = lease_judge(ls, sid, 'X', start)
  if refused then return {-2, 'x_on_golden_s', i} end
  if blocked then return {-2, 'x_on_x', i} end
  local want = ARGV[a + 1]
  if want ~= '*' then
    local cur = redis.call('GET', KEYS[k + 1]) or '-'
    if cur ~= want then return {-3, i} end
  end
end
for j = 1, nr do
  local k = 6 + 3 * nw + 2 * (j - 1)
  local ls = lease_load(KEYS[k], KEYS[k + 1], now)
  if not lease_held(ls, sid) then return {-1, 'voided', nw + j} end
  held[nw + j] = ls
end
local seq = redis.call('INCR', KEYS[3])
local entry = seq .. '|' .. now .. '|' .. sid
redis.call('SET', KEYS[4], ARGV[3])
redis.call('RPUSH', KEYS[2], entry)
redis.call('ZADD', KEYS[1], 'NX', now, queue)
redis.call('HINCRBY', KEYS[5], 'sessions', 1)
redis.call('HINCRBY', KEYS[5], 'bytes', #ARGV[3] + #entry)
-- A written key's X voids every other lease on it (lease_judge: the
-- others it would not void refused the commit above), and the session's
-- own goes: its lease record goes whole.
for i = 1, nw do
  local k, a = 6 + 3 * (i - 1), 8 + 4 * (i - 1)
  if #held[i] > 0 then redis.call('DEL', KEYS[k]) end
  local new = ARGV[a + 2]
  if new == '-' then
    redis.call('DEL', KEYS[k + 1])
  else
    redis.call('SET', KEYS[k + 1], new, 'PX', ARGV[a + 3])
  end
  redis.call('SET', KEYS[k + 2], seq)
end
for j = 1, nr do
  local k = 6 + 3 * nw + 2 * (j - 1)
  if lease_rest(held[nw + j], sid) then
    redis.call('HDEL', KEYS[k], sid)
    lease_keep(KEYS[k], KEYS[k + 1], now)
  else
    redis.call('DEL', KEYS[k])
  end
end
return {seq}
`)

// popScript removes applied sessions from the head of their queue, after
// the store committed them: exactly the given entries, in order, stopping
// at the first that is not the head (another applier popped it). Mappings
// pointing at a popped session or an earlier one are removed: the store
// holds those sessions now.
//
// KEYS: 1 registry, 2 queue, 3 stats, then one object per entry, then the
// mappings of the keys the entries' sessions changed. ARGV: 1 queue name,
// 2 n entries, then the entries, then the last entry's seq.
// Returns how many it popped.
var popScript = redis.NewScript(eachLua + `
local n = tonumber(ARGV[2])
local got = redis.call('LRANGE', KEYS[2], 0, n - 1)
local popped = 0
while popped < n and got[popped + 1] == ARGV[3 + popped] do popped = popped + 1 end
if popped > 0 then
  redis.call('LTRIM', KEYS[2], popped, -1)
  local objs, bytes = {}, 0
  for i = 1, popped do
    objs[i] = KEYS[3 + i]
    bytes = bytes + #got[i]
  end
  for _, obj in ipairs(each('MGET', nil, objs)) do
    if obj then bytes = bytes + #obj end
  end
  each('DEL', nil, objs)
  redis.call('HINCRBY', KEYS[3], 'sessions', -popped)
  redis.call('HINCRBY', KEYS[3], 'bytes', -bytes)
end
local last = tonumber(ARGV[3 + n])
local maps = {}
for k = 4 + n, #KEYS do maps[#maps + 1] = KEYS[k] end
local gone = {}
for i, v in ipairs(each('MGET', nil, maps)) do
  if v and tonumber(v) <= last then gone[#gone + 1] = maps[i] end
end
each('DEL', nil, gone)
local head = got[popped + 1]
if popped == #got then head = redis.call('LINDEX', KEYS[2], 0) end
if not head then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  local p = string.find(head, '|', 1, true)
  local q = string.find(head, '|', p + 1, true)
  redis.call('ZADD', KEYS[1], 'XX', string.sub(head, p + 1, q - 1), ARGV[1])
end
return popped
`)

// deadScript stops a queue at a session the store rejected for good: it
// records the dead letter (the queue's applier skips a stopped queue), and
// drops the cache entries the session changed (voiding their fills), so
// that reads do not show changes the store refused. Only if the session is
// still the queue's head: else another applier applied it meanwhile.
//
// KEYS: 1 dead letters, 2 stats, 3 queue, then per changed key (lease
// record, entry). ARGV: 1 queue name, 2 dead letter, 3 the session's entry.
// Returns 1 when it stopped the queue.
var deadScript = redis.NewScript(lease.Lua + `
if redis.call('LINDEX', KEYS[3], 0) ~= ARGV[3] then return 0 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[2], 'dead', 1)
end
local now = lease_now()
for i = 4, #KEYS, 2 do
  local ls = lease_load(KEYS[i], KEYS[i + 1], now)
  lease_void_inhibit(KEYS[i], ls)
  redis.call('DEL', KEYS[i + 1])
  lease_keep(KEYS[i], KEYS[i + 1], now)
end
return 1
`)

// replayScript restarts a stopped queue: its applier tries the dead
// session again. KEYS: 1 dead letters, 2 stats. ARGV: 1 queue name.
// Returns 1 when the queue was stopped.
var replayScript = redis.NewScript(`
local n = redis.call('HDEL', KEYS[1], ARGV[1])
if n > 0 then redis.call('HINCRBY', KEYS[2], 'dead', -n) end
return n
`)

// dropScript restarts a stopped queue without its dead session: the
// session is removed as if applied, the mappings that point at it go, and
// the entries it changed are dropped (they held its changes).
//
// KEYS: 1 dead letters, 2 stats, 3 registry, 4 queue, 5 object, then the
// mappings of the keys it changed, then per changed key (lease record,
// entry). ARGV: 1 queue name, 2 the session's entry, 3 its seq, 4 the
// number of mappings. Returns 1 when dropped, 0 when the queue was not
// stopped, -1 when its head had moved (the stop is lifted anyway).
var dropScript = redis.NewScript(lease.Lua + `
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HINCRBY', KEYS[2], 'dead', -1)
local head = redis.call('LINDEX', KEYS[4], 0)
if head ~= ARGV[2] then return -1 end
redis.call('LPOP', KEYS[4])
local bytes = #head
local obj = redis.call('GET', KEYS[5])
if obj then bytes = bytes + #obj end
redis.call('DEL', KEYS[5])
redis.call('HINCRBY', KEYS[2], 'sessions', -1)
redis.call('HINCRBY', KEYS[2], 'bytes', -bytes)
local nm = tonumber(ARGV[4])
local seq = tonumber(ARGV[3])
for k = 6, 5 + nm do
  local v = redis.call('GET', KEYS[k])
  if v and tonumber(v) <= seq then redis.call('DEL', KEYS[k]) end
end
local now = lease_now()
for i = 6 + nm, #KEYS, 2 do
  local ls = lease_load(KEYS[i], KEYS[i + 1], now)
  lease_void_inhibit(KEYS[i], ls)
  redis.call('DEL', KEYS[i + 1])
  lease_keep(KEYS[i], KEYS[i + 1], now)
end
local nh = redis.call('LINDEX', KEYS[4], 0)
if not nh then
  redis.call('ZREM', KEYS[3], ARGV[1])
else
  local p = string.find(nh, '|', 1, true)
  local q = string.find(nh, '|', p + 1, true)
  redis.call('ZADD', KEYS[3], 'XX', string.sub(nh, p + 1, q - 1), ARGV[1])
end
return 1
`)
