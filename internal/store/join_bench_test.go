package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/testenv"
)

// BenchmarkApplySessionsJoined applies batches of 10 New-Order-like
// sessions (10 stock updates, then 10 order lines each) with their order
// lines' INSERTs joined and not, side by side: the time per batch is the
// appliers' cost of a batch, store included.
//
//	go test -run '^$' -bench ApplySessionsJoined -benchtime 200x ./internal/store/
func BenchmarkApplySessionsJoined(b *testing.B) {
	stores, names := testStores(b)
	for _, name := range names {
		cfg := stores[name]
		b.Run(name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			h := benchHarness(b, ctx, cfg)
			s := h.s
			ss, _ := Sessions(s)
			if err := ss.PrepareSessions(ctx); err != nil {
				b.Fatal(err)
			}
			stock := h.table(b, map[string]string{
				"postgres": "CREATE TABLE %s (w int, i int, q int, ytd int, cnt int, PRIMARY KEY (w, i))",
				"mysql":    "CREATE TABLE %s (w int, i int, q int, ytd int, cnt int, PRIMARY KEY (w, i))",
			})
			lines := h.table(b, map[string]string{
				"postgres": "CREATE TABLE %s (o int, d int, w int, n int, i int, sw int, dd timestamp, q int, amt numeric(6,2), info char(24), PRIMARY KEY (w, d, o, n))",
				"mysql":    "CREATE TABLE %s (o int, d int, w int, n int, i int, sw int, dd datetime, q int, amt decimal(6,2), info char(24), PRIMARY KEY (w, d, o, n))",
			})
			rows := make([]string, 1000)
			for i := range rows {
				rows[i] = fmt.Sprintf("(1, %d, 50, 0, 0)", i+1)
			}
			h.exec(b, "INSERT INTO "+stock+" VALUES "+strings.Join(rows, ", "))
			ph := func(i int) string { return h.ph(i) }
			upd := "UPDATE " + stock + " SET q = CASE WHEN q >= " + ph(1) + " + 10 THEN q - " + ph(2) + " ELSE q - " + ph(3) + " + 91 END, cnt = cnt + 1 WHERE w = " + ph(4) + " AND i = " + ph(5)
			ins := "INSERT INTO " + lines + " (o, d, w, n, i, sw, dd, q, amt, info) VALUES (" + ph(1) + ", 1, 1, " + ph(2) + ", " + ph(3) + ", 1, NULL, " + ph(4) + ", " + ph(5) + ", " + ph(6) + ")"
			o := 0
			batch := func() []Session {
				out := make([]Session, 10)
				for k := range out {
					o++
					var sts []Statement
					for n := 1; n <= 10; n++ {
						sts = append(sts, Statement{SQL: upd, Args: args("5", "5", "5", "1", strconv.Itoa((o*7+n*13)%1000+1))})
					}
					for n := 1; n <= 10; n++ {
						sts = append(sts, Statement{SQL: ins, Args: []json.RawMessage{
							json.RawMessage(strconv.Itoa(o)), json.RawMessage(strconv.Itoa(n)), json.RawMessage("77"),
							json.RawMessage("5"), json.RawMessage("12.34"), json.RawMessage(`"abcdefghijklmnopqrstuvwx"`)}})
					}
					out[k] = Session{ID: fmt.Sprintf("bench%d-%d", time.Now().UnixNano(), o), Queue: "bench/1", Seq: int64(o), Statements: sts}
				}
				return out
			}
			apply := func(join bool) error {
				var err error
				switch st := s.(type) {
				case *pgStore:
					_, err = st.applySessionsOnce(ctx, batch(), join)
				case *myStore:
					_, err = st.applySessionsPacket(ctx, batch(), join)
				}
				return err
			}
			for _, mode := range []struct {
				name string
				join bool
			}{{"joined", true}, {"unjoined", false}} {
				b.Run(mode.name, func(b *testing.B) {
					for b.Loop() {
						if err := apply(mode.join); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkApplySeveralChanges applies batches of 128 documents' writes of
// one and of four increments each, side by side: the time per batch is the
// appliers' cost of a batch, store included. Writes of several changes
// are what documents written again while pending become; on PostgreSQL
// their record statement checks each record against its write's first
// change (pgWriteRecordsSQL), which should cost about what the check of
// writes of one change costs.
//
//	go test -run '^$' -bench ApplySeveralChanges -benchtime 200x ./internal/store/
func BenchmarkApplySeveralChanges(b *testing.B) {
	stores, names := testStores(b)
	for _, name := range names {
		cfg := stores[name]
		b.Run(name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			h := benchHarness(b, ctx, cfg)
			s := h.s
			tbl := h.describe(b, numbersDDL)
			coll := testenv.UniqueName(b, "c")
			const docs = 128
			rows := make([]string, docs)
			for i := range rows {
				rows[i] = fmt.Sprintf("(%d, 0)", i+1)
			}
			h.exec(b, "INSERT INTO "+tbl.Name+" (id, n) VALUES "+strings.Join(rows, ", "))
			seq := int64(0)
			for _, per := range []int64{1, 4} {
				b.Run(fmt.Sprintf("changes=%d", per), func(b *testing.B) {
					for b.Loop() {
						writes := make([]Write, docs)
						for i := range writes {
							writes[i] = Write{Collection: coll, Table: tbl, ID: strconv.Itoa(i + 1), Partition: 1, Changes: incs("n", seq+1, seq+per)}
							seq += per
						}
						if _, err := s.Apply(ctx, writes); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// benchHarness opens the store cfg names for benchmark b, which closes it
// when it ends.
func benchHarness(b *testing.B, ctx context.Context, cfg testenv.Store) *harness {
	b.Helper()
	s, err := Open(ctx, cfg.Driver, cfg.DSN)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return &harness{driver: cfg.Driver, dsn: cfg.DSN, s: s}
}
