package tpcc

import (
	"context"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/internal/testenv"
)

// smokeDSN is the test PostgreSQL server's tpcc_smoke database.
func smokeDSN(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatalf("WRITEBACK_TEST_PG_DSN must be a URL for the TPC-C smoke test: %v", err)
	}
	u.Path = "/tpcc_smoke"
	return u.String()
}

// TestSmokeWriteBack runs a tiny TPC-C as write-back sessions (two
// warehouses, so that remote stock and remote customers cross queues),
// flushes, and checks conditions 1–5, 7, 10 and the committed work; then it
// breaks the database the way a wrong applier or a lost session would and
// checks that Check says so.
func TestSmokeWriteBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
	defer cancel()
	dsn := smokeDSN(t)
	s := Scale{Warehouses: 2, Items: 1000, Customers: 30}
	var log strings.Builder
	out, err := Bench(ctx, Options{Policy: bench.WriteBack, DSN: dsn, RedisAddr: testenv.RedisAddr(t), Scale: s, Terminals: 3,
		Duration: 3 * time.Second, Seed: 7, Log: io.Writer(&log)})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if err := out.Check.Err(); err != nil {
		t.Fatalf("after a write-back run and a flush: %v\n%s", err, log.String())
	}
	if len(out.Check.Checked) != 8 {
		t.Errorf("checked %v, want conditions 1-5, 7, 10 and the committed work", out.Check.Checked)
	}
	no, pay := out.Kinds[NewOrder.String()], out.Kinds[Payment.String()]
	if out.Work.NewOrders < 10 || out.Work.Payments < 10 || no.Committed == 0 || no.Latency.Count == 0 || out.TpmC <= 0 || pay.Latency.P90 <= 0 {
		t.Fatalf("the workload barely ran: %+v\n%s", out.Result, log.String())
	}
	t.Logf("%.0f tpmC, %d New-Orders, %d Payments, %d sessions flushed", out.TpmC, out.Work.NewOrders, out.Work.Payments, out.Flushed)

	db, err := Open(ctx, Postgres, dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tc := range []struct {
		name, sql, want string
	}{
		{"a district's next order id moved", "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = 1 AND d_id = 1", "condition 2"},
		{"a payment applied to the district only", "UPDATE district SET d_ytd = d_ytd + 1 WHERE d_w_id = 2 AND d_id = 3", "condition 1"},
		{"a new order lost", "DELETE FROM new_order WHERE no_w_id = 1 AND no_d_id = 2 AND no_o_id = (SELECT min(no_o_id) + 1 FROM new_order WHERE no_w_id = 1 AND no_d_id = 2)", "condition 3"},
		{"an order line lost", "DELETE FROM order_line WHERE ol_w_id = 2 AND ol_d_id = 1 AND ol_o_id = 1 AND ol_number = 1", "condition 4"},
		{"an order delivered, its new order not", damageCarrier, "condition 5"},
		{"an order's lines delivered, the order not", damageLines, "condition 7"},
		{"a delivery paid to its customer twice", damageBalance, "condition 10"},
		{"a whole New-Order session lost", "DELETE FROM order_line WHERE (ol_w_id, ol_d_id, ol_o_id) = (SELECT o_w_id, o_d_id, o_id FROM oorder ORDER BY o_id DESC LIMIT 1); " +
			"DELETE FROM new_order WHERE (no_w_id, no_d_id, no_o_id) = (SELECT o_w_id, o_d_id, o_id FROM oorder ORDER BY o_id DESC LIMIT 1); " +
			"UPDATE district SET d_next_o_id = d_next_o_id - 1 WHERE (d_w_id, d_id) = (SELECT o_w_id, o_d_id FROM oorder ORDER BY o_id DESC LIMIT 1); " +
			"DELETE FROM oorder WHERE (o_w_id, o_d_id, o_id) = (SELECT o_w_id, o_d_id, o_id FROM oorder ORDER BY o_id DESC LIMIT 1)", "committed work"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := db.pg.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.WithoutCancel(ctx))
			for _, q := range strings.Split(tc.sql, "; ") {
				if _, err := tx.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			// Check reads through the pool, so the damage is committed and
			// stays; each case breaks another condition.
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			res, err := Check(ctx, db, s, out.Work)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, v := range res.Violations {
				found = found || v.Condition == tc.want
			}
			if !found {
				t.Errorf("Check found %v, want a violation of %s", res.Violations, tc.want)
			}
		})
	}
}

// Damage that the delivery conditions catch, in SQL both stores take: an
// undelivered order marked delivered (condition 5), an undelivered order's
// lines marked delivered (7), a customer's balance moved (10).
const (
	damageCarrier = "UPDATE oorder SET o_carrier_id = 1 WHERE o_w_id = 1 AND o_d_id = 3 AND o_id = (SELECT min(no_o_id) FROM new_order WHERE no_w_id = 1 AND no_d_id = 3)"
	damageLines   = "UPDATE order_line SET ol_delivery_d = now() WHERE ol_w_id = 1 AND ol_d_id = 4 AND ol_o_id = (SELECT min(no_o_id) FROM new_order WHERE no_w_id = 1 AND no_d_id = 4)"
	damageBalance = "UPDATE customer SET c_balance = c_balance + 1 WHERE c_w_id = 1 AND c_d_id = 1 AND c_id = 1"
)
