package lease

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/rscript"
)

// The leases of one key are a Redis hash next to the key's cache entry (in
// its hash-tag slot): field = holder (a session id, or "i:<token>" for an I
// lease), value = "<mode><golden>|<expires ms>[|<session start>]", e.g.
// "S0|1700000000123|1700000000001", with expiry times from Redis's own clock
// (TIME), never the sidecars'. The session start orders sessions by age for
// the wound-wait rule (wait.go); a lease without one (an I lease) is never
// wounded.
//
// The record outlives its leases by the cache entry's remaining lifetime,
// so that an expired lease is still there to be found — and its possibly
// half-updated entry deleted — as long as that entry can exist.

// Lua is the lease library the session scripts start with. Functions:
//
//	lease_now() -> ms                      Redis's clock
//	lease_load(lkey, ckey, now) -> ls      the live leases; drops expired ones,
//	                                       and the entry ckey if one was S or X
//	lease_decide(ls, holder, req) -> ok, mode, conflict, void
//	                                       Decide (without the expiry, done by load)
//	lease_held(ls, holder) -> lease|nil    holder's live lease
//	lease_set(lkey, holder, mode, golden, exp, start)
//	                                       start: the session's, or nil
//	lease_void(lkey, holders)              HDEL each
//	lease_void_inhibit(lkey, ls)           void every I lease (a change is coming)
//	lease_put(ls, l)                       l into ls, replacing holder's lease
//	lease_rest(ls, holder) -> bool         whether ls holds a lease of someone
//	                                       other than holder
//	lease_keep(lkey, ckey, now, ls)        after changes: expire the record when
//	                                       its leases and the entry are gone; ls,
//	                                       when given, is what the record holds
//	                                       now (it is not read again)
//
// The library makes no call whose answer the script already knows: fewer
// commands for Redis to run, and to replicate.
const Lua = baseLua + waitLua

const baseLua = `
local function lease_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function lease_load(lkey, ckey, now)
  local h = redis.call('HGETALL', lkey)
  local ls, del = {}, false
  for i = 1, #h, 2 do
    local v = h[i + 1]
    local mode = string.sub(v, 1, 1)
    local e, st = string.match(v, '^..|(%d+)|?(%d*)$')
    local exp = tonumber(e) or 0
    if exp <= now then
      redis.call('HDEL', lkey, h[i])
      if mode ~= 'I' then del = true end
    else
      ls[#ls + 1] = {holder = h[i], mode = mode, golden = string.sub(v, 2, 2) == '1', exp = exp, start = tonumber(st)}
    end
  end
  if del then redis.call('DEL', ckey) end
  return ls
end
local function lease_compat(req, held, golden)
  if req == 'S' then
    if held == 'X' then return 2 end
    return 0
  elseif req == 'X' then
    if held == 'X' or (held == 'S' and golden) then return 2 end
    return 1
  elseif req == 'I' then
    if held == 'X' or held == 'I' then return 2 end
    return 0
  end
  return 2
end
local function lease_decide(ls, holder, req)
  local mode, void, refused, byx = req, {}, false, false
  for _, l in ipairs(ls) do
    if l.holder == holder then
      if l.mode == 'X' then mode = 'X' end
    else
      local o = lease_compat(req, l.mode, l.golden)
      if o == 2 then
        refused = true
        if l.mode == 'X' then byx = true end
      elseif o == 1 then
        void[#void + 1] = l.holder
      end
    end
  end
  if refused then
    local c = 'x_on_golden_s'
    if req == 'I' then c = 'i_busy' elseif req == 'S' then c = 's_on_x' elseif byx then c = 'x_on_x' end
    return false, nil, c, {}
  end
  return true, mode, '', void
end
local function lease_held(ls, holder)
  for _, l in ipairs(ls) do
    if l.holder == holder then return l end
  end
  return nil
end
local function lease_set(lkey, holder, mode, golden, exp, start)
  local g = '0'
  if golden then g = '1' end
  local v = mode .. g .. '|' .. exp
  if start then v = v .. '|' .. string.format('%d', start) end
  redis.call('HSET', lkey, holder, v)
end
local function lease_void(lkey, holders)
  for _, h in ipairs(holders) do redis.call('HDEL', lkey, h) end
end
local function lease_void_inhibit(lkey, ls)
  for _, l in ipairs(ls) do
    if l.mode == 'I' then redis.call('HDEL', lkey, l.holder) end
  end
end
local function lease_put(ls, l)
  for i, o in ipairs(ls) do
    if o.holder == l.holder then
      ls[i] = l
      return
    end
  end
  ls[#ls + 1] = l
end
local function lease_rest(ls, holder)
  for _, l in ipairs(ls) do
    if l.holder ~= holder then return true end
  end
  return false
end
local function lease_keep(lkey, ckey, now, ls)
  local last = now
  if ls then
    if #ls == 0 then
      redis.call('DEL', lkey)
      return
    end
    for _, l in ipairs(ls) do
      if l.exp > last then last = l.exp end
    end
  else
    local vals = redis.call('HVALS', lkey)
    if #vals == 0 then
      redis.call('DEL', lkey)
      return
    end
    for _, v in ipairs(vals) do
      local e = tonumber(string.match(v, '^..|(%d+)')) or 0
      if e > last then last = e end
    end
  end
  local r = redis.call('PTTL', ckey)
  if r == -1 then
    redis.call('PERSIST', lkey)
    return
  end
  if r < 0 then r = 0 end
  redis.call('PEXPIRE', lkey, last - now + r + 1000)
end
`

// acquireScript requests one lease: the Go face of lease_decide, for tests
// and single-key callers.
//
// KEYS: 1 lease record, 2 cache entry. ARGV: 1 holder, 2 mode, 3 lifetime
// ms. Returns {granted 0/1, mode or conflict, voided holders…}.
var acquireScript = redis.NewScript(Lua + `
local now = lease_now()
local ls = lease_load(KEYS[1], KEYS[2], now)
local ok, mode, conflict, void = lease_decide(ls, ARGV[1], ARGV[2])
if not ok then
  lease_keep(KEYS[1], KEYS[2], now)
  return {0, conflict}
end
lease_void(KEYS[1], void)
local mine = lease_held(ls, ARGV[1])
local exp = now + tonumber(ARGV[3])
if mine and mine.mode == mode then exp = math.max(exp, mine.exp) end
lease_set(KEYS[1], ARGV[1], mode, false, exp, mine and mine.start)
lease_keep(KEYS[1], KEYS[2], now)
local out = {1, mode}
for _, h in ipairs(void) do out[#out + 1] = h end
return out
`)

// validateScript makes a holder's S leases golden, if every one is still
// held: the paper's validation before commit. Its X leases stay as they
// are. KEYS: pairs of (lease record, cache entry). ARGV: 1 holder. Returns
// 0 when all were held (and are now golden), else the 1-based index of the
// first pair whose lease was voided or expired (nothing is changed then).
var validateScript = redis.NewScript(Lua + `
local now = lease_now()
local held = {}
for i = 1, #KEYS, 2 do
  local ls = lease_load(KEYS[i], KEYS[i + 1], now)
  local l = lease_held(ls, ARGV[1])
  if not l then
    lease_keep(KEYS[i], KEYS[i + 1], now)
    return (i + 1) / 2
  end
  held[#held + 1] = l
end
for i = 1, #KEYS, 2 do
  local l = held[(i + 1) / 2]
  if l.mode == 'S' then lease_set(KEYS[i], ARGV[1], 'S', true, l.exp, l.start) end
end
return 0
`)

// releaseScript gives up a holder's leases and says whether it still held
// every one of them: a session that wrote nothing is validated and
// released in one step (one that wrote validates first, its leases golden
// until its commit script has run, and ignores the reply). A lease of the
// holder found expired counts as lost, and its entry goes as lease_load
// drops any expired S or X lease's. KEYS: pairs
// of (lease record, cache entry), then optionally a guard: a hash whose
// field ARGV[2] must hold ARGV[3], or nothing is done and -1 returned.
// ARGV: 1 holder. Returns 0 when it held them all, else the 1-based index
// of the first pair whose lease was voided or expired; either way it
// holds none of them after.
var releaseScript = redis.NewScript(Lua + `
local n = #KEYS
if n % 2 == 1 then
  if redis.call('HGET', KEYS[n], ARGV[2]) ~= ARGV[3] then return -1 end
  n = n - 1
end
local now = lease_now()
local first = 0
for i = 1, n, 2 do
  local ls, rest = lease_load(KEYS[i], KEYS[i + 1], now), {}
  local held = false
  for _, l in ipairs(ls) do
    if l.holder == ARGV[1] then held = true else rest[#rest + 1] = l end
  end
  if held then
    redis.call('HDEL', KEYS[i], ARGV[1])
  elseif first == 0 then
    first = (i + 1) / 2
  end
  lease_keep(KEYS[i], KEYS[i + 1], now, rest)
end
return first
`)

// Key names one leased key: its lease record and its cache entry, which
// must share a hash tag.
type Key struct {
	Lease, Entry string
	// Wait is the key's queue of waiting sessions (wait.go), in the same
	// slot; "" where nobody waits (Validate, Release).
	Wait string
}

// Client runs the single-purpose lease scripts. Sessions use the library
// (Lua) inside their own scripts; Client serves validation and release,
// which touch only leases, and tests.
type Client struct {
	rdb redis.Scripter
}

// NewClient returns a Client over rdb.
func NewClient(rdb redis.Scripter) *Client { return &Client{rdb: rdb} }

// Acquire requests a lease of mode for holder on k, lasting lifetime. It
// reports whether it was granted and, if not, the conflict.
func (c *Client) Acquire(ctx context.Context, k Key, holder string, mode Mode, lifetime time.Duration) (bool, Conflict, error) {
	v, err := acquireScript.Run(ctx, c.rdb, []string{k.Lease, k.Entry}, holder, string(mode), lifetime.Milliseconds()).Slice()
	if err != nil {
		return false, NoConflict, fmt.Errorf("lease: acquire: %w", err)
	}
	if ok, _ := v[0].(int64); ok == 1 {
		return true, NoConflict, nil
	}
	s, _ := v[1].(string)
	return false, Conflict(s), nil
}

// Validate makes holder's S leases on keys golden if it still holds a
// lease on every one of them. It returns -1 when it did, else the index in
// keys of the first lease that was voided or expired. All keys must share
// one hash tag.
func (c *Client) Validate(ctx context.Context, keys []Key, holder string) (int, error) {
	if len(keys) == 0 {
		return -1, nil
	}
	n, err := validateScript.Run(ctx, c.rdb, flatten(keys), holder).Int64()
	if err != nil {
		return 0, fmt.Errorf("lease: validate: %w", err)
	}
	return int(n) - 1, nil
}

// Release gives up holder's leases on keys (sharing one hash tag).
func (c *Client) Release(ctx context.Context, keys []Key, holder string) error {
	if len(keys) == 0 {
		return nil
	}
	if err := releaseScript.Run(ctx, c.rdb, flatten(keys), holder).Err(); err != nil {
		return fmt.Errorf("lease: release: %w", err)
	}
	return nil
}

// ValidateCall is Validate as a call of a shared round trip
// (rscript.Durable.RunAll): its reply, an integer n, means what
// Validate's n-1 does.
func ValidateCall(keys []Key, holder string) rscript.Call {
	return rscript.Call{Script: validateScript, Keys: flatten(keys), Args: []any{holder}}
}

// ReleaseCall is Release as a call of a shared round trip.
func ReleaseCall(keys []Key, holder string) rscript.Call {
	return rscript.Call{Script: releaseScript, Keys: flatten(keys), Args: []any{holder}}
}

// CheckReleaseCall is, as a call of a shared round trip, Validate and
// Release in one step: holder gives up its leases on keys (sharing one
// hash tag), and the reply, an integer n, says whether it still held them
// all (0) or else that keys[n-1] is the first it had lost. Its S leases
// are not made golden: a holder that has nothing left to commit needs
// them no longer.
func CheckReleaseCall(keys []Key, holder string) rscript.Call {
	return rscript.Call{Script: releaseScript, Keys: flatten(keys), Args: []any{holder}}
}

// CheckReleaseIfCall is CheckReleaseCall guarded: it does nothing, and
// its reply is -1, unless field of the hash guard holds value (which need
// not share the keys' hash tag: not for a Redis Cluster).
func CheckReleaseIfCall(keys []Key, holder, guard, field, value string) rscript.Call {
	return rscript.Call{Script: releaseScript, Keys: append(flatten(keys), guard), Args: []any{holder, field, value}}
}

// Set stores a lease as is, whatever is held: tests use it to build every
// cell of Table 1.
func Set(ctx context.Context, rdb redis.Cmdable, k Key, l Lease) error {
	return rdb.HSet(ctx, k.Lease, l.Holder, Format(l)).Err()
}

// Format encodes a lease as its record field's value.
func Format(l Lease) string {
	g := "0"
	if l.Golden {
		g = "1"
	}
	v := string(l.Mode) + g + "|" + strconv.FormatInt(l.Expires.UnixMilli(), 10)
	if l.Start > 0 {
		v += "|" + strconv.FormatInt(l.Start, 10)
	}
	return v
}

// Parse decodes a record field (holder, value) into a Lease.
func Parse(holder, v string) (Lease, error) {
	mode, rest, ok := strings.Cut(v, "|")
	if !ok || len(mode) != 2 {
		return Lease{}, fmt.Errorf("lease: malformed lease %q", v)
	}
	exp, start, hasStart := strings.Cut(rest, "|")
	ms, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return Lease{}, fmt.Errorf("lease: malformed lease %q", v)
	}
	l := Lease{Holder: holder, Mode: Mode(mode[0]), Golden: mode[1] == '1', Expires: time.UnixMilli(ms)}
	if hasStart {
		if l.Start, err = strconv.ParseInt(start, 10, 64); err != nil {
			return Lease{}, fmt.Errorf("lease: malformed lease %q", v)
		}
	}
	return l, nil
}

// Held returns the leases recorded on k, expired ones included.
func Held(ctx context.Context, rdb redis.Cmdable, k Key) ([]Lease, error) {
	h, err := rdb.HGetAll(ctx, k.Lease).Result()
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	out := make([]Lease, 0, len(h))
	for holder, v := range h {
		l, err := Parse(holder, v)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func flatten(keys []Key) []string {
	out := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, k.Lease, k.Entry)
	}
	return out
}
