package bgt

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/internal/testenv"
)

// batchLog is a store that records the documents of each Apply and, on
// the first Apply of each document, buffers a new write of it while the
// batch is in the store.
type batchLog struct {
	store.Store
	during func(ids []string) // called inside Apply, before the store's

	mu      sync.Mutex
	batches [][]string
	seen    map[string]bool
}

func (s *batchLog) Apply(ctx context.Context, writes []store.Write) ([]store.Result, error) {
	ids := make([]string, len(writes))
	var fresh []string
	s.mu.Lock()
	for i, w := range writes {
		ids[i] = w.ID
		if !s.seen[w.ID] {
			s.seen[w.ID] = true
			fresh = append(fresh, w.ID)
		}
	}
	s.batches = append(s.batches, ids)
	s.mu.Unlock()
	s.during(fresh)
	return s.Store.Apply(ctx, writes)
}

// A round applies a backlog in batches back to back, reading the next one
// while the store holds the current: every batch is at most BatchSize
// documents, never holds a document of the batch before it (whose changes
// are still buffered: that would apply them twice, or out of order), and
// the writes buffered while a document's batch was in the store are
// applied after it, in order.
func TestApplyRoundPipelines(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	part := w.buf.Partition(w.coll, "0")
	var ids []string
	for i := 0; len(ids) < 5*16; i++ {
		if id := strconv.Itoa(i); w.buf.Partition(w.coll, id) == part {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		w.put(t, id, 1)
	}
	tbl, err := w.st.Describe(ctx, w.table, "id")
	if err != nil {
		t.Fatal(err)
	}
	var putErr error // the first of the writes during the batches
	log := &batchLog{Store: w.st, seen: map[string]bool{}}
	log.during = func(fresh []string) {
		for _, id := range fresh {
			c, err := change.ParsePut(tbl.Schema, id, []byte(`{"n":2}`))
			if err == nil {
				_, _, err = w.buf.Write(ctx, w.coll, id, c, tbl.Schema, buffer.WriteOptions{TTL: time.Minute})
			}
			if err != nil && putErr == nil {
				putErr = err
			}
		}
	}
	m := metrics.New(prometheus.NewRegistry())
	app := New(Config{InstanceID: "t", Workers: 1, BatchSize: 16, MaxPerDoc: 4},
		w.buf, map[string]*Collection{w.coll: {Name: w.coll, StoreName: "pg", Store: log, Table: tbl}},
		m, slog.New(slog.DiscardHandler))

	applied, full, err := app.ApplyRound(ctx, []int{part})
	if err != nil || putErr != nil {
		t.Fatal(err, putErr)
	}
	// 80 documents, then the 80 written again during their batches: ten
	// batches of 16, eight of them in this round.
	if len(log.batches) != maxPipelined || applied != maxPipelined*16 || !full {
		t.Fatalf("one round: %d batches, %d changes applied, full %v; want %d, %d, true", len(log.batches), applied, full, maxPipelined, maxPipelined*16)
	}
	for {
		n, full, err := app.ApplyRound(ctx, []int{part})
		if err != nil {
			t.Fatal(err)
		}
		if applied += n; !full {
			break
		}
	}
	if want := 2 * len(ids); applied != want {
		t.Fatalf("applied %d changes, want %d", applied, want)
	}
	for i, b := range log.batches {
		if len(b) > 16 {
			t.Fatalf("batch %d has %d documents", i, len(b))
		}
		if i == 0 {
			continue
		}
		prev := map[string]bool{}
		for _, id := range log.batches[i-1] {
			prev[id] = true
		}
		for _, id := range b {
			if prev[id] {
				t.Fatalf("batch %d holds document %s of the batch before it: %v, %v", i, id, log.batches[i-1], b)
			}
		}
	}
	if n := testutil.ToFloat64(m.DuplicatesSkipped); n != 0 {
		t.Fatalf("%v changes applied twice", n)
	}
	for _, id := range ids {
		got, _, err := w.st.Read(ctx, tbl, w.coll, id, w.buf.Partition(w.coll, id))
		if err != nil || string(got["n"]) != "2" {
			t.Fatalf("row %s: %s, %v; want n 2", id, got, err)
		}
	}
}

// cutLog is a batchLog whose store takes cuts (store.Planner): a round
// reads its batches as cuts, and applies them so.
type cutLog struct {
	*batchLog
	cuts int // the batches applied as cuts
}

func (s *cutLog) ApplyPlanned(ctx context.Context, p *store.Planned) ([]store.Result, error) {
	s.mu.Lock()
	s.batches = append(s.batches, nil)
	s.cuts++
	s.mu.Unlock()
	s.during(nil)
	return s.Store.(store.Planner).ApplyPlanned(ctx, p)
}

// A round of cuts applies a backlog of increments while more are buffered
// during each batch, of the documents in the store among others: a batch
// then holds the changes of documents of the batch in the store that are
// past its cut, and every increment must count once.
func TestApplyRoundCuts(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	tbl, err := w.st.Describe(ctx, w.table, "id")
	if err != nil {
		t.Fatal(err)
	}
	part := w.buf.Partition(w.coll, "0")
	var ids []string
	for i := 0; len(ids) < 40; i++ {
		if id := strconv.Itoa(i); w.buf.Partition(w.coll, id) == part {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		w.put(t, id, 0)
	}
	inc := func(id string) error {
		c, err := change.ParsePatch(tbl.Schema, []byte(`{"$inc":{"n":1}}`))
		if err == nil {
			_, _, err = w.buf.Write(ctx, w.coll, id, c, tbl.Schema, buffer.WriteOptions{TTL: time.Minute})
		}
		return err
	}
	want := map[string]int{}
	var incErr error
	log := &cutLog{batchLog: &batchLog{Store: w.st, seen: map[string]bool{}}}
	k := 0
	log.during = func([]string) {
		// Three increments per batch of the first twelve, spread over the
		// documents, those of the batch in the store included.
		if k >= 12*3*7 {
			return
		}
		for range 3 {
			id := ids[k%len(ids)]
			k += 7
			if err := inc(id); err != nil && incErr == nil {
				incErr = err
			}
			want[id]++
		}
	}
	for _, id := range ids[:10] {
		for range 3 {
			if err := inc(id); err != nil {
				t.Fatal(err)
			}
			want[id]++
		}
	}
	m := metrics.New(prometheus.NewRegistry())
	app := New(Config{InstanceID: "t", Workers: 1, BatchSize: 8, MaxPerDoc: 2},
		w.buf, map[string]*Collection{w.coll: {Name: w.coll, StoreName: "pg", Store: log, Table: tbl}},
		m, slog.New(slog.DiscardHandler))
	for range 100 {
		n, _, err := app.ApplyRound(ctx, []int{part})
		if err != nil || incErr != nil {
			t.Fatal(err, incErr)
		}
		if n == 0 {
			break
		}
	}
	t.Logf("%d batches applied as cuts", log.cuts)
	if log.cuts < 12 {
		t.Fatalf("%d batches applied as cuts; want the 40 documents' five and more", log.cuts)
	}
	for _, id := range ids {
		got, _, err := w.st.Read(ctx, tbl, w.coll, id, part)
		if err != nil || string(got["n"]) != strconv.Itoa(want[id]) {
			t.Fatalf("row %s: %s, %v; want n %d", id, got, err, want[id])
		}
	}
	st, err := w.buf.Stats(ctx)
	if err != nil || st.PendingChanges != 0 {
		t.Fatalf("%+v, %v; want nothing pending", st, err)
	}
	var floors int
	if err := queryInt(ctx, testenv.PostgresDSN(t), "SELECT count(*) FROM "+store.FloorsTable+" WHERE collection = '"+w.coll+"' AND seq > 0", &floors); err != nil || floors != 1 {
		t.Fatalf("%d floors moved, %v; want the partition's", floors, err)
	}
	if recs := w.records(t); len(recs) != 0 {
		t.Fatalf("records %v; cuts write none", recs)
	}
}

// pipelineWorld buffers n documents of one partition in w and returns
// their ids, the partition, and an applier whose store is st over w's.
func pipelineWorld(t *testing.T, w *world, n int, st func(store.Store) store.Store) ([]string, int, *Applier) {
	t.Helper()
	part := w.buf.Partition(w.coll, "0")
	var ids []string
	for i := 0; len(ids) < n; i++ {
		if id := strconv.Itoa(i); w.buf.Partition(w.coll, id) == part {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		w.put(t, id, 1)
	}
	tbl, err := w.st.Describe(context.Background(), w.table, "id")
	if err != nil {
		t.Fatal(err)
	}
	app := New(Config{InstanceID: "t", Workers: 1, BatchSize: 16},
		w.buf, map[string]*Collection{w.coll: {Name: w.coll, StoreName: "pg", Store: st(w.st), Table: tbl}},
		metrics.New(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	return ids, part, app
}

// A round starts another batch only if its deadline leaves twice the last
// batch's time: a slow store makes it stop early, with more pending
// (full), instead of running out of time in a batch that then fails.
func TestApplyRoundStopsBeforeItsDeadline(t *testing.T) {
	w := newWorld(t)
	var log *batchLog
	_, part, app := pipelineWorld(t, w, 4*16, func(st store.Store) store.Store {
		log = &batchLog{Store: st, seen: map[string]bool{}, during: func([]string) { time.Sleep(200 * time.Millisecond) }}
		return log
	})
	// After the first batch, at most 300 ms are left: less than twice its
	// 200 ms.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	applied, full, err := app.ApplyRound(ctx, []int{part})
	if err != nil || applied != 16 || !full || len(log.batches) != 1 {
		t.Fatalf("round with 500 ms and batches of 200 ms: %d applied in %d batches, full %v, %v; want one batch, full, no error", applied, len(log.batches), full, err)
	}
}

// A write-through waiting for a partition's lock (ApplyDoc) makes a round
// in progress stop after its current batch instead of draining the
// backlog first.
func TestApplyRoundYieldsToApplyDoc(t *testing.T) {
	w := newWorld(t)
	started := make(chan struct{}, 16)
	var log *batchLog
	ids, part, app := pipelineWorld(t, w, 8*16, func(st store.Store) store.Store {
		log = &batchLog{Store: st, seen: map[string]bool{}, during: func([]string) {
			started <- struct{}{}
			time.Sleep(50 * time.Millisecond)
		}}
		return log
	})
	ctx := context.Background()
	last := ids[len(ids)-1]
	seq := w.put(t, last, 2)
	type result struct {
		applied int
		err     error
	}
	done := make(chan result, 1)
	go func() {
		n, _, err := app.ApplyRound(ctx, []int{part})
		done <- result{n, err}
	}()
	<-started // the first batch is in the store for 50 ms
	if err := app.ApplyDoc(ctx, w.coll, last, seq); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.applied > 2*16 {
		t.Fatalf("the round applied %d changes (%v) while a write-through waited; want at most two batches", r.applied, r.err)
	}
}
