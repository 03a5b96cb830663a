package ycsb

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// These tests need the project's PostgreSQL and MariaDB: `make services`.

func dsnFor(driver string) string {
	if driver == Postgres {
		if v := os.Getenv("WRITEBACK_TEST_PG_DSN"); v != "" {
			return v
		}
		return "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable"
	}
	if v := os.Getenv("WRITEBACK_TEST_MYSQL_DSN"); v != "" {
		return v
	}
	return "root@tcp(127.0.0.1:3306)/writeback"
}

// TestLoadRunVerify loads a small table, runs the workload directly against
// the database and verifies the table against the model, in both drivers.
func TestLoadRunVerify(t *testing.T) {
	for _, driver := range []string{Postgres, MySQL} {
		t.Run(driver, func(t *testing.T) {
			ctx := context.Background()
			db, err := Open(ctx, driver, dsnFor(driver))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() }) // after the Drop below: cleanups run last-in first-out
			spec := Spec{Table: fmt.Sprintf("ycsb_test_%d", time.Now().UnixNano()%1e9), Records: 2500, Fields: 4, FieldSize: 50}
			t.Cleanup(func() { _ = db.Drop(context.Background(), spec.Table) })
			var last int64
			if err := db.Load(ctx, spec, 1, func(n int64, done bool) {
				if done {
					last = n
				}
			}); err != nil {
				t.Fatal(err)
			}
			if last != spec.Records {
				t.Fatalf("progress ended at %d rows, want %d", last, spec.Records)
			}
			chooser, _ := NewChooser("zipfian", spec.Records)
			w := &Workload{Spec: spec, Clients: 4, ReadRatio: 0.5, Chooser: chooser, Warmup: 100 * time.Millisecond, Duration: 500 * time.Millisecond, Seed: 7}
			clients := make([]Client, w.Clients)
			for i := range clients {
				if clients[i], err = db.NewClient(ctx, spec); err != nil {
					t.Fatal(err)
				}
				defer clients[i].Close()
			}
			res, err := w.Run(ctx, clients)
			if err != nil {
				t.Fatal(err)
			}
			if res.Errors > 0 || res.StaleReads > 0 {
				t.Fatalf("%d errors (%v), %d stale reads (%v)", res.Errors, res.ErrorSamples, res.StaleReads, res.StaleSamples)
			}
			if len(res.Reads) == 0 || len(res.Updates) == 0 || res.ReadChecks == 0 {
				t.Fatalf("measured %d reads, %d updates, %d read checks; want some of each", len(res.Reads), len(res.Updates), res.ReadChecks)
			}
			v, err := res.Model.Verify(ctx, db, spec, 5)
			if err != nil {
				t.Fatal(err)
			}
			if v.Checked != res.Model.Len() || v.Bad != 0 {
				t.Fatalf("verified %d of %d fields, %d bad: %v", v.Checked, res.Model.Len(), v.Bad, v.First)
			}
			// A field the model rules out is caught.
			rec := int64(-1)
			for r := range res.Model.recs {
				rec = r
				break
			}
			for f, c := range res.Model.recs[rec] {
				if c.acked {
					q := fmt.Sprintf("UPDATE %s SET %s = 'tampered' WHERE %s = %s", spec.Table, FieldName(f), KeyColumn, db.Placeholder(1))
					if err := db.Exec(ctx, q, Key(rec)); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
			if v, err = res.Model.Verify(ctx, db, spec, 5); err != nil || v.Bad != 1 {
				t.Fatalf("after tampering: %d bad (%v), err %v; want 1", v.Bad, v.First, err)
			}
		})
	}
}
