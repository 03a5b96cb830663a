package lease

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sessions that meet a lease Table 1 refuses wait for it instead of
// aborting at once, with the wound-wait rule so that no cycle of waiting
// sessions can form:
//
//   - S on X, X on X: if the requester is older (Older) than the X holder,
//     it wounds the holder — voids its X lease, which makes the holder's
//     next step (validation, commit) abort it — and is granted; if it is
//     younger, it waits.
//   - X on golden S: the validated holder is committing and can be neither
//     wounded nor waited for without risking a cycle (it may itself wait
//     for the requester's key in its commit): refused at once, as before.
//   - The cells Table 1 grants (S on S, X on non-golden S voiding it, X on
//     I) are unchanged.
//
// Waiting sessions queue per key, in arrival order (FIFO), in a sorted set
// next to the key's lease record (same slot): member
// "<session>|<mode>|<session start>|<deadline ms>", score the arrival
// ordinal. A request is granted only when no live holder blocks it and no
// waiter queued before it wants a mode it conflicts with (two S waiters do
// not conflict). A waiter whose deadline passed is dropped by the next
// request on the key, so a waiter that died leaves nothing behind for
// longer than its own wait bound.
//
// Why no cycle: every wait is for an older holder (younger holders are
// wounded) or behind an earlier waiter, which itself waits for the
// holders, all older than every waiter once each has re-checked (a
// waiter re-checks after every release it hears of and at least every few
// milliseconds, wounding holders younger than itself). Edges of the
// waits-for graph thus go from younger to older sessions only, and golden
// holders, which nobody waits for, close no cycle. Every wait is bounded
// anyway.

// Queued names a request that waits behind earlier waiters only.
const Queued Conflict = "queued"

// Requester is a session asking for a lease.
type Requester struct {
	ID    string
	Mode  Mode  // Shared or Exclusive
	Start int64 // the session's start (Lease.Start); 0: unknown (never wounds)
}

// Waiter is a session queued for a lease on a key.
type Waiter struct {
	ID       string
	Mode     Mode
	Start    int64
	Deadline int64 // ms on Redis's clock; the waiter gives up then
}

// Member is the waiter's entry in the key's wait queue.
func (w Waiter) Member() string {
	return w.ID + "|" + string(w.Mode) + "|" + strconv.FormatInt(w.Start, 10) + "|" + strconv.FormatInt(w.Deadline, 10)
}

// ParseWaiter decodes a wait queue member.
func ParseWaiter(m string) (Waiter, error) {
	f := strings.Split(m, "|")
	if len(f) != 4 || len(f[1]) != 1 {
		return Waiter{}, fmt.Errorf("lease: malformed waiter %q", m)
	}
	st, err1 := strconv.ParseInt(f[2], 10, 64)
	dl, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return Waiter{}, fmt.Errorf("lease: malformed waiter %q", m)
	}
	return Waiter{ID: f[0], Mode: Mode(f[1][0]), Start: st, Deadline: dl}, nil
}

// Older reports whether session a (started at as) is older than session b:
// the earlier start, then the smaller id. A session of unknown start is
// neither older nor wounded.
func Older(as int64, a string, bs int64, b string) bool {
	if as <= 0 || bs <= 0 {
		return false
	}
	return as < bs || as == bs && a < b
}

// Verdict is the answer to a session's request.
type Verdict int

// Verdicts.
const (
	Granted  Verdict = iota
	Wait             // queued: try again after a release or a short pause
	Refused          // X on a golden S: abort and retry, as Table 1 says
	TimedOut         // still blocked at the waiter's deadline: abort
)

func (v Verdict) String() string {
	return [...]string{"granted", "wait", "refused", "timeout"}[v]
}

// Judgement is what a request does.
type Judgement struct {
	Verdict  Verdict
	Mode     Mode     // when granted: the lease held after it
	Conflict Conflict // otherwise: what blocked it
	// Void lists, sorted, the holders whose leases a grant voids: non-golden
	// S and I leases (Table 1) and the X leases of younger sessions (wounded).
	Void []string
}

// Request is the twin of the Lua function lease_request: w's request on a
// key whose live and expired leases are held and whose wait queue, in
// arrival order, is queue, at now (ms on Redis's clock). w.Deadline bounds
// the wait. TestLuaMatchesRequest holds the two together.
func Request(w Waiter, held []Lease, queue []Waiter, now int64) Judgement {
	mode, blocked, hard, byHolder := w.Mode, false, false, false
	var void []string
	var mine *Lease
	for i, l := range held {
		if l.Expires.UnixMilli() <= now {
			continue
		}
		if l.Holder == w.ID {
			mine = &held[i]
			if l.Mode == Exclusive {
				mode = Exclusive
			}
			continue
		}
		switch Compat(w.Mode, l.Mode, l.Golden) {
		case GrantVoid:
			void = append(void, l.Holder)
		case Refuse:
			switch {
			case l.Golden:
				hard = true
			case Older(w.Start, w.ID, l.Start, l.Holder):
				void = append(void, l.Holder)
			default:
				blocked, byHolder = true, true
			}
		}
	}
	if hard {
		return Judgement{Verdict: Refused, Conflict: ExclusiveOnGolden}
	}
	if mine == nil || (mine.Mode != Exclusive && w.Mode != Shared) {
		me := w.Member()
		for _, q := range queue {
			if q.Deadline <= now {
				continue
			}
			if q.Member() == me {
				break
			}
			if q.ID != w.ID && !(w.Mode == Shared && q.Mode == Shared) {
				blocked = true
			}
		}
	}
	if blocked {
		c := Queued
		if byHolder {
			c = ExclusiveOnX
			if w.Mode == Shared {
				c = SharedOnExclusive
			}
		}
		if w.Deadline <= now {
			return Judgement{Verdict: TimedOut, Conflict: c}
		}
		return Judgement{Verdict: Wait, Conflict: c}
	}
	sort.Strings(void)
	return Judgement{Verdict: Granted, Mode: mode, Void: void}
}

// waitLua is the waiting half of the lease library (see Lua):
//
//	lease_older(as, a, bs, b) -> bool      Older
//	lease_judge(ls, sid, req, start) -> mine, mode, void, blocked, refused
//	                                       the holders' half of Request: its
//	                                       own lease, the mode it would hold,
//	                                       whom a grant voids (wounds included),
//	                                       whether a holder blocks it (wait) or
//	                                       a golden S refuses it
//	lease_waiters(wkey, now) -> ws         the live waiters in arrival order;
//	                                       drops those past their deadline
//	lease_request(lkey, wkey, ls, now, sid, req, start, deadline, life)
//	                                       -> verdict, mode or conflict, void
//	                                       Request; on a grant sets the lease,
//	                                       voids, and makes ls what the record
//	                                       then holds (the voided out, the
//	                                       grant in); queues or unqueues the
//	                                       waiter
const waitLua = `
local function lease_older(as, a, bs, b)
  if not as or not bs or as <= 0 or bs <= 0 then return false end
  return as < bs or (as == bs and a < b)
end
local function lease_waiters(wkey, now)
  local ws = {}
  for _, m in ipairs(redis.call('ZRANGE', wkey, 0, -1)) do
    local sid, mode, st, dl = string.match(m, '^(.-)|(.)|(%d+)|(%d+)$')
    if not sid or tonumber(dl) <= now then
      redis.call('ZREM', wkey, m)
    else
      ws[#ws + 1] = {member = m, sid = sid, mode = mode}
    end
  end
  return ws
end
local function lease_judge(ls, sid, req, start)
  local mode, void, blocked, hard = req, {}, false, false
  local mine = nil
  for _, l in ipairs(ls) do
    if l.holder == sid then
      mine = l
      if l.mode == 'X' then mode = 'X' end
    else
      local o = lease_compat(req, l.mode, l.golden)
      if o == 1 then
        void[#void + 1] = l.holder
      elseif o == 2 then
        if l.golden then
          hard = true
        elseif lease_older(start, sid, l.start, l.holder) then
          void[#void + 1] = l.holder
        else
          blocked = true
        end
      end
    end
  end
  return mine, mode, void, blocked, hard
end
local function lease_request(lkey, wkey, ls, now, sid, req, start, deadline, life)
  local mine, mode, void, blocked, hard = lease_judge(ls, sid, req, start)
  local byholder = blocked
  -- %d: a start in µs has more digits than Lua's number to string keeps
  local member = sid .. '|' .. req .. '|' .. string.format('%d', start) .. '|' .. string.format('%d', deadline)
  if hard then
    redis.call('ZREM', wkey, member)
    return 'refused', 'x_on_golden_s', {}
  end
  local ws = lease_waiters(wkey, now)
  if not mine or (mine.mode ~= 'X' and req ~= 'S') then
    for _, w in ipairs(ws) do
      if w.member == member then break end
      if w.sid ~= sid and not (req == 'S' and w.mode == 'S') then blocked = true end
    end
  end
  if blocked then
    local c = 'queued'
    if byholder then
      c = 'x_on_x'
      if req == 'S' then c = 's_on_x' end
    end
    if deadline <= now then
      redis.call('ZREM', wkey, member)
      return 'timeout', c, {}
    end
    if not redis.call('ZSCORE', wkey, member) then
      local last = redis.call('ZRANGE', wkey, -1, -1, 'WITHSCORES')
      local score = 1
      if #last == 2 then score = tonumber(last[2]) + 1 end
      redis.call('ZADD', wkey, score, member)
    end
    local ttl = deadline - now + 1000
    if redis.call('PTTL', wkey) < ttl then redis.call('PEXPIRE', wkey, ttl) end
    return 'wait', c, {}
  end
  -- a waiter past its deadline left the queue in lease_waiters
  for _, w in ipairs(ws) do
    if w.member == member then
      redis.call('ZREM', wkey, member)
      break
    end
  end
  lease_void(lkey, void)
  for _, h in ipairs(void) do
    for i, l in ipairs(ls) do
      if l.holder == h then table.remove(ls, i) break end
    end
  end
  local exp, golden = now + life, false
  if mine and mine.mode == mode then
    exp = math.max(exp, mine.exp)
    golden = mine.golden
  end
  lease_set(lkey, sid, mode, golden, exp, start)
  lease_put(ls, {holder = sid, mode = mode, golden = golden, exp = exp, start = start})
  table.sort(void)
  return 'granted', mode, void
end
`

// requestScript runs lease_request on one key.
//
// KEYS: 1 lease record, 2 cache entry, 3 wait queue. ARGV: 1 session,
// 2 mode, 3 session start, 4 deadline ms, 5 lifetime ms.
// Returns {verdict, mode or conflict, voided holders…}.
var requestScript = redis.NewScript(Lua + `
local now = lease_now()
local ls = lease_load(KEYS[1], KEYS[2], now)
local v, m, void = lease_request(KEYS[1], KEYS[3], ls, now, ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
lease_keep(KEYS[1], KEYS[2], now, ls)
local out = {v, m}
for _, h in ipairs(void) do out[#out + 1] = h end
return out
`)

// leaveScript takes a waiter out of a key's queue. KEYS: 1 wait queue.
// ARGV: 1 member.
var leaveScript = redis.NewScript(`return redis.call('ZREM', KEYS[1], ARGV[1])`)

// ParseVerdict decodes a verdict as the Lua library names it.
func ParseVerdict(s string) (Verdict, bool) {
	switch s {
	case "granted":
		return Granted, true
	case "wait":
		return Wait, true
	case "refused":
		return Refused, true
	case "timeout":
		return TimedOut, true
	}
	return 0, false
}

// Request asks once for w's lease on k (k.Wait must be set) with the
// wound-wait rule, queueing w if it must wait; the caller tries again
// with the same w until the verdict is not Wait, or calls Leave.
func (c *Client) Request(ctx context.Context, k Key, w Waiter, lifetime time.Duration) (Judgement, error) {
	v, err := requestScript.Run(ctx, c.rdb, []string{k.Lease, k.Entry, k.Wait}, w.ID, string(w.Mode), w.Start, w.Deadline, lifetime.Milliseconds()).Slice()
	if err != nil {
		return Judgement{}, fmt.Errorf("lease: request: %w", err)
	}
	return judgement(v)
}

func judgement(v []any) (Judgement, error) {
	if len(v) < 2 {
		return Judgement{}, fmt.Errorf("lease: unexpected reply %v", v)
	}
	vs, _ := v[0].(string)
	verdict, ok := ParseVerdict(vs)
	if !ok {
		return Judgement{}, fmt.Errorf("lease: unexpected verdict %v", v[0])
	}
	s, _ := v[1].(string)
	j := Judgement{Verdict: verdict}
	if verdict == Granted {
		j.Mode = Mode(s[0])
		for _, h := range v[2:] {
			hs, _ := h.(string)
			j.Void = append(j.Void, hs)
		}
	} else {
		j.Conflict = Conflict(s)
	}
	return j, nil
}

// ParseJudgement decodes the reply of lease_request as a script returns it:
// {verdict, mode or conflict, voided holders…}.
func ParseJudgement(v []any) (Judgement, error) { return judgement(v) }

// Leave takes w out of k's wait queue: a waiter that gives up for another
// reason than its verdict (its request was cancelled).
func (c *Client) Leave(ctx context.Context, k Key, w Waiter) error {
	if err := leaveScript.Run(ctx, c.rdb, []string{k.Wait}, w.Member()).Err(); err != nil {
		return fmt.Errorf("lease: leave: %w", err)
	}
	return nil
}

// Waiters returns k's wait queue in arrival order, expired waiters
// included.
func Waiters(ctx context.Context, rdb redis.Cmdable, k Key) ([]Waiter, error) {
	ms, err := rdb.ZRange(ctx, k.Wait, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	out := make([]Waiter, 0, len(ms))
	for _, m := range ms {
		w, err := ParseWaiter(m)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}
