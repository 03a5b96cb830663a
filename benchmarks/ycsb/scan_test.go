package ycsb

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// These tests need the project's PostgreSQL, MariaDB and MongoDB
// (FerretDB): `make services`.

func mongoURI() string {
	if v := os.Getenv("WRITEBACK_TEST_MONGO_URI"); v != "" {
		return v
	}
	return "mongodb://127.0.0.1:27017/"
}

func openFor(ctx context.Context, t *testing.T, driver string) *DB {
	t.Helper()
	var db *DB
	var err error
	if driver == MongoDB {
		db, err = OpenMongo(ctx, mongoURI(), "ycsb")
	} else {
		db, err = Open(ctx, driver, dsnFor(driver))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestScanUpdateAllVerify runs workload S with whole-record updates directly
// against each database: every scan returns the keys it must, every
// scanned own record its last acknowledged values, and the table holds
// exactly the acknowledged values afterwards; a tampered field is caught.
func TestScanUpdateAllVerify(t *testing.T) {
	for _, driver := range []string{Postgres, MySQL, MongoDB} {
		t.Run(driver, func(t *testing.T) {
			ctx := context.Background()
			db := openFor(ctx, t, driver)
			spec := Spec{Table: fmt.Sprintf("ycsb_scan_test_%d", time.Now().UnixNano()%1e9), Records: 300, Fields: 3, FieldSize: 20}
			t.Cleanup(func() { _ = db.Drop(context.Background(), spec.Table) })
			if err := db.Load(ctx, spec, 1, nil); err != nil {
				t.Fatal(err)
			}
			if ok, err := db.TableExists(ctx, spec.Table); err != nil || !ok {
				t.Fatalf("TableExists after Load: %v, %v", ok, err)
			}
			chooser, _ := NewChooser("uniform", spec.Records)
			w := &Workload{Spec: spec, Clients: 2, ScanRatio: 0.5, ScanLength: 5, UpdateAll: true, Chooser: chooser,
				Warmup: 50 * time.Millisecond, Duration: 600 * time.Millisecond, Seed: 3}
			var ops atomic.Int64
			w.OnOp = func() { ops.Add(1) }
			clients := make([]Client, w.Clients)
			for i := range clients {
				c, err := db.NewClient(ctx, spec)
				if err != nil {
					t.Fatal(err)
				}
				clients[i] = c
				defer c.Close()
			}
			if err := Warm(ctx, clients, spec.Records); err != nil {
				t.Fatal(err)
			}
			res, err := w.Run(ctx, clients)
			if err != nil {
				t.Fatal(err)
			}
			if res.Errors > 0 || res.StaleReads > 0 {
				t.Fatalf("%d errors (%v), %d stale reads (%v)", res.Errors, res.ErrorSamples, res.StaleReads, res.StaleSamples)
			}
			if len(res.Scans) == 0 || len(res.Updates) == 0 || len(res.Reads) != 0 {
				t.Fatalf("measured %d scans, %d updates, %d reads; want scans and updates only", len(res.Scans), len(res.Updates), len(res.Reads))
			}
			if ops.Load() < res.Ops {
				t.Fatalf("OnOp counted %d operations, the window alone has %d", ops.Load(), res.Ops)
			}
			v, err := res.Model.Verify(ctx, db, spec, 5)
			if err != nil {
				t.Fatal(err)
			}
			// Every update set all fields: the model knows whole records.
			if v.Checked != res.Model.Len() || v.Checked%spec.Fields != 0 || v.Bad != 0 {
				t.Fatalf("verified %d of %d fields, %d bad: %v", v.Checked, res.Model.Len(), v.Bad, v.First)
			}
			// A scan from near the end returns the records that are left.
			recs, err := clients[0].(Scanner).Scan(ctx, Key(spec.Records-2), 5)
			if err != nil || len(recs) != 2 || recs[0].Key != Key(spec.Records-2) || recs[1].Key != Key(spec.Records-1) {
				t.Fatalf("scan of the last 2 records: %v, %v", recs, err)
			}
			// A field the model rules out is caught.
			var rec int64
			for r := range res.Model.recs {
				rec = r
				break
			}
			if err := clients[0].(RecordUpdater).UpdateRecord(ctx, Key(rec), Row{"x", "y", "z"}); err != nil {
				t.Fatal(err)
			}
			if v, err = res.Model.Verify(ctx, db, spec, 5); err != nil || v.Bad != spec.Fields {
				t.Fatalf("after tampering: %d bad (%v), err %v; want %d", v.Bad, v.First, err, spec.Fields)
			}
			if err := clients[0].(RecordUpdater).UpdateRecord(ctx, "nosuchkey", Row{"x", "y", "z"}); err == nil {
				t.Fatal("updating a missing record succeeded")
			}
		})
	}
}

// TestWorkloadNeedsScanner: a workload with scans refuses clients that
// cannot scan, before running.
func TestWorkloadNeedsScanner(t *testing.T) {
	chooser, _ := NewChooser("uniform", 10)
	w := &Workload{Spec: Spec{Table: "t", Records: 10, Fields: 1, FieldSize: 1}, Clients: 1, ScanRatio: 0.5, Chooser: chooser}
	if _, err := w.Run(context.Background(), []Client{readOnly{}}); err == nil {
		t.Fatal("a workload with scans ran on a client that cannot scan")
	}
	w = &Workload{Spec: w.Spec, Clients: 1, UpdateAll: true, Chooser: chooser}
	if _, err := w.Run(context.Background(), []Client{readOnly{}}); err == nil {
		t.Fatal("a workload of whole-record updates ran on a client that cannot make them")
	}
	w = &Workload{Spec: w.Spec, Clients: 1, ReadRatio: 0.6, ScanRatio: 0.6, Chooser: chooser}
	if _, err := w.Run(context.Background(), []Client{readOnly{}}); err == nil {
		t.Fatal("a workload of 120 % reads and scans ran")
	}
}

type readOnly struct{}

func (readOnly) Read(context.Context, string, bool) (Row, error)   { return nil, nil }
func (readOnly) Update(context.Context, string, int, string) error { return nil }
func (readOnly) Close() error                                      { return nil }
