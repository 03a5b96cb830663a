package buffer

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/rscript"
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
	calls := make([]rscript.Call, len(convs))
	for i, c := range convs {
		if len(c.Changes) == 0 {
			return nil, fmt.Errorf("buffer: convert %s: an empty replacement", c.Member)
		}
		args := make([]any, 0, 2+len(c.Changes))
		args = append(args, c.First, c.Last)
		for _, ch := range c.Changes {
			args = append(args, strconv.FormatInt(ch.Seq, 10)+"|"+string(change.Encode(ch)))
		}
		calls[i] = rscript.Call{Script: convertScript, Keys: []string{b.bwKey(c.Part, c.Member), b.statsKey(c.Part)}, Args: args}
	}
	replies, errs, repls := b.durable().RunAll(ctx, calls)
	for i := range calls {
		if errs[i] != nil {
			return nil, fmt.Errorf("buffer: convert: %w", errs[i])
		}
		if repls[i] != nil {
			return nil, repls[i]
		}
		n, _ := replies[i].(int64)
		ok[i] = n >= 0
	}
	return ok, nil
}
