package document_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writeback/writeback/internal/document"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
)

// A write-through write that the store rejects for good (a CHECK
// constraint) becomes a dead letter, and the copy the writing sidecar's
// near cache installed from it goes too (acknowledge's Revoke): every read
// there afterwards — near-cache hits included, across lease renewals —
// returns the last value the store accepted, never the rejected one.
func TestNearCacheRejectedWriteThrough(t *testing.T) {
	w := newScanWorld(t)
	ctx := context.Background()
	if _, err := w.db.Exec(fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s_s CHECK (s <> 'rejected')", w.coll, w.coll)); err != nil {
		t.Fatal(err)
	}
	sc := w.a
	coll, err := sc.svc.Collection(w.coll)
	if err != nil {
		t.Fatal(err)
	}
	// Short leases: the renewer (LeaseTTL/16 ticks) extends the copy
	// several times while the reads below run.
	const leaseTTL = 400 * time.Millisecond
	coll.Policy, coll.ScanCache = document.WriteThrough, false
	coll.Near = &document.NearCache{MaxBytes: 1 << 20, LeaseTTL: leaseTTL}
	if err := sc.svc.StartNear(ctx, "rejected-a"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.svc.StopNear)
	ref, err := sc.svc.Ref(w.coll, "1")
	if err != nil {
		t.Fatal(err)
	}
	nm := sc.m.Near
	hits := func() float64 { return testutil.ToFloat64(nm.Hits.WithLabelValues(w.coll)) }
	extended := func() float64 {
		return testutil.ToFloat64(nm.Leases.WithLabelValues(w.coll, metrics.LeaseExtended))
	}
	read := func() string {
		t.Helper()
		d, err := sc.svc.Get(ctx, w.coll, "1")
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		return string(d["s"])
	}

	w.put(t, sc, "1", "ok")
	if got := read(); got != `"ok"` { // leases the document: the copy
		t.Fatalf("read %s after the accepted write; want \"ok\"", got)
	}
	if e, ok := sc.svc.Cached(ref); !ok || e.Hash["s"] != `"ok"` {
		t.Fatalf("near cache holds %v (%v); want the accepted value", e, ok)
	}

	// The write holds the copy, so its value is installed as the new one
	// before it is applied; the store then refuses it.
	_, err = sc.svc.Put(ctx, w.coll, "1", []byte(`{"s":"rejected"}`))
	var se *document.StoreError
	if !errors.As(err, &se) || se.Buffered != 0 || !store.IsPermanent(err) {
		t.Fatalf("rejected write: %v; want a permanent StoreError, nothing buffered", err)
	}
	if e, ok := sc.svc.Cached(ref); ok {
		t.Fatalf("near cache still holds %s after the store rejected the write", e.Hash["s"])
	}

	// Read for three lease periods: the document is leased again, served
	// from the near cache and its lease extended by the renewer.
	hits0, ext0 := hits(), extended()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(3 * leaseTTL); time.Now().Before(end); <-tick.C {
		if got := read(); got != `"ok"` {
			t.Fatalf("read %s after the rejected write (near-cache hits %v→%v); want \"ok\"", got, hits0, hits())
		}
	}
	if hits() < hits0+10 || extended() == ext0 {
		t.Fatalf("near-cache hits %v→%v, extended leases %v→%v: the reads did not go through the near cache", hits0, hits(), ext0, extended())
	}
	var s string
	if err := w.db.QueryRow(fmt.Sprintf("SELECT s FROM %s WHERE id = 1", w.coll)).Scan(&s); err != nil || s != "ok" {
		t.Fatalf("store row s=%q (%v); want \"ok\"", s, err)
	}
}
