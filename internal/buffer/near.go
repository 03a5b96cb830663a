package buffer

// Near-cache read leases (Gray & Cheriton), recorded in Redis next to the
// cache entry. A document's lease record "<tag>l:<member>" is a hash:
// holder (a sidecar's instance id) → "<expiry ms>:<generation>", plus "x" →
// the Redis time (ms) until which no new lease is granted because a writer
// is waiting for the holders to let go. The record carries no TTL: it is
// pinned, so that eviction can never make a writer overlook a holder; the
// writes that find it and the grants clean it up. "<tag>h:<member>" marks a
// document written within its collection's hot window (TTL: the window).
//
// A holder's channel is "<prefix>:near:<instance>"; messages are
// "v;<generation>;<writer>;<lease record>" (revoke: drop your copy, then
// release) and "r;<lease record>" (a holder released: the waiting writer
// may try again).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/writeback/writeback/internal/rscript"
)

// replyLeased is the write script's answer to a near write of a document
// other sidecars hold leases on: nothing was written; the second element is
// how many ms until the last lease expires.
const replyLeased = -8

// Leased: other sidecars hold near-cache read leases on the document;
// nothing was written, revocations were sent, and the write may be tried
// again once they released or after WriteResult.Wait.
const Leased Outcome = Overflow + 1

// luaNearCheck is the near-cache step of the write script (flag "n"): see
// writeScript. It runs before the write touches anything.
var luaNearCheck = fmt.Sprintf("local LEASED = %d\n", replyLeased) + `
local near_waiting = false -- near_check found a writer waiting for holders
-- This holder's field as near_check found it (false: none).
local near_own_exp, near_own_gen = false, false
-- The lease record near_check left in place because it held only this
-- holder's field, which the write's grant (near_grant) replaces; if the
-- write is buffered without one, near_done deletes the record.
local near_keep = false
-- near_keys returns a document's partition tag and member from its
-- partition's pending index ("<tag>pending") and its cache entry
-- ("<tag>c:<member>"); its lease record is tag .. 'l:' .. member.
local function near_keys(pending, ck)
  return string.sub(pending, 1, #pending - 7), string.sub(ck, #pending - 4)
end
local function near_check(pending, ck, hot)
  local tag, member = near_keys(pending, ck)
  local lk = tag .. 'l:' .. member
  near_waiting, near_own_exp, near_own_gen, near_keep = false, false, false, false
  local hs = redis.call('HGETALL', lk)
  if #hs > 0 then
    local now = tonumber(ms)
    local last, live = 0, {}
    for j = 1, #hs, 2 do
      local f, v = hs[j], hs[j + 1]
      if f == 'x' and tonumber(v) > now then near_waiting = true end
      -- This sidecar's own lease does not hold the write up: its writer
      -- dropped its copy and refuses installs until the write is over.
      if f == holder then
        near_own_exp, near_own_gen = lease_field(v)
      elseif f ~= 'x' then
        local exp, gen = lease_field(v)
        if exp > now then
          live[#live + 1] = f
          live[#live + 1] = gen
          if exp > last then last = exp end
        end
      end
    end
    if #live > 0 then
      -- No new lease until these expire, and a little longer, so that the
      -- writer, trying again at the last expiry, is not beaten by a new
      -- lease: writers must not starve.
      redis.call('HSET', lk, 'x', last + 500)
      for j = 1, #live, 2 do
        redis.call('PUBLISH', nearchan .. live[j], 'v;' .. live[j + 1] .. ';' .. holder .. ';' .. lk)
      end
      return {LEASED, last - now}
    end
    if #hs == 2 and hs[1] == holder then
      near_keep = lk
    else
      redis.call('DEL', lk)
    end
  end
  -- The hot mark is the caller's to set, once the write is buffered: a
  -- write refused later (a patch of a missing document) leaves none.
  if hot > 0 then return nil, tag .. 'h:' .. member end
  return nil
end

-- near_grant gives the writer (holder) a read lease of generation gen for
-- ttl ms on the entry its write left, and returns the entry: a sidecar's
-- own write updates its copy in place. It grants nothing (nil) where a
-- lease request would get none — no entry, a hot document, a writer
-- waiting for holders. near_check ran first and found no other live
-- holder, so the record holds no field of this holder's older grants.
--
-- copygen, when the write only set fields of the entry it found cached,
-- is the generation of the writer's copy: if this holder's field named it,
-- live, when near_check read it, nothing was written to the document since
-- that copy was granted (extendScript), so the entry is the copy with the
-- write's sets, which the writer computes: 1 instead of the entry.
local function near_grant(pending, ck, gen, ttl, copygen)
  if near_waiting then return nil end
  local tag, member = near_keys(pending, ck)
  -- A holder's field in the record tells the document is not hot: it was
  -- granted while the document was not (no grant is made then), and only
  -- a write marks a document hot, a write that removed the field first.
  -- So only a writer without one asks for the hot mark.
  if not near_own_gen and redis.call('EXISTS', tag .. 'h:' .. member) == 1 then return nil end
  local h = 1
  if not (copygen and near_own_gen == copygen and near_own_exp > tonumber(ms)) then
    h = redis.call('HGETALL', ck)
    if #h == 0 then return nil end
  end
  redis.call('HSET', tag .. 'l:' .. member, holder, (tonumber(ms) + ttl) .. ':' .. gen)
  near_keep = false
  return h
end

-- near_done ends a buffered write: the lease record near_check kept goes
-- unless the write's grant replaced this holder's field in it. Every write
-- removes the names of the leases on the value it replaces before anyone
-- sees it.
local function near_done()
  if near_keep then
    redis.call('DEL', near_keep)
    near_keep = false
  end
end
`

// luaGrant grants a holder a read lease on a document's value, which the
// calling script read or installed: grant_lease(lk, hk, holder, gen, ttl)
// returns LeaseGranted, or LeaseHot (the document is hot: its hot mark hk
// exists) or LeaseRevoking (a writer waits for the holders of its lease
// record lk) and grants nothing. Needs luaEntry.
const luaGrant = `
local function grant_lease(lk, hk, holder, gen, ttl)
  if redis.call('EXISTS', hk) == 1 then return 2 end
  local now = now_ms()
  local x = redis.call('HGET', lk, 'x')
  if x then
    if tonumber(x) > now then return 3 end
    redis.call('HDEL', lk, 'x')
  end
  -- Holders that never released (crashed, or their copy was evicted)
  -- leave expired fields: clean them up once there are many.
  if redis.call('HLEN', lk) >= 16 then
    local hs = redis.call('HGETALL', lk)
    for j = 1, #hs, 2 do
      local exp = lease_field(hs[j + 1])
      if exp and exp <= now then
        redis.call('HDEL', lk, hs[j])
      end
    end
  end
  -- A holder's field keeps its latest generation and the latest expiry of
  -- all its grants (Redis's clock may step back): a writer must not see it
  -- expire before any of its copies.
  local exp = now + tonumber(ttl)
  local cur = redis.call('HGET', lk, holder)
  if cur then exp = math.max(exp, (lease_field(cur))) end
  redis.call('HSET', lk, holder, exp .. ':' .. gen)
  return 1
end
`

// leaseScript reads a cache entry and, on a hit, grants the caller a read
// lease on it unless the document is hot or a writer waits for its holders.
//
// KEYS: 1 cache entry, 2 lease record, 3 hot mark. ARGV: 1 holder,
// 2 generation, 3 lease lifetime ms. Returns {0} on a miss, else {outcome,
// fields} (outcome: LeaseGranted, LeaseHot, LeaseRevoking).
var leaseScript = redis.NewScript(luaEntry + luaGrant + `
local h = redis.call('HGETALL', KEYS[1])
if #h == 0 then return {0} end
return {grant_lease(KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3]), h}
`)

// releaseScript gives a lease back if it is still the generation the
// revocation named (a newer one stays), and tells the waiting writer.
//
// KEYS: 1 lease record. ARGV: 1 holder, 2 generation, 3 the writer's
// channel ("": none).
var releaseScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  local c = string.find(v, ':', 1, true)
  if string.sub(v, c + 1) == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end
end
if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], 'r;' .. KEYS[1]) end
return 1
`)

// extendScript extends a read lease the caller still holds, without
// reading the entry again: its holder field must still name the
// generation of the copy (old), which proves that nothing was written to
// the document since that copy's grant — every write deletes the record's
// fields before it becomes visible (near_check), but for the writer's own,
// which its grant replaces under a new generation (near_grant) or the
// write deletes once buffered (near_done) — so the copy still holds
// the document's value. The field then names the new generation (new), so
// that a release of the old one, in flight, does not take the extension
// away. Refused, like a grant, while a writer waits for its holders;
// refused too once the lease expired: a write may then have gone ahead
// without waiting for this holder, and although it deletes the record, a
// Redis that went back to an older snapshot may show the field again.
//
// It does not look at the hot mark, which a grant does: a field that still
// names the copy's generation was granted while the document was not hot
// (no grant is made then), and only a write marks a document hot — a
// write that deleted the field first. Such a document is leased again
// instead (outcome 0), and that lease request finds it hot.
//
// One call extends the leases of several documents of one partition (its
// keys share the partition's hash tag), each as its own step, reading
// Redis's clock once: two commands per lease (HMGET, HSET).
//
// KEYS: per document its lease record. ARGV: 1 holder, then per document
// its old generation, new generation and lease lifetime ms. Returns per
// document 0 when the field is gone or names another generation (lease
// the document again), else a LeaseOutcome (LeaseGranted: extended).
var extendScript = redis.NewScript(luaEntry + `
local holder = ARGV[1]
local now = now_ms()
local function extend(lk, old, new, ttl)
  local v = redis.call('HMGET', lk, holder, 'x')
  local cur, x = v[1], v[2]
  if not cur then return 0 end
  local was, gen = lease_field(cur)
  if gen ~= old then return 0 end
  if was <= now then return 0 end
  if x and tonumber(x) > now then return 3 end
  local exp = math.max(now + tonumber(ttl), was)
  redis.call('HSET', lk, holder, exp .. ':' .. new)
  return 1
end
local out = {}
for k = 1, #KEYS do
  local a = 2 + 3 * (k - 1)
  out[k] = extend(KEYS[k], ARGV[a], ARGV[a + 1], ARGV[a + 2])
end
return out
`)

// LeaseOutcome is what a lease request got on a hit.
type LeaseOutcome int

const (
	// LeaseGranted: the caller holds a read lease until the deadline it
	// computes (NearRead.TTL from when it sent the request, less a margin).
	LeaseGranted LeaseOutcome = 1
	// LeaseHot: the document was written within its hot window; no lease.
	LeaseHot LeaseOutcome = 2
	// LeaseRevoking: a writer waits for the document's holders; no lease.
	LeaseRevoking LeaseOutcome = 3
	// LeaseUnconfirmed: granted, but fewer replicas than required confirmed
	// it: serve the value once, keep no copy.
	LeaseUnconfirmed LeaseOutcome = 4
)

// NearRead is one lease request of LeaseRead.
type NearRead struct {
	Coll, ID string
	Gen      uint64        // the holder's request number, named again by a revocation
	TTL      time.Duration // lease lifetime
}

// NearReadResult is what a lease request found.
type NearReadResult struct {
	Hit     bool
	Hash    map[string]string // the cache entry, on a hit
	Outcome LeaseOutcome      // on a hit
}

// LeaseRead reads cache entries and takes read leases on the hits for this
// sidecar (Instance), in one round trip. A miss takes no lease: it goes
// through Read.
func (b *Buffer) LeaseRead(ctx context.Context, reqs []NearRead) ([]NearReadResult, error) {
	calls := make([]rscript.Call, len(reqs))
	for i, r := range reqs {
		part := b.Partition(r.Coll, r.ID)
		m := Member(r.Coll, r.ID)
		calls[i] = rscript.Call{
			Script: leaseScript,
			Keys:   []string{b.cacheKey(part, m), b.leaseKey(part, m), b.hotKey(part, m)},
			Args:   []any{b.Instance, strconv.FormatUint(r.Gen, 10), r.TTL.Milliseconds()},
		}
	}
	// The lease must reach the replicas before the holder serves under it:
	// a failover that lost it would let a writer overlook the holder.
	replies, errs, repls := b.durable().RunAll(ctx, calls)
	out := make([]NearReadResult, len(reqs))
	for i := range reqs {
		if errs[i] != nil {
			return nil, fmt.Errorf("buffer: lease read: %w", errs[i])
		}
		v, _ := replies[i].([]any)
		if len(v) == 0 {
			return nil, errors.New("buffer: lease read: malformed reply")
		}
		code, _ := v[0].(int64)
		if code == 0 {
			continue
		}
		items, _ := v[1].([]any)
		h := make(map[string]string, len(items)/2)
		for j := 0; j+1 < len(items); j += 2 {
			f, _ := items[j].(string)
			val, _ := items[j+1].(string)
			h[f] = val
		}
		out[i] = NearReadResult{Hit: true, Hash: h, Outcome: LeaseOutcome(code)}
		if out[i].Outcome == LeaseGranted && repls[i] != nil {
			out[i].Outcome = LeaseUnconfirmed
		}
	}
	return out, nil
}

// NearExtend is one request of ExtendLeases: the copy held was granted
// under Gen; the extension is granted under NewGen.
type NearExtend struct {
	Coll, ID    string
	Gen, NewGen uint64
	TTL         time.Duration
}

// ExtendLeases extends, in one round trip, leases this sidecar holds on
// copies it keeps (extendScript, one call per partition). Each outcome is
// 0 when the lease is no longer the copy's (lease the document again,
// reading its value), else LeaseGranted (extended), LeaseRevoking or
// LeaseUnconfirmed.
func (b *Buffer) ExtendLeases(ctx context.Context, reqs []NearExtend) ([]LeaseOutcome, error) {
	var calls []rscript.Call
	var which [][]int // per call, its requests
	byPart := map[int]int{}
	for i, r := range reqs {
		part := b.Partition(r.Coll, r.ID)
		m := Member(r.Coll, r.ID)
		c, ok := byPart[part]
		if !ok {
			c = len(calls)
			byPart[part] = c
			calls = append(calls, rscript.Call{Script: extendScript, Args: []any{b.Instance}})
			which = append(which, nil)
		}
		calls[c].Keys = append(calls[c].Keys, b.leaseKey(part, m))
		calls[c].Args = append(calls[c].Args, strconv.FormatUint(r.Gen, 10), strconv.FormatUint(r.NewGen, 10), r.TTL.Milliseconds())
		which[c] = append(which[c], i)
	}
	// As a grant's: the extension must reach the replicas before the
	// holder serves under it.
	replies, errs, repls := b.durable().RunAll(ctx, calls)
	out := make([]LeaseOutcome, len(reqs))
	for c, is := range which {
		if errs[c] != nil {
			return nil, fmt.Errorf("buffer: extend lease: %w", errs[c])
		}
		codes, _ := replies[c].([]any)
		if len(codes) != len(is) {
			return nil, errors.New("buffer: extend lease: malformed reply")
		}
		for k, i := range is {
			code, ok := codes[k].(int64)
			if !ok {
				return nil, errors.New("buffer: extend lease: malformed reply")
			}
			out[i] = LeaseOutcome(code)
			if out[i] == LeaseGranted && repls[c] != nil {
				out[i] = LeaseUnconfirmed
			}
		}
	}
	return out, nil
}

// ReleaseLease gives back this sidecar's lease of generation gen on the
// document whose lease record is lk, after its copy is gone, and tells
// writer (an instance id, "" for none) that it may try again.
func (b *Buffer) ReleaseLease(ctx context.Context, lk string, gen uint64, writer string) error {
	ch := ""
	if writer != "" {
		ch = b.NearChannel(writer)
	}
	if err := releaseScript.Run(ctx, b.rdb, []string{lk}, b.Instance, strconv.FormatUint(gen, 10), ch).Err(); err != nil {
		return fmt.Errorf("buffer: release: %w", err)
	}
	return nil
}

// Held is a lease this sidecar gives back: its record and generation.
type Held struct {
	Record string
	Gen    uint64
}

// ReleaseMany gives back leases whose copies this sidecar dropped on its
// own (expired, evicted), in one round trip, telling no writer.
func (b *Buffer) ReleaseMany(ctx context.Context, hs []Held) error {
	pipe := b.rdb.Pipeline()
	for _, h := range hs {
		releaseScript.EvalSha(ctx, pipe, []string{h.Record}, b.Instance, strconv.FormatUint(h.Gen, 10), "")
	}
	_, err := pipe.Exec(ctx)
	if err != nil && rscript.IsNoScript(err) {
		if err = releaseScript.Load(ctx, b.rdb).Err(); err == nil {
			return b.ReleaseMany(ctx, hs)
		}
	}
	if err != nil {
		return fmt.Errorf("buffer: release: %w", err)
	}
	return nil
}

// NearChannel is the channel of instance's revocations and releases.
func (b *Buffer) NearChannel(instance string) string { return b.prefix + ":near:" + instance }

// LeaseRecord is the name of a document's lease record.
func (b *Buffer) LeaseRecord(coll, id string) string {
	return b.leaseKey(b.Partition(coll, id), Member(coll, id))
}

// NearMessage is a message on a holder's channel.
type NearMessage struct {
	Revoke bool   // a revocation; else a release
	Gen    uint64 // the revoked lease's generation
	Writer string // the writer waiting for the revocation
	Record string // the lease record
	Coll   string // the document, from Record
	ID     string
}

// ParseNearMessage decodes a message of a holder's channel.
func ParseNearMessage(msg string) (NearMessage, bool) {
	var m NearMessage
	switch {
	case strings.HasPrefix(msg, "v;"):
		parts := strings.SplitN(msg[2:], ";", 3)
		if len(parts) != 3 {
			return m, false
		}
		gen, err := strconv.ParseUint(parts[0], 10, 64)
		if err != nil {
			return m, false
		}
		m = NearMessage{Revoke: true, Gen: gen, Writer: parts[1], Record: parts[2]}
	case strings.HasPrefix(msg, "r;"):
		m.Record = msg[2:]
	default:
		return m, false
	}
	i := strings.Index(m.Record, "}:l:")
	if i < 0 {
		return m, false
	}
	m.Coll, m.ID = SplitMember(m.Record[i+4:])
	return m, true
}

func (b *Buffer) leaseKey(part int, m string) string { return b.tag(part) + "l:" + m }
func (b *Buffer) hotKey(part int, m string) string   { return b.tag(part) + "h:" + m }
