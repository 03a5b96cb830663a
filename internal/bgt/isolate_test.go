package bgt

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/testenv"
)

// guard installs a trigger on the world's table that raises errcode for
// a row whose n is 666.
func (w *world) guard(t *testing.T, errcode string) {
	t.Helper()
	ctx := context.Background()
	dsn := testenv.PostgresDSN(t)
	fn := w.table + "_guard"
	for _, q := range []string{
		"CREATE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.n = 666 THEN RAISE EXCEPTION 'poison row %', NEW.id USING ERRCODE = '" + errcode + "'; END IF; RETURN NEW; END $$",
		"CREATE TRIGGER " + fn + " BEFORE INSERT OR UPDATE ON " + w.table + " FOR EACH ROW EXECUTE FUNCTION " + fn + "()",
	} {
		if err := execSQL(ctx, dsn, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { _ = execSQL(ctx, dsn, "DROP FUNCTION IF EXISTS "+fn+"() CASCADE") })
}

// rounds runs n rounds over every partition as a worker would (noting
// their failures), or fewer once nothing is pending.
func (w *world) rounds(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	all := partitions(w.buf.Partitions())
	for range n {
		_, _, err := w.app.ApplyRound(ctx, all)
		w.app.note(all, err)
		counts, cerr := w.buf.PendingCounts(ctx, all, 0)
		if cerr != nil {
			t.Fatal(cerr)
		}
		var pending int64
		for _, c := range counts {
			pending += c
		}
		if pending == 0 {
			return
		}
	}
}

// rows reads id → n from the world's table.
func (w *world) rows(t *testing.T) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rs, err := conn.Query(ctx, "SELECT id, n FROM "+w.table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for rs.Next() {
		var id, n int64
		if err := rs.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[strconv.FormatInt(id, 10)] = n
	}
	return out
}

// A batch that keeps failing with an isolable error (a trigger's RAISE
// EXCEPTION, P0001) is split after MaxRetries failed rounds: the two
// changes that fail alone become dead letters with the store's error, and
// every other document is applied, exactly once. (A poisoned document's
// later change, applied after its dead letter, is e2e's
// TestStuckChangeIsDeadLettered: here consecutive PUTs would compact.)
func TestStuckBatchIsSplit(t *testing.T) {
	w := newWorld(t, func(c *Config) {
		c.Workers, c.BatchSize, c.MaxRetries, c.RetryBackoff = 1, 32, 2, time.Millisecond
	})
	w.guard(t, "P0001")
	bad := map[string]int64{}
	for i := range 20 {
		id := strconv.Itoa(i)
		if i == 7 || i == 13 {
			bad[id] = w.put(t, id, 666)
		} else {
			w.put(t, id, i)
		}
	}
	w.rounds(t, 10)

	rows := w.rows(t)
	for i := range 20 {
		id := strconv.Itoa(i)
		n, ok := rows[id]
		switch {
		case bad[id] > 0 && ok:
			t.Errorf("document %s, whose only change is a dead letter, is in the store: %d", id, n)
		case bad[id] == 0 && n != int64(i):
			t.Errorf("document %s: n = %d (found %v), want %d", id, n, ok, i)
		}
	}
	dls, err := w.buf.DeadLetters(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 2 {
		t.Fatalf("dead letters: %+v, want the two poisoned changes", dls)
	}
	for _, d := range dls {
		if d.Seq != bad[d.ID] || !strings.Contains(d.Error, "P0001") || !strings.Contains(d.Error, "poison row") {
			t.Errorf("dead letter %s seq %d: %q; want seq %d with the store's error", d.ID, d.Seq, d.Error, bad[d.ID])
		}
	}
	m := w.app.m
	if got := testutil.ToFloat64(m.ApplyRetries); got != 2 {
		t.Errorf("apply retries: %v, want MaxRetries (2) before the split", got)
	}
	if got := testutil.ToFloat64(m.BatchSplits); got < 1 {
		t.Errorf("batch splits: %v, want at least one", got)
	}
	if got := testutil.ToFloat64(m.DeadLettered.WithLabelValues(metrics.DeadRetries)); got != 2 {
		t.Errorf("dead letters for retries: %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.DuplicatesSkipped); got != 0 {
		t.Errorf("duplicates skipped: %v; a split applies nothing twice", got)
	}
}

// Errors of the store as a whole (here a trigger raising read-only
// transaction, 25006) and MaxRetries 0 never split a batch nor dead-letter
// anything: the batch is retried with backoff.
func TestStuckBatchNotSplit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		errcode    string
		maxRetries int
	}{
		{"store-wide error", "25006", 2},
		{"maxRetries 0", "P0001", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, func(c *Config) {
				c.Workers, c.BatchSize, c.MaxRetries, c.RetryBackoff = 1, 32, tc.maxRetries, time.Millisecond
			})
			w.guard(t, tc.errcode)
			w.put(t, "1", 666)
			w.put(t, "2", 2)
			w.rounds(t, 8)
			if dls, err := w.buf.DeadLetters(context.Background(), 100); err != nil || len(dls) != 0 {
				t.Errorf("dead letters: %+v %v, want none", dls, err)
			}
			m := w.app.m
			if got := testutil.ToFloat64(m.BatchSplits); got != 0 {
				t.Errorf("batch splits: %v, want none", got)
			}
			if got := testutil.ToFloat64(m.ApplyRetries); got != 8 {
				t.Errorf("apply retries: %v, want every round (8)", got)
			}
			if w.app.cfg.MaxRetries != tc.maxRetries {
				t.Errorf("MaxRetries %d became %d", tc.maxRetries, w.app.cfg.MaxRetries)
			}
		})
	}
}
