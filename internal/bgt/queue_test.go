package bgt

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/session"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/internal/testenv"
)

// queueWorld is a queue applier over one table of one SQL database, with
// real Redis, and a session service to commit into its queues.
type queueWorld struct {
	driver string
	db     *sql.DB
	st     store.SessionStore
	table  string
	family string
	rdb    *redis.Client
	svc    *session.Service
	q      *session.Queues
	app    *QueueApplier
	m      *metrics.Sessions
}

func newQueueWorld(t *testing.T, driver string, batch int, tune ...func(*QueueConfig)) *queueWorld {
	t.Helper()
	ctx := context.Background()
	dsn, sqlDriver := testenv.PostgresDSN(t), "pgx"
	if driver == "mysql" {
		dsn, sqlDriver = testenv.MySQLDSN(t), "mysql"
	}
	raw, err := store.Open(ctx, driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := store.Sessions(raw)
	db, err := sql.Open(sqlDriver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	w := &queueWorld{driver: driver, db: db, st: st, table: testenv.UniqueName(t, "qt"), family: testenv.UniqueName(t, "f")}
	w.exec(t, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, v bigint NOT NULL CHECK (v >= 0))", w.table))
	w.exec(t, fmt.Sprintf("INSERT INTO %s (id, v) VALUES (1, 0), (2, 0)", w.table))
	w.rdb = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	prefix := testenv.UniqueName(t, "qt")
	t.Cleanup(func() {
		iter := w.rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			w.rdb.Del(ctx, iter.Val())
		}
		w.rdb.Close()
		_, _ = db.Exec("DROP TABLE " + w.table)
		_, _ = db.Exec("DELETE FROM writeback_applied_sessions WHERE queue LIKE '" + w.family + "/%'")
		db.Close()
		raw.Close()
	})
	fams := map[string]*session.Family{w.family: {Name: w.family, StoreName: "db", Store: st, Tables: []string{w.table}}}
	w.m = metrics.NewSessions(prometheus.NewRegistry())
	log := slog.New(slog.DiscardHandler)
	w.svc = session.New(w.rdb, session.Config{Prefix: prefix, Partitions: 4, LeaseLifetime: time.Second}, fams, nil, w.m, metrics.New(nil), log)
	w.q = session.NewQueues(w.rdb, w.svc.Keys())
	cfg := QueueConfig{InstanceID: "t", Workers: 2, BatchSize: batch, OwnerLease: time.Second, PollInterval: 10 * time.Millisecond}
	for _, f := range tune {
		f(&cfg)
	}
	w.app = NewQueueApplier(cfg, w.q, buffer.New(w.rdb, prefix, 4, time.Second), fams, w.m, log)
	if err := w.app.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	w.svc.Applier = w.app
	return w
}

func (w *queueWorld) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := w.db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (w *queueWorld) ph(i int) string {
	if w.driver == "postgres" {
		return fmt.Sprintf("$%d", i)
	}
	return "?"
}

// commit commits a session of queue "<family>/<q>" that sets row id's v.
func (w *queueWorld) commit(t *testing.T, q string, id int, v int64) session.CommitResult {
	t.Helper()
	ctx := context.Background()
	sid, err := w.svc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.svc.Commit(ctx, sid, session.CommitRequest{
		Queue: w.family + "/" + q,
		Statements: []store.Statement{{
			SQL:  fmt.Sprintf("UPDATE %s SET v = %s WHERE id = %s", w.table, w.ph(1), w.ph(2)),
			Args: []json.RawMessage{json.RawMessage(fmt.Sprint(v)), json.RawMessage(fmt.Sprint(id))},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (w *queueWorld) value(t *testing.T, id int) int64 {
	t.Helper()
	var v int64
	if err := w.db.QueryRow(fmt.Sprintf("SELECT v FROM %s WHERE id = %d", w.table, id)).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func (w *queueWorld) appliedRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := w.db.QueryRow("SELECT count(*) FROM writeback_applied_sessions WHERE queue LIKE '" + w.family + "/%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func eachSessionStore(t *testing.T, f func(t *testing.T, driver string)) {
	for _, d := range []string{"postgres", "mysql"} {
		t.Run(d, func(t *testing.T) { f(t, d) })
	}
}

// Sessions of one queue are applied in commit order across batches; an
// absolute SET makes any reordering visible.
func TestQueueAppliesInOrder(t *testing.T) {
	eachSessionStore(t, func(t *testing.T, driver string) {
		w := newQueueWorld(t, driver, 2)
		for v := int64(1); v <= 7; v++ {
			if res := w.commit(t, "a", 1, v); res.Seq != v {
				t.Fatalf("commit %d got seq %d", v, res.Seq)
			}
		}
		w.commit(t, "b", 2, 9)
		// A miss's prefix: through seq 3 of queue a only.
		if err := w.app.ApplyThrough(context.Background(), w.family+"/a", 3); err != nil {
			t.Fatal(err)
		}
		if v := w.value(t, 1); v != 3 {
			t.Errorf("after ApplyThrough(3): v = %d, want 3", v)
		}
		res, err := w.app.Flush(context.Background())
		if err != nil || !res.Drained || res.Pending != 0 {
			t.Fatalf("flush: %+v %v", res, err)
		}
		if v := w.value(t, 1); v != 7 {
			t.Errorf("v = %d, want 7 (the last session of the queue)", v)
		}
		if v := w.value(t, 2); v != 9 {
			t.Errorf("queue b: v = %d, want 9", v)
		}
	})
}

// A batch of sessions too slow for the batch timeout is retried smaller
// until it fits, instead of timing out forever, and the queue is still
// applied in order, exactly once.
func TestQueueShrinksAfterTimeout(t *testing.T) {
	w := newQueueWorld(t, "postgres", 64, func(c *QueueConfig) {
		c.BatchTimeout, c.RetryBackoff = 300*time.Millisecond, 10*time.Millisecond
	})
	// 50 ms per row written: a batch of 64 sessions takes 3.2 s, one of 4
	// fits in the timeout.
	fn := w.table + "_slow"
	w.exec(t, "CREATE FUNCTION "+fn+"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.05); RETURN NEW; END $$")
	t.Cleanup(func() { _, _ = w.db.Exec("DROP FUNCTION IF EXISTS " + fn + "() CASCADE") })
	w.exec(t, "CREATE TRIGGER "+fn+" BEFORE UPDATE ON "+w.table+" FOR EACH ROW EXECUTE FUNCTION "+fn+"()")
	for v := int64(1); v <= 64; v++ {
		w.commit(t, "a", 1, v)
	}
	runUntilApplied(t, w.app.Run, func(ctx context.Context) (int64, error) {
		st, err := w.q.Stats(ctx)
		return st.PendingSessions, err
	}, "sessions still pending after 30 s: batches that time out are retried at the same size")
	if v := w.value(t, 1); v != 64 {
		t.Errorf("v = %d, want 64 (the last session of the queue)", v)
	}
	if n := w.appliedRows(t); n != 64 {
		t.Errorf("%d applied records, want one per session (64)", n)
	}
	// A batch whose timeout strikes while PostgreSQL commits it may
	// commit all the same; its retry then skips those sessions as
	// duplicates (seen on a loaded machine). The applied records above
	// are what proves exactly-once; skips only say that it held.
	t.Logf("%v duplicates skipped", testutil.ToFloat64(w.m.DuplicatesSkipped))
	w.app.mu.Lock()
	s, ok := w.app.shrunk.m[w.family+"/a"]
	w.app.mu.Unlock()
	if !ok || s.div < 2 || s.failed < 1 {
		t.Errorf("batches of the queue: %+v, %v; want them shrunk after a timeout", s, ok)
	}
	timeouts, shrinks := testutil.ToFloat64(w.m.BatchTimeouts), testutil.ToFloat64(w.m.BatchShrinks)
	if timeouts < 1 || shrinks < 1 || shrinks > timeouts {
		t.Errorf("writeback_session_apply_batch_timeouts_total %v, writeback_session_apply_batch_shrinks_total %v; want at least one of each, and no more shrinks than timeouts", timeouts, shrinks)
	}
}

// A session the store rejects stops its queue at it; ApplyThrough says so.
func TestQueueStopsAtRejectedSession(t *testing.T) {
	eachSessionStore(t, func(t *testing.T, driver string) {
		w := newQueueWorld(t, driver, 8)
		w.commit(t, "a", 1, 5)
		bad := w.commit(t, "a", 1, -1) // violates the check
		w.commit(t, "a", 1, 6)
		w.commit(t, "b", 2, 4)
		res, err := w.app.Flush(context.Background())
		if err != nil || res.Stopped != 1 || res.Pending != 2 {
			t.Fatalf("flush: %+v %v", res, err)
		}
		if v := w.value(t, 1); v != 5 {
			t.Errorf("v = %d, want 5: the session before the rejected one is applied", v)
		}
		if v := w.value(t, 2); v != 4 {
			t.Errorf("queue b: v = %d, want 4", v)
		}
		var qe *session.QueueStoppedError
		if err := w.app.ApplyThrough(context.Background(), w.family+"/a", bad.Seq+1); !errors.As(err, &qe) {
			t.Errorf("ApplyThrough past the dead letter: %v, want QueueStoppedError", err)
		}
		dls, err := w.q.DeadLetters(context.Background(), 10)
		if err != nil || len(dls) != 1 || dls[0].Seq != bad.Seq {
			t.Fatalf("dead letters %+v %v", dls, err)
		}
		if ok, err := w.q.Drop(context.Background(), w.family+"/a"); err != nil || !ok {
			t.Fatalf("drop: %v %v", ok, err)
		}
		if res, err := w.app.Flush(context.Background()); err != nil || res.Stopped != 0 || res.Pending != 0 {
			t.Fatalf("flush after drop: %+v %v", res, err)
		}
		if v := w.value(t, 1); v != 6 {
			t.Errorf("v = %d, want 6", v)
		}
	})
}

// The short version of acceptance 5: applied records are deleted after
// two compaction rounds that both find their session gone from Redis, and
// kept while it is there (a crash between the store commit and the pop).
func TestCompactAppliedSessions(t *testing.T) {
	eachSessionStore(t, func(t *testing.T, driver string) {
		w := newQueueWorld(t, driver, 64)
		ctx := context.Background()
		for v := int64(1); v <= 20; v++ {
			w.commit(t, "a", 1, v)
		}
		if _, err := w.app.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		// One more committed and applied to the store, not popped: as if
		// the applier died between the two.
		w.commit(t, "a", 1, 21)
		head, err := w.q.Head(ctx, w.family+"/a", 10, 0)
		if err != nil || len(head) != 1 {
			t.Fatalf("head %v %v", head, err)
		}
		if _, err := w.st.ApplySessions(ctx, []store.Session{{ID: head[0].Object.ID, Queue: w.family + "/a", Seq: head[0].Seq, Statements: head[0].Object.Statements}}); err != nil {
			t.Fatal(err)
		}
		if n := w.appliedRows(t); n != 21 {
			t.Fatalf("%d applied records, want 21", n)
		}
		if n := w.app.CompactApplied(ctx); n != 0 {
			t.Errorf("round 1 deleted %d; a record goes only at its second round", n)
		}
		if n := w.app.CompactApplied(ctx); n != 20 {
			t.Errorf("round 2 deleted %d, want the 20 popped sessions' records", n)
		}
		if n := w.appliedRows(t); n != 1 {
			t.Errorf("%d applied records left, want the unpopped session's", n)
		}
		// The replay skips it, then pops it; two rounds later its record goes.
		if _, err := w.app.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := testutil.ToFloat64(w.m.DuplicatesSkipped); got != 1 {
			t.Errorf("duplicates skipped %v, want 1", got)
		}
		if v := w.value(t, 1); v != 21 {
			t.Errorf("v = %d, want 21", v)
		}
		w.app.CompactApplied(ctx)
		w.app.CompactApplied(ctx)
		if n := w.appliedRows(t); n != 0 {
			t.Errorf("%d applied records left, want 0", n)
		}
		if got := testutil.ToFloat64(w.m.Compacted); got != 21 {
			t.Errorf("compacted %v, want 21", got)
		}
	})
}

// racingStore is the queue family's real store, except that its first
// lose batches are applied as another member's applier would apply them,
// and this applier is told it lost the race (store.ErrConcurrentApply).
type racingStore struct {
	store.SessionStore
	lose  int
	calls int
}

func (s *racingStore) ApplySessions(ctx context.Context, sessions []store.Session) ([]bool, error) {
	s.calls++
	if s.lose == 0 {
		return s.SessionStore.ApplySessions(ctx, sessions)
	}
	s.lose--
	if _, err := s.SessionStore.ApplySessions(ctx, sessions); err != nil {
		return nil, err
	}
	return nil, &store.Error{Err: store.ErrConcurrentApply}
}

// A lost race with another applier is progress, not a failure: a miss's
// ApplyThrough reads the queue again at once however many races it loses
// in a row (more than the failures it rides out), and the background
// applier neither backs the queue off nor counts a failure. Each session
// is still applied once.
func TestQueueLostRaceIsNotAFailure(t *testing.T) {
	eachSessionStore(t, func(t *testing.T, driver string) {
		w := newQueueWorld(t, driver, 1)
		fam := w.svc.Families()[w.family]
		rs := &racingStore{SessionStore: fam.Store, lose: applyThroughAttempts + 2}
		fam.Store = rs
		for v := int64(1); v <= 3; v++ {
			w.commit(t, "a", 1, v)
		}
		if err := w.app.ApplyThrough(context.Background(), w.family+"/a", 3); err != nil {
			t.Fatalf("ApplyThrough after %d lost races: %v", applyThroughAttempts+2, err)
		}
		if v := w.value(t, 1); v != 3 {
			t.Errorf("v = %d, want 3", v)
		}
		if n := w.appliedRows(t); n != 3 {
			t.Errorf("%d applied records, want 3 (each session once)", n)
		}

		queue := w.family + "/b"
		w.commit(t, "b", 2, 5)
		rs.lose = 1
		_, _, err := w.app.applyQueue(context.Background(), queue, 0)
		if !store.IsConcurrentApply(err) {
			t.Fatalf("applying queue b: %v, want the lost race", err)
		}
		w.app.noteResult(queue, err)
		if n := w.app.failed([]string{queue}); n != 0 {
			t.Errorf("a lost race counted as %d failures", n)
		}
		if err := w.app.ApplyThrough(context.Background(), queue, 1); err != nil {
			t.Fatal(err)
		}
		if v := w.value(t, 2); v != 5 {
			t.Errorf("queue b: v = %d, want 5", v)
		}
	})
}

// recordingStore calls during (when set) inside each ApplySessions, before
// the store's, and records each batch's sessions.
type recordingStore struct {
	store.SessionStore
	during func()

	mu      sync.Mutex
	batches [][]store.Session
	at      []time.Time
}

func (s *recordingStore) ApplySessions(ctx context.Context, sessions []store.Session) ([]bool, error) {
	s.mu.Lock()
	s.batches = append(s.batches, sessions)
	s.at = append(s.at, time.Now())
	during := s.during
	s.during = nil
	s.mu.Unlock()
	if during != nil {
		during()
	}
	return s.SessionStore.ApplySessions(ctx, sessions)
}

// A serial family's batches name the family's lock (store.Session.Lock:
// the store applies them one at a time); other families' name none.
func TestQueueSerialFamilyTakesItsLock(t *testing.T) {
	eachSessionStore(t, func(t *testing.T, driver string) {
		w := newQueueWorld(t, driver, 4)
		fam := w.svc.Families()[w.family]
		// Prepare creates what a serial family's locks need (MySQL: their
		// table) in the store itself, before it is wrapped.
		fam.Serial = true
		if err := w.app.Prepare(context.Background()); err != nil {
			t.Fatal(err)
		}
		rs := &recordingStore{SessionStore: fam.Store}
		fam.Store = rs
		for _, serial := range []bool{false, true} {
			fam.Serial = serial
			w.commit(t, "a", 1, 1)
			w.commit(t, "b", 2, 1)
			if _, err := w.app.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			want := ""
			if serial {
				want = w.family
			}
			if len(rs.batches) == 0 {
				t.Fatal("no batch was applied")
			}
			for _, b := range rs.batches {
				for _, s := range b {
					if s.Lock != want {
						t.Errorf("serial %v: session %s of %s names lock %q, want %q", serial, s.ID, s.Queue, s.Lock, want)
					}
				}
			}
			rs.batches = nil
		}
	})
}

// A queue applier paces a queue by its batches: after a full batch (a
// backlog) it reads the queue again at once; after one that was not full
// it waits for the next poll, and the sessions committed meanwhile go in
// one batch rather than one batch each as they arrive.
func TestQueuePacesBatches(t *testing.T) {
	eachSessionStore(t, func(t *testing.T, driver string) {
		const poll = 2 * time.Second
		w := newQueueWorld(t, driver, 2, func(c *QueueConfig) { c.PollInterval = poll })
		fam := w.svc.Families()[w.family]
		rs := &recordingStore{SessionStore: fam.Store}
		fam.Store = rs
		for v := int64(1); v <= 5; v++ {
			w.commit(t, "a", 1, v)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = w.app.Run(ctx)
		}()
		defer func() { cancel(); <-done }()
		wait := func(want int64) {
			t.Helper()
			deadline := time.Now().Add(3 * poll)
			for w.value(t, 1) != want {
				if time.Now().After(deadline) {
					t.Fatalf("v = %d after %v, want %d", w.value(t, 1), 3*poll, want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}

		// A backlog of five: batches of 2, 2 and 1, back to back.
		wait(5)
		rs.mu.Lock()
		sizes := batchSizes(rs.batches)
		spread := rs.at[len(rs.at)-1].Sub(rs.at[0])
		rs.batches, rs.at = nil, nil
		rs.mu.Unlock()
		if !slices.Equal(sizes, []int{2, 2, 1}) {
			t.Fatalf("batches of %v, want [2 2 1]", sizes)
		}
		if spread > poll/2 {
			t.Errorf("the backlog's batches spread over %v (poll %v); after a full batch the next comes at once", spread, poll)
		}

		// One session, then three committed while it is in the store:
		// they wait for the next poll (the first batch was not full), then
		// go in batches of 2 and 1, back to back.
		rs.mu.Lock()
		rs.during = func() {
			for v := int64(7); v <= 9; v++ {
				w.commit(t, "a", 1, v)
			}
		}
		rs.mu.Unlock()
		w.commit(t, "a", 1, 6)
		wait(9)
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if got := batchSizes(rs.batches); !slices.Equal(got, []int{1, 2, 1}) {
			t.Fatalf("batches of %v, want [1 2 1]", got)
		}
		if gap := rs.at[1].Sub(rs.at[0]); gap < poll/4 {
			t.Errorf("the sessions committed during a batch that was not full were applied %v after it; want them gathered until the next poll (%v)", gap, poll)
		}
		if gap := rs.at[2].Sub(rs.at[1]); gap > poll/2 {
			t.Errorf("the batch after a full one came %v later (poll %v); want it at once", gap, poll)
		}
	})
}

func batchSizes(batches [][]store.Session) []int {
	out := make([]int, len(batches))
	for i, b := range batches {
		out[i] = len(b)
	}
	return out
}

// Head decodes a session's object once: read again (a miss, a retry), the
// sessions come from what it decoded, even with their objects gone from
// Redis; popped, they are read from Redis again. through bounds the head
// before any object is read.
func TestQueueHeadDecodesOnce(t *testing.T) {
	w := newQueueWorld(t, "postgres", 4)
	ctx := context.Background()
	queue := w.family + "/a"
	for v := int64(1); v <= 3; v++ {
		w.commit(t, "a", 1, v)
	}
	head, err := w.q.Head(ctx, queue, 10, 2)
	if err != nil || len(head) != 2 {
		t.Fatalf("Head through 2: %d sessions, %v; want 2", len(head), err)
	}
	p := w.q.Keys().Partition(queue)
	for _, pd := range head {
		if err := w.rdb.Rename(ctx, w.q.Keys().Object(p, pd.Object.ID), w.q.Keys().Object(p, pd.Object.ID)+":aside").Err(); err != nil {
			t.Fatal(err)
		}
	}
	again, err := w.q.Head(ctx, queue, 10, 0)
	if err != nil || len(again) != 3 {
		t.Fatalf("Head: %d sessions, %v; want 3", len(again), err)
	}
	for i, pd := range again[:2] {
		if pd.Missing || len(pd.Object.Statements) != 1 || pd.Object.ID != head[i].Object.ID {
			t.Errorf("session %d read again: missing %v, %d statements; want the object decoded before", i, pd.Missing, len(pd.Object.Statements))
		}
	}
	if again[2].Missing || len(again[2].Object.Statements) != 1 {
		t.Errorf("the third session (beyond the first Head's through): missing %v", again[2].Missing)
	}
	for _, pd := range head {
		if err := w.rdb.Rename(ctx, w.q.Keys().Object(p, pd.Object.ID)+":aside", w.q.Keys().Object(p, pd.Object.ID)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.q.Pop(ctx, queue, again[:1]); err != nil {
		t.Fatal(err)
	}
	// A popped session is forgotten: put back into the queue without its
	// object, it reads as missing.
	if err := w.rdb.LPush(ctx, w.q.Keys().Queue(p, queue), again[0].Entry).Err(); err != nil {
		t.Fatal(err)
	}
	back, err := w.q.Head(ctx, queue, 1, 0)
	if err != nil || len(back) != 1 || !back[0].Missing {
		t.Fatalf("a popped session pushed back without its object: %+v, %v; want it missing", back, err)
	}
}
