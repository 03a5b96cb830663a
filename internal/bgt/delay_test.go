package bgt

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// With ApplyDelay, the workers leave a document pending until its oldest
// buffered write is that old, and the writes it gets meanwhile reach the
// store together: one row write. A flush does not wait.
func TestApplyDelay(t *testing.T) {
	const delay = 600 * time.Millisecond
	w := newWorld(t, func(c *Config) { c.ApplyDelay = delay })
	ctx := context.Background()
	tbl, err := w.st.Describe(ctx, w.table, "id")
	if err != nil {
		t.Fatal(err)
	}
	applied := func(id string) int64 {
		t.Helper()
		_, seq, err := w.st.Read(ctx, tbl, w.coll, id, w.buf.Partition(w.coll, id))
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.app.Run(rctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// Five writes of document 1 within the delay, the first at start.
	start := time.Now()
	var last int64
	for n := range 5 {
		last = w.put(t, "1", n)
		time.Sleep(delay / 10)
	}
	for time.Since(start) < delay*8/10 {
		if seq := applied("1"); seq != 0 {
			t.Fatalf("document 1 applied up to seq %d %s after its first write; the delay is %s", seq, time.Since(start), delay)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for applied("1") != last {
		if time.Since(start) > delay+10*time.Second {
			t.Fatalf("document 1 applied up to seq %d, not its last write's %d, %s after its first write", applied("1"), last, time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// One document, one row write: its five changes in one batch.
	if n := testutil.ToFloat64(w.app.m.AppliedChanges.WithLabelValues(w.coll)); n != 5 {
		t.Errorf("%v changes applied; want 5", n)
	}
	var batches dto.Metric
	if err := w.app.m.ApplyBatchSize.Write(&batches); err != nil {
		t.Fatal(err)
	}
	if n := batches.GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("%d batches applied; want 1", n)
	}
	row, _, err := w.st.Read(ctx, tbl, w.coll, "1", w.buf.Partition(w.coll, "1"))
	if err != nil || string(row["n"]) != "4" {
		t.Fatalf("row %v, %v; want n 4", row, err)
	}

	// A flush applies at once what the workers would leave for the delay.
	seq := w.put(t, "2", 7)
	res, err := w.app.Flush(ctx)
	if err != nil || !res.Drained {
		t.Fatalf("flush: %+v, %v", res, err)
	}
	if got := applied("2"); got != seq {
		t.Fatalf("document 2 applied up to seq %d after a flush; want %d", got, seq)
	}
}
