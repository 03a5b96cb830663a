package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/fault"
	"github.com/writeback/writeback/internal/jitter"
	"github.com/writeback/writeback/internal/jsonenc"
	"github.com/writeback/writeback/internal/lease"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/mappings"
)

// CommitRequest is the body of POST /v1/sessions/{id}/commit.
type CommitRequest struct {
	// Queue is "<family>/<key>": the session is applied after every session
	// committed to it before, and its statements may change only the
	// family's tables. Required unless the session only read.
	Queue      string            `json:"queue"`
	Statements []store.Statement `json:"statements"`
	Cache      []CacheChange     `json:"cache"`
	// Affects lists mapped keys whose values the statements change without
	// a cache change: their entries are dropped, and misses on them apply
	// the queue through this session first.
	Affects []string `json:"affects"`
}

// CacheChange is one change of a mapped cache entry, which must depend on
// the commit's queue. Exactly one of Patch, Set and Delete.
type CacheChange struct {
	Key string `json:"key"`
	// Patch: update operators ($set $unset $inc $push $addToSet $pull, with
	// dotted paths) applied to the cached object; an entry that is not
	// cached stays so, one that the operators do not fit is dropped.
	Patch json.RawMessage `json:"patch,omitempty"`
	// Set: the whole new value.
	Set json.RawMessage `json:"set,omitempty"`
	// Delete: drop the entry.
	Delete bool `json:"delete,omitempty"`
}

// CommitResult is what a commit did.
type CommitResult struct {
	Session string `json:"session"`
	Queue   string `json:"queue,omitempty"`
	Seq     int64  `json:"seq,omitempty"` // the session's position in its queue
}

// Object is a committed session as it waits in Redis (pinned) for an
// applier.
type Object struct {
	ID         string            `json:"id"`
	Queue      string            `json:"queue"`
	At         int64             `json:"at"` // commit time, ms
	Statements []store.Statement `json:"statements,omitempty"`
	Affects    []string          `json:"affects,omitempty"` // every key it changed, sorted
}

// FaultAfterCommit is reached after a session was committed into its
// queue and before the client hears so (see package fault).
const FaultAfterCommit = "session.after-commit"

// Limits of one commit.
const (
	MaxStatements = 1000
	MaxKeys       = 1000
)

// patchSchema parses patches of cached JSON objects: any field, dotted
// paths, every update operator. Its key field cannot be patched; nothing
// else is reserved.
var patchSchema = func() *change.Schema {
	s, err := change.NewDynamicSchema("_writeback_key")
	if err != nil {
		panic(err)
	}
	return s
}()

// write is one key a commit changes.
type write struct {
	key   string
	ttl   time.Duration
	set   json.RawMessage // the new value
	del   bool            // drop the entry (a delete, or an affected key without a change)
	patch *change.Change
}

// plan is a validated commit.
type plan struct {
	fam    *Family
	queue  string
	part   int
	stmts  []store.Statement
	writes []write // sorted by key: the order X leases are taken in
}

func (p *plan) keys() []string {
	out := make([]string, len(p.writes))
	for i, w := range p.writes {
		out[i] = w.key
	}
	return out
}

// entries returns the entry keys of p's writes, and whether one of them is
// a patch (computed from the entry it finds).
func (p *plan) entries(k Keys) (entries []string, patched bool) {
	entries = make([]string, len(p.writes))
	for i, w := range p.writes {
		entries[i] = k.Entry(p.part, w.key)
		patched = patched || w.patch != nil
	}
	return entries, patched
}

// plan validates a commit request; nil for a session that only read.
func (s *Service) plan(req CommitRequest) (*plan, error) {
	if req.Queue == "" {
		if len(req.Statements)+len(req.Cache)+len(req.Affects) > 0 {
			return nil, invalid("a session with statements, cache changes or affected keys must name its queue")
		}
		return nil, nil
	}
	f, err := s.checkQueue(req.Queue)
	if err != nil {
		return nil, err
	}
	if len(req.Statements) > MaxStatements {
		return nil, invalid("a session holds at most %d statements", MaxStatements)
	}
	if len(req.Cache)+len(req.Affects) > MaxKeys {
		return nil, invalid("a session changes at most %d cache keys", MaxKeys)
	}
	p := &plan{fam: f, queue: req.Queue, part: s.keys.Partition(req.Queue), stmts: req.Statements}
	for i, st := range req.Statements {
		if err := s.checkStatement(f, i, st); err != nil {
			return nil, err
		}
	}
	byKey := map[string]int{}
	add := func(field, key string) (*write, error) {
		if err := checkKey(key); err != nil {
			return nil, invalid("%s: %v", field, err)
		}
		r, err := s.resolve(key)
		if errors.Is(err, ErrNoMapping) {
			return nil, invalid("%s: no mapping matches %q; a session changes mapped keys only", field, truncate(key))
		}
		if err != nil {
			return nil, err
		}
		if r.fixed {
			return nil, invalid("%s: %q is an entry of an immutable mapping (immutable: true), which no session changes", field, truncate(key))
		}
		if r.queue != req.Queue {
			if r.queue == "" {
				return nil, invalid("%s: the value of %q depends on no queue (its mapping names none), so no session can change it", field, truncate(key))
			}
			return nil, invalid("%s: %q belongs to queue %q (its mapping says so); a session of queue %q cannot change it", field, truncate(key), r.queue, req.Queue)
		}
		if i, ok := byKey[key]; ok {
			return &p.writes[i], nil
		}
		byKey[key] = len(p.writes)
		ttl := mappings.TTL(r.mapping)
		if b := mappings.Staleness(r.mapping); b > 0 {
			// The value set is current now and may be read until b from
			// now (mappings.Stale); the jitter adds up to a tenth.
			ttl = min(ttl, b*9/10)
		}
		p.writes = append(p.writes, write{key: key, ttl: ttl, del: true})
		return &p.writes[len(p.writes)-1], nil
	}
	changed := map[string]bool{}
	for i, c := range req.Cache {
		field := fmt.Sprintf("cache[%d]", i)
		n := 0
		if c.Patch != nil {
			n++
		}
		if c.Set != nil {
			n++
		}
		if c.Delete {
			n++
		}
		if n != 1 {
			return nil, invalid("%s: give exactly one of patch, set and delete", field)
		}
		if changed[c.Key] {
			return nil, invalid("%s: %q is changed twice; merge its changes", field, truncate(c.Key))
		}
		changed[c.Key] = true
		w, err := add(field, c.Key)
		if err != nil {
			return nil, err
		}
		switch {
		case c.Patch != nil:
			ch, err := change.ParsePatch(patchSchema, c.Patch)
			if err != nil {
				var ce *change.Error
				if errors.As(err, &ce) {
					return nil, invalid("%s.patch: %s", field, ce.Msg)
				}
				return nil, invalid("%s.patch: %v", field, err)
			}
			w.patch, w.del = &ch, false
		case c.Set != nil:
			v, err := compactJSON(c.Set)
			if err != nil {
				return nil, invalid("%s.set is not a JSON value", field)
			}
			w.set, w.del = v, false
		}
	}
	for i, k := range req.Affects {
		if _, err := add(fmt.Sprintf("affects[%d]", i), k); err != nil {
			return nil, err
		}
	}
	sort.Slice(p.writes, func(i, j int) bool { return p.writes[i].key < p.writes[j].key })
	return p, nil
}

// Commit commits a session: it validates the session's leases (S leases
// in other partitions than the queue's become golden), then, in one script
// on the queue's partition, takes X leases on the keys it changes, checks
// its leases there, stores the session and its queue entry, points the
// keys' mappings at it and applies the cache changes; then waits for the
// replicas and releases the rest. An older session's X lease on a key it
// writes is waited for (acquireX) and a younger one's wounded; a voided
// lease, an X lease not granted within the wait, or one refused by a golden
// S for half the lease lifetime aborts the session (AbortedError, 409); a bad request is an InvalidError (400) and leaves the session
// open. In a write-through family, and in every family while pinned memory
// is over its limit (Fallback), the queue is then applied through the
// session before Commit returns; if that fails, the session stays committed
// and Commit returns its result with a NotAppliedError.
func (s *Service) Commit(ctx context.Context, id string, req CommitRequest) (CommitResult, error) {
	start := time.Now()
	pl, planErr := s.plan(req)
	b, groups, ok := s.knownBasis(id, pl, planErr)
	if !ok {
		var err error
		if b, err = s.readBasis(ctx, id, pl); err != nil {
			return CommitResult{}, err
		}
		groups = s.byPartition(b.read)
	}
	if planErr != nil {
		return CommitResult{}, planErr
	}
	defer s.known.forget(id)
	fail := func(err error) (CommitResult, error) {
		s.release(context.WithoutCancel(ctx), id, s.byPartition(b.read), -1) // read: acquireX may have added keys
		var ae *AbortedError
		if errors.As(err, &ae) {
			reason := metrics.AbortConflict
			if ae.Reason == ReasonVoided {
				reason = metrics.AbortVoided
			}
			s.m.Aborts.WithLabelValues(reason).Inc()
		}
		return CommitResult{}, err
	}
	queuePart := -1 // the commit script checks the leases of its partition
	if pl != nil {
		queuePart = pl.part
	}
	if pl == nil {
		// Nothing to commit: the validation and the release are one step
		// per partition, in one round trip.
		if err := s.checkRelease(ctx, id, b, groups); err != nil {
			var ae *AbortedError
			if !errors.As(err, &ae) {
				return fail(err) // the leases may still be held: release them
			}
			s.m.Aborts.WithLabelValues(metrics.AbortVoided).Inc()
			return CommitResult{}, err
		}
		s.m.Commits.WithLabelValues("").Inc()
		s.m.CommitDuration.Observe(time.Since(start).Seconds())
		return CommitResult{Session: id}, nil
	}
	if err := s.validate(ctx, id, groups, queuePart); err != nil {
		return fail(err)
	}
	seq, err := s.commitQueue(ctx, id, pl, b, groups[pl.part])
	if errors.Is(err, errNotesMoved) {
		// A note this process did not see reached the record (the script
		// changed nothing): commit from the record, as without knowledge.
		if b, err = s.readBasis(ctx, id, pl); err != nil {
			return fail(err)
		}
		groups = s.byPartition(b.read)
		if err := s.validate(ctx, id, groups, queuePart); err != nil {
			return fail(err)
		}
		seq, err = s.commitQueue(ctx, id, pl, b, groups[pl.part])
	}
	if err != nil {
		return fail(err)
	}
	for _, k := range pl.keys() {
		s.wakes.wake(s.keys.Lease(pl.part, k))
	}
	fault.Hit(FaultAfterCommit)
	s.release(ctx, id, groups, pl.part)
	s.m.Commits.WithLabelValues(pl.fam.Name).Inc()
	res := CommitResult{Session: id, Queue: pl.queue, Seq: seq}
	if pl.fam.WriteThrough || (s.Fallback != nil && s.Fallback()) {
		// Committed into the queue like any session, so it keeps its
		// order with the sessions pending before it; then applied through
		// itself exactly once, as a miss applies a queue's prefix (an
		// applier racing us applies it or skips it by its applied record).
		if err := s.applyThrough(ctx, pl.queue, seq); err != nil {
			s.m.CommitDuration.Observe(time.Since(start).Seconds())
			return res, &NotAppliedError{Session: id, Queue: pl.queue, Seq: seq, Err: err}
		}
	}
	s.m.CommitDuration.Observe(time.Since(start).Seconds())
	return res, nil
}

// commitBasis is what a commit starts from: the keys the session read,
// each with its lease mode, and its start (its record's), the entries its
// patches are first computed from (nil when it patches nothing: the
// commit script compares each with the entry it finds, and a changed one
// makes commitQueue read them again), and, when this process knows the
// record without reading it, the count of notes the commit script must
// find in it (0: the record was read).
type commitBasis struct {
	read  map[string]string
	age   int64
	cur   []any
	notes int64
}

// errNotesMoved: the commit script found notes in the record that the
// commit's basis did not know (it changed nothing).
var errNotesMoved = errors.New("session: the record holds notes this process did not see")

// knownBasis is the basis of a commit of pl from what this process knows
// of session id, without a round trip, and its read keys by partition:
// only outside Redis Cluster (the record's slot is not the queue's), for a
// valid commit that writes, of a session all of whose reads were in the
// queue's partition (nothing to validate elsewhere) and that read every
// entry it patches.
func (s *Service) knownBasis(id string, pl *plan, planErr error) (commitBasis, map[int][]string, bool) {
	if s.cluster || planErr != nil {
		return commitBasis{}, nil, false
	}
	k := s.known.take(id, s.cfg.SessionTimeout)
	if k == nil {
		return commitBasis{}, nil, false
	}
	groups := s.byPartition(k.read)
	b := commitBasis{read: k.read, age: k.start, notes: k.notes}
	if pl == nil { // nothing to commit: checkRelease guards each partition
		return b, groups, true
	}
	if len(groups) > 1 || (len(groups) == 1 && groups[pl.part] == nil) {
		return commitBasis{}, nil, false
	}
	for i, w := range pl.writes {
		if w.patch == nil {
			continue
		}
		v, ok := k.values[w.key]
		if !ok {
			return commitBasis{}, nil, false
		}
		if b.cur == nil {
			b.cur = make([]any, len(pl.writes))
		}
		b.cur[i] = v
	}
	return b, groups, true
}

// readBasis reads the basis of a commit of pl: session id's record (see
// record) and, when pl patches entries, their current values, in one
// round trip: they do not depend on each other.
func (s *Service) readBasis(ctx context.Context, id string, pl *plan) (commitBasis, error) {
	var entries []string
	if pl != nil {
		if e, patched := pl.entries(s.keys); patched {
			entries = e
		}
	}
	if entries == nil || !validID(id) {
		read, age, err := s.record(ctx, id)
		return commitBasis{read: read, age: age}, err
	}
	pipe := s.rdb.Pipeline()
	rec := pipe.HGetAll(ctx, s.keys.Record(id))
	mget := pipe.MGet(ctx, entries...)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return commitBasis{}, fmt.Errorf("session: %w", err)
	}
	read, age, err := parseRecord(rec.Val())
	if err != nil {
		return commitBasis{}, err
	}
	cur, err := mget.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		cur = nil // commitQueue reads them itself
	}
	return commitBasis{read: read, age: age, cur: cur}, nil
}

// applyThrough applies queue through seq for a write-through commit.
func (s *Service) applyThrough(ctx context.Context, queue string, seq int64) error {
	if s.Applier == nil {
		return errors.New("no applier runs here")
	}
	return s.Applier.ApplyThrough(ctx, queue, seq)
}

func sortedParts(groups map[int][]string) []int {
	out := make([]int, 0, len(groups))
	for p := range groups {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// maxCASRetries bounds the reruns of a commit whose patched entries
// changed between reading them and the script (a fill, or a concurrent
// commit of a key the session did not read).
const maxCASRetries = 16

// commitQueue runs the commit script until it succeeds, is refused for
// good, or the session's lease was voided. When an older session's X lease
// refuses a key, the session waits for its own X lease there (acquireX,
// which adds the key to read) and runs the script again.
func (s *Service) commitQueue(ctx context.Context, id string, pl *plan, b commitBasis, inPart []string) (int64, error) {
	age, read, first := b.age, b.read, b.cur
	p := pl.part
	changed := map[string]bool{}
	for _, w := range pl.writes {
		changed[w.key] = true
	}
	var readOnly []string
	for _, k := range inPart {
		if !changed[k] {
			readOnly = append(readOnly, k)
		}
	}
	obj, err := encodeObject(Object{ID: id, Queue: pl.queue, At: time.Now().UnixMilli(), Statements: pl.stmts, Affects: pl.keys()})
	if err != nil {
		return 0, err
	}
	keys := []string{s.keys.Registry(p), s.keys.Queue(p, pl.queue), s.keys.Counter(p, pl.queue), s.keys.Object(p, id), s.keys.Stats(p)}
	entries, patched := pl.entries(s.keys) // read before each attempt when patched
	for _, w := range pl.writes {
		keys = append(keys, s.keys.Lease(p, w.key), s.keys.Entry(p, w.key), s.keys.Mapping(p, w.key))
	}
	for _, k := range readOnly {
		keys = append(keys, s.keys.Lease(p, k), s.keys.Entry(p, k))
	}
	notes := "" // the record's notes the first attempt checks: see commitBasis
	if b.notes > 0 {
		notes = strconv.FormatInt(b.notes, 10)
	}
	keyAt := func(i int64) string {
		if int(i) <= len(pl.writes) {
			return pl.writes[i-1].key
		}
		return readOnly[int(i)-len(pl.writes)-1]
	}
	deadline := time.Now().Add(s.cfg.LeaseLifetime / 2)
	cas := 0
	for attempt := 1; ; attempt++ {
		cur := make([]any, len(pl.writes))
		switch {
		case patched && attempt == 1 && first != nil:
			cur = first // read with the session's record
		case patched:
			if cur, err = s.rdb.MGet(ctx, entries...).Result(); err != nil && !errors.Is(err, redis.Nil) {
				return 0, fmt.Errorf("session: commit: %w", err)
			}
		}
		args := make([]any, 0, 7+4*len(pl.writes))
		args = append(args, id, pl.queue, obj, len(pl.writes), len(readOnly), age, notes)
		for i, w := range pl.writes {
			r := "0"
			if _, ok := read[w.key]; ok {
				r = "1"
			}
			expected, next := w.compute(cur[i])
			args = append(args, r, expected, next, jitter.TTL(w.ttl).Milliseconds())
		}
		attemptKeys := keys
		if notes != "" {
			attemptKeys = append(keys[:len(keys):len(keys)], s.keys.Record(id))
		}
		v, err := s.runWrite(ctx, commitScript, attemptKeys, args)
		if err != nil {
			return 0, fmt.Errorf("session: commit: %w", err)
		}
		notes = "" // checked once: later attempts add only this commit's own notes (acquireX)
		code, _ := v[0].(int64)
		switch {
		case code > 0:
			return code, nil
		case code == -5:
			return 0, errNotesMoved
		case code == -1:
			i, _ := v[2].(int64)
			return 0, &AbortedError{Reason: ReasonVoided, Key: keyAt(i)}
		case code == -2:
			conflict, _ := v[1].(string)
			i, _ := v[2].(int64)
			if lease.Conflict(conflict) == lease.ExclusiveOnX {
				err := s.acquireX(ctx, id, p, keyAt(i), read)
				if err == nil {
					continue
				}
				if !errors.Is(err, errGolden) {
					return 0, err
				}
				conflict = string(lease.ExclusiveOnGolden)
			}
			s.base.LeaseConflicts.WithLabelValues(conflict).Inc()
			if time.Now().After(deadline) {
				return 0, &AbortedError{Reason: ReasonConflict, Conflict: lease.Conflict(conflict), Key: keyAt(i)}
			}
			if err := sleep(ctx, lease.Backoff(time.Millisecond, s.cfg.LeaseLifetime/8, attempt)); err != nil {
				return 0, err
			}
		case code == -4:
			return 0, ErrUnknownSession // committed by a concurrent commit of the same session
		case code == -3:
			if cas++; cas > maxCASRetries {
				i, _ := v[1].(int64)
				return 0, &AbortedError{Reason: ReasonConflict, Conflict: lease.ExclusiveOnX, Key: keyAt(i)}
			}
		default:
			return 0, fmt.Errorf("session: commit: unknown answer %v", v)
		}
	}
}

// compute returns the entry a write expects ("*": any, "-": absent) and
// the entry it leaves ("-": none), given the current entry (nil: absent).
func (w *write) compute(cur any) (expected, next string) {
	switch {
	case w.set != nil:
		return "*", string(w.set)
	case w.patch == nil:
		return "*", "-"
	}
	text, ok := cur.(string)
	if !ok {
		return "-", "-" // not cached: stays so; the next miss applies the queue
	}
	out, ok := patchEntry(text, *w.patch)
	if !ok {
		return text, "-" // the operators do not fit the cached value: drop it
	}
	return text, out
}

// patchEntry applies a patch to a cached JSON object, keeping its fields
// in their order (new ones follow, sorted). It reports false when the
// entry is not an object or the operators do not fit it.
func patchEntry(text string, c change.Change) (string, bool) {
	out, keys, ok := patchedFields(text, c)
	if !ok {
		return "", false
	}
	b := make([]byte, 0, len(text)+64)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.String(b, k)
		b = append(b, ':')
		v := out[k]
		if bytes.ContainsAny(v, " \t\r\n") {
			// A value the patch wrote (the entry's own are compact):
			// compacted, or as it is if it is not JSON.
			var cv bytes.Buffer
			if json.Compact(&cv, v) == nil {
				v = cv.Bytes()
			}
		}
		b = append(b, v...)
	}
	b = append(b, '}')
	return string(b), true
}

// patchedFields applies a patch to a cached JSON object and returns its
// fields and the order patchEntry writes them in: the entry's, then the
// new ones sorted.
func patchedFields(text string, c change.Change) (out change.Doc, keys []string, ok bool) {
	doc, order, ok := splitObject(text)
	if !ok {
		if doc, order, ok = decodeEntry(text); !ok {
			return nil, nil, false
		}
	}
	out, err := change.Apply(doc, c)
	if err != nil {
		return nil, nil, false
	}
	seen := make(map[string]bool, len(out))
	keys = make([]string, 0, len(out))
	for _, k := range order {
		if _, ok := out[k]; ok && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	n := len(keys)
	for k := range out {
		if !seen[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys[n:])
	return out, keys, true
}

// decodeEntry reads a cached entry's fields, in order, with encoding/json
// (an entry with spaces, which splitObject does not read).
func decodeEntry(text string) (change.Doc, []string, bool) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, false
	}
	doc := change.Doc{}
	var order []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		if _, dup := doc[k]; !dup {
			order = append(order, k)
		}
		doc[k] = v
	}
	return doc, order, true
}
