package buffer

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/change"
)

// floorScript is writeScript's work for one write as straight-line Lua: a
// counting one-field update of a cached document that no sidecar holds a
// lease on, in a call of one write (flags "ucn0", no base), which issues
// exactly the commands writeScript issues for it (TIME, SET … GET of the
// sequence, HGETALL of the lease record, HGET of the old value, RPUSH,
// HSET, DEL of the I leases, two HINCRBY) and nothing
// that decides between cases. It is the floor of a script that does this
// write, for BenchmarkWriteScriptFloor; not a write path.
var floorScript = redis.NewScript(`
local t = redis.call('TIME')
local ms = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cur = tonumber(redis.call('SET', KEYS[3], string.format('%d', us), 'GET'))
if cur < tonumber(ARGV[5]) then return {{-6}} end
local tag = string.sub(KEYS[1], 1, #KEYS[1] - 7)
local lk = tag .. 'l:' .. string.sub(KEYS[5], #tag + 3)
if #redis.call('HGETALL', lk) > 0 then redis.call('DEL', lk) end
local old = redis.call('HGET', KEYS[5], ARGV[13])
local s = math.max(cur + 1, us)
local e = string.format('%d', s) .. '|' .. ms .. '|' .. ARGV[7]
if redis.call('RPUSH', KEYS[6], e) == 1 then redis.call('ZADD', KEYS[1], 'NX', ms, string.sub(KEYS[5], #tag + 3)) end
redis.call('HSET', KEYS[5], ARGV[13], ARGV[14])
redis.call('DEL', KEYS[7])
redis.call('HINCRBY', KEYS[2], 'changes', 1)
redis.call('HINCRBY', KEYS[2], 'bytes', #e)
local added = 0
if not old or old == 'null' then added = 1 end
return {{s, added, 0, false}}
`)

// emptyScript takes the same keys and arguments and does nothing: what an
// EVALSHA costs before its script does anything.
var emptyScript = redis.NewScript(`return {{1}}`)

// BenchmarkWriteScriptFloor measures Redis's time per call (INFO
// commandstats) of one write — the counting one-field update YCSB's
// clients send through the front door, of a cached 10-field document —
// made by writeScript, by floorScript (the same commands, straight-line)
// and by emptyScript, with the same keys and arguments, in alternating
// rounds on an otherwise idle Redis. The difference between the first two
// is what writeScript's generality costs per write.
func BenchmarkWriteScriptFloor(bm *testing.B) {
	b, ctx := newTestBuffer(bm), context.Background()
	s := putYCSBDoc(bm, b)
	patch, err := change.ParsePatch(s, []byte(`{"$set":{"field3":`+ycsbValue(7)+`}}`))
	if err != nil {
		bm.Fatal(err)
	}
	calls := b.writeCalls([]WriteRequest{{Coll: "c", ID: "d", Change: patch, Schema: s,
		Options: WriteOptions{TTL: time.Hour, Token: NewToken(), Count: true, Near: true}}})
	if len(calls) != 1 {
		bm.Fatalf("%d calls; want 1", len(calls))
	}
	keys, args := calls[0].keys, calls[0].args
	ck := keys[4]
	// Each script, once: the same reply and the same entry.
	for _, sc := range []*redis.Script{writeScript, floorScript} {
		v, err := sc.Run(ctx, b.rdb, keys, args...).Slice()
		if err != nil || len(v) != 1 {
			bm.Fatalf("reply %v, %v", v, err)
		}
		r, _ := v[0].([]any)
		if len(r) != 4 || r[1] != int64(0) || r[2] != int64(0) || r[3] != nil {
			bm.Fatalf("reply %v; want {seq, 0, 0, nil}", r)
		}
		if got := b.rdb.HGet(ctx, ck, "field3").Val(); got != ycsbValue(7) {
			bm.Fatalf("field3 %q after the write", got)
		}
	}
	if err := emptyScript.Load(ctx, b.rdb).Err(); err != nil {
		bm.Fatal(err)
	}
	const n, rounds = 500, 6
	per := map[string][]float64{}
	bm.ResetTimer()
	for range rounds {
		for _, v := range []struct {
			name string
			sc   *redis.Script
		}{{"script", writeScript}, {"floor", floorScript}, {"empty", emptyScript}} {
			before := evalshaUsec(bm, b)
			pipe := b.rdb.Pipeline()
			for range n {
				v.sc.EvalSha(ctx, pipe, keys, args...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				bm.Fatal(err)
			}
			per[v.name] = append(per[v.name], float64(evalshaUsec(bm, b)-before)/n)
		}
		// The buffered write's list grows by n per round: start again.
		b.rdb.LTrim(ctx, keys[5], 0, 0)
	}
	bm.StopTimer()
	median := func(xs []float64) float64 { return slices.Sorted(slices.Values(xs))[len(xs)/2] }
	for name, xs := range per {
		bm.ReportMetric(median(xs), name+"-redis-µs/call")
	}
	bm.ReportMetric(median(per["floor"])/median(per["script"]), "floor/script")
	bm.Logf("Redis µs per call, per round: %v", per)
}
