package benchmarks

import (
	"context"
	"testing"
	"time"

	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/benchmarks/ycsb"
)

// TestDemoPipeline runs the demo's pipeline in miniature for every policy,
// so that `make test` catches a broken demo: load a table, serve it from an
// in-process sidecar, run the read/update mix, drain the buffer and check
// the table against the acknowledged updates. It needs `make services`.
func TestDemoPipeline(t *testing.T) {
	ctx := context.Background()
	db, err := ycsb.Open(ctx, ycsb.Postgres, pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := ycsb.Spec{Table: "bench_pipeline", Records: 500, Fields: 3, FieldSize: 20}
	chooser, err := ycsb.NewChooser("zipfian", s.Records)
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{"write-around", "write-through", "write-back"} {
		t.Run(policy, func(t *testing.T) {
			if err := db.Load(ctx, s, 1, nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = db.Drop(context.Background(), s.Table)
				_ = sidecar.ForgetApplied(context.Background(), db, s.Table)
			})
			if err := sidecar.ForgetApplied(ctx, db, s.Table); err != nil {
				t.Fatal(err)
			}
			sc, err := sidecar.Start(ctx, sidecar.Options{
				Policy: policy, Driver: ycsb.Postgres, DSN: pgDSN, RedisAddr: redisAddr,
				Collection: s.Table, Key: ycsb.KeyColumn, PrefixBase: "test",
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := sc.Close(); err != nil {
					t.Error(err)
				}
			}()
			w := &ycsb.Workload{Spec: s, Clients: 4, ReadRatio: 0.5, Chooser: chooser,
				Warmup: 100 * time.Millisecond, Duration: 400 * time.Millisecond, Seed: 2}
			clients := make([]ycsb.Client, w.Clients)
			for i := range clients {
				clients[i] = sc.NewClient(s.Fields)
			}
			res, err := w.Run(ctx, clients)
			if err != nil {
				t.Fatal(err)
			}
			if res.Errors > 0 || res.StaleReads > 0 {
				t.Fatalf("%d errors %v; %d stale reads %v", res.Errors, res.ErrorSamples, res.StaleReads, res.StaleSamples)
			}
			if len(res.Updates) == 0 || len(res.Reads) == 0 {
				t.Fatalf("measured %d reads and %d updates; want some of each", len(res.Reads), len(res.Updates))
			}
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := sc.Flush(fctx); err != nil {
				t.Fatal(err)
			}
			v, err := res.Model.Verify(ctx, db, s, 5)
			if err != nil {
				t.Fatal(err)
			}
			if v.Bad > 0 || v.Checked != res.Model.Len() {
				t.Fatalf("%d of %d updated fields do not match the table: %v", v.Bad, v.Checked, v.First)
			}
			if err := sc.Stop(); err != nil {
				t.Fatal(err)
			}
			if n, err := sc.DeleteKeys(ctx); err != nil || n == 0 {
				t.Fatalf("deleted %d keys of prefix %s (%v); want the sidecar's keys gone", n, sc.Prefix, err)
			}
		})
	}
}
