package tpcc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/internal/testenv"
)

// smokeMyDSN is the test MariaDB server's tpcc_smoke database.
func smokeMyDSN(t *testing.T) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatalf("WRITEBACK_TEST_MYSQL_DSN: %v", err)
	}
	cfg.DBName = "tpcc_smoke"
	return cfg.FormatDSN()
}

// TestMyStatement translates the statements' PostgreSQL dialect: repeated
// and reordered placeholders become positional "?" with their arguments
// repeated, and the casts MariaDB lacks become ones it has.
func TestMyStatement(t *testing.T) {
	q, args, err := MyStatement("UPDATE stock SET s_quantity = CASE WHEN s_quantity >= $1 + 10 THEN s_quantity - $1 ELSE s_quantity - $1 + 91 END, "+
		"s_ytd = s_ytd + $1, s_remote_cnt = s_remote_cnt + $2 WHERE s_w_id = $3 AND c_data = concat(CAST($2 AS varchar), c_data) AND d = CAST($4 AS timestamp)",
		[]any{5, 0, 1, "now"})
	if err != nil {
		t.Fatal(err)
	}
	want := "UPDATE stock SET s_quantity = CASE WHEN s_quantity >= ? + 10 THEN s_quantity - ? ELSE s_quantity - ? + 91 END, " +
		"s_ytd = s_ytd + ?, s_remote_cnt = s_remote_cnt + ? WHERE s_w_id = ? AND c_data = concat(CAST(? AS char), c_data) AND d = CAST(? AS datetime(6))"
	if q != want {
		t.Errorf("got  %s\nwant %s", q, want)
	}
	if got := fmt.Sprint(args); got != "[5 5 5 5 0 1 0 now]" {
		t.Errorf("arguments %s, want [5 5 5 5 0 1 0 now]", got)
	}
	if _, _, err := MyStatement("UPDATE t SET a = $3 WHERE b = $1", []any{1, 2}); err == nil {
		t.Error("a statement binding a third argument of two translated without an error")
	}
	for _, m := range Mappings {
		if _, err := MyMappingQuery(m.Query); err != nil {
			t.Errorf("mapping %s: %v", m.Name, err)
		}
	}
	if _, err := MyMappingQuery("SELECT a FROM t WHERE b = $2 AND c = $1"); err == nil {
		t.Error("a mapping query binding its parameters out of order translated without an error")
	}
}

// TestSmokeMySQL runs a tiny TPC-C on MariaDB under every policy (two
// warehouses, so that remote stock and remote customers cross queues),
// flushes the sidecar's queues, and checks conditions 1–5, 7 and 10 and the
// committed work; then it breaks the database as a wrong applier or a lost
// session would and checks that Check, on MariaDB, says so.
func TestSmokeMySQL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dsn := smokeMyDSN(t)
	redis := testenv.RedisAddr(t)
	s := Scale{Warehouses: 2, Items: 1000, Customers: 30}
	var last Outcome
	for _, p := range Policies {
		var log strings.Builder
		lines := -1 // not compared: the database alone has no cache
		o := Options{Policy: p, Store: MySQL, DSN: dsn, RedisAddr: redis, Scale: s, Terminals: 3,
			Duration: 2 * time.Second, Seed: 7, Log: &log}
		if p != bench.Database {
			o.AfterFlush = func(ctx context.Context, sc *sidecar.Sidecar) (err error) {
				lines, err = sameOrderEntries(ctx, sc, redis, MySQL, dsn, s)
				return err
			}
		}
		out, err := Bench(ctx, o)
		if err != nil {
			t.Fatalf("%s: %v\n%s", p, err, log.String())
		}
		if err := out.Check.Err(); err != nil {
			t.Fatalf("%s on MariaDB: %v\n%s", p, err, log.String())
		}
		if len(out.Check.Checked) != 8 {
			t.Errorf("%s: checked %v, want conditions 1-5, 7, 10 and the committed work", p, out.Check.Checked)
		}
		if lines == 0 {
			t.Errorf("%s: no order of the run was compared with its lines' entry", p)
		}
		no := out.Kinds[NewOrder.String()]
		if out.Work.NewOrders < 5 || out.Work.Payments < 5 || no.Committed == 0 || out.TpmC <= 0 {
			t.Fatalf("%s: the workload barely ran: %+v\n%s", p, out.Result, log.String())
		}
		t.Logf("%s: %.0f tpmC, %d New-Orders, %d Payments, %d sessions flushed", p, out.TpmC, out.Work.NewOrders, out.Work.Payments, out.Flushed)
		last = out
	}

	db, err := Open(ctx, MySQL, dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The database alone runs at READ COMMITTED, as PostgreSQL's default.
	if iso, err := db.rows(ctx, "SELECT @@tx_isolation"); err != nil || len(iso) != 1 || fmt.Sprint(iso[0][0]) != "READ-COMMITTED" {
		t.Errorf("the TPC-C connections' isolation is %v (%v), want READ-COMMITTED", iso, err)
	}
	one := func(q string) []any {
		t.Helper()
		rows, err := db.rows(ctx, q)
		if err != nil || len(rows) != 1 {
			t.Fatalf("%s: %v (%d rows)", q, err, len(rows))
		}
		return rows[0]
	}
	for _, tc := range []struct {
		name   string
		damage func() []string
		want   string
	}{
		{"a district's next order id moved", func() []string {
			return []string{"UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = 1 AND d_id = 1"}
		}, "condition 2"},
		{"a payment applied to the district only", func() []string {
			return []string{"UPDATE district SET d_ytd = d_ytd + 1 WHERE d_w_id = 2 AND d_id = 3"}
		}, "condition 1"},
		{"a new order lost", func() []string {
			v := one(secondNewOrder)
			w, d, o := itoa(int(integer(v[0]))), itoa(int(integer(v[1]))), itoa(int(integer(v[2])))
			return []string{"DELETE FROM new_order WHERE no_w_id = " + w + " AND no_d_id = " + d + " AND no_o_id = " + o}
		}, "condition 3"},
		{"an order line lost", func() []string {
			return []string{"DELETE FROM order_line WHERE ol_w_id = 2 AND ol_d_id = 1 AND ol_o_id = 1 AND ol_number = 1"}
		}, "condition 4"},
		{"an order delivered, its new order not", func() []string { return []string{damageCarrier} }, "condition 5"},
		{"an order's lines delivered, the order not", func() []string { return []string{damageLines} }, "condition 7"},
		{"a delivery paid to its customer twice", func() []string { return []string{damageBalance} }, "condition 10"},
		{"a whole New-Order session lost", func() []string {
			v := one("SELECT o_w_id, o_d_id, o_id FROM oorder ORDER BY o_id DESC LIMIT 1")
			w, d, o := itoa(int(integer(v[0]))), itoa(int(integer(v[1]))), itoa(int(integer(v[2])))
			return []string{
				"DELETE FROM order_line WHERE ol_w_id = " + w + " AND ol_d_id = " + d + " AND ol_o_id = " + o,
				"DELETE FROM new_order WHERE no_w_id = " + w + " AND no_d_id = " + d + " AND no_o_id = " + o,
				"UPDATE district SET d_next_o_id = d_next_o_id - 1 WHERE d_w_id = " + w + " AND d_id = " + d,
				"DELETE FROM oorder WHERE o_w_id = " + w + " AND o_d_id = " + d + " AND o_id = " + o,
			}
		}, "committed work"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each case's damage stays and breaks another condition.
			for _, q := range tc.damage() {
				if err := db.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			res, err := Check(ctx, db, s, last.Work)
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
