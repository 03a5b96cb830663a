package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/lease"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/internal/testenv"
	"github.com/writeback/writeback/mappings"
)

// fakeStore is a SessionStore that only has a dialect: the service never
// runs statements itself.
type fakeStore struct{}

func (fakeStore) Dialect() string                         { return "postgres" }
func (fakeStore) PrepareSessions(context.Context) error   { return nil }
func (fakeStore) CheckRole(context.Context, string) error { return nil }
func (fakeStore) ApplySessions(context.Context, []store.Session) ([]bool, error) {
	return nil, errors.New("not here")
}
func (fakeStore) QueryJSON(context.Context, string, ...any) ([]json.RawMessage, error) {
	return nil, nil
}
func (fakeStore) ListAppliedSessions(context.Context, string, int) ([]store.AppliedSession, error) {
	return nil, nil
}
func (fakeStore) CompactAppliedSessions(context.Context, []string) (int, error) { return 0, nil }
func (fakeStore) CountAppliedSessions(context.Context) (int64, error)           { return 0, nil }
func (fakeStore) Ping(context.Context) error                                    { return nil }

// kv is a mapping plugin for tests: keys "<prefix>:<q>:<name>" of queue
// "f/<q>", values from load.
type kv struct {
	Prefix string        `yaml:"prefix"`
	Fixed  bool          `yaml:"immutable"`
	Life   time.Duration `yaml:"ttl"`
	Stale  time.Duration `yaml:"staleness"`
	load   func(name string) (json.RawMessage, error)
	pat    *mappings.Pattern
}

func (m *kv) Immutable() bool    { return m.Fixed }
func (m *kv) TTL() time.Duration { return m.Life }

func (m *kv) MaxStaleness() time.Duration { return m.Stale }

func (m *kv) Provision(mappings.Context) (err error) {
	m.pat, err = mappings.ParsePattern(m.Prefix + ":{q}:{name}")
	return err
}
func (m *kv) Match(key string) (mappings.Params, bool) { return m.pat.Match(key) }
func (m *kv) Queue(p mappings.Params) string {
	if p["q"] == "none" {
		return ""
	}
	return "f/" + p["q"]
}
func (m *kv) Load(_ context.Context, p mappings.Params) (json.RawMessage, error) {
	return m.load(p["name"])
}

// world is a service over real Redis with the kv mapping.
type world struct {
	svc     *Service
	rdb     *redis.Client
	load    atomic.Pointer[func(string) (json.RawMessage, error)]
	applied atomic.Int64 // the last seq ApplyThrough was asked for
}

func (w *world) ApplyThrough(_ context.Context, _ string, seq int64) error {
	w.applied.Store(seq)
	return nil
}

func newWorld(t *testing.T, tune ...func(*Config)) *world {
	t.Helper()
	w := &world{rdb: redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})}
	prefix := testenv.UniqueName(t, "sess")
	t.Cleanup(func() {
		ctx := context.Background()
		iter := w.rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			w.rdb.Del(ctx, iter.Val())
		}
		w.rdb.Close()
	})
	def := func(string) (json.RawMessage, error) { return json.RawMessage(`{"v":0}`), nil }
	w.load.Store(&def)
	reg := mappings.NewRegistry()
	reg.Register(mappings.Module{ID: "kv", New: func() mappings.Mapping {
		return &kv{load: func(n string) (json.RawMessage, error) { return (*w.load.Load())(n) }}
	}})
	set, err := reg.Load(mappings.Context{Context: context.Background()}, []map[string]any{
		{"plugin": "kv", "prefix": "k"}, {"plugin": "kv", "prefix": "fix", "immutable": true, "ttl": "400ms"},
		{"plugin": "kv", "prefix": "st", "staleness": staleness.String()}})
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*Family{"f": {Name: "f", StoreName: "db", Store: fakeStore{}, Tables: []string{"t"}}}
	cfg := Config{Prefix: prefix, Partitions: 4, LeaseLifetime: time.Second}
	for _, f := range tune {
		f(&cfg)
	}
	w.svc = New(w.rdb, cfg, fams, set,
		metrics.NewSessions(nil), metrics.New(nil), slog.New(slog.DiscardHandler))
	w.svc.Applier = w
	return w
}

// staleness is the bound of the world's lagging mapping, keys
// "st:<q>:<name>" (mappings.Stale).
const staleness = time.Second

// forgotten waits until no deletion of a committed session's record is
// pending (forgetLater), then checks that session id's record is gone.
func (w *world) forgotten(t *testing.T, id string) {
	t.Helper()
	w.deletionsDone(t)
	if n, err := w.rdb.Exists(context.Background(), w.svc.keys.Record(id)).Result(); err != nil || n != 0 {
		t.Fatalf("the committed session's record is still there (%d, %v)", n, err)
	}
}

// deletionsDone waits until no batched deletion of committed sessions'
// records is pending or running (forgetLater).
func (w *world) deletionsDone(t *testing.T) {
	t.Helper()
	waitUntil(t, "the committed sessions' records to go", func() bool {
		w.svc.gone.mu.Lock()
		defer w.svc.gone.mu.Unlock()
		return !w.svc.gone.running
	})
}

// entry is key's cache entry in Redis (queue f/1's partition).
func (w *world) entry(t *testing.T, key string) string {
	t.Helper()
	v, err := w.rdb.Get(context.Background(), w.svc.keys.Entry(w.svc.keys.Partition("f/1"), key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (w *world) commitSet(t *testing.T, key string, v string) CommitResult {
	t.Helper()
	ctx := context.Background()
	id, err := w.svc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q := "f/" + strings.Split(key, ":")[1]
	res, err := w.svc.Commit(ctx, id, CommitRequest{Queue: q, Cache: []CacheChange{{Key: key, Set: json.RawMessage(v)}}})
	if err != nil {
		t.Fatal(err)
	}
	w.forgotten(t, id)
	return res
}

// The race an I lease prevents: a reader misses and loads the old value
// from the store; meanwhile a session commits a new value; the reader's
// fill must not install the old value over it.
func TestFillLosesToConcurrentCommit(t *testing.T) {
	w := newWorld(t)
	loading, release := make(chan struct{}), make(chan struct{})
	slow := func(string) (json.RawMessage, error) {
		close(loading)
		<-release
		return json.RawMessage(`{"v":"old"}`), nil
	}
	w.load.Store(&slow)
	done := make(chan json.RawMessage)
	go func() {
		v, err := w.svc.Read(context.Background(), "", "k:1:a", false)
		if err != nil {
			t.Error(err)
		}
		done <- v
	}()
	<-loading
	res := w.commitSet(t, "k:1:a", `{"v":"new"}`)
	close(release)
	if v := <-done; string(v) != `{"v":"old"}` {
		t.Errorf("the racing read returned %s; it linearizes before the commit and returns what it loaded", v)
	}
	v, err := w.svc.Read(context.Background(), "", "k:1:a", false)
	if err != nil || string(v) != `{"v":"new"}` {
		t.Errorf("after the race the entry is %s (%v); the old value must not have been installed", v, err)
	}
	// A miss applies the queue through the session that changed the key.
	w.rdb.Del(context.Background(), w.svc.Keys().Entry(w.svc.Keys().Partition("f/1"), "k:1:a"))
	def := func(string) (json.RawMessage, error) { return json.RawMessage(`{"v":"store"}`), nil }
	w.load.Store(&def)
	if got := w.readApplied(t, "k:1:a"); got != res.Seq {
		t.Errorf("the miss applied the queue through %d, want %d", got, res.Seq)
	}
}

// readApplied reads key outside a session and returns the last seq the
// service asked its applier to apply a queue through.
func (w *world) readApplied(t *testing.T, key string) int64 {
	t.Helper()
	if _, err := w.svc.Read(context.Background(), "", key, false); err != nil {
		t.Fatal(err)
	}
	return w.applied.Load()
}

// An entry that may lag its queue by up to b: a commit younger than b/2
// is not waited for, and the entry then lives only as long as the rest of
// the bound; a miss after that applies the queue through the commit.
func TestStaleEntryLagsBoundedly(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	before := time.Now()
	res := w.commitSet(t, "k:1:a", `{"v":1}`) // a session of queue f/1, not naming st:1:x
	after := time.Now()
	if got := w.readApplied(t, "st:1:x"); time.Since(before) < staleness/4 && got != 0 {
		t.Errorf("a miss right after the commit applied the queue through %d; a commit younger than half the bound need not be waited for", got)
	}
	entry := w.svc.Keys().Entry(w.svc.Keys().Partition("f/1"), "st:1:x")
	if ttl := w.rdb.PTTL(ctx, entry).Val(); ttl <= 0 || ttl > staleness/2 {
		t.Errorf("the filled entry lives %v; want at most half the bound (%v), since its value may miss the last %v of commits", ttl, staleness/2, staleness/2)
	}
	for time.Since(after) < staleness/2+20*time.Millisecond {
		time.Sleep(10 * time.Millisecond)
	}
	if got := w.readApplied(t, "st:1:x"); got != res.Seq {
		t.Errorf("a miss more than half the bound after the commit applied the queue through %d, want %d (the commit's seq)", got, res.Seq)
	}
	// A value a commit sets is current then, and may be read for the
	// bound from then, no longer.
	w.commitSet(t, "st:1:y", `{"v":3}`)
	if ttl := w.rdb.PTTL(ctx, w.svc.Keys().Entry(w.svc.Keys().Partition("f/1"), "st:1:y")).Val(); ttl <= 0 || ttl > staleness {
		t.Errorf("the entry a commit set lives %v; want at most the bound (%v)", ttl, staleness)
	}
}

// The horizon of a lagging miss: the last session old enough, read from
// the queue's head, and past horizonScan old ones the last session of all.
func TestHorizon(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	r, err := w.svc.resolve("st:1:x")
	if err != nil {
		t.Fatal(err)
	}
	queue := w.svc.keys.Queue(r.part, r.queue)
	push := func(from, n int, at time.Time) {
		for i := from; i < from+n; i++ {
			w.rdb.RPush(ctx, queue, entryText(int64(i), at.UnixMilli(), "s"+strconv.Itoa(i)))
		}
	}
	old, young := time.Now().Add(-time.Minute), time.Now().Add(time.Minute)
	if _, seq, err := w.svc.horizon(ctx, r, time.Second); err != nil || seq != 0 {
		t.Errorf("an empty queue's horizon is %d (%v), want 0", seq, err)
	}
	push(1, 100, old)
	push(101, 5, young)
	if _, seq, err := w.svc.horizon(ctx, r, time.Second); err != nil || seq != 100 {
		t.Errorf("the horizon is %d (%v), want 100, the last session older than the age", seq, err)
	}
	w.rdb.Del(ctx, queue)
	push(1, horizonScan+10, old)
	push(horizonScan+11, 5, young)
	if _, seq, err := w.svc.horizon(ctx, r, time.Second); err != nil || seq != horizonScan+15 {
		t.Errorf("past %d old sessions the horizon is %d (%v), want %d, the last one pending", horizonScan, seq, err, horizonScan+15)
	}
}

func TestReadNotFoundAndNoMapping(t *testing.T) {
	w := newWorld(t)
	none := func(string) (json.RawMessage, error) { return nil, nil }
	w.load.Store(&none)
	if _, err := w.svc.Read(context.Background(), "", "k:1:x", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("no value: %v", err)
	}
	if _, err := w.svc.Read(context.Background(), "", "zzz", false); !errors.Is(err, ErrNoMapping) {
		t.Errorf("no mapping: %v", err)
	}
	if _, err := w.svc.Read(context.Background(), "0123456789abcdef0123456789abcdef", "k:1:x", false); !errors.Is(err, ErrUnknownSession) {
		t.Errorf("unknown session: %v", err)
	}
	var ie *InvalidError
	if _, err := w.svc.Read(context.Background(), "", "k:1:x", true); !errors.As(err, &ie) {
		t.Errorf("lease=x without a session: %v", err)
	}
}

func TestPlanValidation(t *testing.T) {
	w := newWorld(t)
	upd := []store.Statement{{SQL: "UPDATE t SET a = $1", Args: []json.RawMessage{json.RawMessage(`1`)}}}
	cases := []struct {
		name string
		req  CommitRequest
		msg  string
	}{
		{"statements without queue", CommitRequest{Statements: upd}, "must name its queue"},
		{"queue without key", CommitRequest{Queue: "f/", Statements: upd}, "must be <family>/<key>"},
		{"unknown family", CommitRequest{Queue: "g/1", Statements: upd}, `queue family "g" is not configured; use one of: f`},
		{"braces in queue", CommitRequest{Queue: "f/{x}", Statements: upd}, "braces"},
		{"undeclared table", CommitRequest{Queue: "f/1", Statements: []store.Statement{{SQL: "DELETE FROM u"}}}, "statements[0]: table u is not declared"},
		{"invalid argument", CommitRequest{Queue: "f/1", Statements: []store.Statement{{SQL: "UPDATE t SET a = $1", Args: []json.RawMessage{json.RawMessage(`{`)}}}}, "not a JSON value"},
		{"key of another queue", CommitRequest{Queue: "f/1", Affects: []string{"k:2:a"}}, `"k:2:a" belongs to queue "f/2"`},
		{"key of no queue", CommitRequest{Queue: "f/1", Affects: []string{"k:none:a"}}, "depends on no queue"},
		{"unmapped key", CommitRequest{Queue: "f/1", Affects: []string{"x"}}, "no mapping matches"},
		{"two kinds", CommitRequest{Queue: "f/1", Cache: []CacheChange{{Key: "k:1:a", Delete: true, Set: json.RawMessage(`1`)}}}, "exactly one of"},
		{"twice", CommitRequest{Queue: "f/1", Cache: []CacheChange{{Key: "k:1:a", Delete: true}, {Key: "k:1:a", Delete: true}}}, "changed twice"},
		{"bad patch", CommitRequest{Queue: "f/1", Cache: []CacheChange{{Key: "k:1:a", Patch: json.RawMessage(`{"$mul":{"a":1}}`)}}}, "unknown operator"},
		{"control character", CommitRequest{Queue: "f/1", Affects: []string{"k:1:\x01"}}, "control character"},
		{"immutable set", CommitRequest{Queue: "f/1", Cache: []CacheChange{{Key: "fix:1:a", Set: json.RawMessage(`1`)}}}, `"fix:1:a" is an entry of an immutable mapping`},
		{"immutable affected", CommitRequest{Queue: "f/1", Affects: []string{"fix:1:a"}}, "immutable mapping"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.svc.plan(tc.req)
			var ie *InvalidError
			if !errors.As(err, &ie) || !strings.Contains(ie.Msg, tc.msg) {
				t.Errorf("plan: %v, want an InvalidError containing %q", err, tc.msg)
			}
		})
	}
	p, err := w.svc.plan(CommitRequest{Queue: "f/1", Statements: upd,
		Cache: []CacheChange{{Key: "k:1:b", Patch: json.RawMessage(`{"$inc":{"n":1}}`)}}, Affects: []string{"k:1:a", "k:1:b"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.keys(), ","); got != "k:1:a,k:1:b" {
		t.Errorf("written keys %s, want sorted and merged", got)
	}
	if !p.writes[0].del || p.writes[1].patch == nil {
		t.Errorf("writes %+v", p.writes)
	}
}

func TestPatchEntry(t *testing.T) {
	patch := func(body string) change.Change {
		c, err := change.ParsePatch(patchSchema, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cases := []struct {
		entry, patch, want string
		ok                 bool
	}{
		{`{"id":7,"balance":10,"name":"x"}`, `{"$inc":{"balance":-3}}`, `{"id":7,"balance":7,"name":"x"}`, true},
		{`{"b":1,"a":2}`, `{"$set":{"z":true,"c":[1]},"$unset":{"a":""}}`, `{"b":1,"c":[1],"z":true}`, true},
		{`{"a":{"b":[1]}}`, `{"$push":{"a.b":2}}`, `{"a":{"b":[1,2]}}`, true},
		{`{"n":"text"}`, `{"$inc":{"n":1}}`, ``, false},
		{`[1,2]`, `{"$set":{"a":1}}`, ``, false},
		{`{"big":9007199254740993}`, `{"$inc":{"big":1}}`, `{"big":9007199254740994}`, true},
	}
	for _, tc := range cases {
		got, ok := patchEntry(tc.entry, patch(tc.patch))
		if ok != tc.ok || got != tc.want {
			t.Errorf("patchEntry(%s, %s) = %s %v, want %s %v", tc.entry, tc.patch, got, ok, tc.want, tc.ok)
		}
	}
}

func TestEntryText(t *testing.T) {
	e := entryText(12, 1700000000123, "abc")
	seq, ms, id, ok := parseEntry(e)
	if !ok || seq != 12 || ms != 1700000000123 || id != "abc" {
		t.Errorf("parseEntry(%q) = %d %d %q %v", e, seq, ms, id, ok)
	}
	for _, bad := range []string{"", "1|2", "x|2|a", "1|2|"} {
		if _, _, _, ok := parseEntry(bad); ok {
			t.Errorf("parseEntry(%q) accepted", bad)
		}
	}
}

// TestCheckedStatements: a statement text accepted once is not parsed
// again, but only with as many arguments and for the same family; a refused
// text stays refused however often it comes; and the memory of accepted
// texts is bounded.
func TestCheckedStatements(t *testing.T) {
	w := newWorld(t)
	f := w.svc.fams["f"]
	arg := json.RawMessage(`1`)
	ok := store.Statement{SQL: "UPDATE t SET a = $1", Args: []json.RawMessage{arg}}
	for range 3 {
		if err := w.svc.checkStatement(f, 0, ok); err != nil {
			t.Fatalf("an accepted statement, again: %v", err)
		}
	}
	if !w.svc.valid.has(checkedKey{family: "f", sql: ok.SQL, nargs: 1}) {
		t.Fatal("an accepted statement is not remembered")
	}
	// The same text with another number of arguments is checked anew.
	two := store.Statement{SQL: ok.SQL, Args: []json.RawMessage{arg, arg}}
	for range 2 {
		if err := w.svc.checkStatement(f, 0, two); err == nil {
			t.Fatal("a statement with more arguments than placeholders was accepted")
		}
	}
	// Remembering a text does not exempt its arguments.
	bad := store.Statement{SQL: ok.SQL, Args: []json.RawMessage{json.RawMessage(`{`)}}
	if err := w.svc.checkStatement(f, 0, bad); err == nil {
		t.Fatal("an invalid argument of a remembered statement was accepted")
	}
	refused := store.Statement{SQL: "DELETE FROM u"}
	for range 2 {
		if err := w.svc.checkStatement(f, 0, refused); err == nil {
			t.Fatal("a statement on an undeclared table was accepted")
		}
	}
	if w.svc.valid.has(checkedKey{family: "f", sql: refused.SQL}) {
		t.Fatal("a refused statement is remembered")
	}
	// Another family (here: of other tables) checks for itself.
	g := &Family{Name: "g", Store: f.Store, Tables: []string{"u"}}
	if err := w.svc.checkStatement(g, 0, ok); err == nil {
		t.Fatal("a text accepted for one family was accepted for a family without its table")
	}
	var c checked
	for i := range maxChecked + 10 {
		c.add(checkedKey{family: "f", sql: fmt.Sprintf("UPDATE t SET a = %d", i)})
	}
	c.add(checkedKey{family: "f", sql: strings.Repeat(" ", maxCheckedSQL+1)})
	if n := c.n.Load(); n != maxChecked {
		t.Errorf("remembered %d statements, want the bound %d", n, maxChecked)
	}
}

// roundTrips counts the round trips a client makes: a command or a
// pipeline each.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// TestCommitPatchReadsWithRecord: a commit that patches an entry reads the
// session's record and the entry in one round trip (two with the commit
// script; the record's removal follows, batched), and the entry it read is only
// a guess: one that changed before the commit script ran is read again,
// and the patch applies to the value the script finds.
func TestCommitPatchReadsWithRecord(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.commitSet(t, "k:1:a", `{"n":1,"s":"x"}`)
	rt, dels := &roundTrips{}, &delRounds{}
	w.rdb.AddHook(rt)
	w.rdb.AddHook(dels)
	id, err := w.svc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	patch := CommitRequest{Queue: "f/1", Cache: []CacheChange{{Key: "k:1:a", Patch: json.RawMessage(`{"$inc":{"n":1}}`)}}}
	before := rt.n.Load()
	if _, err := w.svc.Commit(ctx, id, patch); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the record's deletion", func() bool { return dels.n.Load() == 1 })
	if n := rt.n.Load() - before; n != 3 {
		t.Errorf("a patching commit made %d round trips, want 3 (record and entry, commit; the record's deletion, after)", n)
	}
	w.forgotten(t, id)
	entry := func() string { return w.entry(t, "k:1:a") }
	if got := entry(); !strings.Contains(got, `"n":2`) {
		t.Fatalf("entry %s after one $inc, want n 2", got)
	}

	// A stale first guess: the script refuses it, the entry is read again.
	pl, err := w.svc.plan(patch)
	if err != nil {
		t.Fatal(err)
	}
	id, err = w.svc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	read, age, err := w.svc.record(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.commitQueue(ctx, id, pl, commitBasis{read: read, age: age, cur: []any{`{"n":1,"s":"x"}`}}, nil); err != nil {
		t.Fatal(err)
	}
	if got := entry(); !strings.Contains(got, `"n":3`) || !strings.Contains(got, `"s":"x"`) {
		t.Errorf("entry %s after a commit that guessed n 1, want n 3 (the $inc on the entry the script found)", got)
	}
}

// TestCommitTwiceQueuesOnce: two commits of one session that both read its
// record before either forgot it (concurrent requests with the same id; a
// session that read nothing under a lease has no lease to lose) queue it
// once: the second finds it committed and answers ErrUnknownSession.
func TestCommitTwiceQueuesOnce(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	id, err := w.svc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := w.svc.plan(CommitRequest{Queue: "f/1",
		Statements: []store.Statement{{SQL: "UPDATE t SET a = $1", Args: []json.RawMessage{json.RawMessage(`1`)}}},
		Affects:    []string{"k:1:a"}})
	if err != nil {
		t.Fatal(err)
	}
	commitTwice := func(what string) {
		t.Helper()
		read, age, err := w.svc.record(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if seq, err := w.svc.commitQueue(ctx, id, pl, commitBasis{read: read, age: age}, nil); err != nil || seq <= 0 {
			t.Fatalf("first commit of %s: seq %d, %v", what, seq, err)
		}
		if _, err := w.svc.commitQueue(ctx, id, pl, commitBasis{read: read, age: age}, nil); !errors.Is(err, ErrUnknownSession) {
			t.Fatalf("second commit of %s: %v, want ErrUnknownSession", what, err)
		}
	}
	commitTwice("the session")
	if n, err := w.rdb.LLen(ctx, w.svc.keys.Queue(pl.part, "f/1")).Result(); err != nil || n != 1 {
		t.Errorf("the queue holds %d sessions (%v), want 1", n, err)
	}

	// A session that read its key under a lease: the first commit
	// released the lease, and the second, which read the record before
	// its deletion, still hears that the session is committed, not that
	// it lost its lease.
	id, _, err = w.svc.BeginRead(ctx, []string{"k:1:a"}, true)
	if err != nil {
		t.Fatal(err)
	}
	commitTwice("the leased session")
}

// delRounds counts the pipelines that delete keys (forgetBatches').
type delRounds struct{ n atomic.Int64 }

func (h *delRounds) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *delRounds) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *delRounds) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "del" {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestCommitsShareRecordDeletions: concurrent commits that leave no lease
// to release delete their records together, fewer round trips than
// commits, and every record goes.
func TestCommitsShareRecordDeletions(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	dels := &delRounds{}
	w.rdb.AddHook(dels)
	const n = 32
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k:1:c%d", i)
			id, _, err := w.svc.BeginRead(ctx, []string{key}, true)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = id
			if _, err := w.svc.Commit(ctx, id, CommitRequest{Queue: "f/1", Cache: []CacheChange{{Key: key, Set: json.RawMessage(`{"v":1}`)}}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		w.forgotten(t, id)
	}
	if got := dels.n.Load(); got == 0 || got >= n {
		t.Errorf("%d commits deleted their records in %d round trips, want fewer (batched)", n, got)
	}
}

// TestCommitFromKnownRecord: the commit of a session whose every note this
// process made, and which read the entry it patches, is one round trip
// (the record's deletion follows, batched). An entry changed behind the
// known value is read again, as a stale guess is. A note made elsewhere (a
// second service on the same Redis: another sidecar) makes the commit
// script refuse what this process knows, changing nothing, and the commit
// then reads the record: the other read's lease, voided meanwhile, aborts
// the session.
func TestCommitFromKnownRecord(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.commitSet(t, "k:1:a", `{"n":1}`)
	rt, dels := &roundTrips{}, &delRounds{}
	w.rdb.AddHook(rt)
	w.rdb.AddHook(dels)
	entry := func() string { return w.entry(t, "k:1:a") }
	inc := CommitRequest{Queue: "f/1", Cache: []CacheChange{{Key: "k:1:a", Patch: json.RawMessage(`{"$inc":{"n":1}}`)}}}

	id, _, _, err := w.svc.BeginReadAll(ctx, Reads{Keys: []string{"k:1:a"}, ForUpdate: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.svc.ReadAll(ctx, id, Reads{Keys: []string{"k:1:c"}}); err != nil { // a second note, seen here
		t.Fatal(err)
	}
	before, delsBefore := rt.n.Load(), dels.n.Load()
	if _, err := w.svc.Commit(ctx, id, inc); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the record's deletion", func() bool { return dels.n.Load() == delsBefore+1 })
	if n := rt.n.Load() - before; n != 2 {
		t.Errorf("a commit from a known record made %d round trips, want 2 (the commit; the record's deletion, after)", n)
	}
	w.forgotten(t, id)
	if got := entry(); got != `{"n":2}` {
		t.Fatalf("entry %s after one $inc, want n 2", got)
	}

	// The entry changed behind the value the session read: the patch
	// applies to the entry the script finds.
	id, _, _, err = w.svc.BeginReadAll(ctx, Reads{Keys: []string{"k:1:a"}, ForUpdate: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.rdb.Set(ctx, w.svc.keys.Entry(w.svc.keys.Partition("f/1"), "k:1:a"), `{"n":5}`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Commit(ctx, id, inc); err != nil {
		t.Fatal(err)
	}
	if got := entry(); got != `{"n":6}` {
		t.Fatalf("entry %s after an $inc of the entry the script found (n 5), want n 6", got)
	}

	// Another service notes a key in the session; a third session's
	// commit of that key voids the lease it took there.
	other := New(w.rdb, w.svc.cfg, w.svc.fams, w.svc.maps, metrics.NewSessions(nil), metrics.New(nil), slog.New(slog.DiscardHandler))
	other.Applier = w
	id, _, _, err = w.svc.BeginReadAll(ctx, Reads{Keys: []string{"k:1:a"}, ForUpdate: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.ReadAll(ctx, id, Reads{Keys: []string{"k:1:b"}}); err != nil {
		t.Fatal(err)
	}
	w.commitSet(t, "k:1:b", `{"v":"b2"}`)
	_, err = w.svc.Commit(ctx, id, inc)
	var ae *AbortedError
	if !errors.As(err, &ae) || ae.Reason != ReasonVoided || ae.Key != "k:1:b" {
		t.Fatalf("commit after another service's read whose lease was voided: %v, want aborted (k:1:b voided)", err)
	}
	if got := entry(); got != `{"n":6}` {
		t.Errorf("entry %s after an aborted commit, want n 6", got)
	}
}

// TestCommitLeavesOthersLeases: a commit deletes the lease records of the
// keys it writes (its X voided everyone else's there) and, on a key it only
// read, removes its own lease and keeps the others', with the record
// expiring no sooner than they do.
func TestCommitLeavesOthersLeases(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.LeaseLifetime = 5 * time.Second })
	ctx := context.Background()
	w.commitSet(t, "k:1:a", `{"v":1}`)
	w.commitSet(t, "k:1:b", `{"v":2}`)
	a, err := w.svc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.svc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ id, key string }{{a, "k:1:a"}, {a, "k:1:b"}, {b, "k:1:b"}} {
		if _, err := w.svc.Read(ctx, r.id, r.key, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.svc.Commit(ctx, a, CommitRequest{Queue: "f/1", Cache: []CacheChange{{Key: "k:1:a", Set: json.RawMessage(`{"v":3}`)}}}); err != nil {
		t.Fatal(err)
	}
	p := w.svc.keys.Partition("f/1")
	key := func(k string) lease.Key {
		return lease.Key{Lease: w.svc.keys.Lease(p, k), Entry: w.svc.keys.Entry(p, k)}
	}
	if n := w.rdb.Exists(ctx, key("k:1:a").Lease).Val(); n != 0 {
		t.Errorf("the written key's lease record is still there: %v", w.rdb.HGetAll(ctx, key("k:1:a").Lease).Val())
	}
	held, err := lease.Held(ctx, w.rdb, key("k:1:b"))
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0].Holder != b {
		t.Fatalf("the read key's record holds %+v, want only session b's lease", held)
	}
	if ttl := w.rdb.PTTL(ctx, key("k:1:b").Lease).Val(); ttl < time.Until(held[0].Expires) {
		t.Errorf("the read key's record expires in %v, before the lease it holds (%v)", ttl, time.Until(held[0].Expires))
	}
	if got := w.entry(t, "k:1:b"); got != `{"v":2}` {
		t.Errorf("the read key's entry is %s, want it untouched", got)
	}
	if _, err := w.svc.Commit(ctx, b, CommitRequest{Queue: "f/1", Cache: []CacheChange{{Key: "k:1:b", Set: json.RawMessage(`{"v":4}`)}}}); err != nil {
		t.Fatalf("session b lost its lease on k:1:b to a commit that only read it: %v", err)
	}
}

// TestReadOnlyCommit: a session that commits nothing ends in one round
// trip when this process saw all its notes — its leases in two partitions
// checked and released; its record is deleted after, batched with other
// commits' — and in two when it did not (the record read first, then the
// leases and the record in one); a note made elsewhere after
// this process's last one is found, and the lease it took released too.
// A session whose S lease a writer voided meanwhile is aborted at its
// commit (ReasonVoided, naming the key), and holds no lease after, in
// either partition, nor a record.
func TestReadOnlyCommit(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	keys := w.svc.Keys()
	q := 2
	for keys.Partition(fmt.Sprintf("f/%d", q)) == keys.Partition("f/1") {
		q++
	}
	a, b, c := "k:1:a", fmt.Sprintf("k:%d:b", q), fmt.Sprintf("k:%d:c", q)
	parts := map[string]string{a: "f/1", b: fmt.Sprintf("f/%d", q), c: fmt.Sprintf("f/%d", q)}
	for _, k := range []string{a, b, c} {
		w.commitSet(t, k, `{"v":"`+k+`"}`)
	}
	holds := func(id string) []string {
		var held []string
		for key, part := range parts {
			h, err := w.rdb.HGetAll(ctx, keys.LeaseKey(keys.Partition(part), key).Lease).Result()
			if err != nil {
				t.Fatal(err)
			}
			if h[id] != "" {
				held = append(held, key+" "+h[id])
			}
		}
		return held
	}
	rt := &roundTrips{}
	w.rdb.AddHook(rt)
	// Redis learns the script first (a NOSCRIPT answer costs a round trip).
	if err := checkReleaseOnce(ctx, w.svc); err != nil {
		t.Fatal(err)
	}
	other := New(w.rdb, w.svc.cfg, w.svc.fams, w.svc.maps, metrics.NewSessions(nil), metrics.New(nil), slog.New(slog.DiscardHandler))
	other.Applier = w
	for _, tc := range []struct {
		name   string
		begin  *Service // the service that reads first
		noteC  bool     // the other service then reads c in the session
		rounds int64
	}{
		{"known here", w.svc, false, 2},                           // the step; the record's deletion, batched after
		{"begun elsewhere", other, false, 2},                      // the record; the step and its deletion
		{"a note elsewhere after this process's", w.svc, true, 3}, // the step, the record, the rest and its deletion
	} {
		id, vals, _, err := tc.begin.BeginReadAll(ctx, Reads{Keys: []string{a, b}})
		if err != nil {
			t.Fatal(err)
		}
		if len(vals) != 2 || string(vals[0]) != `{"v":"`+a+`"}` || string(vals[1]) != `{"v":"`+b+`"}` {
			t.Fatalf("%s: read %s, want both entries", tc.name, vals)
		}
		if tc.noteC {
			if _, _, err := other.ReadAll(ctx, id, Reads{Keys: []string{c}}); err != nil {
				t.Fatal(err)
			}
		}
		if len(holds(id)) == 0 {
			t.Fatalf("%s: the reader holds no lease", tc.name)
		}
		w.deletionsDone(t)
		before := rt.n.Load()
		if _, err := w.svc.Commit(ctx, id, CommitRequest{}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		w.deletionsDone(t)
		if n := rt.n.Load() - before; n != tc.rounds {
			t.Errorf("%s: the read-only commit made %d round trips, want %d", tc.name, n, tc.rounds)
		}
		w.forgotten(t, id)
		if held := holds(id); len(held) > 0 {
			t.Errorf("%s: after the read-only commit the session still holds %v", tc.name, held)
		}
	}

	// A writer voids the reader's S lease on b: the read-only commit
	// aborts, and the reader's lease on a goes too.
	id, _, _, err := w.svc.BeginReadAll(ctx, Reads{Keys: []string{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	w.commitSet(t, b, `{"v":"b2"}`)
	_, err = w.svc.Commit(ctx, id, CommitRequest{})
	var ae *AbortedError
	if !errors.As(err, &ae) || ae.Reason != ReasonVoided || ae.Key != b {
		t.Fatalf("read-only commit after a write voided its lease on %s: %v, want aborted (voided, %s)", b, err, b)
	}
	if held := holds(id); len(held) > 0 {
		t.Errorf("after the aborted read-only commit the session still holds %v", held)
	}
	w.forgotten(t, id)
}

// checkReleaseOnce commits, known and not, sessions that read one key and
// commit nothing: Redis learns both forms of the script.
func checkReleaseOnce(ctx context.Context, svc *Service) error {
	for _, known := range []bool{true, false} {
		id, _, _, err := svc.BeginReadAll(ctx, Reads{Keys: []string{"k:1:z"}})
		if err != nil {
			return err
		}
		if !known {
			svc.known.forget(id)
		}
		if _, err = svc.Commit(ctx, id, CommitRequest{}); err != nil {
			return err
		}
	}
	return nil
}
