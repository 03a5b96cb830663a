package buffer

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/change"
)

// convertScript replaces the head of a buffered write by the converted
// changes an applier computed from it (the paper's Algorithm 2, step 7:
// "set k_bw to its idempotent equivalent"). It checks that the head is
// still the entry the applier read — a concurrent trim (write-through, a
// flush from another sidecar) may have removed it — and refuses otherwise.
// The replacement keeps the first entry's buffering time, so the pending
// index's score is still right, and the counters stay exact. Writers only
// append at the tail, so entries buffered since the applier read are
// untouched. The cached value does not change: the replacement means the
// same document.
//
// KEYS: 1 buffered write, 2 partition stats. ARGV: 1 seq of the head the
// applier read, 2 last seq replaced, 3… the replacement entries without
// their time ("<seq>|<body>"). Returns the number of entries replaced, or
// -1 when the head moved.
var convertScript = redis.NewScript(luaEntry + `
local head = redis.call('LINDEX', KEYS[1], 0)
if not head then return -1 end
local s, ms = entry_seq_ms(head)
if s ~= tonumber(ARGV[1]) then return -1 end
local last = tonumber(ARGV[2])
local popped, bytes = 0, 0
while true do
  local e = redis.call('LINDEX', KEYS[1], 0)
  if not e then break end
  if entry_seq_ms(e) > last then break end
  redis.call('LPOP', KEYS[1])
  popped = popped + 1
  bytes = bytes + #e
end
local added = 0
for j = #ARGV, 3, -1 do
  local p = string.find(ARGV[j], '|', 1, true)
  local e = string.sub(ARGV[j], 1, p) .. ms .. '|' .. string.sub(ARGV[j], p + 1)
  redis.call('LPUSH', KEYS[1], e)
  added = added + #e
end
redis.call('HINCRBY', KEYS[2], 'changes', (#ARGV - 2) - popped)
redis.call('HINCRBY', KEYS[2], 'bytes', added - bytes)
return popped
`)

// Conversion is the replacement of the head of one document's buffered
// write: the entries with seq up to Last, the first of which has seq
// First, become Changes (whose seqs are among theirs, Last included).
type Conversion struct {
	DocRef
	First, Last int64
	Changes     []change.Change
}

// Convert persists conversions, one script per document, in one round
// trip; with Replicas > 0 they count only once that many replicas have
// them (WAIT), as buffered writes do, since an applier applies what it
// persisted right after. ok[i] is false when conversion i found the head
// of its buffered write moved (nothing was replaced).
func (b *Buffer) Convert(ctx context.Context, convs []Conversion) (ok []bool, err error) {
	ok = make([]bool, len(convs))
	if len(convs) == 0 {
		return ok, nil
	}
	calls := make([]scriptCall, len(convs))
	for i, c := range convs {
		if len(c.Changes) == 0 {
			return nil, fmt.Errorf("buffer: convert %s: an empty replacement", c.Member)
		}
		args := make([]any, 0, 2+len(c.Changes))
		args = append(args, c.First, c.Last)
		for _, ch := range c.Changes {
			args = append(args, strconv.FormatInt(ch.Seq, 10)+"|"+string(change.Encode(ch)))
		}
		calls[i].keys = []string{b.bwKey(c.Part, c.Member), b.statsKey(c.Part)}
		calls[i].args = args
	}
	_, cluster := b.rdb.(*redis.ClusterClient)
	if cluster && b.Replicas > 0 {
		// One WAIT covers one node's connection: each conversion waits on
		// its own slot's primary.
		for i, c := range calls {
			node, err := b.rdb.(*redis.ClusterClient).MasterForKey(ctx, c.keys[0])
			if err != nil {
				return nil, fmt.Errorf("buffer: convert: %w", err)
			}
			if ok[i], err = b.convertOn(ctx, node, c); err != nil {
				return nil, err
			}
		}
		return ok, nil
	}
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	for attempt := 0; len(todo) > 0; attempt++ {
		pipe := b.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(todo))
		for k, i := range todo {
			cmds[k] = convertScript.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		var wait *redis.Cmd
		if b.Replicas > 0 {
			wait = pipe.Do(ctx, "WAIT", b.Replicas, b.ReplicaTimeout.Milliseconds())
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		var again []int
		for k, cmd := range cmds {
			n, err := cmd.Int64()
			if isNoScript(err) && attempt == 0 {
				again = append(again, todo[k]) // did not run: load and redo
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("buffer: convert: %w", err)
			}
			ok[todo[k]] = n >= 0
		}
		if wait != nil {
			if err := b.checkReplicas(wait); err != nil {
				return nil, err
			}
		}
		if len(again) > 0 {
			if err := convertScript.Load(ctx, b.rdb).Err(); err != nil {
				return nil, fmt.Errorf("buffer: convert: %w", err)
			}
		}
		todo = again
	}
	return ok, nil
}

// convertOn runs one conversion on node and waits for its replicas.
func (b *Buffer) convertOn(ctx context.Context, node *redis.Client, c scriptCall) (bool, error) {
	for attempt := 0; ; attempt++ {
		pipe := node.Pipeline()
		ev := convertScript.EvalSha(ctx, pipe, c.keys, c.args...)
		wait := pipe.Do(ctx, "WAIT", b.Replicas, b.ReplicaTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		if isNoScript(ev.Err()) && attempt == 0 {
			if err := convertScript.Load(ctx, node).Err(); err != nil {
				return false, fmt.Errorf("buffer: convert: %w", err)
			}
			continue // it did not run: load and redo
		}
		n, err := ev.Int64()
		if err != nil {
			return false, fmt.Errorf("buffer: convert: %w", err)
		}
		if err := b.checkReplicas(wait); err != nil {
			return false, err
		}
		return n >= 0, nil
	}
}

// scriptCall is one script invocation's keys and arguments.
type scriptCall struct {
	keys []string
	args []any
}
