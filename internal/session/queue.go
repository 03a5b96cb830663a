package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/rscript"
	"github.com/writeback/writeback/internal/store"
)

// Queues is the appliers' view of the committed sessions: partitions'
// queues, their heads, pops after the store committed, dead letters and
// the ownership leases of partitions.
type Queues struct {
	rdb  redis.UniversalClient
	keys Keys

	// decoded keeps the session objects Head decoded, by queue and entry,
	// until they are popped: a session is read more than once (by the
	// applier and by misses, again after a lost race or a failed batch),
	// and its object, a session's statements, never changes once queued.
	// An entry names its session's random id, so it names one object.
	mu           sync.Mutex // guards decoded and decodedBytes
	decoded      map[string]decodedObject
	decodedBytes int // the sum of their texts' lengths
}

// decodedObject is a decoded session object and the length of its text.
type decodedObject struct {
	obj  Object
	size int
}

// Bounds of Queues.decoded; past either, it is emptied (the sessions are
// read from Redis again).
const (
	maxDecoded      = 4096
	maxDecodedBytes = 16 << 20
)

// NewQueues returns the queues under keys.
func NewQueues(rdb redis.UniversalClient, keys Keys) *Queues {
	return &Queues{rdb: rdb, keys: keys, decoded: map[string]decodedObject{}}
}

// Keys is the layout.
func (q *Queues) Keys() Keys { return q.keys }

// Pending is a committed session waiting in its queue.
type Pending struct {
	Seq    int64
	At     time.Time // commit time
	Entry  string    // the queue list entry, as stored
	Object Object
	// Missing is set when the entry has no session object (it cannot be
	// applied; the applier dead-letters it).
	Missing bool
}

// Registered returns, per partition of parts, the queues with pending
// sessions, the longest waiting first, and the stopped queues (a dead
// letter holds them) of parts, in one round trip.
func (q *Queues) Registered(ctx context.Context, parts []int) (reg map[int][]string, stopped map[string]bool, err error) {
	pipe := q.rdb.Pipeline()
	regs := make([]*redis.StringSliceCmd, len(parts))
	deads := make([]*redis.StringSliceCmd, len(parts))
	for i, p := range parts {
		regs[i] = pipe.ZRange(ctx, q.keys.Registry(p), 0, -1)
		deads[i] = pipe.HKeys(ctx, q.keys.Dead(p))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("session: queues: %w", err)
	}
	reg, stopped = map[int][]string{}, map[string]bool{}
	for i := range parts {
		if v := regs[i].Val(); len(v) > 0 {
			reg[parts[i]] = v
		}
		for _, name := range deads[i].Val() {
			stopped[name] = true
		}
	}
	return reg, stopped, nil
}

// First returns the seq of a queue's first session (ok false when the
// queue is empty) and whether a dead letter stops it, in one round trip.
func (q *Queues) First(ctx context.Context, queue string) (seq int64, ok, stopped bool, err error) {
	p := q.keys.Partition(queue)
	pipe := q.rdb.Pipeline()
	first := pipe.LIndex(ctx, q.keys.Queue(p, queue), 0)
	dead := pipe.HExists(ctx, q.keys.Dead(p), queue)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, false, false, fmt.Errorf("session: queue %s: %w", queue, err)
	}
	e, err := first.Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, dead.Val(), nil
	}
	seq, _, _, ok = parseEntry(e)
	if !ok {
		return 0, false, false, fmt.Errorf("session: queue %s holds a malformed entry %q", queue, e)
	}
	return seq, true, dead.Val(), nil
}

// Head returns up to n sessions from the head of a queue, in commit order;
// with through > 0, only those with seq <= through.
func (q *Queues) Head(ctx context.Context, queue string, n int, through int64) ([]Pending, error) {
	p := q.keys.Partition(queue)
	entries, err := q.rdb.LRange(ctx, q.keys.Queue(p, queue), 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("session: queue %s: %w", queue, err)
	}
	out := make([]Pending, 0, len(entries))
	var objKeys []string
	var fetch []int // indexes in out of the objects to read
	q.mu.Lock()
	for _, e := range entries {
		seq, ms, id, ok := parseEntry(e)
		if !ok {
			q.mu.Unlock()
			return nil, fmt.Errorf("session: queue %s holds a malformed entry %q", queue, e)
		}
		if through > 0 && seq > through {
			break
		}
		pd := Pending{Seq: seq, At: time.UnixMilli(ms), Entry: e, Object: Object{ID: id, Queue: queue}}
		if d, ok := q.decoded[decodedKey(queue, e)]; ok {
			pd.Object = d.obj
		} else {
			fetch = append(fetch, len(out))
			objKeys = append(objKeys, q.keys.Object(p, id))
		}
		out = append(out, pd)
	}
	q.mu.Unlock()
	if len(objKeys) == 0 {
		return out, nil
	}
	objs, err := q.rdb.MGet(ctx, objKeys...).Result()
	if err != nil {
		return nil, fmt.Errorf("session: queue %s: %w", queue, err)
	}
	sizes := make([]int, len(objs))
	for i, o := range objs {
		pd := &out[fetch[i]]
		text, ok := o.(string)
		if !ok {
			pd.Missing = true
			continue
		}
		if err := decodeObject(text, &pd.Object); err != nil {
			return nil, fmt.Errorf("session: session %s of queue %s: %w", pd.Object.ID, queue, err)
		}
		sizes[i] = len(text)
	}
	q.mu.Lock()
	for i, at := range fetch {
		if out[at].Missing {
			continue
		}
		if len(q.decoded) >= maxDecoded || q.decodedBytes+sizes[i] > maxDecodedBytes {
			clear(q.decoded)
			q.decodedBytes = 0
		}
		k := decodedKey(queue, out[at].Entry)
		if old, ok := q.decoded[k]; ok {
			q.decodedBytes -= old.size
		}
		q.decoded[k] = decodedObject{obj: out[at].Object, size: sizes[i]}
		q.decodedBytes += sizes[i]
	}
	q.mu.Unlock()
	return out, nil
}

// decodedKey is the key of a queue entry's object in Queues.decoded.
func decodedKey(queue, entry string) string { return queue + "\x00" + entry }

// forget drops popped sessions from Queues.decoded.
func (q *Queues) forget(queue string, done []Pending) {
	q.mu.Lock()
	for _, d := range done {
		k := decodedKey(queue, d.Entry)
		if old, ok := q.decoded[k]; ok {
			q.decodedBytes -= old.size
			delete(q.decoded, k)
		}
	}
	q.mu.Unlock()
}

// Pop removes sessions the store committed from the head of their queue
// (done in order, a prefix of what Head returned) and the mappings that
// point at them. It returns how many it popped; fewer than done when
// another applier popped some first.
func (q *Queues) Pop(ctx context.Context, queue string, done []Pending) (int, error) {
	if len(done) == 0 {
		return 0, nil
	}
	p := q.keys.Partition(queue)
	keys := []string{q.keys.Registry(p), q.keys.Queue(p, queue), q.keys.Stats(p)}
	args := []any{queue, len(done)}
	for _, d := range done {
		keys = append(keys, q.keys.Object(p, d.Object.ID))
		args = append(args, d.Entry)
	}
	seen := map[string]bool{}
	for _, d := range done {
		for _, k := range d.Object.Affects {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, q.keys.Mapping(p, k))
			}
		}
	}
	args = append(args, done[len(done)-1].Seq)
	n, err := popScript.Run(ctx, q.rdb, keys, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("session: pop %s: %w", queue, err)
	}
	q.forget(queue, done)
	return int(n), nil
}

// DeadLetter is a session the store rejected for good. Its queue is
// stopped until it is replayed or dropped.
type DeadLetter struct {
	Queue      string            `json:"queue"`
	Session    string            `json:"session"`
	Seq        int64             `json:"seq"`
	Entry      string            `json:"entry"`
	Error      string            `json:"error"`
	At         time.Time         `json:"at"`
	Statements []store.Statement `json:"statements"`
	Affects    []string          `json:"affects,omitempty"`
}

// Stop dead-letters a queue's head session with the store's error: the
// queue stops (order must not be violated), and the entries the session
// changed are dropped. It reports false when the session is no longer the
// head (someone applied it meanwhile).
func (q *Queues) Stop(ctx context.Context, pd Pending, cause error) (bool, error) {
	queue := pd.Object.Queue
	p := q.keys.Partition(queue)
	dl := DeadLetter{Queue: queue, Session: pd.Object.ID, Seq: pd.Seq, Entry: pd.Entry, Error: cause.Error(),
		At: time.Now().UTC(), Statements: pd.Object.Statements, Affects: pd.Object.Affects}
	rec, err := json.Marshal(dl)
	if err != nil {
		return false, err
	}
	keys := []string{q.keys.Dead(p), q.keys.Stats(p), q.keys.Queue(p, queue)}
	for _, k := range pd.Object.Affects {
		keys = append(keys, q.keys.Lease(p, k), q.keys.Entry(p, k))
	}
	n, err := deadScript.Run(ctx, q.rdb, keys, queue, string(rec), pd.Entry).Int64()
	if err != nil {
		return false, fmt.Errorf("session: dead-letter %s: %w", queue, err)
	}
	return n == 1, nil
}

// DeadLetters returns up to limit dead letters, by queue name.
func (q *Queues) DeadLetters(ctx context.Context, limit int) ([]DeadLetter, error) {
	pipe := q.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, q.keys.parts)
	for p := range q.keys.parts {
		cmds[p] = pipe.HGetAll(ctx, q.keys.Dead(p))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("session: dead letters: %w", err)
	}
	var out []DeadLetter
	for _, c := range cmds {
		for _, rec := range c.Val() {
			var d DeadLetter
			if json.Unmarshal([]byte(rec), &d) == nil {
				out = append(out, d)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Replay restarts a stopped queue: its appliers try the dead session
// again (after the cause was fixed). It reports whether the queue was
// stopped.
func (q *Queues) Replay(ctx context.Context, queue string) (bool, error) {
	p := q.keys.Partition(queue)
	n, err := replayScript.Run(ctx, q.rdb, []string{q.keys.Dead(p), q.keys.Stats(p)}, queue).Int64()
	if err != nil {
		return false, fmt.Errorf("session: replay %s: %w", queue, err)
	}
	return n == 1, nil
}

// Drop restarts a stopped queue without its dead session, which is lost
// for good. It reports whether the queue was stopped.
func (q *Queues) Drop(ctx context.Context, queue string) (bool, error) {
	p := q.keys.Partition(queue)
	raw, err := q.rdb.HGet(ctx, q.keys.Dead(p), queue).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("session: drop %s: %w", queue, err)
	}
	var d DeadLetter
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		return false, fmt.Errorf("session: dead letter of %s: %w", queue, err)
	}
	keys := []string{q.keys.Dead(p), q.keys.Stats(p), q.keys.Registry(p), q.keys.Queue(p, queue), q.keys.Object(p, d.Session)}
	for _, k := range d.Affects {
		keys = append(keys, q.keys.Mapping(p, k))
	}
	for _, k := range d.Affects {
		keys = append(keys, q.keys.Lease(p, k), q.keys.Entry(p, k))
	}
	n, err := dropScript.Run(ctx, q.rdb, keys, queue, d.Entry, d.Seq, len(d.Affects)).Int64()
	if err != nil {
		return false, fmt.Errorf("session: drop %s: %w", queue, err)
	}
	return n != 0, nil
}

// Stats are the exact counters of the queues, summed over partitions.
type Stats struct {
	PendingSessions int64
	PinnedBytes     int64
	StoppedQueues   int64
	Queues          int64         // queues with pending sessions
	OldestPending   time.Duration // age of the oldest pending session; 0 when none
}

// Stats reads the per-partition counters in one round trip.
func (q *Queues) Stats(ctx context.Context) (Stats, error) {
	pipe := q.rdb.Pipeline()
	t := pipe.Time(ctx)
	hs := make([]*redis.MapStringStringCmd, q.keys.parts)
	zs := make([]*redis.ZSliceCmd, q.keys.parts)
	zc := make([]*redis.IntCmd, q.keys.parts)
	for p := range q.keys.parts {
		hs[p] = pipe.HGetAll(ctx, q.keys.Stats(p))
		zs[p] = pipe.ZRangeWithScores(ctx, q.keys.Registry(p), 0, 0)
		zc[p] = pipe.ZCard(ctx, q.keys.Registry(p))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Stats{}, fmt.Errorf("session: stats: %w", err)
	}
	var st Stats
	oldest := int64(0)
	for p := range q.keys.parts {
		h := hs[p].Val()
		n := func(k string) int64 { v, _ := strconv.ParseInt(h[k], 10, 64); return v }
		st.PendingSessions += n("sessions")
		st.PinnedBytes += n("bytes")
		st.StoppedQueues += n("dead")
		st.Queues += zc[p].Val()
		if z := zs[p].Val(); len(z) > 0 {
			if ms := int64(z[0].Score); oldest == 0 || ms < oldest {
				oldest = ms
			}
		}
	}
	if oldest > 0 {
		if age := t.Val().Sub(time.UnixMilli(oldest)); age > 0 {
			st.OldestPending = age
		}
	}
	return st, nil
}

// Exist reports, for each applied record, whether its session object is
// still in Redis (compaction keeps those records).
func (q *Queues) Exist(ctx context.Context, recs []store.AppliedSession) ([]bool, error) {
	pipe := q.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(recs))
	for i, r := range recs {
		cmds[i] = pipe.Exists(ctx, q.keys.Object(q.keys.Partition(r.Queue), r.ID))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("session: exists: %w", err)
	}
	out := make([]bool, len(recs))
	for i, c := range cmds {
		out[i] = c.Val() == 1
	}
	return out, nil
}

// Acquire takes or renews ownership of queue partition p for instance id.
func (q *Queues) Acquire(ctx context.Context, p int, id string, lifetime time.Duration) (bool, error) {
	return rscript.Acquire(ctx, q.rdb, q.keys.Owner(p), id, lifetime)
}

// Release gives up ownership of queue partition p if id holds it.
func (q *Queues) Release(ctx context.Context, p int, id string) error {
	return rscript.Release(ctx, q.rdb, q.keys.Owner(p), id)
}
